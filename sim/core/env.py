"""The batched multi-agent environment contract shared by every task.

``obs = env.reset(seed)`` and ``obs, reward, terminated, truncated, info = env.step(actions)``:

    obs[group][entry]   Tensor[num_envs, n_agents, *shape]
    actions[group]      Tensor[num_envs, n_agents, action_dim], float32 in [-1, 1], on env.device
    reward[group]       Tensor[num_envs, n_agents]
    terminated          Tensor[num_envs] bool   (a terminal state: do not bootstrap)
    truncated           Tensor[num_envs] bool   (time limit: bootstrap from info["final_obs"])

Finished environments are reset inside ``step``; ``info["final_obs"]`` holds the observation before that reset for
every env (equal to ``obs`` where nothing finished; on steps that reset envs a lazy
:class:`sim.core.final_obs.FinalObs`). ``info["episode"]`` holds means over the episodes that ended this step
(:mod:`sim.core.episode_stats`), present only when at least one ended (every step under ``masked_resets``,
:mod:`sim.core.masked_reset`). ``info["actions_out_of_range"]`` and ``info["nonfinite_reset"]`` (``[num_envs]``,
every step) count actions the task had to clamp (:mod:`sim.core.actions`) and envs the numerical guard reset
(:mod:`sim.core.nonfinite`). ``state_snapshot`` / ``load_state_snapshot`` copy an env's whole state
(:mod:`sim.core.snapshot`). With ``compile=True`` the task's passes run through ``torch.compile``
(:mod:`sim.core.compiled`); a task may run them with other code behind :class:`sim.core.backend.StepBackend`.

A task subclasses :class:`MultiAgentEnv` and implements the hooks (``docs/new_task.md`` has the table):
``_build_spec``, ``_reset_idx`` (or ``_reset_draws`` + ``_reset_envs``), ``_apply_actions``, ``_control_step``,
``_update_observation_buffers``, ``_observations`` (a pure read), ``_rewards`` and ``_terminations``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import Tensor

from sim.core import actions as action_checks
from sim.core import episode_stats, masked_reset, nonfinite, snapshot
from sim.core.backend import PostPhysics, StepBackend
from sim.core.compiled import TorchBackend, wire
from sim.core.config import resolve_device
from sim.core.final_obs import FinalObs, take_envs
from sim.core.rows import Obs, env_rows, put_envs, put_envs_in_place, two_or_more, where_envs
from sim.core.rows import two_or_more_with_draws as _two_or_more_with_draws
from sim.core.spec import EnvSpec

if TYPE_CHECKING:
    from sim.core.teams import MatchTeams

__all__ = ["MultiAgentEnv", "Obs", "Scenario", "env_rows", "_two_or_more_with_draws"]


@dataclass(frozen=True)
class Scenario:
    """A named evaluation case of a task (``evaluate.py scenario=<name>``): overrides of the task config
    (merged after ``eval_mode``'s and before the command line's ``task.*``) and, where the case sets a
    different bar, success thresholds (merged over the task's ``success_criteria``; ``success.*`` wins)."""

    about: str
    overrides: Mapping[str, Any] = field(default_factory=dict)
    success: Mapping[str, float] = field(default_factory=dict)


class MultiAgentEnv(ABC):
    """Base class: seeding, the step loop, auto-reset and the task hooks; the rest is delegated (module docstring)."""

    task_name: ClassVar[str] = "unnamed"  # the registry name (sim.tasks.TASKS); each task class declares it
    # A task whose _evaluate makes its observation tensors anew at every call (none a view of state that outlives the
    # step) may set this: an auto-reset then writes the reset envs' rows from _observations_of into them in place
    # (info["final_obs"] kept those rows) instead of copying every entry (drone_volleyball: 20 MB a reset step).
    fresh_observations: ClassVar[bool] = False
    # Where training's sim.compile=auto compiles this task's loop (train and eval envs): device type -> the
    # smallest train.total_steps from which it was measured to pay (a first compile costs minutes on a CPU).
    auto_compile_min_steps: ClassVar[dict[str, int]] = {}
    # Other engines the task's bodies can step in, name -> "module:Class" (sim.core.backend.use_engine; sim.make's
    # engine=), e.g. MuJoCo for a sim-to-sim check. "covey", the task's own physics, is always there.
    engines: ClassVar[dict[str, str]] = {}

    @classmethod
    def has_native_kernels(cls, cfg: Any) -> bool:
        """Whether this task, configured as ``cfg``, has C kernels for a CPU: ``sim.make`` then passes its
        ``kernels`` choice (``sim.kernels``, :data:`sim.core.native.KERNELS`) to the constructor as ``kernels=``.
        A task without them runs its torch code and takes no such argument."""
        return False

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
        self._ep_terms: dict[str, Tensor] = {}  # episode sums (sim.core.episode_stats)
        self._ep_return = torch.zeros(num_envs, device=self.device)
        self._actions_out_of_range = torch.zeros(num_envs, dtype=torch.long, device=self.device)
        self._warned_out_of_range = False
        # Trainers set this: the NaN/inf and range checks of actions then cost no host sync per step; a
        # NaN/inf action becomes 0 and check_deferred_actions() raises for it later (once per rollout).
        self.defer_action_checks = False
        # Non-finite actions, actions out of range, non-finite resets (masked resets count them here).
        self._deferred_counts = torch.zeros(3, dtype=torch.long, device=self.device)
        self.nonfinite_resets_total = 0  # envs reset by the numerical guard since construction
        # Reset finished envs by mask, not index (masked_resets): no host sync in step. Not a setting: code that
        # captures the step in a CUDA graph turns it on; every run else resets by index, measured faster on a CPU
        # and on an H200 alike (sim.core.masked_reset).
        self._masked_resets = False
        self._masked_reset_checked = False  # the first masked reset checks that shared state stays unchanged
        # The envs a step's auto-reset restarts, while it runs (else None). The observation tensors that step made are
        # not returned yet and info["final_obs"] keeps those envs' rows as they were, so a task may write the rows
        # into them in place (in its reset and _observations_after_reset) instead of copying whole tensors.
        self._auto_reset_ids: Tensor | None = None
        # The passes are pure tensor code with no data-dependent Python branches, so they compile to a few fused
        # kernels; ~10x fewer kernel launches on CPU and GPU alike.
        self.compiled = bool(compile)
        self.use_backend(TorchBackend(self))
        wire(self)

    def use_backend(self, backend: StepBackend) -> None:
        """Run the task's part of ``reset`` and ``step`` with ``backend`` (default: the torch hooks,
        :class:`~sim.core.compiled.TorchBackend`). A task selects another once, at the end of its ``__init__``.
        ``_advance`` and ``_evaluate`` are the step's handles on the backend's loop and pass (benchmarks time them)."""
        self.backend = backend
        self._advance = backend.advance
        self._evaluate = backend.evaluate

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
        return self._observations_after_reset()

    def observe(self) -> Obs:
        """The current observations again (a pure read): for callers that changed an input the
        observation depends on, e.g. a strategy setting skill commands before its skills act."""
        return self._observations()

    def randomize_episode_progress(self) -> Obs:
        """Set every env's step counter uniformly in ``[0, max_episode_steps)``; returns the observations.

        Called once after :meth:`reset` by trainers: the first episodes then end (truncate) at different times, so
        the envs stay desynchronised and every rollout mixes all phases of an episode (with all envs in step, a
        short rollout holds one phase only, and PPO fits that phase and forgets the others).
        """
        self.episode_step = torch.randint(
            0, self.max_episode_steps, (self.num_envs,), generator=self.rng, device=self.device
        )
        return self._observations()

    def step(self, actions: dict[str, Tensor]) -> tuple[Obs, dict[str, Tensor], Tensor, Tensor, dict]:
        """Advance one control step; see the module docstring for shapes.

        Reliability counts in ``info`` (both ``Tensor[num_envs]`` long, every step): ``actions_out_of_range``
        (agents whose action had a component outside [-1, 1]; the task clamps it, warned once per env object) and
        ``nonfinite_reset`` (1 where the step produced a non-finite observation or reward). Such an env is reset at
        once and reported as terminated with reason ``nonfinite`` (a key of ``info["termination_reasons"]`` on the
        steps it happens); its reward is 0 and ``info["final_obs"]`` holds the post-reset observation, so no NaN/inf
        reaches the policy or the optimiser. The host syncs here are the auto-reset's index of finished envs and, on
        steps where one finished, the count of non-finite ones; with :attr:`masked_resets` there are none.
        """
        actions = self._check_actions(actions)
        out_of_range = self._actions_out_of_range
        self.backend.apply_actions(actions)
        self._advance()
        self.episode_step += 1
        self._sample_step_noise()
        obs, reward, terms, terminated, reasons, bad = self._evaluate()
        truncated = (self.episode_step >= self.max_episode_steps) & ~terminated
        done = terminated | truncated
        episode_stats.accumulate(self, reward, terms)

        info: dict = {
            "final_obs": obs,
            "reward_terms": terms,
            "termination_reasons": reasons,
            "actions_out_of_range": out_of_range,
            "nonfinite_reset": bad.long(),
        }
        if self.masked_resets:
            return masked_reset.finish_step_masked(self, obs, reward, terminated, truncated, done, bad, reasons, info)
        if self._subset_untraced:  # the first indexed step (masked resets never use the subset)
            self._subset_untraced = False
            self._observe_some(two_or_more(torch.arange(min(2, self.num_envs), device=self.device)))
        done_ids = done.nonzero().squeeze(-1)
        if done_ids.numel() > 0:
            n_bad = int(bad.sum())  # only here: a non-finite env is always a done one
            if n_bad:  # the reason appears on the steps it happens (as the task's own reasons could)
                reasons = info["termination_reasons"] = {**reasons, "nonfinite": bad}
            # The terminal state's metrics (a landing, a crash), read before the auto-reset replaces it.
            info["final_metrics"] = self.step_metrics()
            info["episode"] = self._episode_stats(done_ids, reasons, truncated)
            # The finished envs' last observation, kept before the reset (a task may now write those rows in place).
            finished = take_envs(obs, done_ids)
            self._auto_reset_ids = done_ids
            try:
                self._reset_all_idx(done_ids)
                if self._observe_some is None:
                    obs = self._observations_after_reset()
                else:  # the others keep the observation computed above (a reset changes only its own envs)
                    rows = two_or_more(done_ids)
                    put = put_envs_in_place if self.fresh_observations else put_envs
                    obs = put(obs, rows, self._observe_some(rows))
            finally:
                self._auto_reset_ids = None
            info["final_obs"] = FinalObs(obs, done_ids, finished)
            if n_bad:
                info["final_obs"] = where_envs(bad, obs, info["final_obs"])
                nonfinite.report_nonfinite(self, bad, n_bad)
        return obs, reward, terminated, truncated, info

    @property
    def masked_resets(self) -> bool:
        """Whether ``step`` resets finished envs by a mask instead of their indices: no host sync in ``step`` (what a
        CUDA graph capture needs), ``info["episode"]`` on every step (``count`` 0 where none ended), other (equally
        valid) episodes than the indexed reset's. Off by default: eager, it costs more than the sync it saves
        (:mod:`sim.core.masked_reset` has the measurements). Setting True where :meth:`masked_reset_support` says
        the task cannot raises ``ValueError``."""
        return self._masked_resets

    @masked_resets.setter
    def masked_resets(self, on: bool) -> None:
        if on:
            reason = self.masked_reset_support()
            if reason is not None:
                raise ValueError(f"{self.task_name}: masked resets are not supported: {reason}")
        self._masked_resets = bool(on)

    def masked_reset_support(self) -> str | None:
        """None when this task can reset by mask, else why not (:func:`sim.core.masked_reset.masked_reset_support`)."""
        return masked_reset.masked_reset_support(self)

    def sample_actions(self, generator: torch.Generator | None = None) -> dict[str, Tensor]:
        """Uniform random actions in [-1, 1] for every group (from ``generator``, else the env's)."""
        return action_checks.uniform_actions(self, generator or self.rng)

    def zero_actions(self) -> dict[str, Tensor]:
        return action_checks.zero_actions(self)

    def check_deferred_actions(self) -> None:
        """With ``defer_action_checks``: ValueError if any action since the last call held a NaN or inf (the
        env applied 0 instead), a warning (once per env object) if any was outside [-1, 1]. One host sync."""
        action_checks.check_deferred_actions(self)

    def state_snapshot(self) -> dict[str, Any] | str:
        """The env's whole mutable state, ``{attribute path: tensor or scalar}``, for exact resumes, or a one-line
        reason it cannot be copied (a resume then restarts the episodes); :func:`sim.core.snapshot.state_snapshot`."""
        return snapshot.state_snapshot(self)

    def load_state_snapshot(self, state: dict[str, Any]) -> str | None:
        """Restore :meth:`state_snapshot` in place; returns None, or a one-line reason it cannot (then
        nothing was changed: the env must be reset by the caller)."""
        return snapshot.load_state_snapshot(self, state)

    def step_metrics(self) -> dict[str, Tensor]:
        """Task metrics of the current state, name -> ``Tensor[num_envs]`` (unit in the name); a pure read
        (``training.evaluation`` samples it before every ``step``, so it sees states before any auto-reset)."""
        return {}

    def expert_policy(self):
        """A scripted expert ``obs -> {group: actions}`` on this env's state (``training.imitation``); optional."""
        raise ValueError(f"task {self.task_name!r} has no expert policy (imitation.expert=task needs one)")

    def deployment_constants(self, group: str) -> dict:
        """JSON constants a robot needs to build ``group``'s observation (stored in the ONNX metadata)."""
        return {}

    def deployment_profile(self, group: str) -> dict:
        """How ``group``'s policy runs under ROS 2 (:mod:`deploy_ros.profile`, stored in the ONNX metadata): inputs,
        builders, command and its safe value. ``{}`` here: the policy node refuses its models."""
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
    # Env steps export.py records for its parity check by default: a task whose step is a whole decision of a
    # lower level (a volleyball strategy's step flies many control steps) records fewer, so an export stays fast.
    export_record_steps: ClassVar[int] = 200
    renderer: ClassVar[str | None] = None  # "module:Class" of its sim.render.MujocoRenderer (None: no video)

    @classmethod
    def evaluation_overrides(cls) -> dict[str, Any]:
        """Config overrides for evaluation and deployment (noise and randomisation off); none here."""
        return {}

    @classmethod
    def scenarios(cls) -> dict[str, Scenario]:
        """The task's named evaluation cases (robustness rows of its report); none here."""
        return {}

    @classmethod
    def match_teams(cls) -> MatchTeams | None:
        """Two-team tasks: how ``evaluate.py match=/league=`` and ``training.matches`` build teams
        (:class:`sim.core.teams.MatchTeams`); None for other tasks."""
        return None

    # ----------------------------------------------------------------- task hooks (docs/new_task.md)
    decimation: int = 1

    @abstractmethod
    def _build_spec(self) -> EnvSpec: ...

    def _reset_idx(self, env_ids: Tensor) -> None:
        """Reset the task state of ``env_ids [k]``. Default: the split reset, :meth:`_reset_draws` (eager, from
        ``self.rng``) then :meth:`_reset_envs` (compiled with ``compile`` once for any number of envs; cable_load at
        4096 envs: 2.1-2.4 ms eager, 1.1-1.3 ms compiled), run by the backend."""
        self.backend.reset_rows(env_ids)

    def _reset_draws(self, k: int) -> dict[str, Tensor]:
        """Every random number a reset of ``k`` envs uses, each ``[k, ...]``, in a fixed order."""
        raise NotImplementedError(f"{type(self).__name__} defines neither _reset_idx nor _reset_draws/_reset_envs")

    def _reset_envs(self, env_ids: Tensor, draws: dict[str, Tensor]) -> None:
        """Reset the envs ``env_ids [k]`` from their ``draws``: pure tensor code, no random draw, no host sync."""
        raise NotImplementedError(f"{type(self).__name__} defines neither _reset_idx nor _reset_draws/_reset_envs")

    @abstractmethod
    def _apply_actions(self, actions: dict[str, Tensor]) -> None:
        """Take validated actions once per control step (clamp, scaling, latency buffers)."""

    @abstractmethod
    def _control_step(self) -> None:
        """One tick of the low-level control loop (controllers + physics substeps)."""

    def _sample_step_noise(self) -> None:  # noqa: B027 - optional hook, empty by default
        """Draw this step's random numbers from ``self.rng``, outside compiled code (seeding stays exact)."""

    @abstractmethod
    def _update_observation_buffers(self) -> None:
        """Once per step after the physics: push observation history, add the step's noise."""

    def _observations_after_reset(self) -> Obs:
        """The observations right after a reset (``reset`` and the auto-reset); default: the backend's."""
        return self.backend.observations_after_reset()

    def _observations_of(self, env_ids: Tensor) -> Obs:
        """Optional: ``_observations()`` of the envs ``env_ids [k]`` only (entries ``[k, ...]``, a pure read); the
        auto-reset then recomputes only the reset envs (:func:`sim.core.compiled.observes_subsets`)."""
        raise NotImplementedError

    @abstractmethod
    def _observations(self) -> Obs:
        """Read the observation; no side effects. Returned tensors are never written after ``step`` returns them,
        except the reset envs' rows during that step's own auto-reset (``self._auto_reset_ids`` set)."""

    @abstractmethod
    def _rewards(self, terminated: Tensor) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        """``(reward[group] [num_envs, n_agents], weighted terms name -> [num_envs])``."""

    @abstractmethod
    def _terminations(self) -> tuple[Tensor, dict[str, Tensor]]:
        """``(terminated [num_envs] bool, reason name -> [num_envs] bool)``."""

    def loop_compile_options(self) -> dict[str, Any]:
        """Inductor options of the compiled control loop (``compile=True``), asked at its first call: inductor's
        defaults here. A task whose loop kernels read contiguous memory may vectorise them regardless of inductor's
        CPU heuristics (:data:`sim.physics.components.VECTORISED_LOOP`, the component-major loops)."""
        return {}

    def _episode_metrics(self, env_ids: Tensor) -> dict[str, Tensor]:
        """Task metrics at the end of the episodes ``env_ids`` (before reset): the means of
        :meth:`_episode_metrics_per_env` over them. A task may override this instead (e.g. to record
        results as a side effect); it then cannot use :attr:`masked_resets`."""
        per_env = self._episode_metrics_per_env()
        if not per_env:
            return {}
        return dict(zip(per_env, episode_stats.means_over(list(per_env.values()), env_ids, self.num_envs), strict=True))

    def _episode_metrics_per_env(self) -> dict[str, Tensor]:
        """Task metrics of every env's current state, ``name -> [num_envs, ...]`` (trailing axes, e.g.
        agents, are averaged), read where episodes end (before their reset); override to add."""
        return {}

    def _nonfinite_envs(self, obs: Obs, reward: dict[str, Tensor]) -> Tensor:
        """``Tensor[num_envs]`` bool: envs whose float observation entries or rewards hold NaN or inf, every step
        before the auto-reset (:func:`sim.core.nonfinite.nonfinite_envs`). A task whose state can go non-finite
        without showing in its observations may extend it."""
        return nonfinite.nonfinite_envs(obs, reward, self.num_envs, self.device)

    # ----------------------------------------------------------------- the torch passes (TorchBackend runs them)
    def _control_loop(self) -> None:
        for _ in range(self.decimation):
            self._control_step()

    def _post_physics(self) -> PostPhysics:
        """Everything computed once per step after the physics (compiled together with ``compile``):
        ``(obs, reward, terms, terminated, reasons, bad)``, ``bad [num_envs]`` the non-finite envs."""
        self._update_observation_buffers()
        obs = self._observations()
        terminated, reasons = self._terminations()
        reward, terms = self._rewards(terminated)
        # Numerical guard, branch-free (no device sync): a non-finite env ends now, rewarded 0. Here, compiled,
        # its sums fuse into the passes that write the observations (eager after them: 2-3 ms of a volleyball step).
        bad = self._nonfinite_envs(obs, reward)
        reward, terms = nonfinite.zero_rewards_where(bad, reward, terms)
        return obs, reward, terms, terminated | bad, reasons, bad

    # ----------------------------------------------------------------- step phases (benchmarks time these by name)
    def _check_actions(self, actions: dict[str, Tensor]) -> dict[str, Tensor]:
        """The actions to apply, checked (:func:`sim.core.actions.check_actions`)."""
        return action_checks.check_actions(self, actions)

    def _episode_stats(self, ids: Tensor, reasons: dict[str, Tensor], truncated: Tensor) -> dict[str, Tensor]:
        """Means over the episodes ``ids`` that ended this step (``info["episode"]``)."""
        return episode_stats.episode_stats(self, ids, reasons, truncated)

    def _reset_all_idx(self, env_ids: Tensor) -> None:
        self.episode_step[env_ids] = 0
        episode_stats.restart(self, env_ids)
        self._reset_idx(env_ids)

    @staticmethod
    def _screen_actions_eager(act: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The deferred action checks, eager (:func:`sim.core.actions.screen_actions`)."""
        return action_checks.screen_actions(act)
