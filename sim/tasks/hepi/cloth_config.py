"""Configuration of hepi_cloth_hanging: hang a cloth held at two corners over a horizontal bar."""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.core.config import at_least, non_negative, positive
from sim.tasks.hepi.flex_config import FlexTaskCfg


@dataclass(frozen=True)
class ClothRewardCfg:
    """Reward = sum of named raw terms times these scales (per control step)."""

    task_error: float = -1.0  # m, distance of the cloth's middle row from the bar's top line (ClothHangingCfg)
    action_rate: float = -2e-3  # |a_t - a_t-1|^2 (normalised actions)


@dataclass(frozen=True)
class ClothHangingCfg(FlexTaskCfg):
    """hepi_cloth_hanging settings; override any field through ``sim.make(..., **overrides)`` or hydra.
    Placement, timing, gripper limits and stepping: :class:`~sim.tasks.hepi.flex_config.FlexTaskCfg`."""

    # Cloth: a MuJoCo 2-D flex grid (n x n vertices, edges kept at length by equality constraints).
    # Vertices per side: n_side^2 object nodes. 6 (36 nodes) for speed: 7 x 7 costs 1.35-1.45x more per
    # step (the equality rows and contacts of 49 vertices), 8 x 8 about 2x.
    n_side: int = at_least(3, 6)
    cloth_size: float = positive(0.32)  # m, side length
    # m: radius of the collision sphere on each vertex (the cloth meets the bar at its vertices, see
    # cloth_model). cloth_radius + bar_radius must exceed half a cell diagonal with a margin, or the bar,
    # pressed into a cell, slips through (measured: 2.5 + 2.2 cm on the 6.4 cm grid does).
    cloth_radius: float = positive(0.03)
    cloth_mass: float = positive(0.05)  # kg
    # Pa s: MuJoCo's Stokes drag on each vertex (as the rope's). Off: the cloth calms by itself within a
    # second after full-speed motion, and the drag costs ~13% of the cloth's control steps per CPU-second.
    air_viscosity: float = non_negative(0.0)
    grip_height: float = positive(0.6)  # m, held corners' height at the start (the cloth hangs below)

    # Bar: a horizontal capsule on a mocap body, its pose sampled per env in the start frame
    # (cloth in the plane y = 0, the bar ahead on +y).
    bar_radius: float = positive(0.03)  # m
    bar_length: float = positive(0.6)  # m
    # m, bar centre ahead of the cloth plane: with bar_yaw_max the bar stays clear of the resting cloth
    bar_offset: tuple[float, float] = positive((0.15, 0.21), ordered=True)
    bar_drop: tuple[float, float] = non_negative((0.0, 0.12), ordered=True)  # m, below the start grip height
    bar_lateral: float = non_negative(0.05)  # m, +- along the cloth's top edge
    bar_yaw_max: float = non_negative(0.25)  # rad, bar axis turned from the cloth's top edge
    friction: float = non_negative(1.0)  # cloth-bar sliding friction coefficient

    episode_length_s: float = positive(2.0)  # the paper's (timing: FlexTaskCfg)
    max_span_frac: float = positive(1.0)  # grippers stay within this fraction of the held edge's length of each other

    # Success: the middle row within success_error of the bar top, both edges hanging below it.
    success_error: float = positive(0.04)  # m
    success_drop: float = non_negative(0.03)  # m: held and free edges at least this below the bar top
    rewards: ClothRewardCfg = field(default_factory=ClothRewardCfg)

    def __post_init__(self) -> None:
        spacing = self.cloth_size / (self.n_side - 1)
        if spacing <= 2 * self.cloth_radius:
            raise ValueError("cloth_radius: the vertex spacing cloth_size/(n_side-1) must exceed 2*cloth_radius")
        if self.cloth_radius + self.bar_radius <= spacing / 2**0.5:
            raise ValueError("cloth_radius: cloth_radius + bar_radius must exceed half a cell diagonal")
