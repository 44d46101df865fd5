"""PEP 562 lazy re-exports for package ``__init__`` files: ``import sim.tasks.<family>`` stays
cheap (no torch, no env module) and a name is imported the first time it is read."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``exports`` maps a public name to its module."""

    def __getattr__(name: str) -> Any:
        if name in exports:
            return getattr(importlib.import_module(exports[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*exports, *vars(importlib.import_module(package))})

    return __getattr__, __dir__
