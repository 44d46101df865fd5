"""ROS messages the sim bridge's task adapters publish, from simulator state (tensors or arrays; no torch import).

Conventions as the robots' parsers read them (:mod:`deploy_ros.messages`): quaternions ``[w, x, y, z]``, odometry
pose in the world frame and twist in the body frame (REP 105).
"""

from __future__ import annotations

from collections.abc import Sequence

from builtin_interfaces.msg import Time
from geometry_msgs.msg import Pose, PoseStamped
from nav_msgs.msg import Odometry


def sim_stamp(seconds: float) -> Time:
    """A ``builtin_interfaces/Time`` of ``seconds`` of sim time."""
    sec = int(seconds)
    return Time(sec=sec, nanosec=int(round((seconds - sec) * 1e9)))


def set_pose(pose: Pose, pos: Sequence[float], quat_wxyz: Sequence[float]) -> None:
    """Fill a ``geometry_msgs/Pose`` from ``pos [3]`` and a ``[w, x, y, z]`` quaternion (tensors or arrays)."""
    pose.position.x, pose.position.y, pose.position.z = (float(v) for v in pos)
    pose.orientation.w, pose.orientation.x, pose.orientation.y, pose.orientation.z = (float(v) for v in quat_wxyz)


def odometry_msg(
    stamp: Time,
    child: str,
    pos: Sequence[float],
    quat_wxyz: Sequence[float],
    vel_body: Sequence[float],
    ang_vel_body: Sequence[float],
    frame: str = "world",
) -> Odometry:
    """An Odometry message: pose in ``frame``, twist (linear and angular) in the body frame ``child`` (REP 105)."""
    msg = Odometry()
    msg.header.stamp, msg.header.frame_id, msg.child_frame_id = stamp, frame, child
    set_pose(msg.pose.pose, pos, quat_wxyz)
    t = msg.twist.twist
    t.linear.x, t.linear.y, t.linear.z = (float(v) for v in vel_body)
    t.angular.x, t.angular.y, t.angular.z = (float(v) for v in ang_vel_body)
    return msg


def pose_msg(stamp: Time, pos: Sequence[float], quat_wxyz: Sequence[float], frame: str = "world") -> PoseStamped:
    """A PoseStamped in ``frame``."""
    msg = PoseStamped()
    msg.header.stamp, msg.header.frame_id = stamp, frame
    set_pose(msg.pose, pos, quat_wxyz)
    return msg
