"""Task registry: ``sim.make("cable_load", num_envs=4096, device="cpu", seed=0, **overrides)``.

The table of built-in tasks is :data:`sim.tasks.TASKS`, one line per task: name ->
``"module:Class"``. Nothing is imported until a task is made (or its class is asked for), so
importing ``sim`` stays cheap and a broken task module breaks only that task. Everything the
generic layers need about a task is reached through its class (:func:`task_class`): the config
dataclass (``cfg_class``), ``best_metric``, ``success_criteria``, ``evaluation_overrides()``,
``renderer``, ``match_teams()`` (see :class:`sim.core.env.MultiAgentEnv`).

Tasks outside this repository add themselves with :func:`register` (``"module:Class"`` too).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sim.core.config import build_config, to_plain

if TYPE_CHECKING:
    from sim.core.env import MultiAgentEnv, Scenario

_TARGET = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_EXTRA: dict[str, str] = {}  # tasks registered at run time (register()), beside sim.tasks.TASKS
_LOADED: dict[str, type] = {}
# Task config keys that were execution switches, now make()'s ``kernels`` and the env's own choice of layout. A
# stored config (a checkpoint's or an ONNX file's task_cfg) may hold them: make() maps "cpu_kernels" onto
# ``kernels`` and drops "layout" (the env picks it by the rule "auto" was: sim.physics.components.choose_layout).
# A new override of one is refused, naming what replaced it (the value here).
RETIRED_TASK_KEYS = {
    "cpu_kernels": "now sim.kernels (evaluate.py: kernels=)",
    "layout": "the env chooses it: components when compiled or from 1024 envs (sim.physics.components.choose_layout)",
}


def _table() -> dict[str, str]:
    from sim.tasks import TASKS  # the table only: sim.tasks imports no task module

    return {**TASKS, **_EXTRA}


def register(name: str, target: str) -> None:
    """Add a task at run time: ``name`` -> ``"module:Class"`` (imported when first made).

    Raises:
        ValueError: the name is taken or the target is not ``"module:Class"``.
    """
    if not _TARGET.match(target):
        raise ValueError(f"task {name!r}: target must be 'module:Class', got {target!r}")
    if name in _table():
        raise ValueError(f"task {name!r} is registered twice")
    _EXTRA[name] = target


def registered_tasks() -> list[str]:
    """Every task name, sorted; imports no task module."""
    return sorted(_table())


def task_target(name: str) -> str:
    """The ``"module:Class"`` string of task ``name`` (no import)."""
    table = _table()
    if name not in table:
        raise ValueError(f"unknown task {name!r}; registered tasks: {sorted(table)}")
    return table[name]


def task_class(name: str) -> type[MultiAgentEnv]:
    """The env class of task ``name``, importing only its module.

    Raises:
        ValueError: unknown name, or the task's module cannot be imported (one line naming the
            task and the error; the original exception is chained).
    """
    if name in _LOADED:
        return _LOADED[name]
    target = task_target(name)
    module_name, _, cls_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # any failure while importing a task module breaks only that task
        raise ValueError(f"task {name!r} cannot be loaded from {module_name}: {type(err).__name__}: {err}") from err
    cls = getattr(module, cls_name, None)
    if not isinstance(cls, type):
        raise ValueError(f"task {name!r}: {module_name} has no class {cls_name!r}")
    own = cls.__dict__.get("task_name")
    if own != name:
        raise ValueError(f"task {name!r}: {target} must declare task_name = {name!r} (it has {own!r})")
    _LOADED[name] = cls
    return cls


def make(
    task: str | Mapping[str, Any],
    num_envs: int | None = None,
    device: str | None = None,
    seed: int | None = None,
    compile: bool | None = None,
    kernels: str | None = None,
    engine: str = "covey",
    **overrides: Any,
) -> MultiAgentEnv:
    """Build a registered task.

    Args:
        task: a task name, or a config node (dict / hydra ``DictConfig``) with a ``name`` key and
            config fields; ``num_envs``, ``device``, ``seed``, ``compile`` and ``kernels`` may also sit in the node
            (a stored node's ``cpu_kernels`` is read as ``kernels``, its ``layout`` dropped: :data:`RETIRED_TASK_KEYS`).
        num_envs, device, seed, compile, kernels: explicit arguments win over the node's values. Defaults 1,
            "cpu", 0, False, "auto"; ``device="auto"`` picks cuda when present; ``compile`` runs the
            control/physics loop through ``torch.compile`` (slow first step, much faster after); ``kernels``
            (:data:`sim.core.native.KERNELS`) how a CPU steps a task that has C kernels: "auto" through them
            wherever they run, "native" always, "torch" its torch code. A task without C kernels runs its torch
            code ("native" is an error there).
        engine: what steps the bodies: "covey" (its own physics) or another engine the task declares in its env
            class's ``engines`` (:func:`sim.core.backend.use_engine`), e.g. "mujoco" for a sim-to-sim check.
        **overrides: config fields, nested dataclasses as dicts or dotted keys.

    Raises:
        ValueError: unknown task name or config key, a retired key among ``overrides``, a task module that fails
            to import, ``kernels`` unknown or "native" where the C kernels cannot run, or an engine the task lacks.
    """
    from sim.core.backend import use_engine
    from sim.core.native import check_kernels

    if isinstance(task, str):
        name, node = task, {}
    else:
        node = dict(to_plain(task))
        if "name" not in node:
            raise ValueError("a task config node needs a 'name' key naming the task")
        name = node.pop("name")
    retired = sorted(RETIRED_TASK_KEYS.keys() & overrides.keys())
    if retired:
        raise ValueError(f"task.{retired[0]} is no setting any more: {RETIRED_TASK_KEYS[retired[0]]}")
    env_cls = task_class(name)
    num_envs = num_envs if num_envs is not None else node.pop("num_envs", 1)
    device = device if device is not None else node.pop("device", "cpu")
    seed = seed if seed is not None else node.pop("seed", 0)
    compile = compile if compile is not None else node.pop("compile", False)
    node.pop("layout", None)
    stored = node.pop("kernels", node.pop("cpu_kernels", "auto"))
    kernels = check_kernels(kernels if kernels is not None else stored)
    for key in ("num_envs", "device", "seed", "compile"):
        node.pop(key, None)
    if env_cls.cfg_class is None:
        raise ValueError(f"task {name!r}: {env_cls.__name__} declares no cfg_class")
    cfg = build_config(env_cls.cfg_class, {**node, **overrides}, where="task")  # errors name task.<key>
    execution: dict[str, Any] = {"compile": bool(compile)}
    if env_cls.has_native_kernels(cfg):
        execution["kernels"] = kernels
    elif kernels == "native":
        raise ValueError(f"{name}: kernels='native' cannot run here: the task, as configured, has no C kernels")
    env = env_cls(cfg, num_envs=int(num_envs), device=device, seed=int(seed), **execution)
    use_engine(env, engine)
    return env


def evaluation_overrides(task: str) -> dict[str, Any]:
    """The task's ``evaluation_overrides()`` (noise and randomisation off); ``{}`` if it defines none."""
    return task_class(task).evaluation_overrides()


def scenario(task: str, name: str) -> Scenario:
    """The task's named evaluation case ``name`` (its env class's ``scenarios()``).

    Raises:
        ValueError: the task has no such scenario (the message lists the known ones).
    """
    known = task_class(task).scenarios()
    if name not in known:
        raise ValueError(f"task {task!r} has no scenario {name!r}; known: {sorted(known) or 'none'}")
    return known[name]


def apply_scenario(task_cfg: Mapping[str, Any], name: str) -> dict[str, Any]:
    """``task_cfg`` (with its ``name``) with the overrides of the task's scenario ``name`` merged over it:
    the one way ``evaluate.py``, ``export.py`` and the sim bridge turn a trained config into a named case.

    Raises:
        ValueError: the task has no such scenario (the message lists the known ones).
    """
    from sim.core.config import deep_merge

    return deep_merge(dict(task_cfg), scenario(task_cfg["name"], name).overrides)
