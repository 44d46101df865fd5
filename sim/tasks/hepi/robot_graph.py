"""The hepi scene graph rebuilt on a robot (numpy only): shared by the tasks' robot-side builders.

:func:`graph_parts` mirrors ``SceneGraph.observation`` for one env; :class:`RobotGraphPart` is the
base of each task's builder (``robot_builder`` on the task class), which the ``deploy_ros`` policy
node constructs as ``Builder(metadata, entry, agent_index, sources)`` for every graph part and
calls with the parsed inputs (:mod:`deploy_ros.messages`). Subclasses implement
:meth:`RobotGraphPart.vectors`. No torch here (a robot has numpy and onnxruntime only).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from covey_common.messages import InvalidInput
from covey_common.observation import check_agent_index

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


class RobotGraphPart:
    """Builds one graph part (the entry's ``role``) from robot inputs.

    Subclasses read their constants from ``metadata["deployment"]`` in ``__init__`` (after calling
    this one), say which inputs they need with :meth:`require`, and implement :meth:`vectors`.

    Raises:
        ValueError: an entry that is not a graph part, a bad agent index, missing constants/inputs.
    """

    task = "hepi"  # named in error messages

    def __init__(self, metadata: Mapping[str, Any], entry: Mapping[str, Any], agent_index: int, sources: Sequence[str]):
        check_agent_index(agent_index, metadata.get("n_agents"))
        self.name, self.role = str(entry["name"]), str(entry.get("role", ""))
        if self.role not in ROLES:
            raise ValueError(f"entry {self.name!r}: not a graph part (role {self.role!r})")
        self.shape = tuple(int(s) for s in entry["shape"])
        self.sources = list(sources)
        self.deployment = metadata.get("deployment") or {}
        self.control_dt = 1.0 / float(metadata.get("control_hz") or 1.0)
        try:
            self.k = int(self.deployment["graph_k"])
        except KeyError as err:
            raise ValueError(
                f"metadata deployment lacks {err} (re-export {self.task} with the current export.py)"
            ) from err

    def constant(self, key: str) -> np.ndarray:
        """``metadata["deployment"][key]`` as a float64 array; ValueError when the export lacks it."""
        if key not in self.deployment:
            raise ValueError(f"metadata deployment lacks {key!r} (re-export {self.task} with the current export.py)")
        return np.asarray(self.deployment[key], dtype=np.float64)

    def require(self, names: Iterable[str]) -> None:
        need = set(names)
        if not need <= set(self.sources):
            raise ValueError(f"entry {self.name!r} reads {sorted(need)}, the profile gives {self.sources}")

    def vectors(self, inputs: Mapping[str, Any], dt: float | None, fresh: bool) -> tuple[np.ndarray, np.ndarray]:
        """``(object_vectors [No, V, 3], actuator_vectors [Na, V, 3])`` from the inputs; ``fresh``
        at an episode start (no previous frame), ``dt`` seconds since the previous frame."""
        raise NotImplementedError

    def reset(self, inputs: Mapping[str, Any]) -> np.ndarray:
        return self._part(self.vectors(inputs, None, fresh=True))

    def push(self, inputs: Mapping[str, Any], last_action: np.ndarray, dt: float | None = None) -> np.ndarray:
        return self._part(self.vectors(inputs, dt, fresh=False))

    def _part(self, vectors: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        out = graph_parts(*vectors, self.k)[self.role]
        if out.shape != self.shape:
            raise InvalidInput(f"entry {self.name!r}: built {out.shape}, the model takes {self.shape}")
        return out.astype(_DTYPES.get(self.role, np.float32))

    def points(self, inputs: Mapping[str, Any], n: int) -> np.ndarray:
        """The object point cloud as ``float64 [n, 3]``; InvalidInput when it has another count."""
        points = np.asarray(inputs["points"], dtype=np.float64)
        if points.shape != (n, 3):
            raise InvalidInput(f"{len(points)} points on 'points', the model has {n} object nodes")
        return points
