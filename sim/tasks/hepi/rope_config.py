"""Configuration of hepi_rope_closing: close a rope held at both ends around a vertical hanger pole."""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.core.config import at_least, fraction, non_negative, positive
from sim.mujoco.world import MjWorldCfg


@dataclass(frozen=True)
class RopeRewardCfg:
    """Reward = sum of named raw terms times these scales (per control step). The task error is
    HEPi's ``rope_wrapping`` + ``rope_closing`` pair: the loop centre's distance to the pole axis plus
    the gripper gap (``gripper_weight`` times it)."""

    task_error: float = -1.0  # m, RopeClosingCfg.task_error_terms
    action_rate: float = -2e-3  # |a_t - a_t-1|^2 (normalised actions)


@dataclass(frozen=True)
class RopeClosingCfg:
    """hepi_rope_closing settings; override any field through ``sim.make(..., **overrides)`` or hydra."""

    # Rope: a MuJoCo 1-D flex (n_links vertices, capsule edges kept at length by equality constraints).
    n_links: int = at_least(3, 40)  # vertices = object nodes
    rope_length: float = positive(0.6)  # m, first to last vertex
    rope_radius: float = positive(0.006)  # m
    rope_mass: float = positive(0.06)  # kg, spread evenly over the vertices
    rope_damping: float = non_negative(0.01)  # N s/m along each edge
    # Pa s: MuJoCo's Stokes drag on each vertex (6 pi mu r v, r ~6.5 mm from the vertex inertia): a
    # swinging rope slows ~6x in 2 s (0 = none: it swings on for the whole episode). Costs ~10% per step.
    air_viscosity: float = non_negative(0.03)
    grip_span: float = positive(0.3)  # m, gripper distance at the start (the rope hangs in a U below them)
    grip_height: float = positive(0.5)  # m, gripper height at the start

    # Hanger: a vertical pole (a capsule on a mocap body, its pose sampled per env).
    pole_radius: float = positive(0.015)  # m
    pole_length: float = positive(0.5)  # m
    pole_top_above: float = 0.1  # m, pole top above the grippers' start height
    pole_offset: tuple[float, float] = positive((0.1, 0.18), ordered=True)  # m, ahead of the grip line
    pole_lateral: float = non_negative(0.05)  # m, +- along the grip line from its middle
    pole_tilt_max: float = non_negative(0.15)  # rad, tilt of the pole axis from vertical
    friction: float = non_negative(0.5)  # rope-pole sliding friction coefficient

    # Scene placement: the whole start (grippers, rope, pole) turned by a random yaw and shifted.
    yaw_range: float = non_negative(3.14159)  # rad, uniform in +-
    shift_range: float = non_negative(0.1)  # m, uniform in +- on x and y

    # Timing (the paper's: 100 Hz physics, 50 Hz control, 4 s episodes).
    physics_dt: float = positive(0.01)  # s
    decimation: int = at_least(1, 2)  # physics steps per control step
    episode_length_s: float = positive(4.0)

    # Actions: a linear velocity per gripper, [-1, 1] scaled to max_lin_vel.
    max_lin_vel: float = positive(0.5)  # m/s
    # m: a gripper leads its rope end by at most this (bounded constraint force). Above the steady lag of a
    # soft connect at full speed (~2 * 0.02 s * max_lin_vel = 2 cm), else the bound jerks the grippers back.
    max_lead: float = positive(0.05)
    workspace: float = positive(0.5)  # m: grippers stay within this box (+-) around the start centre
    # Grippers stay within this fraction of the rope length of each other: a rope pulled straight between
    # them would need an unbounded tension against gravity (the soft edge constraints stretch instead).
    max_span_frac: float = positive(0.9)

    # Task error and success.
    gripper_weight: float = non_negative(1.0)  # weight of the gripper gap in the task error
    success_gap: float = positive(0.05)  # m: grippers closer than this ...
    success_winding: float = fraction(0.75)  # ... and the closed loop winds round the pole at least this (turns)
    solver_iterations: int = at_least(1, 20)  # MuJoCo Newton iterations (usually 2-4 are used)
    rewards: RopeRewardCfg = field(default_factory=RopeRewardCfg)
    # Stepping (rollout threads); the task reads vertices from qpos/qvel, no sensors: no exact-sensor pass.
    mujoco: MjWorldCfg = field(default_factory=lambda: MjWorldCfg(exact_sensors=False))

    def __post_init__(self) -> None:
        if self.grip_span >= self.rope_length:
            raise ValueError("grip_span: must be below rope_length (the rope starts slack)")
        spacing = self.rope_length / (self.n_links - 1)
        if spacing <= 2 * self.rope_radius:
            raise ValueError("rope_radius: the vertex spacing rope_length/(n_links-1) must exceed 2*rope_radius")
