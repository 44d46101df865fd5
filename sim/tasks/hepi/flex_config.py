"""Settings that hepi_rope_closing and hepi_cloth_hanging share: two floating grippers move a flex
(rope, cloth) held at two vertices round a capsule target (pole, bar) (:mod:`sim.tasks.hepi.flex`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sim.core.config import at_least, non_negative, positive
from sim.mujoco.world import MjWorldCfg


@dataclass(frozen=True)
class FlexTaskCfg:
    """The common fields of :class:`~sim.tasks.hepi.rope_config.RopeClosingCfg` and
    :class:`~sim.tasks.hepi.cloth_config.ClothHangingCfg`. The first group has no default here: each
    task sets its own (and says why there); the rest are the same for both tasks."""

    # Set by each task.
    air_viscosity: float  # Pa s: MuJoCo's Stokes drag on each vertex
    grip_height: float  # m: the grippers' height at the start (the flex hangs below them)
    friction: float  # flex-target sliding friction coefficient
    episode_length_s: float  # s
    max_span_frac: float  # grippers stay within this fraction of the held length (rope, cloth edge) of each other
    rewards: Any  # the task's reward scales (``task_error``, ``action_rate``)

    # Scene placement: the whole start (grippers, flex, target) turned by a random yaw and shifted.
    yaw_range: float = non_negative(3.14159)  # rad, uniform in +-
    shift_range: float = non_negative(0.1)  # m, uniform in +- on x and y

    # Timing (the paper's: 100 Hz physics, 50 Hz control).
    physics_dt: float = positive(0.01)  # s
    decimation: int = at_least(1, 2)  # physics steps per control step

    # Actions: a linear velocity per gripper, [-1, 1] scaled to max_lin_vel.
    max_lin_vel: float = positive(0.5)  # m/s
    # m: a gripper leads its held vertex by at most this (bounded constraint force). Above the steady lag of
    # a soft connect at full speed (~2 * 0.02 s * max_lin_vel = 2 cm), else the bound jerks the grippers back.
    max_lead: float = positive(0.05)
    workspace: float = positive(0.5)  # m: grippers stay within this box (+-) around the start centre

    solver_iterations: int = at_least(1, 20)  # MuJoCo Newton iterations (usually 1-4 are used)
    # Stepping (rollout threads); the task reads vertices from qpos/qvel, no sensors: no exact-sensor pass.
    mujoco: MjWorldCfg = field(default_factory=lambda: MjWorldCfg(exact_sensors=False))
