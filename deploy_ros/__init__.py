"""ROS 2 deployment: run exported covey ONNX policies on robots (numpy + onnxruntime + rclpy, no torch).

- :mod:`deploy_ros.observation`: the simulator's policy observation rebuilt from robot state (numpy only).
- :mod:`deploy_ros.policy_node`: the generic policy node (``python -m deploy_ros.policy_node``).

Nothing is imported here, so ``deploy_ros.observation`` works without rclpy.
"""
