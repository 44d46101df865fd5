"""The one loop that drives an env with a policy outside training: evaluation episodes, the runner's evaluations,
matches, and the observations an export records.

    for s in rollout(env, policy, env.max_episode_steps, seed=0, memory=actors, before_step=draw):
        returns += s.reward["robots"].mean(-1)
        if bool((s.terminated | s.truncated).all()):
            break                                          # stopping early is breaking

Per step ``t``: ``before_step(t, obs)`` (work on the state the policy acts on: step metrics, a video frame, a
recording), ``actions = act(obs)``, ``env.step(actions)``, then the recurrent state of the envs whose episode ended
restarts, and the step is yielded. The env resets (with ``seed``) and the recurrent state restarts when
:func:`rollout` is *called*, not at the first ``next()``: work that needs the reset env (an opponent set up on it)
can run between the call and the loop. The loop adds no random draw of its own and no inference mode (the caller
picks ``torch.inference_mode()`` or ``no_grad`` around it).

The training rollout that fills PPO's storage (``training.runner.Runner.collect``) and DAgger's collection
(``training.imitation``) keep their own loops: they carry the env across iterations or rounds without a reset and
interleave their algorithm's work with every step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from torch import Tensor

from policies import StatefulActor
from sim.core.env import MultiAgentEnv, Obs

Act = Callable[[Obs], dict[str, Tensor]]
BeforeStep = Callable[[int, Obs], None]


class Resettable(Protocol):
    """A policy's recurrent state: ``reset(None)`` restarts every env's, ``reset(done [E] bool)`` those of ``done``."""

    def reset(self, done: Tensor | None = None) -> None: ...


Memory = Mapping[str, Any] | Resettable


@dataclass(frozen=True, slots=True)
class Step:
    """One control step of a :func:`rollout` (``E = env.num_envs``, ``A`` a group's agents).

    Attributes:
        t: the step's index, 0 at the reset.
        obs: the observation the policy acted on, ``obs[group][entry] [E, A, *shape]``.
        actions: ``actions[group] [E, A, act_dim]``.
        next_obs: the observation after the step (of the new episode where one ended: the env auto-resets).
        reward: ``reward[group] [E, A]``.
        terminated: ``[E]`` bool, a terminal state.
        truncated: ``[E]`` bool, the time limit.
        info: the env's step info (``info["episode"]``, ``info["final_obs"]``, ...).
    """

    t: int
    obs: Obs
    actions: dict[str, Tensor]
    next_obs: Obs
    reward: dict[str, Tensor]
    terminated: Tensor
    truncated: Tensor
    info: dict[str, Any]


def restart_memory(memory: Memory | None, done: Tensor | None = None) -> None:
    """Restart the recurrent state of ``memory`` for the envs ``done [E]`` (None: every env). ``memory``: a mapping
    of actors (each :class:`policies.StatefulActor` among them restarts; feed-forward ones have none) or an object
    with ``reset(done)``."""
    if memory is None:
        return
    if isinstance(memory, Mapping):
        for actor in memory.values():
            if isinstance(actor, StatefulActor):
                actor.reset(done)
    else:
        memory.reset(done)


def rollout(
    env: MultiAgentEnv,
    act: Act,
    steps: int,
    *,
    seed: int | None = None,
    memory: Memory | None = None,
    before_step: BeforeStep | None = None,
) -> Iterator[Step]:
    """Reset ``env`` (``env.reset(seed)``) and ``memory`` now; the returned iterator runs up to ``steps`` steps.

    Args:
        env: the env to drive; its auto-reset starts a new episode where one ends.
        act: the policy, ``obs -> actions[group] [E, A, act_dim]`` (every group the env needs).
        steps: control steps at most; break out of the loop to stop sooner.
        seed: the reset's seed (None: ``env.reset()``, the env's own generator).
        memory: the policy's recurrent state (:func:`restart_memory`): every env's restarts now, an env's after
            each step where its episode ended (``terminated | truncated``). None: nothing to restart.
        before_step: ``before_step(t, obs)`` before the policy acts at step ``t``.
    """
    obs = env.reset(seed=seed)
    restart_memory(memory)
    return _steps(env, act, obs, steps, memory, before_step)


def _steps(
    env: MultiAgentEnv, act: Act, obs: Obs, steps: int, memory: Memory | None, before_step: BeforeStep | None
) -> Iterator[Step]:
    for t in range(steps):
        if before_step is not None:
            before_step(t, obs)
        actions = act(obs)
        next_obs, reward, terminated, truncated, info = env.step(actions)
        if memory is not None:
            restart_memory(memory, terminated | truncated)
        yield Step(t, obs, actions, next_obs, reward, terminated, truncated, info)
        obs = next_obs


class EpisodeStats:
    """Count-weighted means of ``info["episode"]`` entries over the steps they appear in."""

    def __init__(self) -> None:
        self.sums: dict[str, Tensor] = {}
        self.count: Tensor | float = 0.0

    def add(self, episode: Mapping[str, Tensor]) -> None:
        n = episode["count"]
        self.count = self.count + n
        for key, val in episode.items():
            if key != "count":
                self.sums[key] = self.sums.get(key, 0.0) + val * n

    def means(self) -> dict[str, float]:
        count = float(self.count)
        return {k: float(v) / count for k, v in self.sums.items()} if count > 0 else {}
