"""Configuration of memory_reach: the target is shown only in the first steps of an episode."""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.core.config import at_least, non_negative, positive


@dataclass(frozen=True)
class RewardCfg:
    """Reward = sum of named raw terms times these scales (per control step)."""

    distance: float = -1.0  # |target - pos| (m)
    at_target: float = 1.0  # 1 while within success_radius
    action: float = -0.01  # |a|^2 (normalised actions)


@dataclass(frozen=True)
class MemoryReachCfg:
    """Task settings; override any field through ``sim.make(..., **overrides)`` or hydra."""

    cue_steps: int = at_least(1, 2)  # control steps at the start of an episode that show the target
    arena_half: float = positive(1.0)  # m: robot and target in [-arena_half, arena_half]^2
    control_dt: float = positive(0.1)  # s (policy 10 Hz)
    episode_length_s: float = positive(3.0)
    max_speed: float = positive(1.0)  # m/s at |action| = 1 (velocity control)
    success_radius: float = positive(0.1)  # m: success = final distance below this
    min_start_dist: float = non_negative(0.8)  # m: beyond what the cue steps can cover, so memory is needed
    rewards: RewardCfg = field(default_factory=RewardCfg)
