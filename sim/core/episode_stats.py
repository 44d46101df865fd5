"""Episode statistics of ``MultiAgentEnv.step`` (``info["episode"]``): returns and reward terms summed per env
while episodes run, and their means over the episodes that end, for indexed and masked resets alike.

The sums live on the env (``_ep_return [num_envs]``, ``_ep_terms`` name -> ``[num_envs]``): episode state that
:meth:`~sim.core.env.MultiAgentEnv.state_snapshot` saves under those names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from sim.core.env import MultiAgentEnv


def accumulate(env: MultiAgentEnv, reward: dict[str, Tensor], terms: dict[str, Tensor]) -> None:
    """Add a step's reward (mean over agents and groups) and its weighted terms to the running episode sums."""
    env._ep_return += torch.stack([r.mean(-1) for r in reward.values()]).mean(0)
    for key, val in terms.items():
        if key not in env._ep_terms:
            env._ep_terms[key] = torch.zeros(env.num_envs, device=env.device)
        env._ep_terms[key] += val


def restart(env: MultiAgentEnv, env_ids: Tensor) -> None:
    """Zero the sums of the envs ``env_ids [k]`` (their episodes restart)."""
    env._ep_return[env_ids] = 0.0
    for buf in env._ep_terms.values():
        buf[env_ids] = 0.0


def per_env_rows(xs: list[Tensor], num_envs: int) -> Tensor:
    """``xs`` (each ``[num_envs, ...]``, any dtype) as one float ``[len(xs), num_envs]``, trailing axes (e.g.
    agents) averaged: the episode statistics take their means in one op each, not a few per statistic."""
    return torch.stack([x.float() if x.dim() == 1 else x.float().reshape(num_envs, -1).mean(-1) for x in xs])


def means_over(xs: list[Tensor], env_ids: Tensor, num_envs: int) -> list[Tensor]:
    """The mean of each of ``xs`` (``[num_envs, ...]``) over the envs ``env_ids``."""
    return list(per_env_rows(xs, num_envs).index_select(1, env_ids).mean(1).unbind(0))


def episode_stats(env: MultiAgentEnv, ids: Tensor, reasons: dict[str, Tensor], truncated: Tensor) -> dict[str, Tensor]:
    """Means over the episodes ``ids`` that ended this step (``info["episode"]``)."""
    count = torch.tensor(float(ids.numel()), device=env.device)
    metrics = env._episode_metrics(ids)
    return episode_means(env, lambda xs: means_over(xs, ids, env.num_envs), count, reasons, truncated, metrics)


def episode_stats_masked(
    env: MultiAgentEnv, done: Tensor, reasons: dict[str, Tensor], truncated: Tensor
) -> dict[str, Tensor]:
    """:func:`episode_stats` as means weighted by ``done`` (0 where no episode ended; ``count`` says so)."""
    weight = done.float()
    count = weight.sum()
    inv = 1.0 / count.clamp(min=1.0)

    def means(xs: list[Tensor]) -> list[Tensor]:
        return list((per_env_rows(xs, env.num_envs) @ weight * inv).unbind(0))

    per_env = env._episode_metrics_per_env()
    metrics = dict(zip(per_env, means(list(per_env.values())), strict=True))
    return episode_means(env, means, count, reasons, truncated, metrics)


def episode_means(
    env: MultiAgentEnv,
    means: Callable[[list[Tensor]], list[Tensor]],
    count: Tensor,
    reasons: dict[str, Tensor],
    truncated: Tensor,
    metrics: dict[str, Tensor],
) -> dict[str, Tensor]:
    """``info["episode"]`` from ``means`` (per-env tensors -> their means over the ended episodes), their
    ``count`` and the task's ``metrics`` (already means): one layout for indexed and masked resets."""
    per_env = {
        "return": env._ep_return,
        "length": env.episode_step,
        "termination/time_out": truncated,
        **{f"reward/{key}": buf for key, buf in env._ep_terms.items()},
        **{f"termination/{key}": flag for key, flag in reasons.items()},
    }
    stats = dict(zip(per_env, means(list(per_env.values())), strict=True))
    stats["count"] = count
    stats.update(metrics)
    return stats
