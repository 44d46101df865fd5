"""drone_volleyball task family: court, ball, rules, skill tasks and matches (VolleyBots / HCSP).

Modules, one job each: ``config`` (settings), ``court`` / ``rules`` (geometry, the rally's
referee), ``env`` (bodies and state: the base) with ``spec`` (observation and action layout), ``physics`` (the
torch control loop) and ``observations`` (the shared entries; ``native`` in C), ``skill_env`` (solo skills),
``match_env`` (matches), ``strategy`` / ``coplay`` (HCSP's levels, each owning a match env),
``control`` / ``ballistics`` / ``skills`` (the scripted skill controllers), ``rule_strategy``
(the rule-based team strategy), ``teams`` (match teams), ``render`` (the MuJoCo picture).
The names below load on first use (importing the package imports no torch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim._lazy import lazy_exports

if TYPE_CHECKING:
    from sim.tasks.drone_volleyball.config import MATCHES, MODES, SKILLS, VolleyballCfg, evaluation_overrides
    from sim.tasks.drone_volleyball.coplay import VolleyballCoplayEnv
    from sim.tasks.drone_volleyball.env import DroneVolleyballEnv
    from sim.tasks.drone_volleyball.match_env import VolleyballMatchEnv
    from sim.tasks.drone_volleyball.skill_env import VolleyballSkillEnv
    from sim.tasks.drone_volleyball.strategy import VolleyballStrategyEnv

_CONFIG = "sim.tasks.drone_volleyball.config"
_EXPORTS = {
    "MATCHES": _CONFIG,
    "MODES": _CONFIG,
    "SKILLS": _CONFIG,
    "VolleyballCfg": _CONFIG,
    "evaluation_overrides": _CONFIG,
    "DroneVolleyballEnv": "sim.tasks.drone_volleyball.env",
    "VolleyballCoplayEnv": "sim.tasks.drone_volleyball.coplay",
    "VolleyballMatchEnv": "sim.tasks.drone_volleyball.match_env",
    "VolleyballSkillEnv": "sim.tasks.drone_volleyball.skill_env",
    "VolleyballStrategyEnv": "sim.tasks.drone_volleyball.strategy",
}
__all__ = [  # noqa: F822 - loaded by __getattr__
    "DroneVolleyballEnv",
    "MATCHES",
    "MODES",
    "SKILLS",
    "VolleyballCfg",
    "VolleyballCoplayEnv",
    "VolleyballMatchEnv",
    "VolleyballSkillEnv",
    "VolleyballStrategyEnv",
    "evaluation_overrides",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
