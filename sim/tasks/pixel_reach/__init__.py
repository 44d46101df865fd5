"""pixel_reach: the model task for image observations (a point robot that sees only a camera image).

The names below load on first use (importing the package imports no torch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim._lazy import lazy_exports

if TYPE_CHECKING:
    from sim.tasks.pixel_reach.config import PixelReachCfg
    from sim.tasks.pixel_reach.env import PixelReachEnv

_EXPORTS = {"PixelReachCfg": "sim.tasks.pixel_reach.config", "PixelReachEnv": "sim.tasks.pixel_reach.env"}
__all__ = ["PixelReachCfg", "PixelReachEnv"]  # noqa: F822 - loaded by __getattr__
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
