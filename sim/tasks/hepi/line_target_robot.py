"""hepi_rope_closing's and hepi_cloth_hanging's graph observation rebuilt on a robot (numpy only).

Both tasks aim their object at a line: the rope at the pole's axis, the cloth at the bar's top line.
The deployment profile (:meth:`sim.tasks.hepi.base.HepiEnv.deployment_profile`) names
:class:`GraphPart` as the builder of every graph part. It reads the parsed inputs
(:mod:`deploy_ros.messages`):

    points     sensor_msgs/PointCloud2 -> float32 [No, 3]: the tracked object points (rope vertices
               from one end; cloth particles row by row from the held edge), world frame, node order
    target     geometry_msgs/PoseStamped -> the pole / bar pose: a point of its axis, and an
               orientation whose local ``line_axis`` (constant) is the axis direction
    gripper<i> nav_msgs/Odometry -> gripper i: position and linear velocity (world)

and the model's ``deployment`` constants (``deployment_constants`` of the task): ``line_axis``
(local axis of the target frame along the line), ``line_lift`` (m, the line sits this far above
the axis, world z: the cloth's bar top) and ``graph_k``. Per node the vectors are position,
displacement to the line (the closest line point minus the node) and linear velocity, as in the
tasks' ``_node_vectors``. Object point velocities are finite differences of consecutive clouds
(the simulator reads them from the physics state; zero on the first frame of an episode);
grippers' from their odometry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from covey_common.quaternion import quat_rotate
from sim.tasks.hepi.robot_graph import RobotGraphPart


class GraphPart(RobotGraphPart):
    """Builds one graph part of a line-target hepi task from robot inputs; see the module docstring."""

    task = "hepi rope/cloth"

    def __init__(self, metadata: Mapping[str, Any], entry: Mapping[str, Any], agent_index: int, sources: Sequence[str]):
        super().__init__(metadata, entry, agent_index, sources)
        self.axis_local = self.constant("line_axis")
        self.lift = float(self.constant("line_lift"))
        self.n_object = int(self.constant("n_object_points"))
        self.n_actuator = int(self.constant("n_actuators"))
        self.require({"points", "target", *(f"gripper{i}" for i in range(self.n_actuator))})
        self._last_points: np.ndarray | None = None

    def vectors(self, inputs: Mapping[str, Any], dt: float | None, fresh: bool) -> tuple[np.ndarray, np.ndarray]:
        points = self.points(inputs, self.n_object)
        target = inputs["target"]
        axis = quat_rotate(target.quat, self.axis_local)
        axis = axis / np.linalg.norm(axis)
        origin = target.pos + np.array([0.0, 0.0, self.lift])
        grippers = [inputs[f"gripper{i}"] for i in range(self.n_actuator)]
        if fresh or self._last_points is None:
            vel = np.zeros_like(points)
        else:
            vel = (points - self._last_points) / (dt or self.control_dt)
        self._last_points = points

        def vectors(p: np.ndarray, v: np.ndarray) -> np.ndarray:
            rel = p - origin
            across = rel - (rel @ axis)[:, None] * axis
            return np.stack((p, -across, v), 1)

        grip_pos = np.stack([g.pos for g in grippers])
        grip_vel = np.stack([g.vel for g in grippers])
        return vectors(points, vel), vectors(grip_pos, grip_vel)
