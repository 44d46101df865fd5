"""memory_reach: the model task for recurrent policies (the target is shown only at the start).

The names below load on first use (importing the package imports no torch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim._lazy import lazy_exports

if TYPE_CHECKING:
    from sim.tasks.memory_reach.config import MemoryReachCfg
    from sim.tasks.memory_reach.env import MemoryReachEnv

_EXPORTS = {"MemoryReachCfg": "sim.tasks.memory_reach.config", "MemoryReachEnv": "sim.tasks.memory_reach.env"}
__all__ = ["MemoryReachCfg", "MemoryReachEnv"]  # noqa: F822 - loaded by __getattr__
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
