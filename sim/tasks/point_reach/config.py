"""Configuration of the point_reach task: point-mass agents with double-integrator dynamics
reaching random goals. Small and fast: the training tests learn it in seconds on a CPU."""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.core.config import non_negative, positive


@dataclass(frozen=True)
class RandomizationCfg:
    """Per-episode randomisation. ``enabled=False`` uses nominal values."""

    enabled: bool = True
    acc_scale: tuple[float, float] = positive((0.8, 1.2), ordered=True)  # actuator strength factor, per agent


@dataclass(frozen=True)
class ObsNoiseCfg:
    """Zero-mean Gaussian noise on the policy observation."""

    enabled: bool = True
    position: float = non_negative(0.01)  # m
    velocity: float = non_negative(0.02)  # m/s


@dataclass(frozen=True)
class RewardCfg:
    """Reward = sum of named raw terms times these scales (per control step)."""

    distance: float = -1.0  # |goal - pos| (m)
    action: float = -0.05  # |a|^2 (normalised actions)
    out_of_bounds: float = -10.0  # once, on a terminal step


@dataclass(frozen=True)
class PointReachCfg:
    """Task settings; override any field through ``sim.make(..., **overrides)`` or hydra."""

    num_agents: int = 3
    dim: int = 2  # 2D or 3D
    control_dt: float = positive(0.1)  # s (policy 10 Hz)
    episode_length_s: float = positive(4.0)
    max_acc: float = positive(3.0)  # m/s^2 at |action| = 1
    drag: float = non_negative(1.0)  # 1/s, linear velocity damping
    start_range: float = non_negative(1.0)  # m, start positions uniform in +-
    goal_range: float = non_negative(1.0)  # m, goals uniform in +-
    bounds: float = positive(3.0)  # m, |pos| beyond this on any axis terminates
    rewards: RewardCfg = field(default_factory=RewardCfg)
    randomization: RandomizationCfg = field(default_factory=RandomizationCfg)
    obs_noise: ObsNoiseCfg = field(default_factory=ObsNoiseCfg)

    def __post_init__(self) -> None:
        if self.num_agents < 1:
            raise ValueError(f"num_agents must be >= 1, got {self.num_agents}")
        if self.dim not in (2, 3):
            raise ValueError(f"dim must be 2 or 3, got {self.dim}")


def evaluation_overrides() -> dict:
    """Overrides that switch off noise and randomisation, for evaluation and deployment."""
    return {"randomization": {"enabled": False}, "obs_noise": {"enabled": False}}
