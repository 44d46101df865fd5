"""Configuration of hepi_insertion: a peg of one of 8 cross-sections into its matching hole."""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.core.config import at_least, non_negative, positive
from sim.mujoco.world import MjWorldCfg

TRAIN_SHAPES: tuple[str, ...] = ("plus", "pentagon", "tee", "diamond", "hexagon", "triangle")
HELD_OUT_SHAPES: tuple[str, ...] = ("star", "heart")  # never sampled in training: the generalisation figure


@dataclass(frozen=True)
class InsertionRewardCfg:
    """Reward = sum of named raw terms times these scales (per control step), as in HEPi's
    ``object_insertion`` term (weight -0.8) plus an action-rate penalty."""

    keypoint_distance: float = -0.8  # mean |keypoint - its target| over the peg keypoints (m)
    action_rate: float = -2e-3  # |a_t - a_t-1|^2 (normalised actions)


@dataclass(frozen=True)
class InsertionCfg:
    """hepi_insertion settings; override any field through ``sim.make(..., **overrides)`` or hydra
    (``task.shapes=[star,heart]`` evaluates the held-out shapes)."""

    # Shapes and sizes: one compiled model per (shape, size); every variant has the same size signature.
    shapes: tuple[str, ...] = TRAIN_SHAPES  # cross-sections sampled at reset (sim.tasks.hepi.shapes.SHAPES)
    n_sizes: int = at_least(1, 3)  # sizes per shape, evenly spaced over size_range
    size_range: tuple[float, float] = positive((0.015, 0.025), ordered=True)  # m, outline circumradius
    peg_height: float = positive(0.05)  # m
    hole_depth: float = positive(0.025)  # m, from the opening to the floor
    clearance: float = positive(0.0015)  # m, wall offset from the peg outline (per side)
    wall_thickness: float = positive(0.008)  # m
    n_actuators: int = at_least(1, 1)  # 1, or 2 grippers welded at two points of the peg top
    grasp_offset: float = non_negative(0.4)  # two grippers at +-grasp_offset * size along the peg's x axis
    friction: float = non_negative(0.3)  # peg-hole sliding friction coefficient

    # Timing (the paper's: 100 Hz physics, 25 Hz control, 4 s episodes).
    physics_dt: float = positive(0.01)  # s
    decimation: int = at_least(1, 4)  # physics steps per control step
    episode_length_s: float = positive(4.0)

    # Actions: velocity commands per gripper, [-1, 1] scaled to these.
    max_lin_vel: float = positive(0.1)  # m/s
    max_ang_vel: float = positive(1.0)  # rad/s
    max_lead: float = positive(0.01)  # m: the gripper leads the held point by at most this (bounded weld force)

    # Hole pose (world): position in a box, yaw uniform, tilt of its axis from vertical.
    hole_pos_low: tuple[float, float, float] = (-0.1, -0.1, 0.0)  # m
    hole_pos_high: tuple[float, float, float] = (0.1, 0.1, 0.1)  # m
    hole_tilt_max: float = non_negative(0.3)  # rad
    # Peg start, in the hole's frame: its bottom centre above the opening, offset and turned.
    start_height: tuple[float, float] = positive((0.03, 0.07), ordered=True)  # m, bottom above the opening
    start_lateral: float = non_negative(0.03)  # m, offset across the hole axis (each of x, y)
    start_yaw_max: float = non_negative(0.5)  # rad about the hole axis (< half the hexagon's 60 deg symmetry)
    start_tilt_max: float = non_negative(0.2)  # rad
    workspace_margin: float = positive(0.15)  # m: grippers stay within the hole box grown by this

    # m: success = mean keypoint error below this at the end, with the peg bottom inside the hole. With
    # 1.5 mm clearance the walls fix the peg's axis, so the error is mostly depth: < 1 cm means the
    # peg sits more than 60% of the 2.5 cm hole deep (a peg resting on the rim scores ~2.5 cm).
    success_threshold: float = positive(0.01)
    rewards: InsertionRewardCfg = field(default_factory=InsertionRewardCfg)
    # Stepping (rollout threads); no sensors are read, so the exact-sensor pass is off.
    mujoco: MjWorldCfg = field(default_factory=lambda: MjWorldCfg(exact_sensors=False))

    def __post_init__(self) -> None:
        from sim.tasks.hepi.shapes import SHAPES

        unknown = [s for s in self.shapes if s not in SHAPES]
        if unknown or not self.shapes:
            raise ValueError(f"shapes: unknown {unknown or '(none given)'}; known: {list(SHAPES)}")
        if self.n_actuators not in (1, 2):
            raise ValueError(f"n_actuators: 1 or 2, got {self.n_actuators}")
        if self.hole_depth >= self.peg_height:
            raise ValueError("hole_depth: must be below peg_height (the gripper holds the part that sticks out)")
        if any(lo > hi for lo, hi in zip(self.hole_pos_low, self.hole_pos_high, strict=True)):
            raise ValueError("hole_pos_low: must be <= hole_pos_high per axis")
