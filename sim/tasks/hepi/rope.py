"""hepi_rope_closing: two floating grippers close a rope around a hanger pole.

After HEPi's rope closing (Hoang et al., ICLR 2025): 50 Hz control, 4 s episodes, physics 0.01 s.
A rope of ``n_links`` (40) vertices (a MuJoCo 1-D flex, :mod:`sim.tasks.hepi.rope_model`) hangs
in a U below two grippers that hold its ends; a vertical pole (tilted up to ``pole_tilt_max``)
stands ahead of it at a sampled place. The grippers must carry the rope round the pole and meet
behind it, so that the rope encircles the pole. The whole start is turned by a random yaw and
shifted, so no direction is special but the vertical.

Task error (HEPi's ``rope_wrapping`` + ``rope_closing``, m): the distance from the rope's centroid
to the pole axis (measured across the axis) plus ``gripper_weight`` times the gripper gap. Success:
the grippers closer than ``success_gap`` and the closed loop (the rope, then the straight segment
from its last vertex back to its first) winding round the pole axis at least
``success_winding`` turns.

Graph observation (:class:`sim.tasks.hepi.flex.FlexEnv`, as the cloth's): 40 object nodes (the rope
vertices) and 2 actuator nodes (the grippers, at their rope ends); vectors per node, world frame: position,
displacement to the pole axis (the closest axis point minus the node), linear velocity. Action per
gripper: a linear velocity (world frame), scaled by ``max_lin_vel`` (0.5 m/s).

Reward per step: ``-task_error - 2e-3 |a_t - a_t-1|^2`` (``task.rewards.winding`` > 0 adds that many times the
loop's turns round the pole, capped at 1: not the paper's, off by default).
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import Tensor

from sim.core.env import Scenario
from sim.core.randomization import uniform
from sim.physics.quaternion import cross, quat_mul
from sim.tasks.hepi.base import random_tilt
from sim.tasks.hepi.flex import FlexEnv, axis_offset
from sim.tasks.hepi.flex_model import FlexModel
from sim.tasks.hepi.rope_config import RopeClosingCfg
from sim.tasks.hepi.rope_model import build_rope_model
from sim.tasks.hepi.scenarios import rope_scenarios

__all__ = ["RopeClosingEnv", "winding_number"]

# The scripted expert: waypoints in the pole frame (f: from the start grip line towards the pole,
# s: along the grip line towards gripper 1), phase switch times and its proportional gain.
EXPERT_BESIDE = 0.12  # m: phase 1, each gripper beside the pole, this far out along s
EXPERT_PAST = (0.08, 0.12)  # m: phase 2, (out along s, past the pole along f)
EXPERT_MEET = (0.015, 0.12)  # m: phase 3, (out along s, past the pole along f): together behind it
EXPERT_PHASES = (1.2, 2.2)  # s: phase 1 -> 2 -> 3
EXPERT_GAIN = 5.0  # 1/s


def winding_number(points: Tensor, origin: Tensor, axis: Tensor) -> Tensor:
    """``[...]`` signed turns of the closed polygon ``points [..., P, 3]`` (then back to the first
    point) round the line through ``origin`` along the unit ``axis``: the sum of the wrapped angle
    steps of the points projected across the axis, over 2 pi."""
    off = axis_offset(points, origin, axis)
    ref = torch.zeros_like(axis)
    use_x = axis[..., 0].abs() < 0.9
    ref[..., 0] = use_x.float()
    ref[..., 1] = (~use_x).float()
    u = torch.nn.functional.normalize(cross(axis, ref), dim=-1)
    w = cross(axis, u)
    theta = torch.atan2((off * w.unsqueeze(-2)).sum(-1), (off * u.unsqueeze(-2)).sum(-1))  # [..., P]
    step = torch.diff(torch.cat((theta, theta[..., :1]), -1), dim=-1)
    step = torch.remainder(step + math.pi, 2 * math.pi) - math.pi
    return step.sum(-1) / (2 * math.pi)


class RopeClosingEnv(FlexEnv):
    """Batched rope closing round a pole with two floating grippers; see the module docstring."""

    task_name = "hepi_rope_closing"
    cfg_class = RopeClosingCfg
    # Window mean at the last control step: closed round the pole (not_closed = 0).
    success_criteria: ClassVar = {"not_closed": 0.5}
    line_axis = (0.0, 0.0, 1.0)  # the pole: its local z axis

    @classmethod
    def scenarios(cls) -> dict[str, Scenario]:
        """Model variants a real setup would bring (:mod:`sim.tasks.hepi.scenarios`)."""
        return rope_scenarios()

    def _build_flex(self, cfg: RopeClosingCfg) -> FlexModel:
        return build_rope_model(cfg)

    def _init_task(self) -> None:
        # The pole by its name here (the same tensors): a point of its axis at the start grip height.
        self.pole_pos, self.pole_axis = self.target_pos, self.target_axis
        self.ends = self.held_nodes  # node indices of the held rope ends

    # ----------------------------------------------------------------- task quantities
    def task_terms(self) -> dict[str, Tensor]:
        """``{loop_dist_m, gap_m, winding, task_error_m}`` each ``[E]``: the rope centroid's distance to
        the pole axis, the gripper gap, the loop's turns round the pole and the task error."""
        if "task_terms" in self.state_cache:
            return self.state_cache["task_terms"]
        verts = self.vertices()
        loop = torch.linalg.vector_norm(axis_offset(verts.mean(1, keepdim=True), self.pole_pos, self.pole_axis), dim=-1)
        g = self.grippers()
        gap = torch.linalg.vector_norm(g[:, 0] - g[:, 1], dim=-1)
        loop = loop.squeeze(-1)
        self.state_cache["task_terms"] = {
            "loop_dist_m": loop,
            "gap_m": gap,
            "winding": winding_number(verts, self.pole_pos, self.pole_axis),
            "task_error_m": loop + self.cfg.gripper_weight * gap,
        }
        return self.state_cache["task_terms"]

    def _reward_terms(self) -> dict[str, Tensor]:
        terms = super()._reward_terms()
        if self.cfg.rewards.winding:  # opt-in (RopeRewardCfg.winding): off, the reward is the paper's
            terms["winding"] = self.task_terms()["winding"].abs().clamp(max=1.0)
        return terms

    def success(self, terms: dict[str, Tensor] | None = None) -> Tensor:
        """``[E]`` bool: grippers within ``success_gap`` and the loop round the pole."""
        t = self.task_terms() if terms is None else terms
        return (t["gap_m"] < self.cfg.success_gap) & (t["winding"].abs() >= self.cfg.success_winding)

    # ----------------------------------------------------------------- FlexEnv hooks
    def _sample_target(self, k: int, turn: Tensor) -> tuple[Tensor, Tensor]:
        cfg, dev, rng = self.cfg, self.device, self.rng
        pole = torch.stack(
            (
                uniform(-cfg.pole_lateral, cfg.pole_lateral, (k,), rng, dev),
                uniform(*cfg.pole_offset, (k,), rng, dev),
                torch.full((k,), cfg.grip_height, device=dev),
            ),
            -1,
        )
        return pole, quat_mul(random_tilt(k, cfg.pole_tilt_max, rng, dev), turn)

    def _held_length(self) -> float:
        return self.cfg.rope_length

    # ----------------------------------------------------------------- metrics
    def step_metrics(self) -> dict[str, Tensor]:
        t = self.task_terms()
        return {
            "task_error_m": t["task_error_m"],
            "gap_m": t["gap_m"],
            "loop_dist_m": t["loop_dist_m"],
            "not_closed": (~self.success(t)).float(),
        }

    # ----------------------------------------------------------------- baseline
    def expert_policy(self):
        """A scripted baseline on the true state: both grippers go beside the pole (one each side),
        past it, then together behind it, following time-phased waypoints in the pole frame with a
        proportional controller (the pole's tilt is ignored: waypoints sit at the start grip height)."""
        cfg = self.cfg
        dt = cfg.physics_dt * cfg.decimation
        side = torch.tensor([-1.0, 1.0], device=self.device).view(1, 2, 1)  # gripper 0 on -s, 1 on +s

        def act(obs) -> dict[str, Tensor]:
            s, f = self.frame[:, 0].unsqueeze(1), self.frame[:, 1].unsqueeze(1)  # [E, 1, 3]
            t = (self.episode_step.float() * dt).view(-1, 1, 1)
            out = torch.where(t < EXPERT_PHASES[0], EXPERT_BESIDE, EXPERT_PAST[0])
            out = torch.where(t < EXPERT_PHASES[1], out, EXPERT_MEET[0])
            ahead = torch.where(t < EXPERT_PHASES[0], 0.0, EXPERT_PAST[1])
            ahead = torch.where(t < EXPERT_PHASES[1], ahead, EXPERT_MEET[1])
            goal = self.pole_pos.unsqueeze(1) + side * out * s + ahead * f  # [E, 2, 3]
            return self.proportional_action(goal, EXPERT_GAIN)

        return act
