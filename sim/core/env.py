"""The batched multi-agent environment contract shared by every task.

``obs = env.reset(seed)`` and ``obs, reward, terminated, truncated, info = env.step(actions)``:

    obs[group][entry]   Tensor[num_envs, n_agents, *shape]
    actions[group]      Tensor[num_envs, n_agents, action_dim], float32 in [-1, 1], on env.device
    reward[group]       Tensor[num_envs, n_agents]
    terminated          Tensor[num_envs] bool   (a terminal state: do not bootstrap)
    truncated           Tensor[num_envs] bool   (time limit: bootstrap from info["final_obs"])

Finished environments are reset inside ``step``; ``info["final_obs"]`` holds the observation
before that reset for every env (equal to ``obs`` where nothing finished; on steps that reset
envs a lazy mapping, :class:`sim.core.final_obs.FinalObs`, whose entries are built at their first read).
``info["episode"]`` holds means over the episodes that ended this step (return, length, each reward term, each
termination reason), present only when at least one ended (every step, with ``count`` 0 when none did,
under ``masked_resets``). ``info["actions_out_of_range"]`` and
``info["nonfinite_reset"]`` (``[num_envs]``, every step) count actions the task had to clamp and
envs the numerical guard reset (a NaN/inf observation or reward: reset at once, terminated with
reason ``nonfinite``, reward 0; see :meth:`MultiAgentEnv.step`). Actions with NaN/inf raise
``ValueError`` in ``step``; with ``env.defer_action_checks = True`` (the training rollout) that check costs
no host sync: the env applies 0 instead and :meth:`MultiAgentEnv.check_deferred_actions` raises later. The
host syncs left in the base ``step`` are the auto-reset's index of finished envs and, on steps where one
finished, the count of non-finite ones (a task's hooks may add their own); with
:attr:`MultiAgentEnv.masked_resets` finished envs are reset by a mask and the base ``step`` has none.
``state_snapshot`` / ``load_state_snapshot`` copy an env's whole state (exact training resumes).

A task subclasses :class:`MultiAgentEnv` and implements the hooks ``_build_spec``,
``_reset_idx``, ``_apply_actions``, ``_control_step``, ``_update_observation_buffers`` (once per
step: history, noise), ``_observations`` (a pure read, safe to call twice), ``_rewards`` and
``_terminations``. ``decimation`` control-loop ticks run per ``step``; with ``compile=True`` that
loop (controllers and physics, the hot path) runs through ``torch.compile``. Optional: ``_observations_of``
(a subset of envs' observations: after an auto-reset only the reset envs are then recomputed).
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import logging
import math
import re
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import Tensor

from sim.core.config import resolve_device
from sim.core.final_obs import FinalObs, take_envs
from sim.core.spec import EnvSpec

if TYPE_CHECKING:
    from sim.core.teams import MatchTeams

Obs = dict[str, dict[str, Tensor]]
# Attributes of the base class that are configuration, not state (state_snapshot), and the packages
# whose plain objects (physics state containers) the snapshot walks into.
_SNAPSHOT_SKIP = frozenset(
    {
        "cfg",
        "spec",
        "device",
        "_advance",
        "_evaluate",
        "_observe",
        "_observe_some",
        "_subset_untraced",
        "num_envs",
        "_masked_resets",
        "_masked_reset_checked",
    }
)
_SNAPSHOT_MODULES = frozenset({"sim", "policies", "training"})
# Networks (frozen opponents, skills), constants, classes and partials: not episode state.
_SNAPSHOT_CONSTANTS = (torch.nn.Module, type, torch.device, torch.dtype, functools.partial)
ACTION_TOL = 1e-6  # |a| up to 1 + this is float round-off of a clamped action, not out of range


@dataclass(frozen=True)
class Scenario:
    """A named evaluation case of a task (``evaluate.py scenario=<name>``): overrides of the task config
    (merged after ``eval_mode``'s and before the command line's ``task.*``) and, where the case sets a
    different bar, success thresholds (merged over the task's ``success_criteria``; ``success.*`` wins)."""

    about: str
    overrides: Mapping[str, Any] = field(default_factory=dict)
    success: Mapping[str, float] = field(default_factory=dict)


_LOG = logging.getLogger("covey.sim")


def _empty_instance(class_path: str) -> Any:
    """An uninitialised instance of ``"module:QualName"`` (a covey class only), for a snapshot restore."""
    module_name, _, qualname = class_path.partition(":")
    if module_name.split(".")[0] not in _SNAPSHOT_MODULES:
        raise ValueError(f"a snapshot may only rebuild covey classes, got {class_path!r}")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj.__new__(obj)


def _where_envs(mask: Tensor, new: Obs, old: Obs) -> Obs:
    """``new`` where ``mask [num_envs]`` else ``old``, for every entry of every group (new tensors)."""
    out: Obs = {}
    for group, entries in old.items():
        out[group] = {}
        for key, value in entries.items():
            m = mask.view(-1, *([1] * (value.dim() - 1)))
            out[group][key] = torch.where(m, new[group][key], value)
    return out


def _put_envs(obs: Obs, env_ids: Tensor, rows: Obs) -> Obs:
    """``obs`` with the envs ``env_ids [k]`` replaced by ``rows`` (entries ``[k, ...]``), as new tensors."""
    return {g: {k: v.index_copy(0, env_ids, rows[g][k]) for k, v in entries.items()} for g, entries in obs.items()}


def _put_envs_in_place(obs: Obs, env_ids: Tensor, rows: Obs) -> Obs:
    """``obs`` with the envs ``env_ids [k]`` replaced by ``rows``, written into its tensors."""
    for g, entries in obs.items():
        for k, v in entries.items():
            v.index_copy_(0, env_ids, rows[g][k])
    return obs


def env_rows(env_ids: Tensor | None) -> Callable[[Tensor], Tensor]:
    """Index per-env tensors ``[num_envs, ...]`` at the envs ``env_ids [k]`` (the identity where ``None``): for
    a task's observations (or any pure read) of a subset of its envs, e.g. the few that an auto-reset restarts."""
    return (lambda x: x) if env_ids is None else (lambda x: x[env_ids])


def _two_or_more(env_ids: Tensor) -> Tensor:
    """``env_ids`` with a single env repeated: compiled with dynamic shapes, sizes 0 and 1 would each get
    their own graph (compiled in the middle of a run); a repeated env writes the same row twice."""
    return env_ids if env_ids.numel() > 1 else env_ids.repeat(2)


def _agents_out_of_range(act: Tensor) -> Tensor:
    """``act [E, A, D]`` -> ``[E, A]`` bool: agents with an action component beyond [-1, 1] (more than round-off
    beyond it); NaN compares False."""
    return (act.abs() > 1.0 + ACTION_TOL).any(-1)


def _two_or_more_with_draws(env_ids: Tensor, draws: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
    """:func:`_two_or_more` for a split reset (``MultiAgentEnv._reset_idx``): a single env's draws are repeated
    with it, so both writes of the repeated env agree."""
    if env_ids.numel() > 1:
        return env_ids, draws
    return _two_or_more(env_ids), {k: d.repeat(2, *[1] * (d.dim() - 1)) for k, d in draws.items()}


class MultiAgentEnv(ABC):
    """Base class: seeding, action validation, the step loop, auto-reset and episode statistics."""

    task_name: ClassVar[str] = "unnamed"  # the registry name (sim.tasks.TASKS); each task class declares it
    # A task whose _evaluate makes its observation tensors anew at every call (none a view of state that outlives the
    # step) may set this: an auto-reset then writes the reset envs' rows from _observations_of into them in place
    # (info["final_obs"] kept those rows) instead of copying every entry (drone_volleyball: 20 MB a reset step).
    fresh_observations: ClassVar[bool] = False
    # Where training's sim.compile=auto compiles this task's loop (train and eval envs): device type -> the
    # smallest train.total_steps from which it was measured to pay (a first compile costs minutes on a CPU).
    auto_compile_min_steps: ClassVar[dict[str, int]] = {}

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
        self._actions_out_of_range = torch.zeros(num_envs, dtype=torch.long, device=self.device)
        self._warned_out_of_range = False
        # Trainers set this: the NaN/inf and range checks of actions then cost no host sync per step; a
        # NaN/inf action becomes 0 and check_deferred_actions() raises for it later (once per rollout).
        self.defer_action_checks = False
        # Non-finite actions, actions out of range, non-finite resets (masked resets count them here).
        self._deferred_counts = torch.zeros(3, dtype=torch.long, device=self.device)
        self.nonfinite_resets_total = 0  # envs reset by the numerical guard since construction
        self._masked_resets = False  # reset finished envs by mask, not index: no host sync in step (masked_resets)
        self._masked_reset_checked = False  # the first masked reset checks that shared state stays unchanged
        # The envs a step's auto-reset restarts, while it runs (else None). The observation tensors that step made are
        # not returned yet and info["final_obs"] keeps those envs' rows as they were, so a task may write the rows
        # into them in place (in its reset and _observations_after_reset) instead of copying whole tensors.
        self._auto_reset_ids: Tensor | None = None
        # The control loop is pure tensor code with no data-dependent Python branches, so it
        # compiles to a few fused kernels; ~10x fewer kernel launches on CPU and GPU alike.
        self.compiled = bool(compile)
        # Compiled at its first call, with the options the task gives once its __init__ has run (loop_compile_options).
        self._advance = self._compile_loop if compile else self._control_loop
        self._evaluate = torch.compile(self._post_physics, dynamic=False) if compile else self._post_physics
        # The observations of every env after an auto-reset: eager, they cost as much as the compiled physics
        # of a control step where envs reset every step (drone_volleyball at 4096 envs: 29 of 67 ms).
        self._observe = torch.compile(self._observations, dynamic=False) if compile else self._observations
        # Where the task computes the observations of a subset of envs: after an auto-reset only the envs that
        # reset (~1% of a volleyball batch per step) are recomputed. Their count changes every step: dynamic.
        self._observe_some = None
        if self._observes_subsets():
            some = self._observations_of
            self._observe_some = torch.compile(some, dynamic=True) if compile else some
        # Compiled, it is traced after the first step (a state as later steps see it), not inside a step's reset.
        self._subset_untraced = compile and self._observe_some is not None
        self._reset_envs_compiled = None  # compiled at the first reset of a task that splits it (_reset_idx)
        # The training rollout's action checks (defer_action_checks): a few passes over the actions fused into one.
        screen = self._screen_actions_eager
        self._screen_actions = torch.compile(screen, dynamic=False) if compile else screen

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
        """Advance one control step; see the module docstring for shapes.

        Reliability counts in ``info`` (both ``Tensor[num_envs]`` long, every step):
        ``actions_out_of_range``: agents whose action had a component outside [-1, 1] (the task clamps
        it; warned once per env object), and ``nonfinite_reset``: 1 where the step produced a
        non-finite observation or reward (:meth:`_nonfinite_envs`). Such an env is reset at once and
        reported as terminated with reason ``nonfinite`` (a key of ``info["termination_reasons"]`` on
        the steps it happens); its reward is 0 and ``info["final_obs"]``
        holds the post-reset observation, so no NaN/inf reaches the policy or the optimiser.
        """
        actions = self._check_actions(actions)
        out_of_range = self._actions_out_of_range
        self._apply_actions(actions)
        self._advance()
        self.episode_step += 1
        self._sample_step_noise()
        obs, reward, terms, terminated, reasons, bad = self._evaluate()
        truncated = (self.episode_step >= self.max_episode_steps) & ~terminated
        done = terminated | truncated
        self._accumulate(reward, terms)

        info: dict = {
            "final_obs": obs,
            "reward_terms": terms,
            "termination_reasons": reasons,
            "actions_out_of_range": out_of_range,
            "nonfinite_reset": bad.long(),
        }
        if self.masked_resets:
            return self._finish_step_masked(obs, reward, terminated, truncated, done, bad, reasons, info)
        if self._subset_untraced:  # the first indexed step (masked resets never use the subset)
            self._subset_untraced = False
            self._observe_some(_two_or_more(torch.arange(min(2, self.num_envs), device=self.device)))
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
                    rows = _two_or_more(done_ids)
                    put = _put_envs_in_place if self.fresh_observations else _put_envs
                    obs = put(obs, rows, self._observe_some(rows))
            finally:
                self._auto_reset_ids = None
            info["final_obs"] = FinalObs(obs, done_ids, finished)
            if n_bad:
                info["final_obs"] = _where_envs(bad, obs, info["final_obs"])
                self._report_nonfinite(bad, n_bad)
        return obs, reward, terminated, truncated, info

    @property
    def masked_resets(self) -> bool:
        """Whether ``step`` resets finished envs by a mask instead of their indices.

        Masked: every step computes a reset of every env and keeps it where an episode ended (a
        ``torch.where`` per state tensor), so ``step`` never waits for the device: no ``nonzero``, no
        data-dependent branch (what a CUDA graph capture needs). ``info["episode"]`` is then present on
        every step (``count`` 0 where none ended; its means are count-weighted, so 0-count steps add
        nothing), ``termination/nonfinite`` is always among its reasons, and non-finite resets are
        logged by :meth:`check_deferred_actions` instead of in ``step``. The random draws differ from
        the indexed reset's (every env draws each step), so the two give different, equally valid
        episodes. The first masked reset of an env also checks, once, that the reset leaves the state that is
        not per-env alone (a comparison that waits for the device). Setting True on a task that cannot
        (:meth:`masked_reset_support`) raises ``ValueError``.

        Off by default, because it costs more than the sync it saves wherever the step runs eagerly
        (``benchmarks/masked_reset_cost.py``, cable_load, 2026-11-26): 0.54x the indexed reset's steps/s
        on this 2-core CPU at 4096 envs, 0.81x on an H200 at 4096 envs and 0.63x at 65,536 (eager, the
        step launch-bound there, so the sync stalls little). It is what lets the step be captured in a
        CUDA graph: ``benchmarks/cuda_graph_capture.py`` captures cable_load's (with host constants built on
        the device while capturing) and replays it 3.9-8.3x faster than the uncaptured masked step.
        """
        return self._masked_resets

    @masked_resets.setter
    def masked_resets(self, on: bool) -> None:
        if on:
            reason = self.masked_reset_support()
            if reason is not None:
                raise ValueError(f"{self.task_name}: masked resets are not supported: {reason}")
        self._masked_resets = bool(on)

    def masked_reset_support(self) -> str | None:
        """None when this task can reset by mask, else why not: its state must be reachable by
        :meth:`state_snapshot` (not a MuJoCo world's), and its end-of-episode metrics must come from
        :meth:`_episode_metrics_per_env` (an override of ``_episode_metrics`` works on indices only)."""
        if type(self)._episode_metrics is not MultiAgentEnv._episode_metrics:
            return "its _episode_metrics works on env indices (implement _episode_metrics_per_env instead)"
        snap = self.state_snapshot()
        return snap if isinstance(snap, str) else None

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

    def state_snapshot(self) -> dict[str, Any] | str:
        """The env's whole mutable state, ``{attribute path: tensor or scalar}``, for exact resumes.

        Found generically: every tensor, numpy array, generator state and Python scalar reachable
        from the env's attributes through dicts, lists, tuples and plain objects (not modules, the
        config or the spec). Returns a one-line reason string instead when some state is of a kind
        it cannot copy (e.g. a MuJoCo data object); a resume then restarts the episodes.
        """
        out: dict[str, Any] = {}
        problems: list[str] = []
        seen: set[int] = set()

        def walk(value: Any, path: str, depth: int) -> None:
            if isinstance(value, Tensor):
                out[path] = value
            elif isinstance(value, torch.Generator):
                out[path + "#generator"] = value.get_state()
            elif isinstance(value, (bool, int, float, str, type(None))):
                out[path] = value
            elif type(value).__module__ == "numpy" and hasattr(value, "shape"):
                if value.dtype.kind not in "biuf":  # object, string, complex arrays: not state torch can hold
                    problems.append(f"{path} (numpy {value.dtype})")
                else:
                    out[path + "#numpy"] = torch.from_numpy(value.copy()) if value.shape else value.item()
            elif (
                isinstance(value, _SNAPSHOT_CONSTANTS)
                or inspect.isroutine(value)
                or getattr(value, "snapshot_constant", False)
                or depth > 4
            ):
                # Networks (frozen opponents, skills), constants, classes, bound methods, compiled loops, and
                # objects that declare themselves constant (a map bank, a reward model): not episode state.
                return
            elif id(value) in seen:
                return  # a container reached twice: its tensors are restored in place, once is enough
            elif isinstance(value, dict):
                seen.add(id(value))
                for key, item in value.items():
                    walk(item, f"{path}[{key!r}]", depth + 1)
            elif isinstance(value, (list, tuple)):
                seen.add(id(value))
                for i, item in enumerate(value):
                    walk(item, f"{path}[{i}]", depth + 1)
            elif hasattr(value, "__dict__") and type(value).__module__.split(".")[0] in _SNAPSHOT_MODULES:
                seen.add(id(value))
                # Its class, so that a restore can rebuild it where the fresh env has None (per-step records).
                out[path + "#class"] = f"{type(value).__module__}:{type(value).__qualname__}"
                for key, item in vars(value).items():
                    walk(item, f"{path}.{key}", depth + 1)
            else:
                problems.append(f"{path} ({type(value).__module__}.{type(value).__name__})")

        for key, value in vars(self).items():
            if key not in _SNAPSHOT_SKIP:
                walk(value, key, 0)
        if problems:
            return f"state of a kind a checkpoint cannot copy: {', '.join(problems[:3])}"
        return out

    def load_state_snapshot(self, snapshot: dict[str, Any]) -> str | None:
        """Restore :meth:`state_snapshot` in place; returns None, or a one-line reason it cannot (then
        nothing was changed: the env must be reset by the caller)."""
        current = self.state_snapshot()
        if isinstance(current, str):
            return current
        # A None in the fresh env where the checkpoint holds an object (e.g. the last step's events) is rebuilt.
        rebuilt = {p for p in current if current[p] is None and p + "#class" in snapshot}
        missing = sorted(set(current) - set(snapshot) - rebuilt)
        if missing:
            return f"the env has state the checkpoint lacks ({', '.join(missing[:3])})"
        for path, value in snapshot.items():
            now = current.get(path)
            if (
                isinstance(now, Tensor)
                and "#" not in path
                and (not isinstance(value, Tensor) or value.shape != now.shape or value.dtype != now.dtype)
            ):
                return f"{path}: {tuple(now.shape)} {now.dtype} in the env vs {getattr(value, 'shape', value)} saved"
        try:
            for path, value in snapshot.items():
                now = current.get(path)
                if path.endswith("#class"):
                    if now != value:  # absent in the fresh env: an empty instance, its fields follow
                        self._set_path(path.removesuffix("#class"), _empty_instance(value))
                    continue
                if isinstance(now, Tensor) and "#" not in path:
                    if torch._debug_has_internal_overlap(now) == 1:  # an expanded view cannot be written into
                        self._set_path(path, value.to(now.device).clone())
                    else:
                        now.copy_(value.to(now.device))
                elif path not in current:  # e.g. a lazily created per-term buffer: added as saved
                    self._set_path(path, value.clone() if isinstance(value, Tensor) else value)
                elif "#" in path or now != value:
                    self._set_path(path, value)
        except (AttributeError, KeyError, IndexError, TypeError, RuntimeError, ValueError) as exc:
            raise RuntimeError(f"restoring the env state failed half-way ({path}: {exc}); reset the env") from exc
        return None

    def _set_path(self, path: str, value: Any) -> None:
        """Set the snapshot entry ``path`` (``a.b['k'][0]#kind``) to ``value``."""
        path, _, kind = path.partition("#")
        parts = re.findall(r"\.?(\w+)|\[([^\]]+)\]", path)
        obj: Any = self
        for attr, index in parts[:-1]:
            obj = getattr(obj, attr) if attr else obj[ast.literal_eval(index)]
        attr, index = parts[-1]
        if kind == "generator":
            target = getattr(obj, attr) if attr else obj[ast.literal_eval(index)]
            target.set_state(value.cpu())
            return
        if kind == "numpy":
            value = value.numpy().copy() if isinstance(value, Tensor) else value
            if attr and hasattr(getattr(obj, attr), "shape") and getattr(obj, attr).shape:
                getattr(obj, attr)[...] = value
                return
        if attr:
            object.__setattr__(obj, attr, value)  # also on frozen dataclasses: it is the saved state
        else:
            obj[ast.literal_eval(index)] = value

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
    def scenarios(cls) -> dict[str, Scenario]:
        """The task's named evaluation cases (robustness rows of its report); none here."""
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

    def _reset_idx(self, env_ids: Tensor) -> None:
        """Reset the task state of ``env_ids [k]`` (long).

        A task overrides this, or instead splits its reset in two: :meth:`_reset_draws` (every random number,
        drawn eagerly from ``self.rng``, so seeding stays exact) and :meth:`_reset_envs` (pure tensor code that
        applies them). With ``compile`` the second is compiled once for any number of envs: an eager reset of a
        few envs is mostly the dispatch of its ~100-200 small ops (cable_load at 4096 envs: 2.1-2.4 ms eager,
        1.1-1.3 ms compiled)."""
        draws = self._reset_draws(env_ids.numel())
        if not self.compiled:
            self._reset_envs(env_ids, draws)
            return
        if self._reset_envs_compiled is None:  # dynamic in the env axis only: the others are the config's
            self._reset_envs_compiled = torch.compile(self._reset_envs, dynamic=False)
        env_ids, draws = _two_or_more_with_draws(env_ids, draws)
        # Marked on a copy: the caller's index stays unmarked (the auto-reset's subset observations then read it, and
        # a marking their graph was not traced with would compile it again).
        env_ids = env_ids.clone()
        for t in (env_ids, *draws.values()):
            torch._dynamo.mark_dynamic(t, 0)
        self._reset_envs_compiled(env_ids, draws)

    def _reset_draws(self, k: int) -> dict[str, Tensor]:
        """The random numbers a reset of ``k`` envs uses, each ``[k, ...]``, drawn from ``self.rng`` in a fixed
        order (see :meth:`_reset_idx`)."""
        raise NotImplementedError(f"{type(self).__name__} defines neither _reset_idx nor _reset_draws/_reset_envs")

    def _reset_envs(self, env_ids: Tensor, draws: dict[str, Tensor]) -> None:
        """Reset the envs ``env_ids [k]`` from their ``draws`` (:meth:`_reset_draws`): pure tensor code, no random
        draw, no host sync (see :meth:`_reset_idx`)."""
        raise NotImplementedError(f"{type(self).__name__} defines neither _reset_idx nor _reset_draws/_reset_envs")

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

    def _observations_after_reset(self) -> Obs:
        """The observations right after ``_reset_all_idx`` (``reset`` and the step's auto-reset); a task
        whose reset already computed them (e.g. in a compiled pass) returns those. Default:
        :meth:`_observations` (compiled with ``compile``)."""
        return self._observe()

    def _observations_of(self, env_ids: Tensor) -> Obs:
        """Optional: the observations of the envs ``env_ids [k]`` only, entries ``[k, n_agents, *shape]`` in the
        order of ``env_ids``, equal to ``_observations()`` indexed at them (a pure read too). A task that has it
        gets only its reset envs recomputed after an auto-reset (indexed resets; see :meth:`_observes_subsets`)."""
        raise NotImplementedError

    def _observes_subsets(self) -> bool:
        """Whether the auto-reset recomputes only the reset envs' observations: the task defines
        :meth:`_observations_of` in the class that defines :meth:`_observations` and
        :meth:`_observations_after_reset`, or below it (a subclass that overrides either without its subset
        version falls back to every env)."""

        def owner(name: str) -> type:
            return next(k for k in type(self).__mro__ if name in vars(k))

        of = owner("_observations_of")
        return of is not MultiAgentEnv and all(
            issubclass(of, owner(name)) for name in ("_observations", "_observations_after_reset")
        )

    @abstractmethod
    def _observations(self) -> Obs:
        """Read the observation; no side effects. Returned tensors must never be mutated in place after ``step``
        returns them (buffers are replaced, not written into): callers and ``info["final_obs"]`` keep them. The one
        exception is a step's own auto-reset: while ``self._auto_reset_ids`` is set, the task may write those envs'
        rows into the tensors this step made (``info["final_obs"]`` kept the rows before)."""

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

    def loop_compile_options(self) -> dict[str, Any]:
        """Inductor options of the compiled control loop (``compile=True``), asked at its first call: inductor's
        defaults here. A task whose loop kernels read contiguous memory may vectorise them regardless of inductor's
        CPU heuristics (:data:`sim.physics.components.VECTORISED_LOOP`, the component-major loops)."""
        return {}

    def _compile_loop(self) -> None:
        """The compiled loop's first call: compile it with the task's options, then run it."""
        self._advance = torch.compile(self._control_loop, dynamic=False, options=self.loop_compile_options() or None)
        self._advance()

    def _post_physics(self) -> tuple[Obs, dict[str, Tensor], dict[str, Tensor], Tensor, dict[str, Tensor], Tensor]:
        """Everything computed once per step after the physics (compiled together with ``compile``):
        ``(obs, reward, terms, terminated, reasons, bad)``, ``bad [num_envs]`` the non-finite envs."""
        self._update_observation_buffers()
        obs = self._observations()
        terminated, reasons = self._terminations()
        reward, terms = self._rewards(terminated)
        # Numerical guard, branch-free (no device sync): a non-finite env ends now, rewarded 0. Here, compiled,
        # its sums fuse into the passes that write the observations (eager after them: 2-3 ms of a volleyball step).
        bad = self._nonfinite_envs(obs, reward)
        reward = {name: torch.where(bad.unsqueeze(-1), 0.0, r) for name, r in reward.items()}
        terms = {name: torch.where(bad, 0.0, t) for name, t in terms.items()}
        return obs, reward, terms, terminated | bad, reasons, bad

    def _reset_all_idx(self, env_ids: Tensor) -> None:
        self.episode_step[env_ids] = 0
        self._ep_return[env_ids] = 0.0
        for buf in self._ep_terms.values():
            buf[env_ids] = 0.0
        self._reset_idx(env_ids)

    def _finish_step_masked(
        self,
        obs: Obs,
        reward: dict[str, Tensor],
        terminated: Tensor,
        truncated: Tensor,
        done: Tensor,
        bad: Tensor,
        reasons: dict[str, Tensor],
        info: dict,
    ) -> tuple[Obs, dict[str, Tensor], Tensor, Tensor, dict]:
        """The end of ``step`` with :attr:`masked_resets`: statistics and the reset by mask, no host sync."""
        reasons = info["termination_reasons"] = {**reasons, "nonfinite": bad}
        info["final_metrics"] = self.step_metrics()
        info["episode"] = self._episode_stats_masked(done, reasons, truncated)
        self._deferred_counts[2] += bad.sum()
        self._reset_masked(done)
        # Unfinished envs keep the observation they had (their state is unchanged, and so is what a
        # pure _observations reads; the where also guards tasks whose reset touches shared buffers).
        obs = _where_envs(done, self._observations_after_reset(), obs)
        info["final_obs"] = _where_envs(bad, obs, info["final_obs"])
        return obs, reward, terminated, truncated, info

    def _reset_masked(self, mask: Tensor) -> None:
        """Reset the envs where ``mask [num_envs]`` (bool) by resetting all of them and keeping the old state
        elsewhere: every state tensor (as :meth:`state_snapshot` finds them) is merged along its first axis.

        A tensor the reset replaces gets a new merged tensor (so tensors handed out earlier, e.g. in
        ``info["final_obs"]``, keep their values); one it writes in place is merged in place, as the reset
        itself wrote it. RuntimeError if the reset changed anything that is not per-env state (a Python
        scalar, or a tensor whose first axis is not the env axis): such a task must use indexed resets.
        """
        E = self.num_envs
        # Shared (not per-env) state must come out of the reset unchanged; checked on the first masked reset of
        # this env only, since the comparison waits for the device (a reset's code path is fixed by the config).
        check_shared = not self._masked_reset_checked
        before = self.state_snapshot()
        assert not isinstance(before, str), before  # masked_reset_support checked it
        saved = {
            p: v.clone()
            for p, v in before.items()
            if isinstance(v, Tensor) and "#" not in p and (check_shared or (v.dim() > 0 and v.shape[0] == E))
        }
        self._reset_all_idx(torch.arange(E, device=self.device))
        after = self.state_snapshot()
        assert not isinstance(after, str), after
        for path, now in after.items():
            if "#" in path:
                continue  # generators advance; numpy arrays and classes are checked as scalars below
            was = before.get(path)
            if not isinstance(now, Tensor):
                if now != was:
                    raise RuntimeError(f"{self.task_name}: the reset changed {path} ({was!r} -> {now!r}), not per-env")
                continue
            if now.dim() == 0 or now.shape[0] != E:
                old = saved.get(path)
                if check_shared and (old is None or not torch.equal(now, old)):  # cannot be merged per env
                    raise RuntimeError(f"{self.task_name}: the reset changed {path} {tuple(now.shape)}, not per-env")
                continue
            old = saved.get(path)
            if old is None or old.shape != now.shape:
                raise RuntimeError(f"{self.task_name}: the reset created or reshaped {path}; use indexed resets")
            merged = torch.where(mask.view(-1, *([1] * (now.dim() - 1))), now, old)
            if now is was and torch._debug_has_internal_overlap(now) != 1:
                now.copy_(merged)
            else:
                self._set_path(path, merged)
        self._masked_reset_checked = True

    def _episode_stats_masked(self, done: Tensor, reasons: dict[str, Tensor], truncated: Tensor) -> dict[str, Tensor]:
        """:meth:`_episode_stats` as means weighted by ``done`` (0 where no episode ended; ``count`` says so)."""
        weight = done.float()
        count = weight.sum()
        inv = 1.0 / count.clamp(min=1.0)

        def means(xs: list[Tensor]) -> list[Tensor]:
            return list((self._per_env_rows(xs) @ weight * inv).unbind(0))

        per_env = self._episode_metrics_per_env()
        metrics = dict(zip(per_env, means(list(per_env.values())), strict=True))
        return self._episode_means(means, count, reasons, truncated, metrics)

    def _check_actions(self, actions: dict[str, Tensor]) -> dict[str, Tensor]:
        """ValueError on a wrong key set, shape, dtype, device or a NaN/inf; counts actions outside [-1, 1].

        Sets ``self._actions_out_of_range`` (``Tensor[num_envs]`` long: agents with a component beyond
        [-1, 1], summed over groups; the task clamps them) and warns once per env object when any is.
        Returns the actions to apply: these, or with ``defer_action_checks`` the same with NaN/inf
        entries set to 0 and counted for :meth:`check_deferred_actions` (no host sync here).
        """
        if not isinstance(actions, dict) or set(actions) != set(self.spec.groups):
            got = sorted(actions) if isinstance(actions, dict) else type(actions).__name__
            raise ValueError(f"actions must be a dict with keys {sorted(self.spec.groups)}, got {got}")
        out_of_range = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)
        checked: dict[str, Tensor] = {}
        for name, group in self.spec.groups.items():
            act = actions[name]
            expected = (self.num_envs, group.n_agents, group.action_dim)
            if not isinstance(act, Tensor):
                raise ValueError(f"actions[{name!r}] must be a torch.Tensor, got {type(act).__name__}")
            if tuple(act.shape) != expected:
                raise ValueError(f"actions[{name!r}] has shape {tuple(act.shape)}, expected {expected}")
            if act.dtype != torch.float32:
                raise ValueError(f"actions[{name!r}] has dtype {act.dtype}, expected torch.float32")
            if act.device.type != self.device.type or (
                # "cuda" (the current device) and "cuda:0" name the same GPU; only two explicit indices can differ.
                act.device.index is not None and self.device.index is not None and act.device.index != self.device.index
            ):
                raise ValueError(f"actions[{name!r}] is on {act.device}, the env is on {self.device}")
            if self.defer_action_checks:
                checked[name], counts, beyond_per_env = self._screen_actions(act)
                self._deferred_counts[:2] += counts
                out_of_range = out_of_range + beyond_per_env
                continue
            checked[name] = act
            # One device sync for both checks, from two reductions to a scalar: the per-agent flags cost ~10x
            # more (reductions over the few action components) and are computed only when one is needed.
            # NaN and inf survive the sum; a finite sum that overflows is told apart by the exact check below.
            lo, hi = torch.aminmax(act)
            finite, any_beyond = torch.stack(
                [torch.isfinite(act.sum()), torch.maximum(-lo, hi) > 1.0 + ACTION_TOL]
            ).tolist()
            if not finite and not bool(torch.isfinite(act).all()):
                bad = (~torch.isfinite(act)).any(-1).any(-1).nonzero().squeeze(-1)[:5].tolist()
                raise ValueError(f"actions[{name!r}] contains NaN or inf (first envs: {bad})")
            if any_beyond:
                beyond = _agents_out_of_range(act)
                out_of_range = out_of_range + beyond.sum(-1)
                if not self._warned_out_of_range:
                    self._warned_out_of_range = True
                    worst = float(act.abs().max())
                    warnings.warn(
                        f"{self.task_name}: actions[{name!r}] outside [-1, 1] (max |a| = {worst:.3g}); clamped. "
                        "A policy or adapter sending these trains on clipped actions; counted per step in "
                        "info['actions_out_of_range'] (warned once)",
                        RuntimeWarning,
                        stacklevel=3,
                    )
        self._actions_out_of_range = out_of_range
        return checked

    @staticmethod
    def _screen_actions_eager(act: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``act [E, A, D]`` -> ``(act with NaN/inf entries set to 0, [agents with a NaN/inf, agents beyond
        [-1, 1]] (long [2]), agents beyond [-1, 1] per env (long [E]))``: the deferred checks, no host sync."""
        finite = torch.isfinite(act)
        beyond = _agents_out_of_range(act)
        counts = torch.stack([(~finite).any(-1).sum(), beyond.sum()])
        return torch.where(finite, act, 0.0), counts, beyond.sum(-1)

    def check_deferred_actions(self) -> None:
        """With ``defer_action_checks``: ValueError if any action since the last call held a NaN or inf (the
        env applied 0 instead), a warning (once per env object) if any was outside [-1, 1]. One host sync."""
        nonfinite, beyond, reset = self._deferred_counts.tolist()
        self._deferred_counts.zero_()
        if reset:  # counted by masked resets, which log nothing in step
            self._report_nonfinite(None, reset)
        if nonfinite:
            raise ValueError(
                f"{self.task_name}: {nonfinite} agent action(s) contained NaN or inf since the last check "
                "(the env applied 0 instead)"
            )
        if beyond and not self._warned_out_of_range:
            self._warned_out_of_range = True
            warnings.warn(
                f"{self.task_name}: {beyond} agent action(s) outside [-1, 1] since the last check; clamped. "
                "A policy or adapter sending these trains on clipped actions; counted per step in "
                "info['actions_out_of_range'] (warned once)",
                RuntimeWarning,
                stacklevel=2,
            )

    def _nonfinite_envs(self, obs: Obs, reward: dict[str, Tensor]) -> Tensor:
        """``Tensor[num_envs]`` bool: envs whose float observation entries or rewards hold NaN or inf.

        Called every step before the auto-reset (no device sync). One sum per env over every float
        value: NaN and inf survive a sum, and it costs one pass (``isfinite().all()`` costs ~25x more
        on CPU); values so large that their sum overflows float32 (~1e38) count as non-finite too.
        A task whose state can go non-finite without showing in its observations may extend it.
        """
        total = torch.zeros(self.num_envs, device=self.device)
        for entries in obs.values():
            for value in entries.values():
                if value.is_floating_point():
                    total = total + value.reshape(self.num_envs, -1).sum(-1)
        for r in reward.values():
            total = total + r.reshape(self.num_envs, -1).sum(-1)
        return ~torch.isfinite(total)

    def _report_nonfinite(self, bad: Tensor | None, n_bad: int) -> None:
        """Log the envs reset for a non-finite state: every time for the first 10, then at powers of 10
        (``bad`` None: the count since the last check, from masked resets, which know no env indices)."""
        self.nonfinite_resets_total += n_bad
        total = self.nonfinite_resets_total
        if total - n_bad < 10 or math.floor(math.log10(total)) > math.floor(math.log10(max(total - n_bad, 1))):
            envs = bad.nonzero().squeeze(-1)[:5].tolist() if bad is not None else "since the last check"
            _LOG.warning(
                "%s: non-finite state in %d env(s) (first: %s), reset; %d so far (counted in info['nonfinite_reset'])",
                self.task_name,
                n_bad,
                envs,
                total,
            )

    def _accumulate(self, reward: dict[str, Tensor], terms: dict[str, Tensor]) -> None:
        self._ep_return += torch.stack([r.mean(-1) for r in reward.values()]).mean(0)
        for key, val in terms.items():
            if key not in self._ep_terms:
                self._ep_terms[key] = torch.zeros(self.num_envs, device=self.device)
            self._ep_terms[key] += val

    def _episode_stats(self, ids: Tensor, reasons: dict[str, Tensor], truncated: Tensor) -> dict[str, Tensor]:
        """Means over the episodes ``ids`` that ended this step (``info["episode"]``)."""
        count = torch.tensor(float(ids.numel()), device=self.device)
        metrics = self._episode_metrics(ids)
        return self._episode_means(lambda xs: self._means_over(xs, ids), count, reasons, truncated, metrics)

    def _per_env_rows(self, xs: list[Tensor]) -> Tensor:
        """``xs`` (each ``[num_envs, ...]``, any dtype) as one float ``[len(xs), num_envs]``, trailing axes (e.g.
        agents) averaged: the episode statistics take their means in one op each, not a few per statistic."""
        return torch.stack([x.float() if x.dim() == 1 else x.float().reshape(self.num_envs, -1).mean(-1) for x in xs])

    def _means_over(self, xs: list[Tensor], env_ids: Tensor) -> list[Tensor]:
        """The mean of each of ``xs`` (``[num_envs, ...]``) over the envs ``env_ids``."""
        return list(self._per_env_rows(xs).index_select(1, env_ids).mean(1).unbind(0))

    def _episode_means(
        self,
        means: Callable[[list[Tensor]], list[Tensor]],
        count: Tensor,
        reasons: dict[str, Tensor],
        truncated: Tensor,
        metrics: dict[str, Tensor],
    ) -> dict[str, Tensor]:
        """``info["episode"]`` from ``means`` (per-env tensors -> their means over the ended episodes), their
        ``count`` and the task's ``metrics`` (already means): one layout for indexed and masked resets."""
        per_env = {
            "return": self._ep_return,
            "length": self.episode_step,
            "termination/time_out": truncated,
            **{f"reward/{key}": buf for key, buf in self._ep_terms.items()},
            **{f"termination/{key}": flag for key, flag in reasons.items()},
        }
        stats = dict(zip(per_env, means(list(per_env.values())), strict=True))
        stats["count"] = count
        stats.update(metrics)
        return stats

    def _episode_metrics(self, env_ids: Tensor) -> dict[str, Tensor]:
        """Task metrics at the end of the episodes ``env_ids`` (before reset): the means of
        :meth:`_episode_metrics_per_env` over them. A task may override this instead (e.g. to record
        results as a side effect); it then cannot use :attr:`masked_resets`."""
        per_env = self._episode_metrics_per_env()
        if not per_env:
            return {}
        return dict(zip(per_env, self._means_over(list(per_env.values()), env_ids), strict=True))

    def _episode_metrics_per_env(self) -> dict[str, Tensor]:
        """Task metrics of every env's current state, ``name -> [num_envs, ...]`` (trailing axes, e.g.
        agents, are averaged), read where episodes end (before their reset); override to add."""
        return {}
