"""What hepi_rope_closing and hepi_cloth_hanging share: two floating grippers move a flex round a target line.

:class:`FlexEnv` is a :class:`~sim.tasks.hepi.base.HepiEnv` over a :class:`~sim.tasks.hepi.flex_model.FlexModel`
(a MuJoCo flexcomp held at two vertices by two mocap grippers, and a mocap capsule target: the rope's
pole, the cloth's bar). It holds:

* **Geometry of the state**: :meth:`vertices` and :meth:`vertex_velocities` ``[E, n, 3]`` in graph
  node order, :meth:`grippers` ``[E, 2, 3]``; the target's pose as ``target_pos [E, 3]`` (a point of
  its axis) and ``target_axis [E, 3]`` (the task's ``line_axis`` turned into the world), and the
  **target line** (:meth:`line_point`: ``target_pos`` raised by ``line_lift``, along ``target_axis``)
  that the observation and the task error measure against.
* **Reset**: the flex's resting start (canonical frame: grippers on the x axis, flex hanging in the
  plane y = 0, target ahead on +y) turned by a random yaw and shifted, which keeps it at rest under
  gravity; the task samples its target (:meth:`_sample_target`).
* **Observation**: object nodes = the vertices, actuator nodes = the grippers; vectors per node:
  position, displacement to the target line (its closest point minus the node), linear velocity
  (a gripper's: that of its held vertex).
* **Limits**: grippers stay in a ``+-cfg.workspace`` box round the start centre, within
  ``cfg.max_span_frac`` of the held length (:meth:`_held_length`) of each other (:func:`limit_span`),
  and lead their held vertex by at most ``cfg.max_lead``.
* **Reward and metrics**: ``task_error`` from :meth:`task_terms` (``task_error_m``); per episode
  ``metrics/success`` (:meth:`success`) and ``metrics/task_error``.

A subclass sets ``line_axis`` (and ``line_lift`` when the line is not the axis), implements
:meth:`_build_flex`, :meth:`_sample_target`, :meth:`_held_length`, :meth:`task_terms`,
:meth:`success` and :meth:`step_metrics`, and may add its own buffers in :meth:`_init_task`. Its
config is a :class:`~sim.tasks.hepi.flex_config.FlexTaskCfg`.
Shapes: E envs, n vertices (object nodes), k envs being reset.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from sim.core.randomization import uniform
from sim.physics.quaternion import quat_rotate
from sim.tasks.hepi.base import GROUP, HepiEnv, mocap_world, yaw_quat
from sim.tasks.hepi.flex_config import FlexTaskCfg
from sim.tasks.hepi.flex_model import FlexModel

__all__ = ["VECTOR_NAMES", "FlexEnv", "axis_offset", "limit_span"]

VECTOR_NAMES = ("position", "target_displacement", "linear_velocity")


def axis_offset(points: Tensor, origin: Tensor, axis: Tensor) -> Tensor:
    """``[..., P, 3]``: the part of ``points - origin`` across a line (``points [..., P, 3]``, the
    line through ``origin [..., 3]`` along the unit ``axis [..., 3]``)."""
    rel = points - origin.unsqueeze(-2)
    a = axis.unsqueeze(-2)
    return rel - (rel * a).sum(-1, keepdim=True) * a


def limit_span(pos: Tensor, max_span: float) -> Tensor:
    """Gripper positions ``[..., 2, 3]`` with pairs further apart than ``max_span`` (m) pulled towards
    their midpoint to exactly that distance."""
    mid = pos.mean(-2, keepdim=True)
    half = pos - mid
    span = 2 * torch.linalg.vector_norm(half[..., :1, :], dim=-1, keepdim=True)
    return mid + half * (max_span / span.clamp(min=max_span))


class FlexEnv(HepiEnv):
    """Two grippers holding a flex, a capsule target; see the module docstring."""

    renderer = "sim.tasks.hepi.world_render:WorldRenderer"
    robot_builder = "sim.tasks.hepi.line_target_robot:GraphPart"
    best_metric = ("metrics/success", "max")
    evaluation_window_s = 0.02  # the last control step: success is where the flex ends
    vector_names = VECTOR_NAMES
    line_axis: ClassVar[tuple[float, float, float]]  # the target line's direction in the target's frame
    line_lift: float = 0.0  # m: the target line lies this far above the target's axis (world z)

    def __init__(
        self, cfg: FlexTaskCfg, num_envs: int, device: str | torch.device = "cpu", seed: int = 0, compile: bool = False
    ) -> None:
        self.flex = self._build_flex(cfg)
        self.n_object = len(self.flex.node_order)
        self.n_actuator = 2
        self.action_vectors = 1
        self.world = mocap_world(self.flex.model, num_envs, cfg, device)
        super().__init__(cfg, num_envs, device, seed, compile)
        E, dev = num_envs, self.device
        f32 = dict(dtype=torch.float32, device=dev)
        self.node_order = torch.as_tensor(self.flex.node_order, device=dev)  # [n] flexcomp vertex of each node
        self.flex_origin = torch.as_tensor(self.flex.vertex_origin, **f32)  # [n, 3] at qpos = 0, flexcomp order
        self.vertex_origin = self.flex_origin[self.node_order]  # [n, 3] node order
        self.rest_vertices = torch.as_tensor(self.flex.rest_vertices, **f32)  # [n, 3] flexcomp order, canonical
        self.grip_start = torch.as_tensor(self.flex.grip_start, **f32)  # [2, 3] canonical frame
        self.held_nodes = torch.tensor(self.flex.held_nodes, device=dev)  # [2] the node each gripper holds
        self.target_pos = torch.zeros(E, 3, **f32)  # a point of the target's axis (its mocap position)
        self.target_axis = torch.zeros(E, 3, **f32)
        self.target_axis[:] = torch.tensor(self.line_axis, **f32)
        self.centre = torch.zeros(E, 3, **f32)  # start grip midpoint: the workspace centre
        self.frame = torch.zeros(E, 2, 3, **f32)  # (s, f): along the start grip line, towards the target
        self._init_task()
        self.reset()

    # ----------------------------------------------------------------- task hooks (subclasses)
    def _build_flex(self, cfg: FlexTaskCfg) -> FlexModel:
        """The task's compiled flex scene and its resting start (called first in ``__init__``)."""
        raise NotImplementedError

    def _init_task(self) -> None:
        """The task's own buffers and settings (called once, after the common ones, before the first reset)."""

    def _sample_target(self, k: int, turn: Tensor) -> tuple[Tensor, Tensor]:
        """The target of ``k`` new episodes whose start is turned by ``turn [k, 4]``: ``(position [k, 3]``
        in the canonical start frame, ``orientation [k, 4]`` in the world)."""
        raise NotImplementedError

    def _held_length(self) -> float:
        """m: the flex's length between its held vertices when straight (the span limit's unit)."""
        raise NotImplementedError

    def task_terms(self) -> dict[str, Tensor]:
        """Task quantities ``{name: [E]}``, among them ``task_error_m`` (memoise in ``state_cache``)."""
        raise NotImplementedError

    def success(self, terms: dict[str, Tensor] | None = None) -> Tensor:
        """``[E]`` bool: the task done, from ``terms`` (default :meth:`task_terms`)."""
        raise NotImplementedError

    # ----------------------------------------------------------------- geometry of the current state
    def vertices(self) -> Tensor:
        """``[E, n, 3]`` flex vertex positions (m, world), node order."""
        if "vertices" not in self.state_cache:  # read by the observation, rewards, metrics and the lead bound
            qpos = self.world.qpos.to(self.device).view(self.num_envs, -1, 3)[:, self.node_order]
            self.state_cache["vertices"] = self.vertex_origin + qpos
        return self.state_cache["vertices"]

    def vertex_velocities(self) -> Tensor:
        """``[E, n, 3]`` flex vertex velocities (m/s, world), node order."""
        return self.world.qvel.to(self.device).view(self.num_envs, -1, 3)[:, self.node_order]

    def grippers(self) -> Tensor:
        """``[E, 2, 3]`` gripper (mocap) positions (m, world)."""
        return self.world.mocap_pos[:, :2].to(self.device)

    def line_point(self) -> Tensor:
        """``[E, 3]`` a point of the target line: ``target_pos`` raised by ``line_lift``."""
        if not self.line_lift:  # the axis itself (the rope's pole): no copy, and exactly its values
            return self.target_pos
        point = self.target_pos.clone()
        point[:, 2] += self.line_lift
        return point

    # ----------------------------------------------------------------- HepiEnv hooks
    def _task_reset(self, env_ids: Tensor) -> None:
        cfg, k, dev, rng = self.cfg, env_ids.numel(), self.device, self.rng
        yaw = uniform(-cfg.yaw_range, cfg.yaw_range, (k,), rng, dev)
        shift = torch.zeros(k, 3, device=dev)
        shift[:, :2] = uniform(-cfg.shift_range, cfg.shift_range, (k, 2), rng, dev)
        turn = yaw_quat(yaw)  # [k, 4]: the start turned about the vertical keeps the flex at rest

        def place(p: Tensor) -> Tensor:  # canonical [k, P, 3] -> world
            return quat_rotate(turn.unsqueeze(1), p) + shift.unsqueeze(1)

        verts = place(self.rest_vertices.expand(k, -1, -1))
        grip = place(self.grip_start.expand(k, -1, -1))
        target, target_quat = self._sample_target(k, turn)
        target_pos = place(target.unsqueeze(1)).squeeze(1)
        line_axis = torch.zeros(k, 3, device=dev)
        line_axis[:] = torch.tensor(self.line_axis, device=dev)
        axes = torch.eye(3, device=dev)[:2].expand(k, -1, -1)  # canonical (s, f) = (x, y)

        self.target_pos[env_ids] = target_pos
        self.target_axis[env_ids] = quat_rotate(target_quat, line_axis)
        self.centre[env_ids] = grip.mean(1)
        self.frame[env_ids] = quat_rotate(turn.unsqueeze(1), axes)
        ident = torch.zeros(k, 2, 4, device=dev)
        ident[..., 0] = 1.0
        self.world.set_state(
            env_ids,
            qpos=(verts - self.flex_origin).flatten(1),
            qvel=torch.zeros(k, self.world.nv, device=dev),
            mocap_pos=torch.cat((grip, target_pos.unsqueeze(1)), 1),
            mocap_quat=torch.cat((ident, target_quat.unsqueeze(1)), 1),
        )

    def _held_positions(self) -> Tensor:
        return self.vertices()[:, self.held_nodes]

    def _workspace(self) -> tuple[Tensor, Tensor]:
        c = self.centre.view(-1, 1, 1, 3)  # against the trajectory [E, T, Na, 3]
        return c - self.cfg.workspace, c + self.cfg.workspace

    def gripper_trajectory(self) -> tuple[Tensor, Tensor]:
        """:meth:`HepiEnv.gripper_trajectory` with the grippers kept within ``max_span_frac`` of the held
        length of each other (:func:`limit_span`): kinematic grippers pulling further would stretch the
        flex without bound (or tear it)."""
        pos, quat = super().gripper_trajectory()
        return limit_span(pos, self.cfg.max_span_frac * self._held_length()), quat

    def _node_vectors(self) -> tuple[Tensor, Tensor]:
        verts, vel = self.vertices(), self.vertex_velocities()
        point = self.line_point()

        def vectors(p: Tensor, v: Tensor) -> Tensor:  # [E, P, 3] each -> [E, P, 3 vectors, 3]
            return torch.stack((p, -axis_offset(p, point, self.target_axis), v), 2)

        return vectors(verts, vel), vectors(self.grippers(), vel[:, self.held_nodes])

    def _reward_terms(self) -> dict[str, Tensor]:
        return {"task_error": self.task_terms()["task_error_m"]}

    def deployment_constants(self, group: str = GROUP) -> dict:
        """What the robot-side builder (:mod:`sim.tasks.hepi.line_target_robot`) needs: the target
        pose on ``target`` is a point of the target's axis with local ``line_axis`` along it;
        ``line_lift`` (m) raises the line above that axis."""
        return {
            "graph_k": self.graph_k,
            "line_axis": [float(a) for a in self.line_axis],
            "line_lift": float(self.line_lift),
            "n_object_points": self.n_object,
            "n_actuators": self.n_actuator,
        }

    # ----------------------------------------------------------------- metrics
    def _task_episode_metrics(self, env_ids: Tensor) -> dict[str, Tensor]:
        t = self.task_terms()
        return {
            "metrics/success": self.success(t)[env_ids].float().mean(),
            "metrics/task_error": t["task_error_m"][env_ids].mean(),
        }

    # ----------------------------------------------------------------- baseline helpers
    def proportional_action(self, goal: Tensor, gain: float) -> dict[str, Tensor]:
        """The action that drives the grippers to ``goal [E, 2, 3]`` (m) at ``gain`` (1/s), each
        gripper's velocity capped at ``max_lin_vel``: ``{GROUP: [E, 1, 6]}``."""
        v = gain * (goal - self.grippers()) / self.cfg.max_lin_vel
        v = v / torch.linalg.vector_norm(v, dim=-1, keepdim=True).clamp(min=1.0)
        return {GROUP: v.flatten(1).unsqueeze(1)}
