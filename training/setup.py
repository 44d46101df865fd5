"""A training run assembled from its resolved config: what :class:`training.runner.Runner` receives.

    run = build_run(cfg)          # cfg: the resolved hydra config as a plain dict (configs/config.yaml)
    Runner(run).learn()           # the runner gets the env, the algorithm and the logger; it owns the loop

:func:`build_run` does, in this order (the order fixes the random streams, so it stays as it is):
the typed settings of each node (:class:`Settings`), the device and the torchrun ranks
(``distributed=true``), the checkpoint a ``resume=`` names (read first: its one-line errors come before
anything is built, and it records the thread counts the run had), the torch threads
(training/threads.py), the global seed, the env (``sim.compile``, ``sim.kernels``), the networks of the trained groups
(with ``init_from=`` weights), the action-sampling generator, the algorithm, the update's threads, the
best-checkpoint metric, the run directory and the logger (:class:`RunLogger`, opened by ``learn``).

Three choices belong to the runner class being built and are asked of ``hooks`` (:class:`Hooks`; a
Runner is its own): which groups it trains, the networks' initial weights, and the algorithm.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import torch
import yaml
from torch import nn

import sim
from policies import GroupDims, InputSpec, build_actor_critics
from policies.mlp import compiled_cpu_elu, set_compiled_cpu_elu
from sim.core.config import build_config, resolve_device
from sim.core.registry import task_class
from training.allocator import keep_freed_memory
from training.checkpoint import load_initial_weights
from training.imitation import ImitationCfg
from training.logger import CsvLogger, ProgressBar, WandbLogger
from training.ppo import PPO, PPOCfg
from training.resume import ResumePoint, find_resume_point
from training.settings import TrainCfg, WandbCfg
from training.threads import ThreadTuner, set_torch_threads, update_thread_tuner
from training.trpl import TRPL


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


def set_action_priors(models: nn.ModuleDict, env: Any, scale: float) -> None:
    """Each group's action prior (its ``GroupSpec.action_prior_matrix()``) times ``scale`` into its network."""
    for name in models:
        prior = env.spec.groups[name].action_prior_matrix().to(env.device) * scale
        models[name].set_action_prior(prior)


@dataclass(frozen=True)
class Settings:
    """The typed nodes of a run's config (each checked on building: a wrong key fails naming it)."""

    train: TrainCfg
    algo: PPOCfg
    wandb: WandbCfg
    imitation: ImitationCfg

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> Settings:
        return cls(
            train=build_config(TrainCfg, cfg.get("train", {}), where="train"),
            algo=build_config(PPOCfg, cfg.get("algo", {}), where="algo"),
            wandb=build_config(WandbCfg, cfg.get("wandb", {}), where="wandb"),
            imitation=build_config(ImitationCfg, cfg.get("imitation", {}), where="imitation"),
        )


class RunLogger:
    """The run's logs: ``metrics.csv``, wandb and the progress bar (rank 0's; other ranks write nothing).

    Built with the run, opened by ``Runner.learn`` (:meth:`open`: wandb starts only when a run trains),
    closed at its end; :meth:`write` prints a line above the bar.
    """

    def __init__(self, run_dir: Path, run_id: str, cfg: Mapping[str, Any], wandb: WandbCfg, main: bool) -> None:
        self.run_dir, self.run_id, self.cfg, self.wandb_cfg, self.main = run_dir, run_id, cfg, wandb, main
        self.csv: CsvLogger | None = None
        self.wandb: WandbLogger | None = None
        self.bar: ProgressBar | None = None

    def open(self, total: int, initial: int, resume_step: int | None, progress: bool) -> None:
        """Start the logs of a run of ``total`` env steps at step ``initial`` (a resume keeps the CSV's rows
        up to ``resume_step``)."""
        wb = self.wandb_cfg
        if self.main:
            self.csv = CsvLogger(self.run_dir / "metrics.csv", resume_step=resume_step)
        mode = wb.mode if self.main else "disabled"
        self.wandb = WandbLogger(mode, self.run_dir, self.run_id, self.cfg, wb.project, wb.entity, wb.group, wb.tags)
        self.bar = ProgressBar(total, initial, enabled=progress and self.main)

    def log(self, row: Mapping[str, Any], step: int) -> None:
        if self.csv is not None:
            self.csv.log(row)
        self.wandb.log(row, step=step)

    def update(self, steps: int, row: Mapping[str, Any]) -> None:
        """Advance the bar by ``steps``, showing samples/s, the mean episode return and the task metrics of ``row``."""
        shown = {"sps": row["samples_per_s"]}
        if "episode/return" in row:
            shown["ret"] = row["episode/return"]
        prefix = "episode/metrics/"
        shown.update({k.removeprefix(prefix): v for k, v in row.items() if k.startswith(prefix)})
        self.bar.update(steps, shown)

    def video(self, frames: list, path: Path, step: int, fps: float) -> None:
        """Write an evaluation's ``frames`` to ``path`` (gif), log it to wandb (``eval/video``) and say so."""
        import numpy as np

        from sim.render import write_video

        path = write_video(np.stack(frames), path, fps)
        self.wandb.log_video("eval/video", path, step)
        self.write(f"eval video: {path}")

    def write(self, line: str) -> None:
        """Print ``line`` (rank 0 only: the other ranks' lines would repeat it)."""
        if not self.main:
            return
        if self.bar is not None:
            self.bar.write(line)
        else:
            print(line)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.wandb is not None:
            self.wandb.close()


class Hooks:
    """What :func:`build_run` asks the runner class it builds for (defaults: every group, PPO, ``init_from``)."""

    supports_distributed = True  # torchrun: only the plain PPO runner merges its state over ranks

    def groups(self, run: Run) -> list[str]:
        return list(run.env.spec.groups)

    def initial_weights(self, run: Run) -> None:
        init_from_weights(run)

    def algorithm(self, run: Run) -> Any:
        return ppo(run)


def init_from_weights(run: Run) -> None:
    """``init_from=<checkpoint>``: the networks start from the weights of the groups it has."""
    path = run.cfg.get("init_from")
    if path:
        groups = load_initial_weights(run.models, path, run.task_cfg, run.group_dims)
        print(f"  init_from {path}: groups {groups}")


def ppo(run: Run) -> PPO:
    """The on-policy algorithm of ``algo``: PPO, or TRPL (training/trpl.py) where ``algo.trpl.projection`` names one."""
    algo_cls = PPO if run.settings.algo.trpl.projection == "none" else TRPL
    return algo_cls(run.models, run.settings.algo, run.env.num_envs, run.settings.train.rollout_steps, run.device,
                    run.generator)  # fmt: skip


@dataclass
class Run:
    """Everything a runner is given (filled in order by :func:`build_run`)."""

    cfg: dict[str, Any]
    settings: Settings
    device: torch.device
    dist: Any = None  # training.distributed.Distributed under torchrun
    seed: int = 0  # seed + rank
    task_cfg: dict[str, Any] = field(default_factory=dict)
    env: Any = None
    group_dims: dict[str, GroupDims] = field(default_factory=dict)
    models: nn.ModuleDict | None = None
    generator: torch.Generator | None = None  # the policy's action sampling
    alg: Any = None
    update_threads: ThreadTuner | None = None
    torch_threads: int = 0  # the rollouts' intra-op threads, as resolved
    steps_per_iter: int = 0  # env steps per iteration, every rank's
    num_iterations: int = 0
    best_metric: tuple[str, str] = ("", "")  # (episode metric choosing best.pt, "min" | "max")
    run_dir: Path | None = None
    run_id: str = ""
    resume: ResumePoint | None = None  # the checkpoint to continue from (restored by the runner)
    logger: RunLogger | None = None
    notes: dict[str, str] = field(default_factory=dict)  # how threads, allocator and compile were chosen

    @property
    def is_main(self) -> bool:
        return self.dist is None or self.dist.is_main

    @property
    def task(self) -> str:
        return self.task_cfg["name"]


def build_run(cfg: Mapping[str, Any], hooks: Any = None) -> Run:
    """Assemble the run of ``cfg`` (see the module docstring); ``hooks`` answers the runner's choices
    (:class:`Hooks` by default). Raises the user's errors (a wrong key, a missing checkpoint) in one line."""
    hooks = Hooks() if hooks is None else hooks
    cfg = dict(cfg)
    settings = Settings.from_config(cfg)
    run = Run(cfg=cfg, settings=settings, device=resolve_device(cfg.get("device", "auto")))
    if cfg.get("distributed", False):
        from training import distributed

        if not hooks.supports_distributed or settings.imitation.expert != "none":
            # Their extra state (replay, league, DAgger data) is per process and not merged over ranks.
            raise ValueError(
                f"distributed=true is the PPO Runner's, without imitation ({type(hooks).__name__}, "
                f"imitation.expert={settings.imitation.expert})"
            )
        run.dist = distributed.init(run.device)
        run.device = run.dist.device(run.device)
    run.task_cfg = dict(cfg["task"])
    if cfg.get("resume"):
        run.resume = find_resume_point(Path(str(cfg["resume"])), run.task, run.device)
    _set_threads(run)
    # On a CPU the update's activations are freed and allocated again every minibatch (training.allocator).
    run.notes["allocator"] = keep_freed_memory() if run.device.type == "cpu" else ""
    run.seed = int(cfg.get("seed", 0)) + (run.dist.rank if run.dist is not None else 0)
    torch.manual_seed(run.seed)
    _make_env(run)
    run.group_dims = {
        name: group_dims(run.env.spec.groups[name], settings.algo.critic_input) for name in hooks.groups(run)
    }
    run.models = build_actor_critics(run.group_dims, settings.algo.policy).to(run.device)
    set_action_priors(run.models, run.env, 1.0)
    hooks.initial_weights(run)
    if run.dist is not None:  # every rank starts from rank 0's weights; normalisers merge over ranks
        run.dist.broadcast_module(run.models)
        run.dist.attach_normalizers(run.models)
    run.generator = torch.Generator(device=run.device)
    run.generator.manual_seed(run.seed + 1)
    run.alg = hooks.algorithm(run)
    tc = settings.train
    run.steps_per_iter = run.env.num_envs * tc.rollout_steps
    if run.dist is not None:
        run.alg.dist = run.dist
        run.steps_per_iter *= run.dist.world_size
    run.num_iterations = max(1, math.ceil(tc.total_steps / run.steps_per_iter))
    run.update_threads = update_thread_tuner(
        int(cfg.get("update_threads", 0)), run.device, run.num_iterations, _local_ranks(run)
    )
    run.best_metric = best_metric(tc, type(run.env))
    _run_dir(run)
    run.logger = RunLogger(run.run_dir, run.run_id, cfg, settings.wandb, run.is_main)
    return run


def describe(run: Run, from_step: int) -> str:
    """The run's banner: task, algorithm, envs, device, how threads and compiling were chosen, groups, budget."""
    notes, algo = run.notes, run.settings.algo
    n_params = sum(p.numel() for p in run.models.parameters())
    groups = ", ".join(f"{k}: {asdict(v)}" for k, v in run.group_dims.items())
    ranks = f" x {run.dist.world_size} ranks" if run.dist is not None else ""
    return (
        f"covey train: task={run.task} algo={algo.name} ({algo.policy.sharing}) "
        f"num_envs={run.env.num_envs}{ranks} device={run.device} threads={torch.get_num_threads()} "
        f"({notes['threads']}), update {run.update_threads.describe()} (update_threads) "
        f"{notes['allocator'] + ' ' if notes['allocator'] else ''}"
        f"compile={run.env.compiled} ({notes['compile']}"
        f"{'; networks: compiled ELU' if compiled_cpu_elu() else ''})"
        f"{f' kernels={run.env.kernels}' if hasattr(run.env, 'kernels') else ''}\n"
        f"  groups {groups}; {n_params:,} parameters; {run.num_iterations} iterations of "
        f"{run.steps_per_iter:,} steps from step {from_step:,}\n  run dir {run.run_dir}"
    )


def best_metric(tc: TrainCfg, env_cls: type) -> tuple[str, str]:
    """``(metric, mode)`` choosing best.pt: ``train.best_metric``/``best_mode`` or the task's default."""
    default = env_cls.best_metric  # the task's (episode metric, min | max)
    metric = tc.best_metric or default[0]
    if tc.best_metric and not tc.best_mode and tc.best_metric != default[0]:
        raise ValueError(f"train.best_metric={tc.best_metric!r} needs train.best_mode=min or max")
    mode = tc.best_mode or default[1]
    if mode not in ("min", "max"):
        raise ValueError(f"train.best_mode must be 'min' or 'max', got {mode!r}")
    return metric, mode


def _local_ranks(run: Run) -> int:
    return int(os.environ.get("LOCAL_WORLD_SIZE", 1)) if run.dist is not None else 1


def _set_threads(run: Run) -> None:
    """``torch_threads`` after the device and the ranks are known (0: training.threads' default, or, on a
    resume, the count the checkpoint's run had, so that it continues bit for bit)."""
    recorded = run.resume.threads.get("torch") if run.resume is not None else None
    requested = int(run.cfg.get("torch_threads", 0))
    run.notes["threads"] = set_torch_threads(requested, run.device, _local_ranks(run), recorded=recorded)
    run.torch_threads = torch.get_num_threads()


def _make_env(run: Run) -> None:
    from training.config import sim_compile  # lazily: importing it registers every task with hydra

    sim_cfg = run.cfg.get("sim", {})
    env_cls = task_class(run.task)
    compile_env, run.notes["compile"] = sim_compile(
        sim_cfg.get("compile", "auto"), run.device, env_cls, run.settings.train.total_steps
    )
    num_envs = int(run.cfg.get("num_envs", 1024))
    run.env = sim.make(
        run.task_cfg,
        num_envs=num_envs,
        device=run.device,
        seed=run.seed,
        compile=compile_env,
        kernels=sim_cfg.get("kernels"),  # None (a config older than sim.kernels): the task node's, else "auto"
    )
    # A run that compiles its env on a CPU pays for a compiler there: the networks' ELU then takes it too
    # (policies.mlp.set_compiled_cpu_elu; ~9% of a cable_load PPO update). Off in every other run.
    set_compiled_cpu_elu(run.env.compiled and run.device.type == "cpu")


def _run_dir(run: Run) -> None:
    """The run directory (a resume's, or a new one: rank 0 makes it, the others learn its name) and the run
    id (CleanRL-style; a resume keeps its own)."""
    if run.resume is not None:
        run.run_dir, run.run_id = run.resume.run_dir, run.resume.run_id
    elif run.dist is None:
        run.run_dir = new_run_dir(run.cfg.get("runs_dir", "runs"), run.task)
    else:
        made = str(new_run_dir(run.cfg.get("runs_dir", "runs"), run.task)) if run.is_main else None
        run.run_dir = Path(run.dist.broadcast_object(made))
    if run.resume is None:
        run.run_id = f"{run.task}__{run.settings.algo.name}__s{run.seed}__{run.run_dir.name}"


def write_config(run: Run) -> None:
    """``config.yaml`` in the run directory (``config_resumed.yaml`` on a resume; rank 0 only)."""
    if run.is_main:
        name = "config.yaml" if run.resume is None else "config_resumed.yaml"
        with open(run.run_dir / name, "w") as f:
            yaml.safe_dump(run.cfg, f, sort_keys=False)
