"""ROS 2 deployment: run exported covey ONNX policies on robots (numpy + onnxruntime + rclpy, no torch).

- :mod:`deploy_ros.policy_node`: the generic policy node (``python -m deploy_ros.policy_node``).
- :mod:`deploy_ros.profile`: the generic ``vector`` / ``image`` observation builders and the task builder named by
  the deployment profile (its schema: :mod:`covey_common.profile`).
- :mod:`deploy_ros.messages`: ROS message -> numpy parsers, by message type.
- :mod:`deploy_ros.selftest`: a policy node on synthetic inputs (checks a robot install).
- :mod:`deploy_ros.launch`: a team's nodes from ``deploy_ros/params/<task>.yaml``.

The numpy layer it shares with the simulator side is :mod:`covey_common` (the ONNX runner, the observation-builder
base, quaternions); ``deploy_ros.model``, ``.observation``, ``.quaternion`` and ``.cli`` re-export it under their
former names. The sim bridge is :mod:`sim.ros.bridge` (it needs torch); ``python -m deploy_ros.sim_bridge`` starts it.
``deploy_ros`` imports no ``sim``, ``training``, ``policies`` or torch module: a task's robot builder is imported by
the ``"module:Class"`` named in the model's metadata (data, not a code dependency).

Nothing is imported here, so the numpy modules work without rclpy.
"""
