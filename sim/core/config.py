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
        if dataclasses.is_dataclass(current) and isinstance(val, Mapping):
            changes[key] = build_config(type(current), val, base=current)
        elif isinstance(val, list):
            changes[key] = tuple(val)
        else:
            changes[key] = _coerce(val, hints.get(key), key, cls.__name__)
    return dataclasses.replace(base, **changes)


def _coerce(val: Any, hint: Any, key: str, owner: str) -> Any:
    """Light type check: ints are accepted for floats, bools must be bools."""
    if hint is float and isinstance(val, int) and not isinstance(val, bool):
        return float(val)
    if hint in (int, float, bool, str) and not isinstance(val, hint):
        raise ValueError(f"{owner}.{key} expects {hint.__name__}, got {val!r}")
    return val


def resolve_device(device: str | torch.device | None) -> torch.device:
    """``"auto"``/None -> cuda when present, else cpu; anything else as given."""
    if device is None or str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)
