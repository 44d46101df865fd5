"""The simulator on ROS 2 topics: :mod:`sim.ros.bridge` (one env of any task stepped in real time, speaking the
robots' topics; needs torch and rclpy) and :mod:`sim.ros.messages` (the messages task adapters publish).

Nothing is imported here, so ``import sim`` needs no rclpy.
"""
