"""Masked resets (``env.masked_resets``): finished envs are reset by a mask instead of their indices, so ``step``
never waits for the device (no ``nonzero``, no data-dependent branch; what a CUDA graph capture needs).

Every step computes a reset of every env and keeps it where an episode ended, one ``torch.where`` per state tensor
(:func:`reset_masked`, over the tensors :func:`sim.core.snapshot.state_snapshot` finds). ``info["episode"]`` is then
present on every step (``count`` 0 where none ended; its means are count-weighted, so 0-count steps add nothing),
``termination/nonfinite`` is always among its reasons, and non-finite resets are logged by
``check_deferred_actions``. The random draws differ from the indexed reset's (every env draws each step), so the two
give different, equally valid episodes. The first masked reset of an env also checks, once, that the reset leaves
the state that is not per-env alone (a comparison that waits for the device).

Off by default and no setting (code that captures the step in a CUDA graph turns it on), because it costs more
than the sync it saves wherever the step runs eagerly (``benchmarks/masked_reset_cost.py``, cable_load, 2026-11-26):
0.54x the indexed reset's steps/s on this 2-core CPU at 4096 envs, 0.81x on an H200 at 4096 envs and 0.63x at 65,536
(eager, the step launch-bound there, so the sync stalls little). It is what lets the step be captured in a CUDA
graph: ``benchmarks/cuda_graph_capture.py`` captures cable_load's (with host constants built on the device while
capturing) and replays it 3.9-8.3x faster than the uncaptured masked step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from sim.core.episode_stats import episode_stats_masked
from sim.core.rows import where_envs
from sim.core.snapshot import is_expanded, set_path

if TYPE_CHECKING:
    from sim.core.env import MultiAgentEnv, Obs


def masked_reset_support(env: MultiAgentEnv) -> str | None:
    """None when ``env`` can reset by mask, else why not: its state must be reachable by ``state_snapshot`` (not a
    MuJoCo world's), and its end-of-episode metrics must come from ``_episode_metrics_per_env`` (an override of
    ``_episode_metrics`` works on indices only)."""
    from sim.core.env import MultiAgentEnv

    if type(env)._episode_metrics is not MultiAgentEnv._episode_metrics:
        return "its _episode_metrics works on env indices (implement _episode_metrics_per_env instead)"
    snap = env.state_snapshot()
    return snap if isinstance(snap, str) else None


def finish_step_masked(
    env: MultiAgentEnv,
    obs: Obs,
    reward: dict[str, Tensor],
    terminated: Tensor,
    truncated: Tensor,
    done: Tensor,
    bad: Tensor,
    reasons: dict[str, Tensor],
    info: dict,
) -> tuple[Obs, dict[str, Tensor], Tensor, Tensor, dict]:
    """The end of ``step`` with masked resets: statistics and the reset by mask, no host sync."""
    reasons = info["termination_reasons"] = {**reasons, "nonfinite": bad}
    info["final_metrics"] = env.step_metrics()
    info["episode"] = episode_stats_masked(env, done, reasons, truncated)
    env._deferred_counts[2] += bad.sum()
    reset_masked(env, done)
    # Unfinished envs keep the observation they had (their state is unchanged, and so is what a
    # pure _observations reads; the where also guards tasks whose reset touches shared buffers).
    obs = where_envs(done, env._observations_after_reset(), obs)
    info["final_obs"] = where_envs(bad, obs, info["final_obs"])
    return obs, reward, terminated, truncated, info


def reset_masked(env: MultiAgentEnv, mask: Tensor) -> None:
    """Reset the envs where ``mask [num_envs]`` (bool) by resetting all of them and keeping the old state
    elsewhere: every state tensor (as ``state_snapshot`` finds them) is merged along its first axis.

    A tensor the reset replaces gets a new merged tensor (so tensors handed out earlier, e.g. in
    ``info["final_obs"]``, keep their values); one it writes in place is merged in place, as the reset
    itself wrote it. RuntimeError if the reset changed anything that is not per-env state (a Python
    scalar, or a tensor whose first axis is not the env axis): such a task must use indexed resets.
    """
    E = env.num_envs
    # Shared (not per-env) state must come out of the reset unchanged; checked on the first masked reset of
    # this env only, since the comparison waits for the device (a reset's code path is fixed by the config).
    check_shared = not env._masked_reset_checked
    before = env.state_snapshot()
    assert not isinstance(before, str), before  # masked_reset_support checked it
    saved = {
        p: v.clone()
        for p, v in before.items()
        if isinstance(v, Tensor) and "#" not in p and (check_shared or (v.dim() > 0 and v.shape[0] == E))
    }
    env._reset_all_idx(torch.arange(E, device=env.device))
    after = env.state_snapshot()
    assert not isinstance(after, str), after
    for path, now in after.items():
        if "#" in path:
            continue  # generators advance; numpy arrays and classes are checked as scalars below
        was = before.get(path)
        if not isinstance(now, Tensor):
            if now != was:
                raise RuntimeError(f"{env.task_name}: the reset changed {path} ({was!r} -> {now!r}), not per-env")
            continue
        if now.dim() == 0 or now.shape[0] != E:
            old = saved.get(path)
            if check_shared and (old is None or not torch.equal(now, old)):  # cannot be merged per env
                raise RuntimeError(f"{env.task_name}: the reset changed {path} {tuple(now.shape)}, not per-env")
            continue
        old = saved.get(path)
        if old is None or old.shape != now.shape:
            raise RuntimeError(f"{env.task_name}: the reset created or reshaped {path}; use indexed resets")
        merged = torch.where(mask.view(-1, *([1] * (now.dim() - 1))), now, old)
        if now is was and not is_expanded(now):  # written in place by the reset: merged in place
            now.copy_(merged)
        else:
            set_path(env, path, merged)
    env._masked_reset_checked = True
