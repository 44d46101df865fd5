"""hepi_cloth_hanging: two floating grippers hang a cloth over a bar.

After HEPi's cloth hanging (Hoang et al., ICLR 2025; their cloth has a hole put over a hook, ours
is draped over a bar): 50 Hz control, 2 s episodes, physics 0.01 s. A square cloth of
``n_side x n_side`` vertices (a MuJoCo 2-D flex, :mod:`sim.tasks.hepi.cloth_model`) hangs from two
grippers at two adjacent corners; a horizontal bar lies ahead of it at a sampled place, height
and yaw. The grippers must carry the held edge over the bar and down its far side, so the cloth
hangs on both sides with the bar under its middle. The whole start is turned by a random yaw and
shifted.

Task error (m): the distance, across the bar axis, from the centroid of the cloth's middle row
(halfway between the held and the free edge) to the bar's top line (the axis raised by the bar
radius plus the cloth half-thickness). Success: that error below ``success_error`` and the held and
the free edge (row centroids) both at least ``success_drop`` below the bar top.

Graph observation (:class:`sim.tasks.hepi.flex.FlexEnv`, as the rope's): ``n_side^2`` object nodes (the cloth
vertices, row by row from the held edge) and 2 actuator nodes (the grippers, at their corners);
vectors per node, world frame: position, displacement to the bar's top line (the closest point of
it minus the node), linear velocity. Action per gripper: a linear velocity (world frame), scaled by
``max_lin_vel`` (0.5 m/s).

Reward per step: ``-task_error - 2e-3 |a_t - a_t-1|^2``.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from sim.core.env import Scenario
from sim.core.randomization import uniform
from sim.physics.quaternion import cross, quat_mul
from sim.tasks.hepi.base import yaw_quat
from sim.tasks.hepi.cloth_config import ClothHangingCfg
from sim.tasks.hepi.cloth_model import build_cloth_model
from sim.tasks.hepi.flex import FlexEnv, axis_offset
from sim.tasks.hepi.flex_model import FlexModel
from sim.tasks.hepi.scenarios import cloth_scenarios

__all__ = ["ClothHangingEnv"]

# The scripted expert: per gripper, waypoints around the bar point nearest to it (n: horizontal,
# across the bar, away from the cloth's start; z up from the bar top), the blend between them, gain.
EXPERT_ABOVE = (-0.04, 0.08)  # m (along n, along z): phase 1, above the bar's near side
EXPERT_OVER = (0.06, 0.06)  # m: phase 2, above its far side
EXPERT_DOWN_N = 0.05  # m along n: phase 3, down the far side (to half the cloth length below the top)
# The phase is read from the gripper's own position, not from the clock (a DAgger student holds no clock),
# and the goal blends linearly across these bands (m: from, width), so the action is a continuous function
# of the state: hard switches left states on a switch line whose labels point opposite ways (back to the
# near side below it, on over the bar above it), and the student, averaging them, stalled on the bar top.
EXPERT_HIGH = (0.0, 0.05)  # z above the top: phase 1 -> 2
EXPERT_ACROSS = (0.0, 0.04)  # n across the top: -> phase 3
EXPERT_GAIN = 5.0  # 1/s
EXPERT_AXIS_MARGIN = 0.05  # m: waypoints stay this far inside the bar's ends


class ClothHangingEnv(FlexEnv):
    """Batched cloth hanging over a bar with two floating grippers; see the module docstring."""

    task_name = "hepi_cloth_hanging"
    cfg_class = ClothHangingCfg
    # Window mean at the last control step: hung over the bar (not_hung = 0).
    success_criteria: ClassVar = {"not_hung": 0.5}
    line_axis = (1.0, 0.0, 0.0)  # the bar: its local x axis

    @classmethod
    def scenarios(cls) -> dict[str, Scenario]:
        """Model variants a real setup would bring (:mod:`sim.tasks.hepi.scenarios`)."""
        return cloth_scenarios()

    def _build_flex(self, cfg: ClothHangingCfg) -> FlexModel:
        return build_cloth_model(cfg)

    def _init_task(self) -> None:
        n = self.cfg.n_side
        # The rest start summed in float32 (the rope converts its model's float64 sum): the two differ
        # by an ulp, and this is the start every cloth episode so far was sampled from.
        rest_qpos = torch.as_tensor(self.flex.rest_qpos, dtype=torch.float32, device=self.device)
        self.rest_vertices = self.flex_origin + rest_qpos.view(-1, 3)
        self.line_lift = self.cfg.bar_radius + self.cfg.cloth_radius  # the target line: the bar's top
        # The bar by its name here (the same tensors): its centre and axis.
        self.bar_pos, self.bar_axis = self.target_pos, self.target_axis
        self.corners = self.held_nodes  # node indices of the held corners
        self.mid_rows = torch.tensor([(n - 1) // 2, n // 2], device=self.device)  # the middle row (two when n is even)

    # ----------------------------------------------------------------- task quantities
    def bar_top(self) -> Tensor:
        """``[E, 3]`` a point of the bar's top line (above the bar centre): the target line."""
        return self.line_point()

    def task_terms(self) -> dict[str, Tensor]:
        """``{task_error_m, held_drop_m, free_drop_m}`` each ``[E]``: the middle row's distance to the
        bar's top line; how far the held and the free edge (row centroids) hang below the bar top."""
        if "task_terms" in self.state_cache:
            return self.state_cache["task_terms"]
        n = self.cfg.n_side
        rows = self.vertices().view(self.num_envs, n, n, 3).mean(2)  # [E, n, 3] row centroids
        top = self.bar_top()
        mid = rows[:, self.mid_rows].mean(1, keepdim=True)
        err = torch.linalg.vector_norm(axis_offset(mid, top, self.bar_axis), dim=-1).squeeze(-1)
        drop = top[:, 2:3] - rows[:, [0, n - 1], 2]  # [E, 2] held, free edge
        self.state_cache["task_terms"] = {"task_error_m": err, "held_drop_m": drop[:, 0], "free_drop_m": drop[:, 1]}
        return self.state_cache["task_terms"]

    def success(self, terms: dict[str, Tensor] | None = None) -> Tensor:
        """``[E]`` bool: middle row on the bar top, both edges hanging below it."""
        t = self.task_terms() if terms is None else terms
        drop = self.cfg.success_drop
        # Both edges below a middle row that lies on the bar top: the halves hang down its two sides
        # (the free edge may dangle under the axis, so no test on the horizontal side).
        return (t["task_error_m"] < self.cfg.success_error) & (t["held_drop_m"] > drop) & (t["free_drop_m"] > drop)

    # ----------------------------------------------------------------- FlexEnv hooks
    def _sample_target(self, k: int, turn: Tensor) -> tuple[Tensor, Tensor]:
        cfg, dev, rng = self.cfg, self.device, self.rng
        bar = torch.stack(
            (
                uniform(-cfg.bar_lateral, cfg.bar_lateral, (k,), rng, dev),
                uniform(*cfg.bar_offset, (k,), rng, dev),
                cfg.grip_height - uniform(*cfg.bar_drop, (k,), rng, dev),
            ),
            -1,
        )
        return bar, quat_mul(turn, yaw_quat(uniform(-cfg.bar_yaw_max, cfg.bar_yaw_max, (k,), rng, dev)))

    def _held_length(self) -> float:
        return self.cfg.cloth_size

    # ----------------------------------------------------------------- metrics
    def step_metrics(self) -> dict[str, Tensor]:
        t = self.task_terms()
        return {"task_error_m": t["task_error_m"], "not_hung": (~self.success(t)).float()}

    # ----------------------------------------------------------------- baseline
    def expert_policy(self):
        """A scripted baseline on the true state: each gripper goes above the near side of the bar
        point nearest to it, over to the far side, then down it to half the cloth length below the
        bar top, with a proportional controller. The phase is read from the gripper's position
        across and above the bar, never from the time, and the goal blends between the phases over
        ``EXPERT_HIGH`` and ``EXPERT_ACROSS`` (a continuous action that a student can fit)."""
        cfg = self.cfg
        reach = cfg.bar_length / 2 - EXPERT_AXIS_MARGIN

        def act(obs) -> dict[str, Tensor]:
            g = self.grippers()  # [E, 2, 3]
            top, axis = self.bar_top().unsqueeze(1), self.bar_axis.unsqueeze(1)
            along = ((g - top) * axis).sum(-1, keepdim=True).clamp(-reach, reach)
            base = top + along * axis  # [E, 2, 3] the bar-top point nearest each gripper
            up = torch.zeros_like(axis)
            up[..., 2] = 1.0
            across = torch.nn.functional.normalize(cross(up, axis), dim=-1)
            away = torch.sign(((top - self.centre.unsqueeze(1)) * across).sum(-1, keepdim=True))
            n_far = across * torch.where(away == 0, 1.0, away)  # from the cloth's start over the bar
            n_pos = ((g - base) * n_far).sum(-1, keepdim=True)  # [E, 2, 1] across the bar, + = far side
            z_pos = (g - base)[..., 2:]  # [E, 2, 1] above the bar top
            high = ((z_pos - EXPERT_HIGH[0]) / EXPERT_HIGH[1]).clamp(0.0, 1.0)
            over = ((n_pos - EXPERT_ACROSS[0]) / EXPERT_ACROSS[1]).clamp(0.0, 1.0)
            # phase 1 climbs straight up once past its waypoint: never back towards the near side
            n_off = torch.lerp(n_pos.clamp(min=EXPERT_ABOVE[0]), torch.full_like(n_pos, EXPERT_OVER[0]), high)
            z_off = EXPERT_ABOVE[1] + (EXPERT_OVER[1] - EXPERT_ABOVE[1]) * high
            n_off = torch.lerp(n_off, torch.full_like(n_off, EXPERT_DOWN_N), over)
            z_off = torch.lerp(z_off, torch.full_like(z_off, -cfg.cloth_size / 2), over)
            goal = base + n_off * n_far + z_off * up
            return self.proportional_action(goal, EXPERT_GAIN)

        return act
