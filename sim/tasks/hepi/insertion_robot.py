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

from deploy_ros.messages import InvalidInput
from deploy_ros.observation import check_agent_index
from deploy_ros.quaternion import quat_rotate

ROLES = ("node_features", "node_vectors", "node_types", "node_mask", "edge_index", "edge_types", "edge_mask")
_DTYPES = {"node_types": np.int64, "edge_index": np.int64, "edge_types": np.int64, "node_mask": bool, "edge_mask": bool}


def graph_parts(object_vectors: np.ndarray, actuator_vectors: np.ndarray, k: int) -> dict[str, np.ndarray]:
    """The scene graph's parts (``SceneGraph.observation`` for one env, no agent axis).

    ``object_vectors [No, V, 3]``, ``actuator_vectors [Na, V, 3]``, channel 0 the position.
    """
    n_obj, n_act = len(object_vectors), len(actuator_vectors)
    pos = object_vectors[:, 0]
    dist = np.linalg.norm(pos[:, None] - pos[None], axis=-1)
    np.fill_diagonal(dist, np.inf)
    senders = np.argsort(dist, axis=-1, kind="stable")[:, :k]  # k nearest, nearest first
    knn = np.stack((senders.reshape(-1), np.repeat(np.arange(n_obj), k)), -1)
    obj, act = np.arange(n_obj), np.arange(n_obj, n_obj + n_act)
    oa = np.stack(np.meshgrid(obj, act, indexing="ij"), -1).reshape(-1, 2)
    aa = np.stack(np.meshgrid(act, act, indexing="ij"), -1).reshape(-1, 2)
    aa = aa[aa[:, 0] != aa[:, 1]]
    types = np.concatenate((np.zeros(n_obj, np.int64), np.ones(n_act, np.int64)))
    edges = np.concatenate((knn, oa, aa)).astype(np.int64)
    edge_types = np.concatenate((np.zeros(len(knn)), np.ones(len(oa)), np.full(len(aa), 2))).astype(np.int64)
    return {
        "node_features": np.eye(2, dtype=np.float32)[types],
        "node_vectors": np.concatenate((object_vectors, actuator_vectors)).astype(np.float32),
        "node_types": types,
        "node_mask": np.ones(n_obj + n_act, bool),
        "edge_index": edges,
        "edge_types": edge_types,
        "edge_mask": np.ones(len(edges), bool),
    }


class GraphPart:
    """Builds one graph part (the entry's ``role``) of hepi_insertion from robot inputs; see the module
    docstring. Constructed by the policy node as ``GraphPart(metadata, entry, agent_index, sources)``.

    Raises:
        ValueError: missing deployment constants or an entry that is not a graph part.
    """

    def __init__(self, metadata: Mapping[str, Any], entry: Mapping[str, Any], agent_index: int, sources: Sequence[str]):
        check_agent_index(agent_index, metadata.get("n_agents"))
        self.name, self.role = str(entry["name"]), str(entry.get("role", ""))
        if self.role not in ROLES:
            raise ValueError(f"entry {self.name!r}: not a graph part (role {self.role!r})")
        self.shape = tuple(int(s) for s in entry["shape"])
        dep = metadata.get("deployment") or {}
        try:
            self.k = int(dep["graph_k"])
            self.targets = np.asarray(dep["target_points"], dtype=np.float64)  # [No, 3] hole frame
            self.grasp_targets = np.asarray(dep["grasp_target_points"], dtype=np.float64)  # [Na, 3] hole frame
        except KeyError as err:
            raise ValueError(f"metadata deployment lacks {err} (export hepi_insertion with covey >= issue 16)") from err
        self.n_actuator = len(self.grasp_targets)
        need = {"points", "target", *(f"gripper{i}" for i in range(self.n_actuator))}
        if not need <= set(sources):
            raise ValueError(f"entry {self.name!r} reads {sorted(need)}, the profile gives {list(sources)}")

    def reset(self, inputs: Mapping[str, Any]) -> np.ndarray:
        return self._part(inputs)

    def push(self, inputs: Mapping[str, Any], last_action: np.ndarray, dt: float | None = None) -> np.ndarray:
        return self._part(inputs)

    def _part(self, inputs: Mapping[str, Any]) -> np.ndarray:
        points = np.asarray(inputs["points"], dtype=np.float64)
        if points.shape != self.targets.shape:
            raise InvalidInput(f"{len(points)} points on 'points', the peg has {len(self.targets)} keypoints")
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
        parts = graph_parts(
            vectors(points, self.targets, obj_vel), vectors(grip_pos, self.grasp_targets, grip_vel), self.k
        )
        out = parts[self.role]
        if out.shape != self.shape:
            raise InvalidInput(f"entry {self.name!r}: built {out.shape}, the model takes {self.shape}")
        return out.astype(_DTYPES.get(self.role, np.float32))
