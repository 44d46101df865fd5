"""What every adapter shares: spec entries as gymnasium spaces, the flat action layout, numpy views.

A covey env speaks ``obs[group][entry]`` = ``Tensor[num_envs, n_agents, *shape]`` and
``actions[group]`` = ``float32 [num_envs, n_agents, action_dim]``; learner libraries want one agent
(rsl_rl), one flat action vector per env (Gymnasium) or one dict per agent (PettingZoo). The
functions here are the one place that decides names, bounds and dtypes, so the adapters agree.

Entry kinds (``sim.core.spec.ObsEntry``) become ``gymnasium.spaces.Box`` with the entry's dtype:

* ``vector``: float32, unbounded;
* ``image``: uint8 in [0, 255] (kept uint8; a learner scales it);
* ``graph``: float parts unbounded; ``node_mask`` / ``edge_mask`` bool; ``edge_index`` int64 in
  ``[0, N - 1]`` (``N`` the graph's padded node count); ``node_types`` / ``edge_types`` int64 in
  ``[0, TYPE_HIGH]`` (the spec does not record the number of types).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from sim.core.spec import EnvSpec, GroupSpec, ObsEntry, dtype_name

if TYPE_CHECKING:
    from gymnasium import spaces

TYPE_HIGH = 2**15 - 1  # upper bound of node/edge type indices in the spaces (no task has more types)
SEP = "/"  # "group/entry" keys of the flattened (all groups in one dict) observation


def graph_node_count(group: GroupSpec, graph: str) -> int:
    """Padded node count ``N`` of graph ``graph`` in ``group`` (from any node-indexed part)."""
    for entry in group.observations.values():
        if entry.kind == "graph" and entry.graph == graph and entry.role.startswith("node_"):
            return entry.shape[0]
    raise ValueError(f"graph {graph!r} has no node part (node_features, node_mask, ...) to size edge_index by")


def entry_space(name: str, entry: ObsEntry, group: GroupSpec, lead: tuple[int, ...] = ()) -> spaces.Box:
    """The Box of one entry, shape ``(*lead, *entry.shape)`` (``lead`` e.g. ``(n_agents,)``), entry dtype.

    Raises:
        ValueError: an entry kind or dtype with no space here (named in the message).
    """
    from gymnasium import spaces

    shape = (*lead, *entry.shape)
    dtype = np.dtype(dtype_name(entry.dtype))
    if entry.kind == "vector" or (entry.kind == "graph" and dtype.kind == "f"):
        return spaces.Box(-np.inf, np.inf, shape, np.float32)
    if entry.kind == "image":
        return spaces.Box(0, 255, shape, np.uint8)
    if entry.kind == "graph" and dtype == np.bool_:
        return spaces.Box(0, 1, shape, np.bool_)
    if entry.kind == "graph" and entry.role == "edge_index":
        return spaces.Box(0, graph_node_count(group, entry.graph) - 1, shape, np.int64)
    if entry.kind == "graph" and dtype.kind == "i":
        return spaces.Box(0, TYPE_HIGH, shape, np.int64)
    raise ValueError(f"observation entry {name!r}: kind {entry.kind!r} dtype {dtype} has no gymnasium space")


def action_space(group: GroupSpec, lead: tuple[int, ...] = ()) -> spaces.Box:
    """``Box(-1, 1, (*lead, action_dim), float32)``: covey's actions, continuous even for ``action_nvec``
    groups (a discrete choice is sent as an evenly spaced value, see ``sim.core.spec.GroupSpec``)."""
    from gymnasium import spaces

    return spaces.Box(-1.0, 1.0, (*lead, group.action_dim), np.float32)


def action_slices(spec: EnvSpec) -> dict[str, slice]:
    """Group -> slice of the flat action vector: groups in spec order, each ``n_agents * action_dim``
    values agent-major (agent 0's action, then agent 1's, ...)."""
    out, start = {}, 0
    for name, group in spec.groups.items():
        size = group.n_agents * group.action_dim
        out[name] = slice(start, start + size)
        start += size
    return out


def split_actions(spec: EnvSpec, flat: Tensor) -> dict[str, Tensor]:
    """Flat actions ``[num_envs, sum(n_agents * action_dim)]`` -> ``{group: [num_envs, n_agents, action_dim]}``
    (float32, clamped to [-1, 1]: learners' Gaussian samples leave the box, covey would warn and clamp)."""
    out = {}
    for name, sl in action_slices(spec).items():
        group = spec.groups[name]
        out[name] = flat[:, sl].reshape(-1, group.n_agents, group.action_dim).float().clamp(-1.0, 1.0)
    return out


def flatten_groups(obs: dict[str, dict[str, Tensor]]) -> dict[str, Tensor]:
    """``obs[group][entry]`` -> ``{"group/entry": Tensor[num_envs, n_agents, *shape]}`` (no copies)."""
    return {f"{group}{SEP}{key}": value for group, entries in obs.items() for key, value in entries.items()}


def to_numpy(tree: Any) -> Any:
    """Tensors in nested dicts -> numpy arrays, always copies: learners keep and may write into what
    they get, and a view would alias the env's own buffers (constant ones are returned every step)."""
    if isinstance(tree, Tensor):
        return tree.detach().cpu().numpy().copy()
    if isinstance(tree, dict):
        return {k: to_numpy(v) for k, v in tree.items()}
    return tree


def to_tensor(value: Any, device: torch.device) -> Tensor:
    """An action from a learner (numpy array, list or tensor) -> float32 tensor on ``device``."""
    if isinstance(value, Tensor):
        return value.to(device=device, dtype=torch.float32)
    return torch.as_tensor(np.asarray(value, dtype=np.float32), device=device)
