"""Scripted baseline for point_reach: a PD law on the named observation slices."""

from __future__ import annotations

from torch import Tensor

from sim.core.spec import GroupSpec


def pd_actions(policy_obs: Tensor, group: GroupSpec, kp: float = 2.0, kd: float = 1.5) -> Tensor:
    """``a = clamp((kp * e - kd * v) / max_acc, -1, 1)`` with ``e`` = goal - pos.

    Args:
        policy_obs: ``[E, A, obs_dim]`` policy observation of group ``agents``.
        group: its spec (for the slices and the action scale).
    Returns:
        ``[E, A, dim]`` actions in [-1, 1].
    """
    sl = group.observations["policy"].slices()
    err, vel = policy_obs[..., sl["goal_rel"]], policy_obs[..., sl["vel"]]
    return ((kp * err - kd * vel) / group.action_scale[0]).clamp(-1.0, 1.0)
