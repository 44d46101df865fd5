"""cable_load task family: config, geometry and the batched env.

Importing the package imports none of them (no torch): the names below load on first use, so
the robot-side numpy modules of this folder import on a robot without torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim._lazy import lazy_exports

if TYPE_CHECKING:
    from sim.tasks.cable_load.config import CableLoadCfg, evaluation_overrides
    from sim.tasks.cable_load.env import CableLoadEnv

_EXPORTS = {
    "CableLoadCfg": "sim.tasks.cable_load.config",
    "CableLoadEnv": "sim.tasks.cable_load.env",
    "evaluation_overrides": "sim.tasks.cable_load.config",
}
__all__ = ["CableLoadCfg", "CableLoadEnv", "evaluation_overrides"]  # noqa: F822 - loaded by __getattr__
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
