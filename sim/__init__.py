"""covey simulation: batched multi-agent tasks on torch tensors (any device).

``import sim`` is cheap (no torch, no task module): the names below load on first use (PEP 562).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim._lazy import lazy_exports

if TYPE_CHECKING:
    from sim.core.registry import evaluation_overrides, make, registered_tasks, task_class

_EXPORTS = {name: "sim.core.registry" for name in ("evaluation_overrides", "make", "registered_tasks", "task_class")}
__all__ = ["evaluation_overrides", "make", "registered_tasks", "task_class"]  # noqa: F822 - loaded by __getattr__
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
