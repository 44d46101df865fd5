"""Typed ``key=value`` command lines for the scripts (``evaluate.py``, ``export.py``, ``sim/render/nerf/*``): hydra's
override grammar into an arguments dataclass, checked as configs are (:func:`sim.core.config.build_config`).

The one-line error reporting itself is :func:`covey_common.cli.exit_on_user_error`, re-exported here.
"""

from __future__ import annotations

import typing
from collections.abc import Sequence
from typing import Any, TypeVar

from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from covey_common.cli import exit_on_user_error, usage
from sim.core.config import ConfigError, build_config

__all__ = ["exit_on_user_error", "one_line", "parse_args", "usage"]

T = TypeVar("T")


def one_line(err: BaseException) -> str:
    """A hydra / omegaconf error as one line: its message and its cause's first line (without hydra's
    search path, and without its hint to add a key with ``+``: check_config would reject the key)."""
    text = str(err).split("Config search path:")[0]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    parts = [" ".join(line for line in lines if not line.startswith("To append to your config use"))]
    cause = err.__cause__
    if isinstance(cause, OmegaConfBaseException | HydraException):
        first = next((line.strip() for line in str(cause).splitlines() if line.strip()), "")
        if first and first not in parts[0]:
            parts.append(first)
    return ": ".join(p.rstrip(".") for p in parts if p)


def parse_args(cls: type[T], argv: Sequence[str], prefixes: Sequence[str] = ()) -> tuple[T, dict[str, dict]]:
    """``key=value`` arguments -> an instance of the arguments dataclass ``cls``, plus the nested values
    given under each of ``prefixes`` (``task.fault.enabled=true`` -> ``{"task": {"fault": {"enabled": True}}}``),
    which the caller checks against their own config.

    Values follow hydra's override grammar, as on train.py's command line (``1e-3``, ``true``,
    ``null``, ``[1,2]``, quotes); a field of type ``str`` takes the text after ``=`` verbatim (paths,
    ``match=scripted,hover``). The instance is built with :func:`sim.core.config.build_config`, so
    field bounds and ``__post_init__`` checks apply.

    Raises:
        ConfigError: a malformed argument, an unknown or repeated key, a value of the wrong type or out
            of bounds; the message names the key.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    nested: dict[str, dict] = {p: {} for p in prefixes}
    seen: set[str] = set()
    for item in argv:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError("", f"expected key=value, got {item!r}")
        if key in seen:
            raise ConfigError(key, "given twice")
        seen.add(key)
        head, _, rest = key.partition(".")
        if head in nested and rest:
            _put(nested[head], rest.split("."), _parse_value(parser, key, raw))
        elif key in hints and _is_str(hints[key]):
            values[key] = None if raw == "null" and _is_optional(hints[key]) else raw
        elif key in hints:
            values[key] = _parse_value(parser, key, raw)
        else:
            extra = ", ".join(f"{p}.<key>" for p in prefixes)
            valid = sorted(hints) + ([extra] if extra else [])
            raise ConfigError(key, f"unknown argument; valid: {', '.join(valid)}")
    return build_config(cls, values), nested


def _parse_value(parser: Any, key: str, raw: str) -> Any:
    try:
        (override,) = parser.parse_overrides([f"{key}={raw}"])
    except HydraException as err:
        raise ConfigError(key, f"cannot parse {raw!r}: {one_line(err)}") from None
    if override.is_sweep_override():
        raise ConfigError(key, f"takes one value, got the choices {raw!r} (a list is [a,b])")
    return override.value()


def _put(node: dict, path: list[str], val: Any) -> None:
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = val


def _is_optional(hint: Any) -> bool:
    return type(None) in typing.get_args(hint)


def _is_str(hint: Any) -> bool:
    return hint is str or (_is_optional(hint) and str in typing.get_args(hint))
