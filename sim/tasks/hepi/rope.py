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

Graph observation (:class:`sim.tasks.hepi.base.HepiEnv`): 40 object nodes (the rope vertices)
and 2 actuator nodes (the grippers, at their rope ends); vectors per node, world frame: position,
displacement to the pole axis (the closest axis point minus the node), linear velocity. Action per
gripper: a linear velocity (world frame), scaled by ``max_lin_vel`` (0.5 m/s).

Reward per step: ``-task_error - 2e-3 |a_t - a_t-1|^2``.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import Tensor

from sim.core.randomization import uniform
from sim.mujoco.world import BatchedMjWorld
from sim.physics.quaternion import cross, quat_mul, quat_rotate
from sim.tasks.hepi.base import GROUP, HepiEnv
from sim.tasks.hepi.insertion import random_tilt, yaw_quat
from sim.tasks.hepi.rope_config import RopeClosingCfg
from sim.tasks.hepi.rope_model import build_rope_model

__all__ = ["RopeClosingEnv", "axis_offset", "limit_span", "winding_number"]

VECTOR_NAMES = ("position", "target_displacement", "linear_velocity")
# The scripted expert: waypoints in the pole frame (f: from the start grip line towards the pole,
# s: along the grip line towards gripper 1), phase switch times and its proportional gain.
EXPERT_BESIDE = 0.12  # m: phase 1, each gripper beside the pole, this far out along s
EXPERT_PAST = (0.08, 0.12)  # m: phase 2, (out along s, past the pole along f)
EXPERT_MEET = (0.015, 0.12)  # m: phase 3, (out along s, past the pole along f): together behind it
EXPERT_PHASES = (1.2, 2.2)  # s: phase 1 -> 2 -> 3
EXPERT_GAIN = 5.0  # 1/s


def axis_offset(points: Tensor, origin: Tensor, axis: Tensor) -> Tensor:
    """``[..., P, 3]``: the part of ``points - origin`` across a line (``points [..., P, 3]``, the
    line through ``origin [..., 3]`` along the unit ``axis [..., 3]``)."""
    rel = points - origin.unsqueeze(-2)
    a = axis.unsqueeze(-2)
    return rel - (rel * a).sum(-1, keepdim=True) * a


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


def limit_span(pos: Tensor, max_span: float) -> Tensor:
    """Gripper positions ``[..., 2, 3]`` with pairs further apart than ``max_span`` (m) pulled towards
    their midpoint to exactly that distance."""
    mid = pos.mean(-2, keepdim=True)
    half = pos - mid
    span = 2 * torch.linalg.vector_norm(half[..., :1, :], dim=-1, keepdim=True)
    return mid + half * (max_span / span.clamp(min=max_span))


class RopeClosingEnv(HepiEnv):
    """Batched rope closing round a pole with two floating grippers; see the module docstring."""

    task_name = "hepi_rope_closing"
    renderer = "sim.tasks.hepi.world_render:WorldRenderer"
    robot_builder = "sim.tasks.hepi.line_target_robot:GraphPart"
    cfg_class = RopeClosingCfg
    best_metric = ("metrics/success", "max")
    # Window mean at the last control step: closed round the pole (not_closed = 0).
    success_criteria: ClassVar = {"not_closed": 0.5}
    evaluation_window_s = 0.02  # the last control step: success is where the rope ends
    vector_names = VECTOR_NAMES

    def __init__(
        self,
        cfg: RopeClosingCfg,
        num_envs: int,
        device: str | torch.device = "cpu",
        seed: int = 0,
        compile: bool = False,
    ) -> None:
        self.rope = build_rope_model(cfg)
        self.n_object = cfg.n_links
        self.n_actuator = 2
        self.action_vectors = 1
        self.world = BatchedMjWorld(
            self.rope.model, num_envs, control=("mocap_pos", "mocap_quat"), cfg=cfg.mujoco, device=device
        )
        super().__init__(cfg, num_envs, device, seed, compile)
        E, dev = num_envs, self.device
        f32 = dict(dtype=torch.float32, device=dev)
        self.vertex_origin = torch.as_tensor(self.rope.vertex_origin, **f32)  # [n, 3]
        self.rest_vertices = torch.as_tensor(self.rope.rest_vertices, **f32)  # [n, 3] canonical frame
        self.grip_start = torch.as_tensor(self.rope.grip_start, **f32)  # [2, 3] canonical frame
        self.ends = torch.tensor([0, cfg.n_links - 1], device=dev)
        self.pole_pos = torch.zeros(E, 3, **f32)  # a point of the pole axis at the start grip height
        self.pole_axis = torch.zeros(E, 3, **f32)
        self.pole_axis[:, 2] = 1.0
        self.centre = torch.zeros(E, 3, **f32)  # start grip midpoint: the workspace centre
        self.frame = torch.zeros(E, 2, 3, **f32)  # (s, f): along the start grip line, towards the pole
        self.reset()

    # ----------------------------------------------------------------- geometry of the current state
    def vertices(self) -> Tensor:
        """``[E, n, 3]`` rope vertex positions (m, world)."""
        if "vertices" not in self.state_cache:  # read by the observation, rewards, metrics and the lead bound
            qpos = self.world.qpos.to(self.device)
            self.state_cache["vertices"] = self.vertex_origin + qpos.view(self.num_envs, -1, 3)
        return self.state_cache["vertices"]

    def vertex_velocities(self) -> Tensor:
        """``[E, n, 3]`` rope vertex velocities (m/s, world)."""
        return self.world.qvel.to(self.device).view(self.num_envs, -1, 3)

    def grippers(self) -> Tensor:
        """``[E, 2, 3]`` gripper (mocap) positions (m, world)."""
        return self.world.mocap_pos[:, :2].to(self.device)

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

    def success(self, terms: dict[str, Tensor] | None = None) -> Tensor:
        """``[E]`` bool: grippers within ``success_gap`` and the loop round the pole."""
        t = self.task_terms() if terms is None else terms
        return (t["gap_m"] < self.cfg.success_gap) & (t["winding"].abs() >= self.cfg.success_winding)

    # ----------------------------------------------------------------- HepiEnv hooks
    def _task_reset(self, env_ids: Tensor) -> None:
        cfg, k, dev, rng = self.cfg, env_ids.numel(), self.device, self.rng
        yaw = uniform(-cfg.yaw_range, cfg.yaw_range, (k,), rng, dev)
        shift = torch.zeros(k, 3, device=dev)
        shift[:, :2] = uniform(-cfg.shift_range, cfg.shift_range, (k, 2), rng, dev)
        turn = yaw_quat(yaw)  # [k, 4]: the start turned about the vertical keeps the rope at rest

        def place(p: Tensor) -> Tensor:  # canonical [k, P, 3] -> world
            return quat_rotate(turn.unsqueeze(1), p) + shift.unsqueeze(1)

        verts = place(self.rest_vertices.expand(k, -1, -1))
        grip = place(self.grip_start.expand(k, -1, -1))
        pole = torch.stack(
            (
                uniform(-cfg.pole_lateral, cfg.pole_lateral, (k,), rng, dev),
                uniform(*cfg.pole_offset, (k,), rng, dev),
                torch.full((k,), cfg.grip_height, device=dev),
            ),
            -1,
        )
        pole_pos = place(pole.unsqueeze(1)).squeeze(1)
        pole_quat = quat_mul(random_tilt(k, cfg.pole_tilt_max, rng, dev), turn)
        z = torch.zeros(k, 3, device=dev)
        z[:, 2] = 1.0
        axes = torch.eye(3, device=dev)[:2].expand(k, -1, -1)  # canonical (s, f) = (x, y)

        self.pole_pos[env_ids] = pole_pos
        self.pole_axis[env_ids] = quat_rotate(pole_quat, z)
        self.centre[env_ids] = grip.mean(1)
        self.frame[env_ids] = quat_rotate(turn.unsqueeze(1), axes)
        ident = torch.zeros(k, 2, 4, device=dev)
        ident[..., 0] = 1.0
        self.world.set_state(
            env_ids,
            qpos=(verts - self.vertex_origin).flatten(1),
            qvel=torch.zeros(k, self.world.nv, device=dev),
            mocap_pos=torch.cat((grip, pole_pos.unsqueeze(1)), 1),
            mocap_quat=torch.cat((ident, pole_quat.unsqueeze(1)), 1),
        )

    def _held_positions(self) -> Tensor:
        return self.vertices()[:, self.ends]

    def _workspace(self) -> tuple[Tensor, Tensor]:
        c = self.centre.view(-1, 1, 1, 3)  # against the trajectory [E, T, Na, 3]
        return c - self.cfg.workspace, c + self.cfg.workspace

    def gripper_trajectory(self) -> tuple[Tensor, Tensor]:
        """:meth:`HepiEnv.gripper_trajectory` with the grippers kept within the rope's length of each
        other (:func:`limit_span`): kinematic grippers pulling further would stretch the rope without bound."""
        pos, quat = super().gripper_trajectory()
        return limit_span(pos, self.cfg.max_span_frac * self.cfg.rope_length), quat

    def _node_vectors(self) -> tuple[Tensor, Tensor]:
        verts, vel = self.vertices(), self.vertex_velocities()
        g = self.grippers()

        def vectors(p: Tensor, v: Tensor) -> Tensor:  # [E, P, 3] each -> [E, P, 3 vectors, 3]
            return torch.stack((p, -axis_offset(p, self.pole_pos, self.pole_axis), v), 2)

        return vectors(verts, vel), vectors(g, vel[:, self.ends])

    def _reward_terms(self) -> dict[str, Tensor]:
        return {"task_error": self.task_terms()["task_error_m"]}

    def deployment_constants(self, group: str = GROUP) -> dict:
        """What the robot-side builder (:mod:`sim.tasks.hepi.line_target_robot`) needs: the target
        pose on ``target`` is the pole (a point of its axis; local z along it);
        ``line_lift`` (m) raises the line above that axis."""
        return {
            "graph_k": self.graph_k,
            "line_axis": [0.0, 0.0, 1.0],
            "line_lift": 0.0,
            "n_object_points": self.n_object,
            "n_actuators": self.n_actuator,
        }

    # ----------------------------------------------------------------- metrics
    def step_metrics(self) -> dict[str, Tensor]:
        t = self.task_terms()
        return {
            "task_error_m": t["task_error_m"],
            "gap_m": t["gap_m"],
            "loop_dist_m": t["loop_dist_m"],
            "not_closed": (~self.success(t)).float(),
        }

    def _task_episode_metrics(self, env_ids: Tensor) -> dict[str, Tensor]:
        t = self.task_terms()
        return {
            "metrics/success": self.success(t)[env_ids].float().mean(),
            "metrics/task_error": t["task_error_m"][env_ids].mean(),
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
            v = EXPERT_GAIN * (goal - self.grippers()) / cfg.max_lin_vel
            v = v / torch.linalg.vector_norm(v, dim=-1, keepdim=True).clamp(min=1.0)
            return {GROUP: v.flatten(1).unsqueeze(1)}

        return act
