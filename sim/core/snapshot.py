"""An env's whole mutable state as ``{attribute path: value}`` (exact training resumes), found by reflection.

:func:`state_snapshot` walks the env's attributes through dicts, lists, tuples and plain covey objects and keeps
every tensor, numpy array, generator state and Python scalar; :func:`load_state_snapshot` writes such a mapping
back in place, with :func:`set_path` resolving paths like ``indi.prev_vel`` or ``_ep_terms['position']``.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import re
from typing import Any

import torch
from torch import Tensor

# Attributes of the base class that are configuration, not state, and the packages whose plain objects (physics
# state containers) the snapshot walks into.
SKIP = frozenset(
    {
        "cfg",
        "spec",
        "device",
        "backend",
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
MODULES = frozenset({"sim", "policies", "training"})
# Networks (frozen opponents, skills), constants, classes and partials: not episode state.
CONSTANTS = (torch.nn.Module, type, torch.device, torch.dtype, functools.partial)


def is_expanded(t: Tensor) -> bool:
    """Whether ``t`` is a broadcast view (a dimension of size > 1 with stride 0, as ``expand`` makes): several of
    its elements share one memory location, so it cannot be written into element by element."""
    return any(stride == 0 and size > 1 for stride, size in zip(t.stride(), t.shape, strict=True))


def empty_instance(class_path: str) -> Any:
    """An uninitialised instance of ``"module:QualName"`` (a covey class only), for a snapshot restore."""
    module_name, _, qualname = class_path.partition(":")
    if module_name.split(".")[0] not in MODULES:
        raise ValueError(f"a snapshot may only rebuild covey classes, got {class_path!r}")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj.__new__(obj)


def state_snapshot(root: Any) -> dict[str, Any] | str:
    """``root``'s whole mutable state, ``{attribute path: tensor or scalar}``, or a one-line reason string when
    some state is of a kind it cannot copy (e.g. a MuJoCo data object). See the module docstring."""
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
            isinstance(value, CONSTANTS)
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
        elif hasattr(value, "__dict__") and type(value).__module__.split(".")[0] in MODULES:
            seen.add(id(value))
            # Its class, so that a restore can rebuild it where the fresh env has None (per-step records).
            out[path + "#class"] = f"{type(value).__module__}:{type(value).__qualname__}"
            for key, item in vars(value).items():
                walk(item, f"{path}.{key}", depth + 1)
        else:
            problems.append(f"{path} ({type(value).__module__}.{type(value).__name__})")

    for key, value in vars(root).items():
        if key not in SKIP:
            walk(value, key, 0)
    if problems:
        return f"state of a kind a checkpoint cannot copy: {', '.join(problems[:3])}"
    return out


def load_state_snapshot(root: Any, snapshot: dict[str, Any]) -> str | None:
    """Restore :func:`state_snapshot` into ``root`` in place; returns None, or a one-line reason it cannot (then
    nothing was changed: the env must be reset by the caller)."""
    current = state_snapshot(root)
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
                    set_path(root, path.removesuffix("#class"), empty_instance(value))
                continue
            if isinstance(now, Tensor) and "#" not in path:
                if is_expanded(now):  # an expanded view cannot be written into: replaced by a copy
                    set_path(root, path, value.to(now.device).clone())
                else:
                    now.copy_(value.to(now.device))
            elif path not in current:  # e.g. a lazily created per-term buffer: added as saved
                set_path(root, path, value.clone() if isinstance(value, Tensor) else value)
            elif "#" in path or now != value:
                set_path(root, path, value)
    except (AttributeError, KeyError, IndexError, TypeError, RuntimeError, ValueError) as exc:
        raise RuntimeError(f"restoring the env state failed half-way ({path}: {exc}); reset the env") from exc
    return None


def set_path(root: Any, path: str, value: Any) -> None:
    """Set the snapshot entry ``path`` (``a.b['k'][0]#kind``) under ``root`` to ``value``."""
    path, _, kind = path.partition("#")
    parts = re.findall(r"\.?(\w+)|\[([^\]]+)\]", path)
    obj: Any = root
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
