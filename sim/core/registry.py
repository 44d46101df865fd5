"""Task registry: ``sim.make("cable_load", num_envs=4096, device="cpu", seed=0, **overrides)``."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from sim.core.config import build_config, to_plain

_TASKS: dict[str, tuple[type, type]] = {}


def register(name: str, cfg_cls: type) -> Callable[[type], type]:
    """Class decorator registering a task class with its config dataclass under ``name``."""

    def wrap(env_cls: type) -> type:
        if name in _TASKS:
            raise ValueError(f"task {name!r} is registered twice")
        _TASKS[name] = (env_cls, cfg_cls)
        env_cls.task_name = name
        return env_cls

    return wrap


def registered_tasks() -> list[str]:
    _import_builtin_tasks()
    return sorted(_TASKS)


def make(
    task: str | Mapping[str, Any],
    num_envs: int | None = None,
    device: str | None = None,
    seed: int | None = None,
    compile: bool | None = None,
    **overrides: Any,
):
    """Build a registered task.

    Args:
        task: a task name, or a config node (dict / hydra ``DictConfig``) with a ``name`` key and
            config fields; ``num_envs``, ``device`` and ``seed`` may also sit in the node.
        num_envs, device, seed, compile: explicit arguments win over the node's values. Defaults 1,
            "cpu", 0, False; ``device="auto"`` picks cuda when present; ``compile`` runs the
            control/physics loop through ``torch.compile`` (slow first step, much faster after).
        **overrides: config fields, nested dataclasses as dicts or dotted keys.

    Raises:
        ValueError: unknown task name or config key.
    """
    _import_builtin_tasks()
    if isinstance(task, str):
        name, node = task, {}
    else:
        node = dict(to_plain(task))
        if "name" not in node:
            raise ValueError("a task config node needs a 'name' key naming the task")
        name = node.pop("name")
    if name not in _TASKS:
        raise ValueError(f"unknown task {name!r}; registered tasks: {sorted(_TASKS)}")
    num_envs = num_envs if num_envs is not None else node.pop("num_envs", 1)
    device = device if device is not None else node.pop("device", "cpu")
    seed = seed if seed is not None else node.pop("seed", 0)
    compile = compile if compile is not None else node.pop("compile", False)
    for key in ("num_envs", "device", "seed", "compile"):
        node.pop(key, None)
    env_cls, cfg_cls = _TASKS[name]
    cfg = build_config(cfg_cls, {**node, **overrides})
    return env_cls(cfg, num_envs=int(num_envs), device=device, seed=int(seed), compile=bool(compile))


def evaluation_overrides(task: str) -> dict[str, Any]:
    """The task's ``evaluation_overrides()`` (noise and randomisation off); ``{}`` if it defines none."""
    _import_builtin_tasks()
    if task not in _TASKS:
        raise ValueError(f"unknown task {task!r}; registered tasks: {sorted(_TASKS)}")
    module = importlib.import_module(_TASKS[task][0].__module__.rsplit(".", 1)[0])
    fn = getattr(module, "evaluation_overrides", None)
    return fn() if callable(fn) else {}


def _import_builtin_tasks() -> None:
    # Importing the package registers every built-in task.
    import sim.tasks  # noqa: F401
