"""vlm_driving: batched driving on procedural roads with traffic, rewarded by a vision-language model (VLM-RL).

The names below load on first use (importing the package imports no torch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim._lazy import lazy_exports

if TYPE_CHECKING:
    from sim.tasks.vlm_driving.config import DrivingCfg
    from sim.tasks.vlm_driving.env import VLMDrivingEnv

_EXPORTS = {"DrivingCfg": "sim.tasks.vlm_driving.config", "VLMDrivingEnv": "sim.tasks.vlm_driving.env"}
__all__ = ["DrivingCfg", "VLMDrivingEnv"]  # noqa: F822 - loaded by __getattr__
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
