"""Action checks of ``MultiAgentEnv.step``: immediate (a host sync per step, ``ValueError`` at once) and deferred
(``env.defer_action_checks``: no host sync, NaN/inf applied as 0 and reported by :func:`check_deferred_actions`).

The counters live on the env (``_actions_out_of_range``, ``_deferred_counts``, ``_warned_out_of_range``): they are
episode state that :meth:`~sim.core.env.MultiAgentEnv.state_snapshot` saves under those names.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from sim.core.nonfinite import report_nonfinite

if TYPE_CHECKING:
    from sim.core.env import MultiAgentEnv

ACTION_TOL = 1e-6  # |a| up to 1 + this is float round-off of a clamped action, not out of range
_CLIPPED = (
    "A policy or adapter sending these trains on clipped actions; counted per step in "
    "info['actions_out_of_range'] (warned once)"
)


def uniform_actions(env: MultiAgentEnv, generator: torch.Generator) -> dict[str, Tensor]:
    """Uniform random actions in [-1, 1] for every group of ``env``, ``[E, A, D]`` each."""
    return {
        name: torch.rand((env.num_envs, g.n_agents, g.action_dim), generator=generator, device=env.device) * 2 - 1
        for name, g in env.spec.groups.items()
    }


def zero_actions(env: MultiAgentEnv) -> dict[str, Tensor]:
    """Zero actions for every group of ``env``, ``[E, A, D]`` each."""
    return {
        name: torch.zeros(env.num_envs, g.n_agents, g.action_dim, device=env.device)
        for name, g in env.spec.groups.items()
    }


def agents_out_of_range(act: Tensor) -> Tensor:
    """``act [E, A, D]`` -> ``[E, A]`` bool: agents with an action component beyond [-1, 1] (more than round-off
    beyond it); NaN compares False."""
    return (act.abs() > 1.0 + ACTION_TOL).any(-1)


def screen_actions(act: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``act [E, A, D]`` -> ``(act with NaN/inf entries set to 0, [agents with a NaN/inf, agents beyond
    [-1, 1]] (long [2]), agents beyond [-1, 1] per env (long [E]))``: the deferred checks, no host sync."""
    finite = torch.isfinite(act)
    beyond = agents_out_of_range(act)
    counts = torch.stack([(~finite).any(-1).sum(), beyond.sum()])
    return torch.where(finite, act, 0.0), counts, beyond.sum(-1)


def check_actions(env: MultiAgentEnv, actions: dict[str, Tensor]) -> dict[str, Tensor]:
    """ValueError on a wrong key set, shape, dtype, device or a NaN/inf; counts actions outside [-1, 1].

    Sets ``env._actions_out_of_range`` (``Tensor[num_envs]`` long: agents with a component beyond
    [-1, 1], summed over groups; the task clamps them) and warns once per env object when any is.
    Returns the actions to apply: these, or with ``defer_action_checks`` the same with NaN/inf
    entries set to 0 and counted for :func:`check_deferred_actions` (no host sync here).
    """
    if not isinstance(actions, dict) or set(actions) != set(env.spec.groups):
        got = sorted(actions) if isinstance(actions, dict) else type(actions).__name__
        raise ValueError(f"actions must be a dict with keys {sorted(env.spec.groups)}, got {got}")
    out_of_range = torch.zeros(env.num_envs, dtype=torch.long, device=env.device)
    checked: dict[str, Tensor] = {}
    for name, group in env.spec.groups.items():
        act = actions[name]
        expected = (env.num_envs, group.n_agents, group.action_dim)
        if not isinstance(act, Tensor):
            raise ValueError(f"actions[{name!r}] must be a torch.Tensor, got {type(act).__name__}")
        if tuple(act.shape) != expected:
            raise ValueError(f"actions[{name!r}] has shape {tuple(act.shape)}, expected {expected}")
        if act.dtype != torch.float32:
            raise ValueError(f"actions[{name!r}] has dtype {act.dtype}, expected torch.float32")
        if act.device.type != env.device.type or (
            # "cuda" (the current device) and "cuda:0" name the same GPU; only two explicit indices can differ.
            act.device.index is not None and env.device.index is not None and act.device.index != env.device.index
        ):
            raise ValueError(f"actions[{name!r}] is on {act.device}, the env is on {env.device}")
        if env.defer_action_checks:
            checked[name], counts, beyond_per_env = env._screen_actions(act)
            env._deferred_counts[:2] += counts
            out_of_range = out_of_range + beyond_per_env
            continue
        checked[name] = act
        # One device sync for both checks, from two reductions to a scalar: the per-agent flags cost ~10x
        # more (reductions over the few action components) and are computed only when one is needed.
        # NaN and inf survive the sum; a finite sum that overflows is told apart by the exact check below.
        lo, hi = torch.aminmax(act)
        flags = torch.stack([torch.isfinite(act.sum()), torch.maximum(-lo, hi) > 1.0 + ACTION_TOL])
        finite, any_beyond = flags.tolist()
        if not finite and not bool(torch.isfinite(act).all()):
            bad = (~torch.isfinite(act)).any(-1).any(-1).nonzero().squeeze(-1)[:5].tolist()
            raise ValueError(f"actions[{name!r}] contains NaN or inf (first envs: {bad})")
        if any_beyond:
            out_of_range = out_of_range + agents_out_of_range(act).sum(-1)
            if not env._warned_out_of_range:
                env._warned_out_of_range = True
                worst = float(act.abs().max())
                warnings.warn(
                    f"{env.task_name}: actions[{name!r}] outside [-1, 1] (max |a| = {worst:.3g}); clamped. {_CLIPPED}",
                    RuntimeWarning,
                    stacklevel=4,
                )
    env._actions_out_of_range = out_of_range
    return checked


def check_deferred_actions(env: MultiAgentEnv) -> None:
    """With ``defer_action_checks``: ValueError if any action since the last call held a NaN or inf (the
    env applied 0 instead), a warning (once per env object) if any was outside [-1, 1]. One host sync."""
    nonfinite, beyond, reset = env._deferred_counts.tolist()
    env._deferred_counts.zero_()
    if reset:  # counted by masked resets, which log nothing in step
        report_nonfinite(env, None, reset)
    if nonfinite:
        raise ValueError(
            f"{env.task_name}: {nonfinite} agent action(s) contained NaN or inf since the last check "
            "(the env applied 0 instead)"
        )
    if beyond and not env._warned_out_of_range:
        env._warned_out_of_range = True
        warnings.warn(
            f"{env.task_name}: {beyond} agent action(s) outside [-1, 1] since the last check; clamped. {_CLIPPED}",
            RuntimeWarning,
            stacklevel=3,
        )
