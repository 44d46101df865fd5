"""Configuration of hepi_rope_closing: close a rope held at both ends around a vertical hanger pole."""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.core.config import at_least, fraction, non_negative, positive
from sim.tasks.hepi.flex_config import FlexTaskCfg


@dataclass(frozen=True)
class RopeRewardCfg:
    """Reward = sum of named raw terms times these scales (per control step). The task error is
    HEPi's ``rope_wrapping`` + ``rope_closing`` pair: the loop centre's distance to the pole axis plus
    the gripper gap (``gripper_weight`` times it)."""

    task_error: float = -1.0  # m, RopeClosingCfg.task_error_terms
    action_rate: float = -2e-3  # |a_t - a_t-1|^2 (normalised actions)
    # Turns of the closed loop round the pole, |winding| capped at 1. Not the paper's and off by default: its task
    # error is met by pulling the grippers together at the pole without winding the rope, which success asks for
    # (README, "Rope closing: HEPi vs EMPN vs Transformer"). A positive scale rewards the winding itself.
    winding: float = 0.0


@dataclass(frozen=True)
class RopeClosingCfg(FlexTaskCfg):
    """hepi_rope_closing settings; override any field through ``sim.make(..., **overrides)`` or hydra.
    Placement, timing, gripper limits and stepping: :class:`~sim.tasks.hepi.flex_config.FlexTaskCfg`."""

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

    episode_length_s: float = positive(4.0)  # the paper's (timing: FlexTaskCfg)
    # Grippers stay within this fraction of the rope length of each other: a rope pulled straight between
    # them would need an unbounded tension against gravity (the soft edge constraints stretch instead).
    max_span_frac: float = positive(0.9)

    # Task error and success.
    gripper_weight: float = non_negative(1.0)  # weight of the gripper gap in the task error
    success_gap: float = positive(0.05)  # m: grippers closer than this ...
    success_winding: float = fraction(0.75)  # ... and the closed loop winds round the pole at least this (turns)
    rewards: RopeRewardCfg = field(default_factory=RopeRewardCfg)

    def __post_init__(self) -> None:
        if self.grip_span >= self.rope_length:
            raise ValueError("grip_span: must be below rope_length (the rope starts slack)")
        spacing = self.rope_length / (self.n_links - 1)
        if spacing <= 2 * self.rope_radius:
            raise ValueError("rope_radius: the vertex spacing rope_length/(n_links-1) must exceed 2*rope_radius")
