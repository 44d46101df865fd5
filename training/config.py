"""The one typed configuration of the entry points: the config dataclasses as hydra structured configs.

The dataclasses hold every field and its default; the yaml files under ``configs/`` only override
them (or pick variants). Importing this module registers with hydra's ``ConfigStore``:

    covey_schema        :class:`CoveyCfg`, the root (configs/config.yaml lists it first)
    task/<name>         one node per registered task: its ``cfg_class`` plus ``name`` (no yaml
                        file needed: ``task=<name>`` works for every task in ``sim.tasks.TASKS``),
                        and its training recipe, ``configs/recipe/<name>.yaml`` (:func:`with_recipe`)

so ``python train.py --cfg job`` shows every field, a misspelt key fails while hydra composes,
and :func:`check_config` then builds every node's dataclass (types, bounds, ``__post_init__``).
It lives in ``training/`` because the root's nodes are training's settings and task configs
(``sim`` must not import ``training``; ``policies`` must not import ``sim``). The nodes' dataclasses
are in :mod:`training.settings`; neither module imports a runner or an algorithm, so the runners may
import this one (``runner.py`` does, for :func:`sim_compile`).

One parser for the three entry points: train.py gets its arguments from hydra (overrides in
hydra's grammar); evaluate.py and export.py describe theirs as a dataclass and read them with
:func:`parse_args` (the same grammar, the same checks). Every user error is a
:class:`~sim.core.config.ConfigError`, printed by :func:`exit_on_user_error` as one line.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

# The scripts' key=value parsing and one-line errors, re-exported for evaluate.py and export.py.
from covey_common.cli import exit_on_user_error, usage  # noqa: F401
from sim.core.cli import one_line, parse_args  # noqa: F401
from sim.core.config import ConfigError, at_least, build_config, non_negative, to_plain
from sim.core.native import check_kernels
from sim.core.registry import RETIRED_TASK_KEYS, registered_tasks, task_class
from training.settings import (
    CoSelfPlayCfg,
    ImitationCfg,
    PipelineCfg,
    PPOCfg,
    SACCfg,
    SelfPlayCfg,
    TrainCfg,
    WandbCfg,
)

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
RUNNERS = ("ppo", "selfplay", "coselfplay", "sac", "pipeline")


@dataclass(frozen=True)
class SimCfg:
    """How the simulation executes, for every task (hydra node ``sim``): its two switches. The env chooses the rest
    (its control loop's memory layout, sim.physics.components.choose_layout; resets by index)."""

    # torch.compile the control/physics loop: "true", "false", or "auto" = where the task measured that it pays
    # (its env class's auto_compile_min_steps, e.g. cable_load on cuda); see sim_compile().
    compile: str = "auto"
    # How a CPU steps a task that has C kernels (cable_load; drone_volleyball's matches), sim.core.native.KERNELS:
    # "auto" through them wherever they run (CPU tensors, a C compiler), "native" always (an error where they cannot
    # run), "torch" the torch code (the reference, what a GPU runs). Tasks without C kernels run their torch code.
    kernels: str = "auto"

    def __post_init__(self) -> None:
        check_kernels(self.kernels)


# Keys that were execution switches: an override of one fails, saying what took its place. (A stored task config
# that holds one still loads: sim.core.registry.make maps it.)
RETIRED_KEYS = {f"task.{key}": place for key, place in RETIRED_TASK_KEYS.items()} | {
    "sim.masked_resets": "envs reset by index (code that captures CUDA graphs sets env.masked_resets)"
}


# Where compiled code is cached across runs (torch's FX graph cache): a cable_load compile takes ~140 s the first
# time on the 2-core CPU and ~10 s with the cache. TORCHINDUCTOR_CACHE_DIR, when set, wins.
COMPILE_CACHE = Path.home() / ".cache" / "covey" / "torchinductor"


def cpu_compiler_available() -> bool:
    """Whether torch.compile's CPU backend finds a C++ compiler (it builds its kernels with one)."""
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler

        get_cpp_compiler()
    except Exception:  # InvalidCxxCompiler, or an inductor that moved it: compiling would fail the same way
        return False
    return True


def sim_compile(value: object, device: torch.device, env_cls: type, total_steps: int = 0) -> tuple[bool, str]:
    """``(compile, why)`` for ``sim.compile`` (``"auto"``/``"true"``/``"false"`` or a bool) on ``device``.

    ``auto`` compiles where the task says compiling pays: on the device types of
    ``env_cls.auto_compile_min_steps``, for runs of at least that many ``total_steps``. Measured for cable_load
    (benchmarks/README.md): an H200 steps 6.7x (4096 envs) and 4.1x (65,536) faster compiled; on a CPU its C
    kernels step as fast uncompiled, so it compiles on a GPU only.
    A compiled run keeps torch's compile cache in :data:`COMPILE_CACHE` (so the warm-up is paid once per machine).
    """
    text = str(value).lower()
    if text not in ("auto", "true", "false"):
        raise ConfigError("sim.compile", f"must be auto, true or false, got {value!r}")
    if text == "auto":
        least = env_cls.auto_compile_min_steps.get(device.type)
        on = least is not None and total_steps >= least
        why = f"auto: {'compiled' if on else 'eager'} for this task on {device.type}"
        if least:
            why += f" ({total_steps:,} train steps, compiled from {least:,})"
    else:
        on, why = text == "true", "sim.compile"
    if on:
        # Before anything of inductor runs: it fixes its cache folder (/tmp by default) the first time it needs it.
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(COMPILE_CACHE))
        if text == "auto" and device.type == "cpu" and not cpu_compiler_available():
            return False, "auto: eager, no C++ compiler for torch.compile on this CPU (install g++ to compile)"
        why += f"; cache {os.environ['TORCHINDUCTOR_CACHE_DIR']}"
    return on, why


@dataclass(frozen=True)
class CoveyCfg:
    """The root config of ``train.py``: top-level keys and one node per group of settings.

    ``task`` is the node of the task chosen with ``task=<name>`` (ConfigStore group ``task``): that
    task's config dataclass plus ``name``.
    """

    seed: int = 0
    num_envs: int = at_least(1, 1024)  # parallel environments
    device: str = "auto"  # auto = cuda when present, else cpu
    # torch.set_num_threads; 0 = training.threads' default (CPU: the cores minus one and minus the machine's
    # current load, at least 1: 2 threads collapse 5-100x when another process wants a core; GPU: torch's)
    torch_threads: int = non_negative(0)
    # The PPO update's threads: 0 = torch_threads, fixed (a run repeats bit for bit, and a resume continues it
    # exactly); N = always N; -1 = timed on a CPU in runs of 20 iterations or more (torch_threads against all of
    # this process's cores, the faster kept, the other re-tried after 10 updates, then after 20 while it loses,
    # never in the last 5: training.threads.ThreadTuner): 2 threads update 1.6x faster on an idle 2-core
    # machine, 1.3x slower beside another busy process, and 1 and 2 threads round differently, so such a run
    # does not repeat bit for bit. Rollouts keep torch_threads.
    update_threads: int = at_least(-1, 0)
    runs_dir: str = "runs"  # runs land in <runs_dir>/<task>/<YYYY-mm-dd_HH-MM-SS>/
    resume: str | None = None  # a run directory (or checkpoint file) to continue
    # Start the networks from a checkpoint's weights (its groups, same dimensions; fresh optimizer and run):
    # fine-tuning, e.g. RL from pixels starting from a DAgger-distilled student.
    init_from: str | None = None
    # ppo (training/runner.py) | selfplay (training/selfplay_runner.py; also algo=selfplay) |
    # coselfplay (training/coselfplay.py) | sac (training/sac_runner.py; also algo=sac) |
    # pipeline (training/pipeline.py: the stages of pipeline.stages, each with its own runner)
    runner: str = "ppo"
    # Data-parallel PPO over the processes torchrun starts (training/distributed.py):
    # torchrun --nproc_per_node=N train.py task=... distributed=true; num_envs is per process.
    distributed: bool = False
    task: Any = None
    algo: PPOCfg = field(default_factory=PPOCfg)
    sim: SimCfg = field(default_factory=SimCfg)
    train: TrainCfg = field(default_factory=TrainCfg)
    imitation: ImitationCfg = field(default_factory=ImitationCfg)  # DAgger warm start before PPO
    league: SelfPlayCfg = field(default_factory=SelfPlayCfg)  # self-play (algo=selfplay, stage=strategy)
    coselfplay: CoSelfPlayCfg = field(default_factory=CoSelfPlayCfg)  # HCSP stage 3 (stage=coselfplay)
    sac: SACCfg = field(default_factory=SACCfg)  # SAC's own settings (algo=sac; training/sac.py)
    pipeline: PipelineCfg = field(default_factory=PipelineCfg)  # a recipe's stages in turn (runner=pipeline)
    wandb: WandbCfg = field(default_factory=WandbCfg)

    def __post_init__(self) -> None:
        if self.runner not in RUNNERS:
            raise ValueError(f"runner must be one of {RUNNERS}, got {self.runner!r}")
        if self.device != "auto":
            try:
                torch.device(self.device)
            except RuntimeError:
                raise ValueError(f"device must be auto or a torch device (cpu, cuda:1), got {self.device!r}") from None


# ----------------------------------------------------------------------------- registration
BROKEN_TASKS: dict[str, str] = {}  # task name -> why its module could not be imported


def _writable(node: DictConfig) -> DictConfig:
    """Frozen dataclasses make read-only nodes, which hydra could not override: clear the flag."""
    OmegaConf.set_readonly(node, False)
    for child in node.values():
        if isinstance(child, DictConfig):
            _writable(child)
    return node


def task_node(name: str) -> DictConfig:
    """The structured config node of task ``name``: ``name`` plus every field of its ``cfg_class``.

    Raises:
        ValueError: unknown task, or its module cannot be imported.
    """
    cfg_class = task_class(name).cfg_class
    if cfg_class is None:
        raise ValueError(f"task {name!r} declares no cfg_class")
    schema = dataclasses.make_dataclass(
        cfg_class.__name__, [("name", str, field(default=name))], bases=(cfg_class,), frozen=True
    )
    return _writable(OmegaConf.structured(schema))


def recipe_path(name: str) -> Path:
    """Where task ``name``'s training recipe is: ``configs/recipe/<name>.yaml`` (it may not exist)."""
    return CONFIG_DIR / "recipe" / f"{name}.yaml"


def with_recipe(node: DictConfig, name: str) -> DictConfig:
    """``node`` (task ``name``'s) with a defaults list that brings the task's recipe, where it has one.

    The recipe is a ``# @package _global_`` config of the group ``recipe``: its ``override /algo: <algo>``
    and its values (envs, ``train.*`` ...) enter wherever ``task=<name>`` does. Through the task's node, not
    an interpolation in the root (``recipe: ${task}``), because hydra forbids group overrides (the recipe's
    algo) below an interpolated entry; command-line choices and values still win over it.
    """
    if not recipe_path(name).is_file():
        return node
    OmegaConf.set_struct(node, False)
    node["defaults"] = [{"/recipe": name}, "_self_"]
    OmegaConf.set_struct(node, True)
    return node


def register_configs() -> None:
    """Store the root schema and every registered task's node in hydra's ConfigStore (idempotent).

    A task whose module fails to import is left out (``BROKEN_TASKS`` says why); the others work.
    """
    cs = ConfigStore.instance()
    if "covey_schema.yaml" not in cs.repo:
        cs.store(name="covey_schema", node=_writable(OmegaConf.structured(CoveyCfg)))
    stored = cs.repo.get("task", {})
    for name in registered_tasks():
        if f"{name}.yaml" in stored or name in BROKEN_TASKS:
            continue
        try:
            cs.store(group="task", name=name, node=with_recipe(task_node(name), name))
        except ValueError as err:
            BROKEN_TASKS[name] = str(err)


register_configs()


# ----------------------------------------------------------------------------- compose and check
@contextmanager
def _hydra_errors_as_config_errors(overrides: Sequence[str]) -> Iterator[None]:
    try:
        yield
    except (HydraException, OmegaConfBaseException) as err:
        for item in overrides:  # a task whose module is broken: say why, not just "not found"
            key, _, val = item.lstrip("+~").partition("=")
            if key == "task" and val in BROKEN_TASKS:
                raise ConfigError("task", BROKEN_TASKS[val]) from None
            if key in RETIRED_KEYS:
                raise ConfigError(key, f"is no setting any more: {RETIRED_KEYS[key]}") from None
        raise ConfigError("", one_line(err)) from None


def compose(overrides: Sequence[str] = (), config_name: str = "config") -> DictConfig:
    """The config ``train.py`` would run with these overrides (hydra compose of ``configs/``).

    Raises:
        ConfigError: a malformed override, an unknown key or group option, a value of the wrong type.
    """
    register_configs()  # again: tasks registered (sim.core.registry.register) after this module's import
    with _hydra_errors_as_config_errors(overrides):
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
            return hydra_compose(config_name=config_name, overrides=list(overrides))


def check_config(cfg: Mapping[str, Any] | DictConfig) -> None:
    """Build every node of a composed config as its dataclass (the task's through the registry), so
    that a bad value fails before anything runs.

    Raises:
        ConfigError: naming the first bad key (``train.rollout_steps: must be >= 1, got 0``).
    """
    plain = dict(to_plain(cfg))
    task = dict(plain.pop("task", None) or {})
    if "name" not in task:
        raise ConfigError("task", "no task chosen: give task=<name>")
    name = task.pop("name")
    try:
        cfg_class = task_class(name).cfg_class
    except ValueError as err:
        raise ConfigError("task.name", str(err)) from None
    build_config(cfg_class, task, where="task")
    build_config(CoveyCfg, plain)
    check_sac(plain)


SAC_FROM_PPO = ("lr", "schedule", "gamma", "max_grad_norm")  # PPO's keys that SAC has of its own (sac.*)


def check_sac(plain: Mapping[str, Any]) -> None:
    """``algo=sac`` shows SAC's ``sac.lr``, ``sac.gamma`` ... in ``algo`` (configs/algo/sac.yaml): a
    different ``algo.lr`` there would do nothing, so it is refused, naming the key SAC reads.

    Raises:
        ConfigError: naming ``algo.<key>``.
    """
    algo, sac = plain.get("algo") or {}, plain.get("sac") or {}
    if algo.get("name") != "sac":
        return
    for key in SAC_FROM_PPO:
        if key in algo and key in sac and algo[key] != sac[key]:
            raise ConfigError(f"algo.{key}", f"SAC reads sac.{key}, not PPO's algo.{key}: give sac.{key}={algo[key]}")


def check_distributed(plain: Mapping[str, Any], kind: str) -> None:
    """What ``distributed=true`` supports: PPO runs (``runner=ppo``, not self-play, SAC or imitation)
    started by torchrun.

    Raises:
        ConfigError: naming ``distributed`` and why.
    """
    from training.distributed import launched_by_torchrun

    if kind != "ppo":
        raise ConfigError("distributed", f"data-parallel training supports the PPO runner only, not {kind!r}")
    if (plain.get("imitation") or {}).get("expert", "none") != "none":
        raise ConfigError("distributed", "imitation (DAgger) runs in one process: set imitation.expert=none")
    if not launched_by_torchrun():
        raise ConfigError(
            "distributed", "needs torchrun: torchrun --nproc_per_node=N train.py task=<name> distributed=true"
        )
