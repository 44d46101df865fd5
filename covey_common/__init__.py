"""What both sides of the robot boundary share, on numpy alone (no torch, no sim, no training, no rclpy).

- :mod:`covey_common.spec`: observation-term records, entry kinds and dtype names, discrete-choice decoding.
- :mod:`covey_common.onnx`: the ONNX metadata key and format, and the one onnxruntime runner of an export.
- :mod:`covey_common.profile`: the deployment-profile schema (metadata ``ros``).
- :mod:`covey_common.observation`: the robot-side observation-builder base (terms with history).
- :mod:`covey_common.messages`: parsed-message types the builders read (:class:`~covey_common.messages.InvalidInput`).
- :mod:`covey_common.quaternion`: numpy twins of the simulator's quaternion maths.
- :mod:`covey_common.files`: atomic file writes.
- :mod:`covey_common.cli`: one-line errors for command-line entry points.

Nothing is imported here.
"""
