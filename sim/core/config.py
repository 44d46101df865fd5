"""Typed, read-only task configs built from dataclasses plus overrides.

Overrides come as keyword arguments, plain dicts or hydra/omegaconf nodes. Nested dataclass
fields take nested mappings or dotted keys (``"randomization.load_mass": (1.0, 2.0)``). Any key
that is not a field is an error naming the key and the valid choices, so a misspelt override
never silently does nothing.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

import torch

T = TypeVar("T")


def to_plain(obj: Any) -> Any:
    """omegaconf containers -> plain dicts/lists; anything else unchanged."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(obj, DictConfig | ListConfig):
            return OmegaConf.to_container(obj, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf is a core dependency
        pass
    return obj


def _nest_dotted(overrides: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, val in overrides.items():
        head, _, rest = key.partition(".")
        if rest:
            out.setdefault(head, {})
            if not isinstance(out[head], dict):
                raise ValueError(f"override {key!r} conflicts with a value for {head!r}")
            out[head][rest] = val
        else:
            if isinstance(out.get(head), dict) and isinstance(val, Mapping):
                out[head].update(val)
            else:
                out[head] = val
    return {k: _nest_dotted(v) if isinstance(v, dict) else v for k, v in out.items()}


def build_config(cls: type[T], overrides: Mapping[str, Any] | None = None, base: T | None = None) -> T:
    """Instantiate dataclass ``cls`` (from ``base`` if given) with ``overrides`` applied."""
    overrides = _nest_dotted(to_plain(dict(overrides or {})))
    base = base if base is not None else cls()
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        raise ValueError(f"unknown config key(s) {unknown} for {cls.__name__}; valid keys: {sorted(fields)}")
    hints = typing.get_type_hints(cls)
    changes = {}
    for key, val in overrides.items():
        current = getattr(base, key)
        where = f"{cls.__name__}.{key}"
        if dataclasses.is_dataclass(current):
            if not isinstance(val, Mapping):
                raise ValueError(f"{where} is a group of settings; give a mapping, got {val!r}")
            changes[key] = build_config(type(current), val, base=current)
        else:
            changes[key] = _coerce(val, hints.get(key), where)
    return dataclasses.replace(base, **changes)


def _coerce(val: Any, hint: Any, where: str) -> Any:
    """Check ``val`` against a field's type hint: scalars, and tuples (fixed length or ``...``)."""
    if hint is bool:
        if not isinstance(val, bool):
            raise ValueError(f"{where} expects a bool, got {val!r}")
        return val
    if hint is int:
        if isinstance(val, bool) or not isinstance(val, int):
            raise ValueError(f"{where} expects an int, got {val!r}")
        return val
    if hint is float:
        if isinstance(val, bool) or not isinstance(val, int | float):
            raise ValueError(f"{where} expects a float, got {val!r}")
        return float(val)
    if hint is str:
        if not isinstance(val, str):
            raise ValueError(f"{where} expects a str, got {val!r}")
        return val
    if typing.get_origin(hint) is tuple:
        if not isinstance(val, list | tuple):
            raise ValueError(f"{where} expects a sequence {hint}, got {val!r}")
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(v, args[0], f"{where}[{i}]") for i, v in enumerate(val))
        if len(val) != len(args):
            raise ValueError(f"{where} expects {len(args)} values, got {len(val)}: {val!r}")
        return tuple(_coerce(v, t, f"{where}[{i}]") for i, (v, t) in enumerate(zip(val, args, strict=True)))
    return val


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Recursively merge ``over`` into a copy of ``base`` (nested mappings merge, other values replace)."""
    out = {k: deep_merge(v, {}) if isinstance(v, Mapping) else v for k, v in base.items()}
    for key, val in over.items():
        if isinstance(val, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], val)
        else:
            out[key] = deep_merge(val, {}) if isinstance(val, Mapping) else val
    return out


def resolve_device(device: str | torch.device | None) -> torch.device:
    """``"auto"``/None -> cuda when present, else cpu; anything else as given."""
    if device is None or str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)
