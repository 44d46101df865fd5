"""Compile wiring of ``MultiAgentEnv`` (``compile=True``) and the default :class:`~sim.core.backend.StepBackend`.

With ``compile`` the control loop (at its first call, with the task's ``loop_compile_options()``), the post-physics
pass, the observations after a reset, the subset observations an auto-reset recomputes (dynamic in the env count),
the split reset's tensor code (``_reset_envs``, dynamic too) and the deferred action checks run through
``torch.compile``; without, the same functions run eagerly. Every random draw stays outside compiled code, so a
seed gives the same numbers either way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from sim.core.actions import screen_actions
from sim.core.rows import two_or_more_with_draws

if TYPE_CHECKING:
    from sim.core.env import MultiAgentEnv, Obs


def wire(env: MultiAgentEnv) -> None:
    """Set the env's compiled (or eager) helpers: ``_observe`` (every env's observations), ``_observe_some`` (a
    subset's, where the task has :meth:`~sim.core.env.MultiAgentEnv._observations_of`), ``_subset_untraced``,
    ``_reset_envs_compiled`` and ``_screen_actions``."""
    compile = env.compiled
    # The observations of every env after an auto-reset: eager, they cost as much as the compiled physics
    # of a control step where envs reset every step (drone_volleyball at 4096 envs: 29 of 67 ms).
    env._observe = torch.compile(env._observations, dynamic=False) if compile else env._observations
    # Where the task computes the observations of a subset of envs: after an auto-reset only the envs that
    # reset (~1% of a volleyball batch per step) are recomputed. Their count changes every step: dynamic.
    env._observe_some = None
    if observes_subsets(env):
        some = env._observations_of
        env._observe_some = torch.compile(some, dynamic=True) if compile else some
    # Compiled, it is traced after the first step (a state as later steps see it), not inside a step's reset.
    env._subset_untraced = compile and env._observe_some is not None
    env._reset_envs_compiled = None  # compiled at the first reset of a task that splits it (_reset_idx)
    # The training rollout's action checks (defer_action_checks): a few passes over the actions fused into one.
    env._screen_actions = torch.compile(screen_actions, dynamic=False) if compile else screen_actions


def observes_subsets(env: MultiAgentEnv) -> bool:
    """Whether the auto-reset recomputes only the reset envs' observations: the task defines
    ``_observations_of`` in the class that defines ``_observations`` and ``_observations_after_reset``, or below
    it (a subclass that overrides either without its subset version falls back to every env)."""
    from sim.core.env import MultiAgentEnv

    def owner(name: str) -> type:
        return next(k for k in type(env).__mro__ if name in vars(k))

    of = owner("_observations_of")
    return of is not MultiAgentEnv and all(
        issubclass(of, owner(name)) for name in ("_observations", "_observations_after_reset")
    )


def split_reset(env: MultiAgentEnv, env_ids: Tensor) -> None:
    """A reset split in two (``_reset_draws``, eager, then ``_reset_envs``, compiled with ``compile`` once for any
    number of envs: an eager reset of a few envs is mostly the dispatch of its ~100-200 small ops)."""
    draws = env._reset_draws(env_ids.numel())
    if not env.compiled:
        env._reset_envs(env_ids, draws)
        return
    if env._reset_envs_compiled is None:  # dynamic in the env axis only: the others are the config's
        env._reset_envs_compiled = torch.compile(env._reset_envs, dynamic=False)
    env_ids, draws = two_or_more_with_draws(env_ids, draws)
    # Marked on a copy: the caller's index stays unmarked (the auto-reset's subset observations then read it, and
    # a marking their graph was not traced with would compile it again).
    env_ids = env_ids.clone()
    for t in (env_ids, *draws.values()):
        torch._dynamo.mark_dynamic(t, 0)
    env._reset_envs_compiled(env_ids, draws)


class TorchBackend:
    """:class:`~sim.core.backend.StepBackend` of the task's torch hooks: ``_apply_actions``, the control loop
    (``_control_step`` x ``decimation``) and the post-physics pass (compiled with ``compile``), the split reset
    (:func:`split_reset`) and the observations (``_observe``)."""

    snapshot_constant = True  # configuration, not episode state (state_snapshot)

    def __init__(self, env: MultiAgentEnv) -> None:
        self.env = env
        self.evaluate = torch.compile(env._post_physics, dynamic=False) if env.compiled else env._post_physics
        self.advance = self._compile_loop if env.compiled else env._control_loop

    def _compile_loop(self) -> None:
        """The compiled loop's first call: compile it with the task's options (known once its ``__init__`` ran),
        then run it. The env's handle (``env._advance``) gets the compiled loop too."""
        env = self.env
        loop = torch.compile(env._control_loop, dynamic=False, options=env.loop_compile_options() or None)
        self.advance = env._advance = loop
        loop()

    def apply_actions(self, actions: dict[str, Tensor]) -> None:
        self.env._apply_actions(actions)

    def reset_rows(self, env_ids: Tensor) -> None:
        split_reset(self.env, env_ids)

    def observations_after_reset(self) -> Obs:
        return self.env._observe()


def reset_for_wall_clock(env: MultiAgentEnv, seed: int) -> None:
    """Reset ``env`` to the start of ``seed`` for a caller on a wall clock (the ROS sim bridge). A compiled env first
    builds its graphs (a reset and two zero-action steps: they compile at their first calls), so that the caller's
    first tick does not stall for minutes."""
    if env.compiled:
        env.reset(seed=seed)
        for _ in range(2):
            env.step(env.zero_actions())
    env.reset(seed=seed)
