"""The training loop: a run's env, algorithm and logger (training/setup.py builds them), and its checkpoints.

    runner = Runner(build_run(cfg))   # or Runner(cfg): the same, built from the resolved config (a plain dict)
    runner.learn()                    # trains to train.total_steps env steps (or train.max_minutes)

One iteration collects ``train.rollout_steps`` steps of ``num_envs`` envs under ``torch.inference_mode()``, computes
GAE and runs the algorithm's update; ``global_step`` counts env steps (``num_envs`` per ``env.step``). Every
``train.eval_every`` iterations a deterministic policy runs on a separate env with the task's
``evaluation_overrides()`` (noise and randomisation off) for one episode length, and ``checkpoints/best.pt`` follows
the best value of ``train.best_metric`` (with ``train.eval_every=0``: its mean over the training episodes, checked
at every checkpoint). ``checkpoints/latest.pt`` is written every ``train.checkpoint_every`` iterations, at the end,
and on Ctrl-C (at the end of the running iteration); ``resume=<run dir>`` continues from it in the same directory
(same CSV, same wandb run), exactly (training/resume.py).

Subclasses (self-play, SAC, HCSP's phases) change the run through hooks: ``trained_groups``, ``_initial_weights``
and ``make_algorithm`` while it is built; ``other_actions``, ``after_env_step``, ``end_iteration``,
``after_imitation``, ``eval_other_actions``, ``collect`` and ``save`` while it trains.
"""

from __future__ import annotations

import math
import signal
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

import sim
from sim.core.config import deep_merge
from sim.core.registry import evaluation_overrides
from training.checkpoint import save_checkpoint
from training.resume import RunState, checkpoint_payload, gather_rank_states, restore
from training.rollout import EpisodeStats, rollout
from training.settings import TrainCfg  # noqa: F401 - re-exported (tests import it from here)
from training.setup import (  # noqa: F401 - covey_version, group_dims, input_specs, new_run_dir: re-exported
    Run,
    RunLogger,
    build_run,
    covey_version,
    describe,
    group_dims,
    init_from_weights,
    input_specs,
    new_run_dir,
    ppo,
    set_action_priors,
    write_config,
)
from training.warm_start import imitate


class Runner:
    """Owns the loop, timing, logging, evaluation and checkpoints of a run (its env, algorithm and logger given).

    ``Runner(run)`` takes a :class:`training.setup.Run`; ``Runner(cfg)`` (a resolved config) builds one
    with this class's hooks first (:meth:`from_config` says the same). A run with ``resume=`` is restored here.
    """

    def __init__(self, run: Run | Mapping[str, Any]) -> None:
        if not isinstance(run, Run):
            run = build_run(run, hooks=self)
        self._attach(run)
        self.logger: RunLogger = run.logger
        self._value_only_until = 0  # iterations < this fit only the critic (after imitation)
        # Stratified PPO reads each agent state's stratum from the task at every rollout step.
        self._stratify = getattr(self.alg.cfg, "stratify", False)
        if self._stratify and not callable(getattr(self.env, "imitation_strata", None)):
            raise ValueError(f"algo.stratify: task {self.env.spec.task!r} defines no imitation_strata()")
        self.state = RunState()
        self._t0 = time.perf_counter()
        self._eval_env = None
        self._renderer = None
        self._video_ok = self.train_cfg.video
        self._num_evals = 0
        self._last_eval_iteration = -1
        self._last_episode_metric: float | None = None
        self._guard_counts = [0, 0]  # the last rollout's out-of-range actions and non-finite resets
        self._env_restored = False  # resume put the checkpoint's env state back (learn() then does not reset)
        self._stop_requested = False  # Ctrl-C seen: save at the end of this iteration and stop
        if run.resume is not None:
            self.state = restore(self, run.resume)
        write_config(run)

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> Runner:
        """The run of a resolved config (plain dicts), built with this class's hooks."""
        return cls(cfg)

    def _attach(self, run: Run) -> None:
        """Take the parts of ``run`` (also while it is built, so that the construction hooks see them)."""
        self.run = run
        self.cfg, self.device, self.dist, self.seed = run.cfg, run.device, run.dist, run.seed
        s = run.settings
        self.train_cfg, self.ppo_cfg, self.wandb_cfg, self.imitation_cfg = s.train, s.algo, s.wandb, s.imitation
        self.task_cfg = run.task_cfg
        self.task = run.task_cfg.get("name")
        self.env, self.group_dims, self.models, self.generator, self.alg = (
            run.env, run.group_dims, run.models, run.generator, run.alg
        )  # fmt: skip
        self.update_threads, self.steps_per_iter, self.num_iterations = (
            run.update_threads, run.steps_per_iter, run.num_iterations
        )  # fmt: skip
        self.best_metric, self.best_mode = run.best_metric
        self.run_dir, self.run_id = run.run_dir, run.run_id
        self.ckpt_dir = self.run_dir / "checkpoints" if self.run_dir is not None else None

    @property
    def is_main(self) -> bool:
        """The process that logs, evaluates and writes checkpoints (always, but rank 0 under torchrun)."""
        return self.dist is None or self.dist.is_main

    # ----------------------------------------------------------------- hooks while the run is built
    # training.setup.build_run asks these (training.setup.Hooks); each hands the run so far to this runner's own.
    supports_distributed = property(lambda self: type(self) is Runner)  # torchrun: the plain PPO runner only

    def groups(self, run: Run) -> list[str]:
        self._attach(run)
        return self.trained_groups()

    def initial_weights(self, run: Run) -> None:
        self._attach(run)
        self._initial_weights()

    def algorithm(self, run: Run) -> Any:
        self._attach(run)
        return self.make_algorithm(run.env.num_envs)

    def trained_groups(self) -> list[str]:
        """The agent groups this runner trains (all; a self-play runner leaves the opponent's out)."""
        return list(self.env.spec.groups)

    def make_algorithm(self, num_envs: int) -> Any:
        """The algorithm object (verbs ``act``, ``process_env_step``, ``compute_returns``, ``update`` and the
        ``optimizer`` / ``memory`` a checkpoint holds): PPO here; SAC in training/sac_runner.py."""
        return ppo(self.run)

    def _initial_weights(self) -> None:
        """Hook: start the networks from other weights than a fresh init: ``init_from=<checkpoint>`` (the groups it
        has; HCSP stage 3 overrides the hook)."""
        init_from_weights(self.run)

    # ----------------------------------------------------------------- the loop
    def learn(self) -> RunState:
        """Train until ``train.total_steps`` (or ``train.max_minutes``); returns the final state."""
        tc, st = self.train_cfg, self.state
        main = self.is_main  # under torchrun only rank 0 logs, evaluates and saves
        resume_step = st.global_step if self.run.resume is not None else None
        bar = self.logger
        bar.open(self.num_iterations * self.steps_per_iter, st.global_step, resume_step, tc.progress)
        bar.write(describe(self.run, st.global_step))
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
                bar.log(row, step=st.global_step)
                bar.update(self.steps_per_iter, row)
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
            if self._renderer is not None:
                self._renderer.close()
        return st

    def _defer_sigint(self, bar: RunLogger):
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
        set_action_priors(self.models, self.env, self._prior_scale(step))

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

    def _imitate(self, bar: RunLogger) -> None:
        """DAgger into the trained groups' actors (training/warm_start.py), then an evaluation (best.pt may keep
        this policy); the critic alone fits the first ``imitation.critic_warmup`` iterations."""
        imitate(self, bar.write)
        self._value_only_until = self.imitation_cfg.critic_warmup
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
    def _evaluate_and_select(self, bar: RunLogger, final: bool = False) -> dict[str, float]:
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
            self.logger.video(frames, self.run_dir / "videos" / f"eval_{st.global_step}.gif", st.global_step,
                              self.train_cfg.video_fps)  # fmt: skip
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
        episodes, frames = EpisodeStats(), []

        def draw(t: int, obs: dict) -> None:
            if t % every == 0:
                frames.append(renderer.render([0])[0])

        def act(obs: dict) -> dict[str, Tensor]:
            actions = {name: actor(obs[name]) for name, actor in actors.items()}
            actions.update(others(obs))
            return actions

        hook = draw if renderer is not None else None
        steps = rollout(env, act, env.max_episode_steps, seed=self.seed + 10_000, memory=actors, before_step=hook)
        others = self.eval_other_actions(env)  # after the reset: it may set the opponent up on the reset env
        for s in steps:
            if "episode" in s.info:
                episodes.add(s.info["episode"])
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
                kernels=self.cfg.get("sim", {}).get("kernels"),  # the training env's choice (None: the task's stored)
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

    # ----------------------------------------------------------------- checkpoints
    def save(self, path: Path, resumable: bool = False) -> None:
        """Write a checkpoint of the current state (atomic; training/resume.py's ``checkpoint_payload``).

        ``resumable`` (``latest.pt``, always written at an iteration boundary) adds the env's and the recurrent
        rollout state, so a resume continues the very same run. Under torchrun only rank 0 writes; a resumable
        checkpoint then also holds every rank's state (``rank_states``), gathered here: every rank must call it.
        """
        rank_states = gather_rank_states(self) if resumable and self.dist is not None else None
        if not self.is_main:
            return
        meta = {
            "run_id": self.run_id,
            "global_step": self.state.global_step,
            "algo": self.ppo_cfg.name,
            "covey_version": covey_version(),
            "config": self.cfg,
            "groups": {name: dims.to_dict() for name, dims in self.group_dims.items()},
            "wall_time": self._elapsed(),
            "best": {"metric": self.best_metric, "mode": self.best_mode, "value": self.state.best_value},
            "num_evals": self._num_evals,
            # The counts this run computes with: a resume with torch_threads=0 reuses them (same bits).
            "threads": {"torch": self.run.torch_threads, "update": self.update_threads.current},
        }
        payload = checkpoint_payload(self, resumable, meta)
        if rank_states is not None:
            payload["rank_states"] = rank_states
        save_checkpoint(path, payload)

    # ----------------------------------------------------------------- display
