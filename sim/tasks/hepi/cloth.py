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

Graph observation (:class:`sim.tasks.hepi.base.HepiEnv`): ``n_side^2`` object nodes (the cloth
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

from sim.core.randomization import uniform
from sim.mujoco.world import BatchedMjWorld
from sim.physics.quaternion import cross, quat_mul, quat_rotate
from sim.tasks.hepi.base import GROUP, HepiEnv
from sim.tasks.hepi.cloth_config import ClothHangingCfg
from sim.tasks.hepi.cloth_model import build_cloth_model
from sim.tasks.hepi.insertion import yaw_quat
from sim.tasks.hepi.rope import VECTOR_NAMES, axis_offset, limit_span

__all__ = ["ClothHangingEnv"]

# The scripted expert: per gripper, waypoints around the bar point nearest to it (n: horizontal,
# across the bar, away from the cloth's start; z up from the bar top), phase switch times, gain.
EXPERT_ABOVE = (-0.04, 0.08)  # m (along n, along z): phase 1, above the bar's near side
EXPERT_OVER = (0.06, 0.06)  # m: phase 2, above its far side
EXPERT_DOWN_N = 0.05  # m along n: phase 3, down the far side (to half the cloth length below the top)
# Phases switch on the gripper's own position, not on the clock, so the expert's action is a function
# of what the policy sees (a DAgger student cannot imitate a timed script): phase 2 once the gripper
# is this high above the bar top, phase 3 once it is this far across it.
EXPERT_SWITCH = (0.045, 0.04)  # m: (phase 2: z above the top, phase 3: n across the top)
EXPERT_GAIN = 5.0  # 1/s
EXPERT_AXIS_MARGIN = 0.05  # m: waypoints stay this far inside the bar's ends


class ClothHangingEnv(HepiEnv):
    """Batched cloth hanging over a bar with two floating grippers; see the module docstring."""

    task_name = "hepi_cloth_hanging"
    renderer = "sim.tasks.hepi.world_render:WorldRenderer"
    robot_builder = "sim.tasks.hepi.line_target_robot:GraphPart"
    cfg_class = ClothHangingCfg
    best_metric = ("metrics/success", "max")
    # Window mean at the last control step: hung over the bar (not_hung = 0).
    success_criteria: ClassVar = {"not_hung": 0.5}
    evaluation_window_s = 0.02  # the last control step: success is where the cloth ends
    vector_names = VECTOR_NAMES

    def __init__(
        self,
        cfg: ClothHangingCfg,
        num_envs: int,
        device: str | torch.device = "cpu",
        seed: int = 0,
        compile: bool = False,
    ) -> None:
        self.cloth = build_cloth_model(cfg)
        n = cfg.n_side
        self.n_object = n * n
        self.n_actuator = 2
        self.action_vectors = 1
        self.world = BatchedMjWorld(
            self.cloth.model, num_envs, control=("mocap_pos", "mocap_quat"), cfg=cfg.mujoco, device=device
        )
        super().__init__(cfg, num_envs, device, seed, compile)
        E, dev = num_envs, self.device
        f32 = dict(dtype=torch.float32, device=dev)
        # Node order: row by row from the held edge; order[j] = flexcomp vertex of node j.
        self.order = torch.as_tensor(self.cloth.node_order, device=dev)
        self.vertex_origin = torch.as_tensor(self.cloth.vertex_origin, **f32)[self.order]  # [n^2, 3]
        self.rest_qpos = torch.as_tensor(self.cloth.rest_qpos, **f32)  # [nq] flexcomp order
        self.grip_start = torch.as_tensor(self.cloth.grip_start, **f32)  # [2, 3] canonical frame
        self.corners = torch.tensor([0, n - 1], device=dev)  # node indices of the held corners
        self.mid_rows = torch.tensor([(n - 1) // 2, n // 2], device=dev)  # the middle row (two when n is even)
        self.bar_pos = torch.zeros(E, 3, **f32)  # bar centre
        self.bar_axis = torch.zeros(E, 3, **f32)
        self.bar_axis[:, 0] = 1.0
        self.centre = torch.zeros(E, 3, **f32)  # start grip midpoint: the workspace centre
        self._lift = cfg.bar_radius + cfg.cloth_radius  # bar top line above the axis
        self.reset()

    # ----------------------------------------------------------------- geometry of the current state
    def vertices(self) -> Tensor:
        """``[E, n^2, 3]`` cloth vertex positions (m, world), node order (row by row from the held edge)."""
        if "vertices" not in self.state_cache:  # read by the observation, rewards, metrics and the lead bound
            qpos = self.world.qpos.to(self.device).view(self.num_envs, -1, 3)[:, self.order]
            self.state_cache["vertices"] = self.vertex_origin + qpos
        return self.state_cache["vertices"]

    def vertex_velocities(self) -> Tensor:
        """``[E, n^2, 3]`` cloth vertex velocities (m/s, world), node order."""
        return self.world.qvel.to(self.device).view(self.num_envs, -1, 3)[:, self.order]

    def grippers(self) -> Tensor:
        """``[E, 2, 3]`` gripper (mocap) positions (m, world)."""
        return self.world.mocap_pos[:, :2].to(self.device)

    def bar_top(self) -> Tensor:
        """``[E, 3]`` a point of the bar's top line (above the bar centre)."""
        top = self.bar_pos.clone()
        top[:, 2] += self._lift
        return top

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

    # ----------------------------------------------------------------- HepiEnv hooks
    def _task_reset(self, env_ids: Tensor) -> None:
        cfg, k, dev, rng = self.cfg, env_ids.numel(), self.device, self.rng
        yaw = uniform(-cfg.yaw_range, cfg.yaw_range, (k,), rng, dev)
        shift = torch.zeros(k, 3, device=dev)
        shift[:, :2] = uniform(-cfg.shift_range, cfg.shift_range, (k, 2), rng, dev)
        turn = yaw_quat(yaw)  # [k, 4]: the start turned about the vertical keeps the cloth at rest

        def place(p: Tensor) -> Tensor:  # canonical [k, P, 3] -> world
            return quat_rotate(turn.unsqueeze(1), p) + shift.unsqueeze(1)

        origin = torch.as_tensor(self.cloth.vertex_origin, dtype=torch.float32, device=dev)  # flexcomp order
        verts = place((origin + self.rest_qpos.view(-1, 3)).expand(k, -1, -1))
        grip = place(self.grip_start.expand(k, -1, -1))
        bar = torch.stack(
            (
                uniform(-cfg.bar_lateral, cfg.bar_lateral, (k,), rng, dev),
                uniform(*cfg.bar_offset, (k,), rng, dev),
                cfg.grip_height - uniform(*cfg.bar_drop, (k,), rng, dev),
            ),
            -1,
        )
        bar_pos = place(bar.unsqueeze(1)).squeeze(1)
        bar_quat = quat_mul(turn, yaw_quat(uniform(-cfg.bar_yaw_max, cfg.bar_yaw_max, (k,), rng, dev)))
        x = torch.zeros(k, 3, device=dev)
        x[:, 0] = 1.0

        self.bar_pos[env_ids] = bar_pos
        self.bar_axis[env_ids] = quat_rotate(bar_quat, x)
        self.centre[env_ids] = grip.mean(1)
        ident = torch.zeros(k, 2, 4, device=dev)
        ident[..., 0] = 1.0
        self.world.set_state(
            env_ids,
            qpos=(verts - origin).flatten(1),
            qvel=torch.zeros(k, self.world.nv, device=dev),
            mocap_pos=torch.cat((grip, bar_pos.unsqueeze(1)), 1),
            mocap_quat=torch.cat((ident, bar_quat.unsqueeze(1)), 1),
        )

    def _held_positions(self) -> Tensor:
        return self.vertices()[:, self.corners]

    def _workspace(self) -> tuple[Tensor, Tensor]:
        c = self.centre.view(-1, 1, 1, 3)  # against the trajectory [E, T, Na, 3]
        return c - self.cfg.workspace, c + self.cfg.workspace

    def gripper_trajectory(self) -> tuple[Tensor, Tensor]:
        """:meth:`HepiEnv.gripper_trajectory` with the grippers kept within the held edge's length of
        each other (:func:`limit_span`): kinematic grippers pulling further would tear the cloth."""
        pos, quat = super().gripper_trajectory()
        return limit_span(pos, self.cfg.max_span_frac * self.cfg.cloth_size), quat

    def _node_vectors(self) -> tuple[Tensor, Tensor]:
        verts, vel = self.vertices(), self.vertex_velocities()
        top = self.bar_top()

        def vectors(p: Tensor, v: Tensor) -> Tensor:  # [E, P, 3] each -> [E, P, 3 vectors, 3]
            return torch.stack((p, -axis_offset(p, top, self.bar_axis), v), 2)

        return vectors(verts, vel), vectors(self.grippers(), vel[:, self.corners])

    def _reward_terms(self) -> dict[str, Tensor]:
        return {"task_error": self.task_terms()["task_error_m"]}

    def deployment_constants(self, group: str = GROUP) -> dict:
        """What the robot-side builder (:mod:`sim.tasks.hepi.line_target_robot`) needs: the target
        pose on ``target`` is the bar (its centre; local x along its axis);
        ``line_lift`` (m) raises the line above that axis."""
        return {
            "graph_k": self.graph_k,
            "line_axis": [1.0, 0.0, 0.0],
            "line_lift": float(self._lift),
            "n_object_points": self.n_object,
            "n_actuators": self.n_actuator,
        }

    # ----------------------------------------------------------------- metrics
    def step_metrics(self) -> dict[str, Tensor]:
        t = self.task_terms()
        return {"task_error_m": t["task_error_m"], "not_hung": (~self.success(t)).float()}

    def _task_episode_metrics(self, env_ids: Tensor) -> dict[str, Tensor]:
        t = self.task_terms()
        return {
            "metrics/success": self.success(t)[env_ids].float().mean(),
            "metrics/task_error": t["task_error_m"][env_ids].mean(),
        }

    # ----------------------------------------------------------------- baseline
    def expert_policy(self):
        """A scripted baseline on the true state: each gripper goes above the near side of the bar
        point nearest to it, over to the far side, then down it to half the cloth length below the
        bar top, with a proportional controller. The phase is read from the gripper's position
        across and above the bar (``EXPERT_SWITCH``), never from the time."""
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
            over, high = n_pos > EXPERT_SWITCH[1], z_pos > EXPERT_SWITCH[0]
            n_off = torch.where(over, EXPERT_DOWN_N, torch.where(high, EXPERT_OVER[0], EXPERT_ABOVE[0]))
            z_off = torch.where(high, EXPERT_OVER[1], EXPERT_ABOVE[1])
            z_off = torch.where(over, -cfg.cloth_size / 2, z_off)
            goal = base + n_off * n_far + z_off * up
            v = EXPERT_GAIN * (goal - g) / cfg.max_lin_vel
            v = v / torch.linalg.vector_norm(v, dim=-1, keepdim=True).clamp(min=1.0)
            return {GROUP: v.flatten(1).unsqueeze(1)}

        return act
