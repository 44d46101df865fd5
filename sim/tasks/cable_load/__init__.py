"""cable_load task family: config, geometry and the batched env."""

from sim.tasks.cable_load.config import CableLoadCfg, evaluation_overrides
from sim.tasks.cable_load.env import CableLoadEnv

__all__ = ["CableLoadCfg", "CableLoadEnv", "evaluation_overrides"]
