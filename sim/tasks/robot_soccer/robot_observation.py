"""robot_soccer's ``proprio`` entry rebuilt on a robot from its wheel odometry (numpy only).

The vision agent reads ``image`` (the head camera, straight from a ``sensor_msgs/Image``) and ``proprio``: its own
body-frame velocity and yaw rate, and the previous action, the terms of
:data:`sim.tasks.robot_soccer.env.PROPRIO_TERMS`. ``nav_msgs/Odometry`` gives the pose (world frame), the twist is
parsed into the world frame (:mod:`deploy_ros.messages`), so the velocity is rotated back by the yaw here; the angular
velocity arrives in the body frame. No torch here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from covey_common.messages import OdometryState
from covey_common.observation import ObservationBuilder, TermContext
from covey_common.quaternion import quat_yaw


def _body_velocity(ctx: TermContext) -> np.ndarray:
    odom: OdometryState = ctx.inputs
    yaw = float(quat_yaw(odom.quat))
    c, s = math.cos(yaw), math.sin(yaw)
    vx, vy = float(odom.vel[0]), float(odom.vel[1])
    return np.array([c * vx + s * vy, -s * vx + c * vy])


TERMS = {
    "vel": _body_velocity,
    "yaw_rate": lambda ctx: np.array([float(ctx.inputs.ang_vel[2])]),
    "last_action": lambda ctx: ctx.last_action,
}
NEUTRAL = OdometryState(np.zeros(3), np.array([1.0, 0.0, 0.0, 0.0]), np.zeros(3), np.zeros(3))


class ProprioObservation:
    """The ``proprio`` entry builder the ROS node drives: the robot's odometry in, ``[7]`` float32 out."""

    def __init__(self, metadata: Mapping[str, Any], entry: Mapping[str, Any], agent_index: int, sources: Sequence[str]):
        if len(sources) != 1:
            raise ValueError(f"robot_soccer's proprio observation reads 1 input (own odometry), got {list(sources)}")
        self.source = sources[0]
        self.builder = ObservationBuilder(metadata, agent_index, TERMS, NEUTRAL, layout=entry)

    def reset(self, inputs: Mapping[str, Any]) -> np.ndarray:
        return self.builder.reset(inputs[self.source])

    def push(self, inputs: Mapping[str, Any], last_action: np.ndarray, dt: float | None = None) -> np.ndarray:
        return self.builder.push(inputs[self.source], last_action, dt=dt)
