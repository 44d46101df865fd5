"""point_reach task family: point masses reaching goals (a tiny task for fast training checks).

The names below load on first use (importing the package imports no torch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim._lazy import lazy_exports

if TYPE_CHECKING:
    from sim.tasks.point_reach.baseline import pd_actions
    from sim.tasks.point_reach.config import PointReachCfg, evaluation_overrides
    from sim.tasks.point_reach.env import PointReachEnv

_EXPORTS = {
    "PointReachCfg": "sim.tasks.point_reach.config",
    "PointReachEnv": "sim.tasks.point_reach.env",
    "evaluation_overrides": "sim.tasks.point_reach.config",
    "pd_actions": "sim.tasks.point_reach.baseline",
}
__all__ = ["PointReachCfg", "PointReachEnv", "evaluation_overrides", "pd_actions"]  # noqa: F822 - loaded by __getattr__
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
