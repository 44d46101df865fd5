"""Configuration of pixel_reach: a point robot that sees only a camera image of the scene."""

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
class PixelReachCfg:
    """Task settings; override any field through ``sim.make(..., **overrides)`` or hydra."""

    image_size: int = at_least(16, 48)  # pixels (square image, H = W)
    view_half_extent: float = positive(2.0)  # m: the image spans +-this around the robot
    arena_half: float = positive(1.0)  # m: robot and target stay in [-arena_half, arena_half]^2
    control_dt: float = positive(0.1)  # s (policy 10 Hz)
    episode_length_s: float = positive(3.0)
    max_speed: float = positive(1.0)  # m/s at |action| = 1 (velocity control)
    success_radius: float = positive(0.1)  # m: success = final distance below this
    target_draw_radius: float = positive(0.15)  # m: the target's disc in the image
    robot_draw_radius: float = positive(0.1)  # m: the robot's own marker at the image centre
    min_start_dist: float = non_negative(0.3)  # m: targets start at least this far from the robot
    rewards: RewardCfg = field(default_factory=RewardCfg)
