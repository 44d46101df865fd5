"""The training loop: env + PPO + logging + evaluation + checkpoints, for any registered task.

    runner = Runner(cfg)      # cfg: the resolved hydra config as a plain dict (see configs/config.yaml)
    runner.learn()            # trains to train.total_steps env steps (or train.max_minutes)

One iteration collects ``train.rollout_steps`` steps of ``num_envs`` envs under
``torch.inference_mode()``, computes GAE and runs the PPO update; ``global_step`` counts env
steps (``num_envs`` per ``env.step``). Every ``train.eval_every`` iterations a deterministic
policy runs on a separate env with the task's ``evaluation_overrides()`` (noise and
randomisation off) for one episode length, and ``checkpoints/best.pt`` follows the best value of
``train.best_metric`` (with ``train.eval_every=0``: its mean over the training episodes, checked at
every checkpoint). ``checkpoints/latest.pt`` is written every ``train.checkpoint_every``
iterations, at the end, and on Ctrl-C (at the end of the running iteration); ``resume=<run dir>``
continues from it in the same directory (same CSV, same wandb run). ``latest.pt`` also holds the
env's state and the recurrent rollout state, so a run killed at any moment (SIGKILL included)
resumes exactly: the same steps and the same metric curve; where the env state cannot be restored
the resume says why in one line and the envs restart their episodes.
"""

from __future__ import annotations

import json
import math
import os
import signal
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import torch
import yaml
from torch import Tensor

import sim
from policies import GroupDims, InputSpec, build_actor_critics, reset_memory
from policies.mlp import compiled_cpu_elu, set_compiled_cpu_elu
from sim.core.config import build_config, deep_merge, resolve_device
from sim.core.registry import evaluation_overrides, task_class
from training.allocator import keep_freed_memory
from training.checkpoint import (
    FORMAT,
    NoCheckpointError,
    check_compatible,
    load_checkpoint,
    load_initial_weights,
    restore_rng_state,
    rng_state,
    save_checkpoint,
)
from training.imitation import ImitationCfg, checkpoint_expert, dagger, load_datasets
from training.logger import CsvLogger, ProgressBar, WandbLogger
from training.ppo import PPO, PPOCfg
from training.settings import TrainCfg, WandbCfg  # the settings dataclasses live there (a leaf module)
from training.threads import set_torch_threads, update_thread_tuner


@dataclass
class RunState:
    """What a checkpoint restores besides weights and RNG."""

    global_step: int = 0
    iteration: int = 0
    wall_time: float = 0.0  # s of training before this process
    best_value: float | None = None
    last_eval: dict[str, float] = field(default_factory=dict)


def covey_version() -> str:
    try:
        return version("covey")
    except PackageNotFoundError:  # pragma: no cover - running from a plain checkout
        return "unknown"


def new_run_dir(runs_dir: str | Path, task: str) -> Path:
    """``<runs_dir>/<task>/<YYYY-mm-dd_HH-MM-SS>`` (with ``_1``, ``_2``... if that exists)."""
    base = Path(runs_dir) / task / datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    path, n = base, 0
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}_{n}")
    path.mkdir(parents=True)
    return path


def input_specs(entries: Mapping[str, Any]) -> tuple[InputSpec, ...]:
    """A group's ``ObsEntry`` records (name -> entry) as the policies' :class:`InputSpec` tuple."""
    return tuple(
        InputSpec(name, e.shape, str(e.dtype).removeprefix("torch."), e.kind, e.graph, e.role)
        for name, e in entries.items()
    )


def group_dims(group: Any, critic_input: str = "state") -> GroupDims:
    """The policy sizes of one ``GroupSpec``: the actor reads ``actor_obs``; the critic reads
    ``critic_obs`` (``critic_input="state"``, MAPPO / asymmetric) or what the actor reads (``"policy"``, IPPO)."""
    actor = input_specs(group.inputs("actor"))
    critic = input_specs(group.inputs("critic")) if critic_input == "state" else actor
    return GroupDims(
        group.n_agents,
        action_dim=group.action_dim,
        action_nvec=group.action_nvec,
        actor_inputs=actor,
        critic_inputs=critic,
    )


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


def _to_cpu(value: Any) -> Any:
    """Tensors in nested dicts / lists / tuples moved to the CPU (what one rank sends another)."""
    if isinstance(value, Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_to_cpu(v) for v in value)
    return value


class _QuietBar(ProgressBar):
    """The progress bar of a torchrun rank other than 0: neither drawn nor written."""

    def __init__(self, total: int, initial: int, enabled: bool = True) -> None:
        super().__init__(total, initial, enabled=False)

    def write(self, line: str) -> None:
        """Rank 0 says it."""


class Runner:
    """Owns the env, the PPO algorithm, the run directory, logs and checkpoints."""

    def __init__(self, cfg: Mapping[str, Any]) -> None:
        self.cfg = dict(cfg)
        self.train_cfg = build_config(TrainCfg, cfg.get("train", {}), where="train")
        self.ppo_cfg = build_config(PPOCfg, cfg.get("algo", {}), where="algo")
        self.wandb_cfg = build_config(WandbCfg, cfg.get("wandb", {}), where="wandb")
        self.imitation_cfg = build_config(ImitationCfg, cfg.get("imitation", {}), where="imitation")
        self._value_only_until = 0  # iterations < this fit only the critic (after imitation)
        self.device = resolve_device(cfg.get("device", "auto"))
        # distributed=true (torchrun): training.distributed.Distributed; each rank seeds seed + rank.
        self.dist: Any = None
        if cfg.get("distributed", False):
            from training import distributed

            if type(self) is not Runner or self.imitation_cfg.expert != "none":
                # Their extra state (replay, league, DAgger data) is per process and not merged over ranks.
                raise ValueError(
                    f"distributed=true is the PPO Runner's, without imitation ({type(self).__name__}, "
                    f"imitation.expert={self.imitation_cfg.expert})"
                )
            self.dist = distributed.init(self.device)
            self.device = self.dist.device(self.device)
        # After the device and the ranks are known: 0 = training.threads' default (1 core left free).
        local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", 1)) if self.dist is not None else 1
        self.threads_why = set_torch_threads(int(cfg.get("torch_threads", 0)), self.device, local_ranks)
        # On a CPU the update's activations are freed and allocated again every minibatch (training.allocator).
        self.allocator_why = keep_freed_memory() if self.device.type == "cpu" else ""
        self.seed = int(cfg.get("seed", 0)) + (self.dist.rank if self.dist is not None else 0)
        torch.manual_seed(self.seed)
        self.task_cfg: dict[str, Any] = dict(cfg["task"])
        self.task = self.task_cfg["name"]
        num_envs = int(cfg.get("num_envs", 1024))
        from training.config import sim_compile  # lazily: importing it registers every task with hydra

        env_cls = task_class(self.task)
        compile_env, self.compile_why = sim_compile(
            cfg.get("sim", {}).get("compile", "auto"), self.device, env_cls, self.train_cfg.total_steps
        )
        self.env = sim.make(self.task_cfg, num_envs=num_envs, device=self.device, seed=self.seed, compile=compile_env)
        self.env.masked_resets = bool(cfg.get("sim", {}).get("masked_resets", False))
        # A run that compiles its env on a CPU pays for a compiler there: the networks' ELU then takes it too
        # (policies.mlp.set_compiled_cpu_elu; ~9% of a cable_load PPO update). Off in every other run.
        set_compiled_cpu_elu(self.env.compiled and self.device.type == "cpu")
        self.group_dims = self._group_dims()
        self.models = build_actor_critics(self.group_dims, self.ppo_cfg.policy).to(self.device)
        self._set_action_priors(0)
        self._initial_weights()
        if self.dist is not None:  # every rank starts from rank 0's weights; normalisers merge over ranks
            self.dist.broadcast_module(self.models)
            self.dist.attach_normalizers(self.models)
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(self.seed + 1)
        tc = self.train_cfg
        self.alg = self.make_algorithm(num_envs)
        # Stratified PPO reads each agent state's stratum from the task at every rollout step.
        self._stratify = getattr(self.alg.cfg, "stratify", False)
        if self._stratify and not callable(getattr(self.env, "imitation_strata", None)):
            raise ValueError(f"algo.stratify: task {self.env.spec.task!r} defines no imitation_strata()")
        self.steps_per_iter = num_envs * tc.rollout_steps  # env steps per iteration, every rank's
        if self.dist is not None:
            self.alg.dist = self.dist
            self.steps_per_iter *= self.dist.world_size
        self.num_iterations = max(1, math.ceil(tc.total_steps / self.steps_per_iter))
        self.update_threads = update_thread_tuner(
            int(cfg.get("update_threads", 0)), self.device, self.num_iterations, local_ranks
        )
        default_metric = type(self.env).best_metric  # the task's (episode metric, min | max)
        self.best_metric = tc.best_metric or default_metric[0]
        if tc.best_metric and not tc.best_mode and tc.best_metric != default_metric[0]:
            raise ValueError(f"train.best_metric={tc.best_metric!r} needs train.best_mode=min or max")
        self.best_mode = tc.best_mode or default_metric[1]
        if self.best_mode not in ("min", "max"):
            raise ValueError(f"train.best_mode must be 'min' or 'max', got {self.best_mode!r}")
        self.state = RunState()
        self._t0 = time.perf_counter()
        self._eval_env = None
        self._renderer = None
        self._video_ok = tc.video
        self._num_evals = 0
        self._last_eval_iteration = -1
        self._last_episode_metric: float | None = None
        self._guard_counts = [0, 0]  # the last rollout's out-of-range actions and non-finite resets
        self._env_restored = False  # resume put the checkpoint's env state back (learn() then does not reset)
        self._stop_requested = False  # Ctrl-C seen: save at the end of this iteration and stop

        resume = cfg.get("resume")
        if resume:
            self.run_dir, ckpt = self._resume_paths(Path(str(resume)))
            self._restore(ckpt)
        elif self.dist is None:
            self.run_dir = new_run_dir(cfg.get("runs_dir", "runs"), self.task)
        else:  # rank 0 makes the directory; the others only need its name
            made = str(new_run_dir(cfg.get("runs_dir", "runs"), self.task)) if self.is_main else None
            self.run_dir = Path(self.dist.broadcast_object(made))
        self.ckpt_dir = self.run_dir / "checkpoints"
        if not resume:
            self.run_id = f"{self.task}__{self.ppo_cfg.name}__s{self.seed}__{self.run_dir.name}"  # CleanRL-style
        if self.is_main:
            with open(self.run_dir / ("config.yaml" if not resume else "config_resumed.yaml"), "w") as f:
                yaml.safe_dump(self.cfg, f, sort_keys=False)

    @property
    def is_main(self) -> bool:
        """The process that logs, evaluates and writes checkpoints (always, but rank 0 under torchrun)."""
        return self.dist is None or self.dist.is_main

    # ----------------------------------------------------------------- setup helpers
    def trained_groups(self) -> list[str]:
        """The agent groups this runner trains (all; a self-play runner leaves the opponent's out)."""
        return list(self.env.spec.groups)

    def make_algorithm(self, num_envs: int) -> Any:
        """The algorithm object (verbs ``act``, ``process_env_step``, ``compute_returns``, ``update`` and the
        ``optimizer`` / ``memory`` a checkpoint holds): PPO here; SAC in training/sac_runner.py."""
        return PPO(self.models, self.ppo_cfg, num_envs, self.train_cfg.rollout_steps, self.device, self.generator)

    def _initial_weights(self) -> None:
        """Hook: start the networks from other weights than a fresh init: ``init_from=<checkpoint>`` (the groups it
        has; HCSP stage 3 overrides the hook); resume overrides it."""
        path = self.cfg.get("init_from")
        if path:
            groups = load_initial_weights(self.models, path, self.task_cfg, self.group_dims)
            print(f"  init_from {path}: groups {groups}")

    def _group_dims(self) -> dict[str, GroupDims]:
        groups = self.env.spec.groups
        return {name: group_dims(groups[name], self.ppo_cfg.critic_input) for name in self.trained_groups()}

    @staticmethod
    def _resume_paths(path: Path) -> tuple[Path, Path]:
        """``resume`` may name a run directory or a checkpoint file inside one."""
        if path.is_dir():
            return path, path / "checkpoints" / "latest.pt"
        if path.is_file():
            return path.parent.parent, path
        raise FileNotFoundError(f"resume={path}: no such run directory or checkpoint")

    def _restore(self, ckpt: Path) -> None:
        try:
            payload = load_checkpoint(ckpt, map_location=self.device)
        except NoCheckpointError as exc:
            raise NoCheckpointError(
                f"resume={self.cfg.get('resume')}: the run has no complete checkpoint yet ({exc}); "
                f"start over without resume= (python train.py task={self.task} ...), or delete {self.run_dir}"
            ) from None
        check_compatible(payload, self.task_cfg, self.group_dims, ckpt)
        old_policy = payload["algo_cfg"].get("policy", {})
        if old_policy != self.cfg.get("algo", {}).get("policy", {}):
            raise ValueError(
                f"checkpoint {ckpt} was trained with algo.policy={old_policy}; "
                f"this run has algo.policy={self.cfg.get('algo', {}).get('policy')}"
            )
        try:
            self.models.load_state_dict(payload["model"])
            self.alg.optimizer.load_state_dict(payload["optimizer"])
        except (RuntimeError, ValueError, KeyError) as exc:
            raise ValueError(f"checkpoint {ckpt} does not fit this run's networks: {exc}") from exc
        restore_rng_state(payload["rng"], self.env.rng, self.generator)
        self._restore_env(payload, ckpt)
        meta = payload["meta"]
        self.run_id = str(meta.get("run_id", self.run_dir.name))
        best = meta.get("best") or {}
        self.state = RunState(
            global_step=int(payload["global_step"]),
            iteration=int(payload["iteration"]),
            wall_time=float(meta.get("wall_time", 0.0)),
            best_value=best.get("value") if best.get("metric") == self.best_metric else None,
            last_eval=dict(payload.get("metrics") or {}),
        )
        self._num_evals = int(meta.get("num_evals", 0))

    def _restore_env(self, payload: dict, ckpt: Path) -> None:
        """Put the checkpoint's env and rollout state back (exact resume), or say in one line why not.

        Under torchrun each rank takes its own envs, random streams and rollout state from
        ``rank_states`` (gathered by rank 0 into ``latest.pt``); without them (a single-process
        checkpoint, or another number of ranks) every rank re-seeds its streams and restarts its envs.
        """
        env_state = payload.get("env_state")
        saved_envs = payload["meta"]["config"].get("num_envs", -1)
        memory = payload.get("rollout_memory") or {}
        why = None
        if self.dist is not None:
            states, world = payload.get("rank_states"), self.dist.world_size
            if states is not None and len(states) == world:
                mine = states[self.dist.rank]
                restore_rng_state(mine["rng"], self.env.rng, self.generator)
                env_state, saved_envs, memory = mine["env_state"], mine["num_envs"], mine["rollout_memory"] or {}
            else:
                # Fresh streams per rank (not rank 0's saved ones on every rank, which would repeat its noise).
                stream = (self.seed * 1_000_003 + int(payload["iteration"])) % (2**63)
                self.env.rng.manual_seed(stream)
                self.generator.manual_seed(stream + 1)
                why = "written by one process" if states is None else f"written by {len(states)} ranks, not {world}"
        if why is not None:
            pass
        elif env_state is None:
            why = "it holds no env state (not a latest.pt, or written before covey saved it)"
        elif isinstance(env_state, str):
            why = f"the task's env state could not be saved: {env_state}"
        elif self.env.num_envs != int(saved_envs):
            why = f"num_envs differs ({saved_envs} in the checkpoint)"
        else:
            try:
                why = self.env.load_state_snapshot(env_state)
            except Exception as exc:  # noqa: BLE001 - failed (half-way): learn() resets the env instead
                why = f"{type(exc).__name__}: {exc}"
        if why is None and memory:
            try:
                for name, sides in memory.items():
                    for side, value in sides.items():
                        self.alg.memory[name][side].copy_(value)
            except (KeyError, RuntimeError) as exc:
                why = f"the recurrent rollout state does not fit ({exc})"
        self._env_restored = why is None
        who = f"resume (rank {self.dist.rank})" if self.dist is not None else "resume"
        step = payload["global_step"]
        if why is None and self.is_main:
            print(f"{who}: {ckpt} at step {step:,}: exact (weights, optimiser, RNG and env state)")
        elif why is not None:
            # After a partial env restore the env must start over anyway: reset below in learn().
            print(
                f"{who}: {ckpt} at step {step:,}: the envs restart their episodes, so the "
                f"metric curve goes on statistically, not step for step: {why}"
            )

    # ----------------------------------------------------------------- the loop
    def learn(self) -> RunState:
        """Train until ``train.total_steps`` (or ``train.max_minutes``); returns the final state."""
        tc, st = self.train_cfg, self.state
        resumed = bool(self.cfg.get("resume"))
        main = self.is_main  # under torchrun only rank 0 logs, evaluates and saves
        csv_path, resume_step = self.run_dir / "metrics.csv", st.global_step if resumed else None
        csv_log = CsvLogger(csv_path, resume_step=resume_step) if main else None
        wb = self.wandb_cfg
        mode = wb.mode if main else "disabled"
        self.wandb = WandbLogger(mode, self.run_dir, self.run_id, self.cfg, wb.project, wb.entity, wb.group, wb.tags)
        total = self.num_iterations * self.steps_per_iter
        bar = ProgressBar(total, st.global_step, enabled=tc.progress) if main else _QuietBar(total, st.global_step)
        bar.write(self._summary())
        if self.env.compiled:
            bar.write(
                "  compiling the env step before the first rollout and evaluation (torch.compile): minutes the first "
                "time on a CPU, seconds once cached"
            )
        if self.imitation_cfg.expert != "none" and st.iteration == 0:
            self._imitate(bar)
        if self._env_restored:
            obs = self.env.observe()  # the checkpoint's env state: the run goes on exactly where it was
        else:
            obs = self.env.reset()
            if tc.random_episode_start:
                obs = self.env.randomize_episode_progress()
        # Ctrl-C finishes the iteration and saves latest.pt at its boundary (a checkpoint taken mid-rollout
        # or mid-update would not resume exactly); a second Ctrl-C stops at once, without saving.
        restore_sigint = self._defer_sigint(bar)
        try:
            while st.iteration < self.num_iterations:
                obs, row = self.train_iteration(obs)
                out_of_time = tc.max_minutes > 0 and self._elapsed() > 60.0 * tc.max_minutes
                if self.dist is not None:  # one rank's Ctrl-C or clock stops every rank at the same iteration
                    self._stop_requested, out_of_time = self.dist.any(self._stop_requested, out_of_time)
                last = st.iteration >= self.num_iterations or out_of_time
                if tc.eval_every > 0 and (st.iteration % tc.eval_every == 0 or last) and main:
                    row.update(self._evaluate_and_select(bar, final=last))
                if main:
                    csv_log.log(row)
                self.wandb.log(row, step=st.global_step)
                bar.update(self.steps_per_iter, self._bar_metrics(row))
                if tc.eval_every <= 0 and f"episode/{self.best_metric}" in row:
                    # No evaluation: follow the training episodes' metric (stochastic policy).
                    self._last_episode_metric = row[f"episode/{self.best_metric}"]
                if tc.checkpoint_every > 0 and st.iteration % tc.checkpoint_every == 0 or self._stop_requested:
                    self._select_best(self._last_episode_metric)
                    self.save(self.ckpt_dir / "latest.pt", resumable=True)
                if self._stop_requested:
                    bar.write(f"interrupted: saved {self.ckpt_dir / 'latest.pt'} at step {st.global_step:,}")
                    raise KeyboardInterrupt
                if out_of_time:
                    bar.write(f"train.max_minutes={tc.max_minutes} reached at step {st.global_step:,}")
                    break
            if tc.eval_every > 0 and self._last_eval_iteration != st.iteration and main:  # resumed a finished run
                self._evaluate_and_select(bar, final=True)
            self._select_best(self._last_episode_metric)
            self.save(self.ckpt_dir / "latest.pt", resumable=True)
            if self.dist is not None:  # return when rank 0's checkpoint is on disk (a resume may follow)
                self.dist.barrier()
        finally:
            restore_sigint()
            bar.close()
            self.wandb.close()
            if self._renderer is not None:
                self._renderer.close()
        return st

    def _defer_sigint(self, bar: ProgressBar):
        """Install the deferred Ctrl-C handler (main thread only); returns the function restoring the old one."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = signal.getsignal(signal.SIGINT)

        def handler(signum, frame) -> None:
            if self._stop_requested:
                raise KeyboardInterrupt
            self._stop_requested = True
            bar.write("Ctrl-C: finishing this iteration, then saving latest.pt (Ctrl-C again: quit without saving)")

        signal.signal(signal.SIGINT, handler)
        return lambda: signal.signal(signal.SIGINT, previous)

    def collect(self, obs: dict) -> tuple[dict, EpisodeStats]:
        """One rollout of ``train.rollout_steps`` steps into the storage, then GAE (inference mode).

        Returns the last observation and the statistics of the episodes that ended.
        """
        episodes = EpisodeStats()
        guard = torch.zeros(2, dtype=torch.long, device=self.device)  # out-of-range actions, non-finite resets
        # The actions' NaN/range checks once per rollout instead of a host sync every step.
        self.env.defer_action_checks = True
        try:
            with torch.inference_mode():
                for _ in range(self.train_cfg.rollout_steps):
                    actions = self.alg.act(obs, self.env.imitation_strata()) if self._stratify else self.alg.act(obs)
                    actions.update(self.other_actions(obs))
                    obs, reward, terminated, truncated, info = self.env.step(actions)
                    reward = {name: reward[name] for name in self.models}
                    self.alg.process_env_step(reward, terminated, truncated, info)
                    self.after_env_step(terminated, truncated, info)
                    if "episode" in info:
                        episodes.add(info["episode"])
                    if "nonfinite_reset" in info:
                        guard += torch.stack([info["actions_out_of_range"].sum(), info["nonfinite_reset"].sum()])
                self.alg.compute_returns(obs)
        finally:
            self.env.defer_action_checks = False
        self.env.check_deferred_actions()
        self._guard_counts = guard.tolist()
        return obs, episodes

    def other_actions(self, obs: dict) -> dict[str, Tensor]:
        """Actions of the groups not trained here (``{}``: every group is trained)."""
        return {}

    def after_env_step(self, terminated: Tensor, truncated: Tensor, info: dict) -> None:
        """Called after every training ``env.step`` (self-play records match results here)."""

    def _prior_scale(self, step: int) -> float:
        """The action prior's weight at env step ``step`` (``train.prior_anneal_steps``)."""
        anneal = self.train_cfg.prior_anneal_steps
        return 1.0 if anneal <= 0 else max(0.0, 1.0 - step / anneal)

    def _set_action_priors(self, step: int) -> None:
        scale = self._prior_scale(step)
        for name in self.models:
            self.models[name].set_action_prior(self.env.spec.groups[name].action_prior_matrix().to(self.device) * scale)

    def train_iteration(self, obs: dict) -> tuple[dict, dict[str, Any]]:
        """Collect one rollout and update; returns the last obs and this iteration's log row."""
        st = self.state
        if self.train_cfg.prior_anneal_steps > 0:
            self._set_action_priors(st.global_step)
        t_start = time.perf_counter()
        obs, episodes = self.collect(obs)
        t_collect = time.perf_counter()
        with self.update_threads:
            losses = self.alg.update(
                progress=st.iteration / self.num_iterations, value_only=st.iteration < self._value_only_until
            )
        t_update = time.perf_counter()
        st.iteration += 1
        st.global_step += self.steps_per_iter
        row: dict[str, Any] = {
            "global_step": st.global_step,
            "iteration": st.iteration,
            "wall_time": round(self._elapsed(), 3),
            "samples_per_s": self.steps_per_iter / (t_update - t_start),
            "charts/collect_samples_per_s": self.steps_per_iter / (t_collect - t_start),
            "charts/collect_time": t_collect - t_start,
            "charts/update_time": t_update - t_collect,
            "charts/update_threads": self.update_threads.current,
            # The env's reliability counts over this rollout (sim.core.env.MultiAgentEnv.step).
            "charts/actions_out_of_range": self._guard_counts[0],
            "charts/nonfinite_resets": self._guard_counts[1],
        }
        if self.train_cfg.prior_anneal_steps > 0:  # the prior's weight in this iteration's rollout and update
            row["charts/action_prior_scale"] = self._prior_scale(st.global_step - self.steps_per_iter)
        row.update(losses)
        row.update(self.end_iteration())
        row.update({f"episode/{k}": v for k, v in episodes.means().items()})
        return obs, row

    def _imitate(self, bar: ProgressBar) -> None:
        """DAgger from the env's expert into the trained groups' actors (``training.imitation``),
        its statistics in ``<run>/imitation.json``, then an evaluation (best.pt may keep this policy)."""
        cfg = self.imitation_cfg
        trained = torch.nn.ModuleDict({g: self.models[g] for g in self.trained_groups()})
        if cfg.expert == "task":
            expert = self.env.expert_policy()
        else:
            expert = checkpoint_expert(cfg.expert, list(trained), self.env.device)
        dataset = load_datasets(cfg.reuse, self.env.device) if cfg.reuse else None
        if dataset is None and cfg.save_data:
            dataset = {}
        limit = self.train_cfg.max_minutes

        saved_rounds = [-1]  # how many rounds the files on disk hold (a last round already saved is not redone)

        def save(stats: list[dict[str, float]]) -> None:
            if len(stats) == saved_rounds[0]:
                return
            (self.run_dir / "imitation.json").write_text(json.dumps({"cfg": asdict(cfg), "rounds": stats}, indent=2))
            self.save(self.ckpt_dir / "imitation.pt")  # the imitation-only policy, whatever PPO does next
            saved_rounds[0] = len(stats)

        def after_round(stats: list[dict[str, float]]) -> bool:
            if cfg.checkpoint_every and len(stats) % cfg.checkpoint_every == 0:
                save(stats)
            if limit > 0 and self._elapsed() > 60.0 * limit:
                bar.write(f"train.max_minutes={limit} reached after DAgger round {len(stats) - 1}")
                return True
            return False

        stats = dagger(self.env, trained, expert, cfg, self.generator, log=bar.write, dataset=dataset,
                       after_round=after_round)  # fmt: skip
        if cfg.save_data:
            torch.save(dataset, self.run_dir / "imitation_data.pt")
        save(stats)
        self._value_only_until = cfg.critic_warmup
        self.alg.freeze_obs_normalizers = True
        self.after_imitation()
        if self.train_cfg.eval_every > 0:
            self._evaluate_and_select(bar)

    def after_imitation(self) -> None:
        """Work once DAgger has fitted the actors, before the evaluation that follows it (self-play: seed
        the league with the imitated policy)."""

    def end_iteration(self) -> dict[str, Any]:
        """Work at the end of an iteration, after the update (self-play: record results, snapshot,
        draw the next opponents); returns extra entries for this iteration's log row."""
        return {}

    def _elapsed(self) -> float:
        return self.state.wall_time + time.perf_counter() - self._t0

    # ----------------------------------------------------------------- evaluation
    def _evaluate_and_select(self, bar: ProgressBar, final: bool = False) -> dict[str, float]:
        """Deterministic evaluation; saves best.pt when ``best_metric`` improves."""
        st = self.state
        self._num_evals += 1
        self._last_eval_iteration = st.iteration
        record = self._video_ok and (
            final or (self.train_cfg.video_every > 0 and self._num_evals % self.train_cfg.video_every == 0)
        )
        metrics, frames = self.evaluate(record_video=record)
        st.last_eval = metrics
        out = {f"eval/{k}": v for k, v in metrics.items()}
        if frames:
            self._write_video(frames, bar)
        value = metrics.get(self.best_metric)
        # An annealed prior: only a policy whose last iteration ran without it counts.
        if self.train_cfg.prior_anneal_steps <= 0 or self._prior_scale(st.global_step - self.steps_per_iter) == 0.0:
            self._select_best(value)
        bar.write(
            f"eval @ {st.global_step:,} steps: return {metrics.get('return', math.nan):.3f}, "
            f"{self.best_metric} {value if value is not None else math.nan:.4g} (best {st.best_value})"
        )
        return out

    def _select_best(self, value: float | None) -> None:
        """Save best.pt when ``value`` of ``best_metric`` beats the best so far."""
        st = self.state
        if value is None or math.isnan(value):
            return
        best = st.best_value
        if best is None or (value < best if self.best_mode == "min" else value > best):
            st.best_value = value
            self.save(self.ckpt_dir / "best.pt")

    @torch.inference_mode()
    def evaluate(self, record_video: bool = False) -> tuple[dict[str, float], list]:
        """Run the deterministic policy on the eval env for one episode length.

        Returns count-weighted means over every episode that ended in that window (an env that
        ends early starts a new episode, which counts if it ends in time), and the frames of env 0
        when ``record_video``.
        """
        env = self._get_eval_env()
        actors = {name: ac.deterministic_actor() for name, ac in self.models.items()}
        renderer = self._get_renderer(env) if record_video else None
        every = max(1, round(env.spec.control_hz / self.train_cfg.video_fps))
        obs = env.reset(seed=self.seed + 10_000)
        others = self.eval_other_actions(env)
        episodes, frames = EpisodeStats(), []
        for t in range(env.max_episode_steps):
            if renderer is not None and t % every == 0:
                frames.append(renderer.render([0])[0])
            actions = {name: actor(obs[name]) for name, actor in actors.items()}
            actions.update(others(obs))
            obs, _, terminated, truncated, info = env.step(actions)
            reset_memory(actors, terminated | truncated)
            if "episode" in info:
                episodes.add(info["episode"])
        return episodes.means(), frames

    def eval_other_actions(self, env) -> Any:
        """``obs -> actions`` of the untrained groups in evaluations (self-play: a fixed opponent)."""
        return lambda obs: {}

    def _get_eval_env(self):
        if self._eval_env is None:
            task_cfg = deep_merge(self.task_cfg, evaluation_overrides(self.task))
            # Compiled with the training env: its own batch size compiles the loop once more (~11 s with the cache
            # on the 2-core CPU), and an eager 64-env evaluation is bound by op dispatch (5x slower there).
            self._eval_env = sim.make(
                task_cfg,
                num_envs=self.train_cfg.eval_envs,
                device=self.device,
                seed=self.seed,
                compile=self.env.compiled,
            )
        return self._eval_env

    def _get_renderer(self, env):
        if self._renderer is None and self._video_ok:
            try:
                from sim.render import make_renderer

                self._renderer = make_renderer(env, width=320, height=240)
            except Exception as exc:  # no renderer for the task, or no GL backend on this machine
                print(f"eval video disabled: {exc}")
                self._video_ok = False
        return self._renderer

    def _write_video(self, frames: list, bar: ProgressBar) -> None:
        import numpy as np

        from sim.render import write_video

        path = write_video(
            np.stack(frames), self.run_dir / "videos" / f"eval_{self.state.global_step}.gif", self.train_cfg.video_fps
        )
        self.wandb.log_video("eval/video", path, self.state.global_step)
        bar.write(f"eval video: {path}")

    # ----------------------------------------------------------------- checkpoints
    def save(self, path: Path, resumable: bool = False) -> None:
        """Write a checkpoint of the current state (atomic).

        ``resumable`` (``latest.pt``, always written at an iteration boundary) adds the env's state
        (``env_state``: :meth:`sim.core.env.MultiAgentEnv.state_snapshot`, or why it cannot be
        copied) and the recurrent rollout state (``rollout_memory``), so a resume continues the
        very same run: same steps, same metric curve. Under torchrun only rank 0 writes; a resumable
        checkpoint then also holds every rank's env, random-stream and rollout state (``rank_states``,
        a list in rank order), gathered here, so every rank must call this for ``latest.pt``.
        """
        rank_states = self._gather_rank_states() if resumable and self.dist is not None else None
        if not self.is_main:
            return
        st = self.state
        payload = {
            "format": FORMAT,
            "task_cfg": self.task_cfg,
            "algo_cfg": dict(self.cfg.get("algo", {})),
            "model": self.models.state_dict(),
            "optimizer": self.alg.optimizer.state_dict(),
            "normalizers": {
                name: {
                    "obs": ac.actor_encoder.norms.state_dict(),
                    "critic": ac.critic_encoder.norms.state_dict(),
                    "value": ac.value_norm.state_dict(),
                }
                for name, ac in self.models.items()
            },
            "global_step": st.global_step,
            "iteration": st.iteration,
            "rng": rng_state(self.env.rng, self.generator),
            "meta": {
                "run_id": self.run_id,
                "global_step": st.global_step,
                "algo": self.ppo_cfg.name,
                "covey_version": covey_version(),
                "config": self.cfg,
                "groups": {name: dims.to_dict() for name, dims in self.group_dims.items()},
                "wall_time": self._elapsed(),
                "best": {"metric": self.best_metric, "mode": self.best_mode, "value": st.best_value},
                "num_evals": self._num_evals,
                "saved_at": datetime.now().isoformat(timespec="seconds"),
            },
            "metrics": dict(st.last_eval),
        }
        if resumable:
            try:
                payload["env_state"] = self.env.state_snapshot()
            except Exception as exc:  # noqa: BLE001 - never lose a checkpoint to the optional env copy
                payload["env_state"] = f"the env state snapshot failed ({type(exc).__name__}: {exc})"
            payload["rollout_memory"] = self.alg.memory
        if rank_states is not None:
            payload["rank_states"] = rank_states
        save_checkpoint(path, payload)

    def _gather_rank_states(self) -> list[dict[str, Any]] | None:
        """Every rank's env snapshot, random streams and recurrent rollout state (on the CPU), on rank 0."""
        try:
            env_state = self.env.state_snapshot()
        except Exception as exc:  # noqa: BLE001 - never lose a checkpoint to the optional env copy
            env_state = f"the env state snapshot failed ({type(exc).__name__}: {exc})"
        mine = {
            "num_envs": self.env.num_envs,
            "env_state": env_state,
            "rng": rng_state(self.env.rng, self.generator),
            "rollout_memory": self.alg.memory,
        }
        return self.dist.gather_object(_to_cpu(mine))

    # ----------------------------------------------------------------- display
    def _summary(self) -> str:
        n_params = sum(p.numel() for p in self.models.parameters())
        groups = ", ".join(f"{k}: {asdict(v)}" for k, v in self.group_dims.items())
        ranks = f" x {self.dist.world_size} ranks" if self.dist is not None else ""
        return (
            f"covey train: task={self.task} algo={self.ppo_cfg.name} ({self.ppo_cfg.policy.sharing}) "
            f"num_envs={self.env.num_envs}{ranks} device={self.device} threads={torch.get_num_threads()} "
            f"({self.threads_why}), update {self.update_threads.describe()} (update_threads) "
            f"{self.allocator_why + ' ' if self.allocator_why else ''}"
            f"compile={self.env.compiled} ({self.compile_why}"
            f"{'; networks: compiled ELU' if compiled_cpu_elu() else ''})\n"
            f"  groups {groups}; {n_params:,} parameters; {self.num_iterations} iterations of "
            f"{self.steps_per_iter:,} steps from step {self.state.global_step:,}\n  run dir {self.run_dir}"
        )

    def _bar_metrics(self, row: Mapping[str, Any]) -> dict[str, float]:
        out = {"sps": row["samples_per_s"]}
        if "episode/return" in row:
            out["ret"] = row["episode/return"]
        for key, val in row.items():
            if key.startswith("episode/metrics/"):
                out[key.removeprefix("episode/metrics/")] = val
        return out
