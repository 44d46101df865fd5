"""ROS 2 deployment: run exported covey ONNX policies on robots (numpy + onnxruntime + rclpy, no torch).

- :mod:`deploy_ros.policy_node`: the generic policy node (``python -m deploy_ros.policy_node``).
- :mod:`deploy_ros.profile`: the task's deployment profile (metadata ``ros``) and the generic
  ``vector`` / ``image`` observation builders.
- :mod:`deploy_ros.messages`: ROS message -> numpy parsers, by message type.
- :mod:`deploy_ros.model`: a covey-onnx-v2 model run for one agent (inputs per entry, memory carried).
- :mod:`deploy_ros.observation`: vector observations from named terms with history (tasks add the terms).
- :mod:`deploy_ros.quaternion`: numpy twins of the simulator's quaternion maths.
- :mod:`deploy_ros.sim_bridge`: one env of any task stepped in real time on the robots' topics (needs torch).
- :mod:`deploy_ros.launch`: a team's nodes from ``deploy_ros/params/<task>.yaml``.

Nothing is imported here, so the numpy modules work without rclpy.
"""
