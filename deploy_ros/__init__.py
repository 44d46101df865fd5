"""ROS 2 (rclpy) nodes: policy node, sim bridge, launch files (deployment issue)."""
