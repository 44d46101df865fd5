"""Per-env row helpers of the step: index, merge and replace the env rows of observation dicts.

Observations are ``{group: {entry: Tensor[num_envs, ...]}}`` (:data:`sim.core.env.Obs`); these helpers work on
their first axis only, whatever the entry's shape and dtype.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

Obs = dict[str, dict[str, Tensor]]


def env_rows(env_ids: Tensor | None) -> Callable[[Tensor], Tensor]:
    """Index per-env tensors ``[num_envs, ...]`` at the envs ``env_ids [k]`` (the identity where ``None``): for
    a task's observations (or any pure read) of a subset of its envs, e.g. the few that an auto-reset restarts."""
    return (lambda x: x) if env_ids is None else (lambda x: x[env_ids])


def where_envs(mask: Tensor, new: Obs, old: Obs) -> Obs:
    """``new`` where ``mask [num_envs]`` else ``old``, for every entry of every group (new tensors)."""
    out: Obs = {}
    for group, entries in old.items():
        out[group] = {}
        for key, value in entries.items():
            m = mask.view(-1, *([1] * (value.dim() - 1)))
            out[group][key] = torch.where(m, new[group][key], value)
    return out


def put_envs(obs: Obs, env_ids: Tensor, rows: Obs) -> Obs:
    """``obs`` with the envs ``env_ids [k]`` replaced by ``rows`` (entries ``[k, ...]``), as new tensors."""
    return {g: {k: v.index_copy(0, env_ids, rows[g][k]) for k, v in entries.items()} for g, entries in obs.items()}


def put_envs_in_place(obs: Obs, env_ids: Tensor, rows: Obs) -> Obs:
    """``obs`` with the envs ``env_ids [k]`` replaced by ``rows``, written into its tensors."""
    for g, entries in obs.items():
        for k, v in entries.items():
            v.index_copy_(0, env_ids, rows[g][k])
    return obs


def two_or_more(env_ids: Tensor) -> Tensor:
    """``env_ids`` with a single env repeated: compiled with dynamic shapes, sizes 0 and 1 would each get
    their own graph (compiled in the middle of a run); a repeated env writes the same row twice."""
    return env_ids if env_ids.numel() > 1 else env_ids.repeat(2)


def two_or_more_with_draws(env_ids: Tensor, draws: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
    """:func:`two_or_more` for a split reset (``MultiAgentEnv._reset_idx``): a single env's draws are repeated
    with it, so both writes of the repeated env agree."""
    if env_ids.numel() > 1:
        return env_ids, draws
    return two_or_more(env_ids), {k: d.repeat(2, *[1] * (d.dim() - 1)) for k, d in draws.items()}
