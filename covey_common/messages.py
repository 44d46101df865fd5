"""Parsed-message types: what the robot's message parsers (:mod:`deploy_ros.messages`) hand to observation builders.

Task builders (``sim/tasks/<task>/robot_observation.py``) read these and raise :class:`InvalidInput` on
unusable values; they import this module, not the parsers, so the simulator side never imports ``deploy_ros``.
Frames and units are those of :mod:`deploy_ros.messages` (ROS REP 103/105; quaternions ``[w, x, y, z]``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class InvalidInput(ValueError):
    """A message (or an observation built from it) that cannot be used; the reason is the message."""


@dataclass(frozen=True)
class OdometryState:
    """A parsed ``nav_msgs/Odometry``: ``pos [3]`` world m, ``quat [4]`` wxyz body -> world,
    ``vel [3]`` WORLD m/s, ``ang_vel [3]`` BODY rad/s (float64)."""

    pos: np.ndarray
    quat: np.ndarray
    vel: np.ndarray
    ang_vel: np.ndarray


@dataclass(frozen=True)
class PoseState:
    """A parsed ``geometry_msgs/PoseStamped``: ``pos [3]`` world m, ``quat [4]`` wxyz (float64)."""

    pos: np.ndarray
    quat: np.ndarray


@dataclass(frozen=True)
class ImageFrame:
    """A parsed ``sensor_msgs/Image``: ``pixels`` uint8 ``[H, W, C]`` (RGB for rgb8/bgr8, ``C = 1`` for mono8,
    ``C = n`` channels as sent for 8UCn), and the message's own ``encoding``."""

    pixels: np.ndarray
    encoding: str


@dataclass(frozen=True)
class NamedValues:
    """A parsed ``sensor_msgs/JointState`` used as a stamped record of named numbers (e.g. a referee's game state):
    ``names`` as sent and ``values [len(names)]`` float64 (its ``position`` array)."""

    names: tuple[str, ...]
    values: np.ndarray

    def __getitem__(self, name: str) -> float:
        """The value named ``name`` (:class:`InvalidInput` when the message has none)."""
        try:
            return float(self.values[self.names.index(name)])
        except ValueError:
            raise InvalidInput(f"no field {name!r} (fields: {list(self.names)})") from None


MESSAGE_TYPES = (
    "nav_msgs/Odometry",
    "geometry_msgs/PoseStamped",
    "sensor_msgs/Image",
    "std_msgs/Float32MultiArray",
    "sensor_msgs/PointCloud2",
    "nav_msgs/Path",
    "sensor_msgs/JointState",
)
"""The message types a deployment profile input may name (``deploy_ros.messages.PARSERS`` has one parser each)."""
