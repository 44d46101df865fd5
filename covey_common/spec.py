"""Spec records both sides of the robot boundary read: observation terms, entry kinds, graph roles and dtype
names (as the ONNX metadata spells them), and the decoding of discrete choices.

The simulator's specs (``sim.core.spec``: ``ObsEntry``, ``GroupSpec``, with torch dtypes) build on these;
an entry's metadata dict (``ObsEntry.to_dict``) holds the same names, read back by :func:`terms_from_dicts`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class ObsTerm:
    """A named slice of a flat observation vector (one time step, before history stacking)."""

    name: str
    size: int
    unit: str = ""
    frame: str = ""
    description: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly record (an entry's ``terms`` in the ONNX metadata)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ObsTerm:
        """The term of a :meth:`to_dict` record (unknown keys ignored)."""
        return cls(
            str(d["name"]),
            int(d["size"]),
            str(d.get("unit", "")),
            str(d.get("frame", "")),
            str(d.get("description", "")),
        )


def terms_from_dicts(records: Iterable[Mapping[str, Any]]) -> tuple[ObsTerm, ...]:
    """An entry's ``terms`` from its metadata records, in order."""
    return tuple(ObsTerm.from_dict(d) for d in records)


OBS_KINDS = ("vector", "image", "graph")
GRAPH_ROLES = ("node_features", "node_vectors", "node_types", "node_mask", "edge_index", "edge_types", "edge_mask")
GRAPH_DTYPE_NAMES = {
    "node_features": "float32",  # [N, F] invariant node features
    "node_vectors": "float32",  # [N, V, 3] 3D vectors per node (positions, velocities): equivariant inputs
    "node_types": "int64",  # [N] type index (heterogeneous graphs)
    "node_mask": "bool",  # [N] real node (True) or padding
    "edge_index": "int64",  # [E, 2] (sender, receiver) node indices
    "edge_types": "int64",  # [E] type index
    "edge_mask": "bool",  # [E] real edge or padding
}
"""Graph role -> the dtype name of that part (``sim.core.spec`` holds the torch dtypes of the same names)."""


def choice_from_action(action: Any, n: int) -> Any:
    """A discrete action value in [-1, 1] -> the index of one of ``n`` options (``GroupSpec.action_nvec``):
    a long tensor for a torch tensor (the same ops as torch's ``round(clamp(...))``), int64 for numpy."""
    if hasattr(action, "long"):  # a torch tensor (torch is not imported here)
        return ((action.clip(-1.0, 1.0) + 1.0) * (0.5 * (n - 1))).round().long()
    return np.round((np.clip(action, -1.0, 1.0) + 1.0) * (0.5 * (n - 1))).astype(np.int64)
