"""hepi_insertion's graph observation rebuilt on a robot (numpy only).

The deployment profile (:meth:`sim.tasks.hepi.base.HepiEnv.deployment_profile`) names
:class:`GraphPart` as the builder of every graph part. It reads the parsed inputs
(:mod:`deploy_ros.messages`):

    points     sensor_msgs/PointCloud2 -> float32 [24, 3]: the peg keypoints, world frame, in node
               order (outline vertices on the bottom face, then the top face)
    target     geometry_msgs/PoseStamped -> the hole pose (opening centre, z out of the hole)
    gripper<i> nav_msgs/Odometry -> the gripper at its grasp point: pose, linear velocity (world),
               angular velocity (body)

and the model's ``deployment`` constants (:meth:`InsertionEnv.deployment_constants`): the
keypoints' and grasp points' targets in the hole frame, and k. It mirrors
``InsertionEnv._node_vectors`` and ``SceneGraph.observation``: the peg is rigid and held, so a
keypoint's velocity is the gripper's twist at that point, ``v_g + w x (p - p_g)``, and every node's
angular velocity is the gripper's.

No torch here (a robot has numpy and onnxruntime only).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from covey_common.quaternion import quat_rotate
from sim.tasks.hepi.robot_graph import RobotGraphPart, graph_parts

__all__ = ["GraphPart", "graph_parts"]


class GraphPart(RobotGraphPart):
    """Builds one graph part (the entry's ``role``) of hepi_insertion from robot inputs; see the module
    docstring. Constructed by the policy node as ``GraphPart(metadata, entry, agent_index, sources)``.

    Raises:
        ValueError: missing deployment constants or an entry that is not a graph part.
    """

    task = "hepi_insertion"

    def __init__(self, metadata: Mapping[str, Any], entry: Mapping[str, Any], agent_index: int, sources: Sequence[str]):
        super().__init__(metadata, entry, agent_index, sources)
        self.targets = self.constant("target_points")  # [No, 3] hole frame
        self.grasp_targets = self.constant("grasp_target_points")  # [Na, 3] hole frame
        self.n_actuator = len(self.grasp_targets)
        self.require({"points", "target", *(f"gripper{i}" for i in range(self.n_actuator))})

    def vectors(self, inputs: Mapping[str, Any], dt: float | None, fresh: bool) -> tuple[np.ndarray, np.ndarray]:
        points = self.points(inputs, len(self.targets))
        hole = inputs["target"]
        grippers = [inputs[f"gripper{i}"] for i in range(self.n_actuator)]
        g0 = grippers[0]
        omega = quat_rotate(g0.quat, g0.ang_vel)  # world frame; the peg turns with its gripper

        def vectors(p: np.ndarray, targets_hole: np.ndarray, vel: np.ndarray) -> np.ndarray:
            targets = hole.pos + quat_rotate(hole.quat[None], targets_hole)
            return np.stack((p, targets - p, vel, np.broadcast_to(omega, p.shape)), 1)

        obj_vel = g0.vel + np.cross(omega, points - g0.pos)
        grip_pos = np.stack([g.pos for g in grippers])
        grip_vel = np.stack([g.vel for g in grippers])
        return vectors(points, self.targets, obj_vel), vectors(grip_pos, self.grasp_targets, grip_vel)
