"""Typed, read-only configs built from dataclasses plus overrides.

Overrides come as keyword arguments, plain dicts or hydra/omegaconf nodes. Nested dataclass
fields take nested mappings or dotted keys (``"randomization.load_mass": (1.0, 2.0)``). Any key
that is not a field is an error naming the key and the valid choices, so a misspelt override
never silently does nothing.

Impossible values are declared next to the field they bound, as field metadata::

    control_dt: float = positive(0.01)              # > 0
    decimation: int = at_least(1, 3)                # >= 1
    probability: float = fraction(1.0)              # in [0, 1]
    load_mass: tuple[float, float] = positive((1.2, 1.6), ordered=True)   # each > 0, low <= high

and :func:`build_config` checks them (with every ``__post_init__``) whenever it builds a config;
every failure is a :class:`ConfigError` whose message starts with the dotted key
(``task.control_dt: must be > 0, got -0.01``).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

import torch

from covey_common.cli import UserError

T = TypeVar("T")


class ConfigError(UserError):
    """A user error in a config. ``key`` is the dotted path of the offending key (``task.control_dt``),
    or of the node when the error concerns several keys; ``str(err)`` is one line: ``"<key>: <reason>"``."""

    def __init__(self, key: str, reason: str) -> None:
        self.key, self.reason = key, reason
        super().__init__(f"{key}: {reason}" if key else reason)


def bounded(
    default: Any,
    *,
    gt: float | None = None,
    ge: float | None = None,
    le: float | None = None,
    ordered: bool = False,
) -> Any:
    """A dataclass field with bounds that :func:`build_config` checks: ``value > gt``, ``>= ge``,
    ``<= le`` (for a tuple: every element); ``ordered``: a tuple is non-decreasing (a ``(low, high)``
    range). ``default`` must be immutable (scalars, tuples)."""
    bounds = {k: v for k, v in (("gt", gt), ("ge", ge), ("le", le)) if v is not None}
    return dataclasses.field(default=default, metadata={"bounds": bounds, "ordered": ordered})


def positive(default: Any, *, ordered: bool = False) -> Any:
    """A field whose value (every element of a tuple) must be > 0: times, lengths, masses, gains' scales."""
    return bounded(default, gt=0.0, ordered=ordered)


def non_negative(default: Any, *, ordered: bool = False) -> Any:
    """A field whose value (every element of a tuple) must be >= 0."""
    return bounded(default, ge=0.0, ordered=ordered)


def at_least(low: float, default: Any, *, ordered: bool = False) -> Any:
    """A field whose value (every element of a tuple) must be >= ``low`` (counts: ``at_least(1, 3)``)."""
    return bounded(default, ge=low, ordered=ordered)


def fraction(default: Any, *, ordered: bool = False) -> Any:
    """A probability or share: in [0, 1] (every element of a tuple)."""
    return bounded(default, ge=0.0, le=1.0, ordered=ordered)


def check_bounds(cfg: Any, where: str = "") -> None:
    """Check the bounds declared by :func:`bounded` on ``cfg``'s own fields (not nested configs).

    Raises:
        ConfigError: naming ``<where>.<field>``.
    """
    for f in dataclasses.fields(cfg):
        bounds = f.metadata.get("bounds")
        if bounds is None:
            continue
        val = getattr(cfg, f.name)
        items = val if isinstance(val, tuple | list) else (val,)
        key = _join(where, f.name)
        for x in items:
            if x is None or isinstance(x, bool) or not isinstance(x, int | float):
                continue
            if "gt" in bounds and not x > bounds["gt"]:
                raise ConfigError(key, f"must be > {bounds['gt']:g}, got {val!r}")
            if "ge" in bounds and not x >= bounds["ge"]:
                raise ConfigError(key, f"must be >= {bounds['ge']:g}, got {val!r}")
            if "le" in bounds and not x <= bounds["le"]:
                raise ConfigError(key, f"must be <= {bounds['le']:g}, got {val!r}")
        if f.metadata.get("ordered") and any(a > b for a, b in zip(items, items[1:], strict=False)):
            raise ConfigError(key, f"a (low, high) range needs low <= high, got {val!r}")


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def to_plain(obj: Any) -> Any:
    """omegaconf containers -> plain dicts/lists; anything else unchanged."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(obj, DictConfig | ListConfig):
            return OmegaConf.to_container(obj, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf is a core dependency
        pass
    return obj


def _nest_dotted(overrides: Mapping[str, Any], where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, val in overrides.items():
        head, _, rest = key.partition(".")
        if rest:
            out.setdefault(head, {})
            if not isinstance(out[head], dict):
                raise ConfigError(_join(where, key), f"conflicts with a value for {_join(where, head)}")
            out[head][rest] = val
        else:
            if isinstance(out.get(head), dict) and isinstance(val, Mapping):
                out[head].update(val)
            else:
                out[head] = val
    return {k: _nest_dotted(v, _join(where, k)) if isinstance(v, dict) else v for k, v in out.items()}


def build_config(cls: type[T], overrides: Mapping[str, Any] | None = None, base: T | None = None, where: str = "") -> T:
    """Instantiate dataclass ``cls`` (from ``base`` if given) with ``overrides`` applied, then check it.

    Args:
        cls: a (frozen) config dataclass; nested dataclass fields take nested mappings.
        overrides: field values; lists become tuples where the field is a tuple.
        base: the instance to start from (default ``cls()``).
        where: the node's dotted path for messages (``"task"`` -> ``task.control_dt: ...``).

    Raises:
        ConfigError: an unknown key, a value of the wrong type, a value out of its declared bounds,
            or a ``__post_init__`` check; the message names the key.
    """
    overrides = _nest_dotted(dict(to_plain(overrides or {})), where)
    base = base if base is not None else cls()
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        raise ConfigError(_join(where, unknown[0]), f"unknown key of {cls.__name__}; valid keys: {sorted(fields)}")
    hints = typing.get_type_hints(cls)
    changes = {}
    for key, val in overrides.items():
        current = getattr(base, key)
        path = _join(where, key)
        if dataclasses.is_dataclass(current):
            if not isinstance(val, Mapping):
                raise ConfigError(path, f"is a group of settings; give a mapping, got {val!r}")
            changes[key] = build_config(type(current), val, base=current, where=path)
        else:
            changes[key] = _coerce(val, hints.get(key), path)
    try:
        cfg = dataclasses.replace(base, **changes)
    except ConfigError:
        raise
    except ValueError as err:  # a __post_init__ check: its message names the field
        msg = str(err)
        raise ConfigError("" if not where or msg.startswith(f"{where}.") else where, msg) from None
    check_bounds(cfg, where)
    return cfg


def _coerce(val: Any, hint: Any, where: str) -> Any:
    """Check ``val`` against a field's type hint: scalars, and tuples (fixed length or ``...``)."""
    if hint is bool:
        if not isinstance(val, bool):
            raise ConfigError(where, f"expects a bool, got {val!r}")
        return val
    if hint is int:
        if isinstance(val, bool) or not isinstance(val, int):
            raise ConfigError(where, f"expects an int, got {val!r}")
        return val
    if hint is float:
        if isinstance(val, bool) or not isinstance(val, int | float):
            raise ConfigError(where, f"expects a float, got {val!r}")
        return float(val)
    if hint is str:
        if not isinstance(val, str):
            raise ConfigError(where, f"expects a str, got {val!r}")
        return val
    if typing.get_origin(hint) is tuple:
        if not isinstance(val, list | tuple):
            raise ConfigError(where, f"expects a sequence {hint}, got {val!r}")
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(v, args[0], f"{where}[{i}]") for i, v in enumerate(val))
        if len(val) != len(args):
            raise ConfigError(where, f"expects {len(args)} values, got {len(val)}: {val!r}")
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
