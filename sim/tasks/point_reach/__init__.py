"""point_reach task family: point masses reaching goals (a tiny task for fast training checks)."""

from sim.tasks.point_reach.baseline import pd_actions
from sim.tasks.point_reach.config import PointReachCfg, evaluation_overrides
from sim.tasks.point_reach.env import PointReachEnv

__all__ = ["PointReachCfg", "PointReachEnv", "evaluation_overrides", "pd_actions"]
