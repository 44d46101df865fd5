"""The batched multi-agent environment contract shared by every task.

``obs = env.reset(seed)`` and ``obs, reward, terminated, truncated, info = env.step(actions)``:

    obs[group][entry]   Tensor[num_envs, n_agents, *shape]
    actions[group]      Tensor[num_envs, n_agents, action_dim], float32 in [-1, 1], on env.device
    reward[group]       Tensor[num_envs, n_agents]
    terminated          Tensor[num_envs] bool   (a terminal state: do not bootstrap)
    truncated           Tensor[num_envs] bool   (time limit: bootstrap from info["final_obs"])

Finished environments are reset inside ``step``; ``info["final_obs"]`` holds the observation
before that reset for every env (equal to ``obs`` where nothing finished). ``info["episode"]``
holds means over the episodes that ended this step (return, length, each reward term, each
termination reason), present only when at least one ended.

A task subclasses :class:`MultiAgentEnv` and implements the hooks ``_build_spec``,
``_reset_idx``, ``_apply_actions``, ``_control_step``, ``_update_observation_buffers`` (once per
step: history, noise), ``_observations`` (a pure read, safe to call twice), ``_rewards`` and
``_terminations``. ``decimation`` control-loop ticks run per ``step``; with ``compile=True`` that
loop (controllers and physics, the hot path) runs through ``torch.compile``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import Tensor

from sim.core.config import resolve_device
from sim.core.spec import EnvSpec

if TYPE_CHECKING:
    from sim.core.teams import MatchTeams

Obs = dict[str, dict[str, Tensor]]


class MultiAgentEnv(ABC):
    """Base class: seeding, action validation, the step loop, auto-reset and episode statistics."""

    task_name: ClassVar[str] = "unnamed"  # the registry name (sim.tasks.TASKS); each task class declares it

    def __init__(
        self, cfg, num_envs: int, device: str | torch.device = "cpu", seed: int = 0, compile: bool = False
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.cfg = cfg
        self.num_envs = num_envs
        self.device = resolve_device(device)
        self.rng = torch.Generator(device=self.device)
        self.rng.manual_seed(seed)
        self.episode_step = torch.zeros(num_envs, dtype=torch.long, device=self.device)
        self.spec: EnvSpec = self._build_spec()
        self._ep_terms: dict[str, Tensor] = {}
        self._ep_return = torch.zeros(num_envs, device=self.device)
        # The control loop is pure tensor code with no data-dependent Python branches, so it
        # compiles to a few fused kernels; ~10x fewer kernel launches on CPU and GPU alike.
        self._advance = torch.compile(self._control_loop, dynamic=False) if compile else self._control_loop
        self._evaluate = torch.compile(self._post_physics, dynamic=False) if compile else self._post_physics

    # ----------------------------------------------------------------- public API
    @property
    def max_episode_steps(self) -> int:
        return self.spec.max_episode_steps

    def reset(self, seed: int | None = None) -> Obs:
        """Reset every environment; reseeds the env's generator when ``seed`` is given."""
        if seed is not None:
            self.rng.manual_seed(seed)
        all_ids = torch.arange(self.num_envs, device=self.device)
        self._reset_all_idx(all_ids)
        return self._observations()

    def observe(self) -> Obs:
        """The current observations again (a pure read): for callers that changed an input the
        observation depends on, e.g. a strategy setting skill commands before its skills act."""
        return self._observations()

    def randomize_episode_progress(self) -> Obs:
        """Set every env's step counter uniformly in ``[0, max_episode_steps)``; returns the observations.

        Called once after :meth:`reset` by trainers: the first episodes then end (truncate) at
        different times, so the envs stay desynchronised and every rollout mixes all phases of an
        episode. With all envs in step, a short rollout holds one phase only (all envs just after
        the start, or all near the end), and PPO fits that phase and forgets the others.
        """
        self.episode_step = torch.randint(
            0, self.max_episode_steps, (self.num_envs,), generator=self.rng, device=self.device
        )
        return self._observations()

    def step(self, actions: dict[str, Tensor]) -> tuple[Obs, dict[str, Tensor], Tensor, Tensor, dict]:
        """Advance one control step; see the module docstring for shapes."""
        self._check_actions(actions)
        self._apply_actions(actions)
        self._advance()
        self.episode_step += 1
        self._sample_step_noise()
        obs, reward, terms, terminated, reasons = self._evaluate()
        truncated = (self.episode_step >= self.max_episode_steps) & ~terminated
        done = terminated | truncated
        self._accumulate(reward, terms)

        info: dict = {"final_obs": obs, "reward_terms": terms, "termination_reasons": reasons}
        done_ids = done.nonzero().squeeze(-1)
        if done_ids.numel() > 0:
            # The terminal state's metrics (a landing, a crash), read before the auto-reset replaces it.
            info["final_metrics"] = self.step_metrics()
            info["episode"] = self._episode_stats(done_ids, reasons, truncated)
            self._reset_all_idx(done_ids)
            obs = self._observations()
        return obs, reward, terminated, truncated, info

    def sample_actions(self, generator: torch.Generator | None = None) -> dict[str, Tensor]:
        """Uniform random actions in [-1, 1] for every group."""
        return {
            name: torch.rand(
                (self.num_envs, g.n_agents, g.action_dim), generator=generator or self.rng, device=self.device
            )
            * 2
            - 1
            for name, g in self.spec.groups.items()
        }

    def zero_actions(self) -> dict[str, Tensor]:
        return {
            name: torch.zeros(self.num_envs, g.n_agents, g.action_dim, device=self.device)
            for name, g in self.spec.groups.items()
        }

    def step_metrics(self) -> dict[str, Tensor]:
        """Task metrics of the current state, name -> ``Tensor[num_envs]`` (unit in the name); none here.

        A pure read for evaluation (``training.evaluation`` samples it before every ``step``, so
        it sees each episode's states before any auto-reset). Tasks override it.
        """
        return {}

    def expert_policy(self):
        """A scripted expert ``obs -> {group: actions}`` acting on this env's state (imitation warm
        starts, ``training.imitation``); tasks that have one override this."""
        raise ValueError(f"task {self.task_name!r} has no expert policy (imitation.expert=task needs one)")

    def deployment_constants(self, group: str) -> dict:
        """JSON-friendly constants a robot needs to build ``group``'s policy observation itself
        (geometry the observation uses, per agent); stored in exported ONNX metadata. None here."""
        return {}

    def deployment_profile(self, group: str) -> dict:
        """How ``group``'s exported policy runs on a robot under ROS 2, as JSON (stored in the ONNX
        metadata under ``"ros"``, read by the ``deploy_ros`` policy node and sim bridge): which
        message type and topic feeds each input, which builder makes each observation entry from
        them, and the command message with its safe value. Format: :mod:`deploy_ros.profile`.

        ``{}`` here: a task that does not say how to deploy it; the policy node refuses its models.
        """
        return {}

    # ----------------------------------------------------------------- task metadata (class level)
    # What the generic layers (training/, evaluate.py, export.py, sim.render) know about a task,
    # reached through its class (sim.core.registry.task_class(name)); each task overrides what differs.
    cfg_class: ClassVar[type | None] = None  # the config dataclass sim.make builds
    best_metric: ClassVar[tuple[str, str]] = ("return", "max")  # (episode metric, "min" | "max") picking best.pt
    # Success of an evaluated episode: every listed window-mean metric below its bound (training.evaluation).
    success_criteria: ClassVar[Mapping[str, float]] = MappingProxyType({})
    # Seconds at the end of an episode that evaluation metrics average over (evaluate.py window_s=0).
    evaluation_window_s: ClassVar[float] = 5.0
    renderer: ClassVar[str | None] = None  # "module:Class" of its sim.render.MujocoRenderer (None: no video)

    @classmethod
    def evaluation_overrides(cls) -> dict[str, Any]:
        """Config overrides for evaluation and deployment (noise and randomisation off); none here."""
        return {}

    @classmethod
    def match_teams(cls) -> MatchTeams | None:
        """Two-team tasks: how ``evaluate.py match=/league=`` and ``training.matches`` build teams
        (:class:`sim.core.teams.MatchTeams`); None for other tasks."""
        return None

    # ----------------------------------------------------------------- task hooks
    decimation: int = 1

    @abstractmethod
    def _build_spec(self) -> EnvSpec: ...

    @abstractmethod
    def _reset_idx(self, env_ids: Tensor) -> None:
        """Reset the task state of ``env_ids [k]`` (long)."""

    @abstractmethod
    def _apply_actions(self, actions: dict[str, Tensor]) -> None:
        """Take validated actions once per control step (scaling, latency buffers)."""

    @abstractmethod
    def _control_step(self) -> None:
        """One tick of the low-level control loop (controllers + physics substeps)."""

    def _sample_step_noise(self) -> None:  # noqa: B027 - optional hook, empty by default
        """Draw this step's random numbers (e.g. observation noise) from ``self.rng``.

        Runs outside compiled code so that seeding stays exact; the hooks below read the draws.
        """

    @abstractmethod
    def _update_observation_buffers(self) -> None:
        """Once per step after the physics: push observation history, draw observation noise."""

    @abstractmethod
    def _observations(self) -> Obs:
        """Read the observation; no side effects. Returned tensors must never be mutated in place
        later (buffers are replaced, not written into), since ``info["final_obs"]`` keeps them."""

    @abstractmethod
    def _rewards(self, terminated: Tensor) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        """``(reward[group] [num_envs, n_agents], weighted terms name -> [num_envs])``."""

    @abstractmethod
    def _terminations(self) -> tuple[Tensor, dict[str, Tensor]]:
        """``(terminated [num_envs] bool, reason name -> [num_envs] bool)``."""

    # ----------------------------------------------------------------- internals
    def _control_loop(self) -> None:
        for _ in range(self.decimation):
            self._control_step()

    def _post_physics(self) -> tuple[Obs, dict[str, Tensor], dict[str, Tensor], Tensor, dict[str, Tensor]]:
        """Everything computed once per step after the physics (compiled together with ``compile``)."""
        self._update_observation_buffers()
        obs = self._observations()
        terminated, reasons = self._terminations()
        reward, terms = self._rewards(terminated)
        return obs, reward, terms, terminated, reasons

    def _reset_all_idx(self, env_ids: Tensor) -> None:
        self.episode_step[env_ids] = 0
        self._ep_return[env_ids] = 0.0
        for buf in self._ep_terms.values():
            buf[env_ids] = 0.0
        self._reset_idx(env_ids)

    def _check_actions(self, actions: dict[str, Tensor]) -> None:
        if not isinstance(actions, dict) or set(actions) != set(self.spec.groups):
            got = sorted(actions) if isinstance(actions, dict) else type(actions).__name__
            raise ValueError(f"actions must be a dict with keys {sorted(self.spec.groups)}, got {got}")
        for name, group in self.spec.groups.items():
            act = actions[name]
            expected = (self.num_envs, group.n_agents, group.action_dim)
            if not isinstance(act, Tensor):
                raise ValueError(f"actions[{name!r}] must be a torch.Tensor, got {type(act).__name__}")
            if tuple(act.shape) != expected:
                raise ValueError(f"actions[{name!r}] has shape {tuple(act.shape)}, expected {expected}")
            if act.dtype != torch.float32:
                raise ValueError(f"actions[{name!r}] has dtype {act.dtype}, expected torch.float32")
            if act.device != self.device:
                raise ValueError(f"actions[{name!r}] is on {act.device}, the env is on {self.device}")
            if not bool(torch.isfinite(act).all()):
                bad = (~torch.isfinite(act)).any(-1).any(-1).nonzero().squeeze(-1)[:5].tolist()
                raise ValueError(f"actions[{name!r}] contains NaN or inf (first envs: {bad})")

    def _accumulate(self, reward: dict[str, Tensor], terms: dict[str, Tensor]) -> None:
        self._ep_return += torch.stack([r.mean(-1) for r in reward.values()]).mean(0)
        for key, val in terms.items():
            if key not in self._ep_terms:
                self._ep_terms[key] = torch.zeros(self.num_envs, device=self.device)
            self._ep_terms[key] += val

    def _episode_stats(self, ids: Tensor, reasons: dict[str, Tensor], truncated: Tensor) -> dict[str, Tensor]:
        stats = {
            "return": self._ep_return[ids].mean(),
            "length": self.episode_step[ids].float().mean(),
            "count": torch.tensor(float(ids.numel()), device=self.device),
            "termination/time_out": truncated[ids].float().mean(),
        }
        for key, buf in self._ep_terms.items():
            stats[f"reward/{key}"] = buf[ids].mean()
        for key, flag in reasons.items():
            stats[f"termination/{key}"] = flag[ids].float().mean()
        stats.update(self._episode_metrics(ids))
        return stats

    def _episode_metrics(self, env_ids: Tensor) -> dict[str, Tensor]:
        """Task metrics at the end of the episodes ``env_ids`` (before reset); override to add."""
        return {}
