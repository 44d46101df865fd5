"""drone_volleyball task family: court, ball, rules, skill tasks and matches (VolleyBots / HCSP)."""

from sim.tasks.drone_volleyball.config import MATCHES, MODES, SKILLS, VolleyballCfg, evaluation_overrides
from sim.tasks.drone_volleyball.coplay import VolleyballCoplayEnv
from sim.tasks.drone_volleyball.env import DroneVolleyballEnv
from sim.tasks.drone_volleyball.strategy import VolleyballStrategyEnv

__all__ = [
    "MATCHES",
    "MODES",
    "SKILLS",
    "DroneVolleyballEnv",
    "VolleyballCfg",
    "VolleyballCoplayEnv",
    "VolleyballStrategyEnv",
    "evaluation_overrides",
]
