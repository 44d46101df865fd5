"""hepi_insertion: a peg of one of 8 cross-sections, held by floating grippers, into its matching hole.

After HEPi's rigid insertion (Hoang et al., ICLR 2025): 25 Hz control, 4 s episodes, physics
0.01 s. The peg (plus, pentagon, star, tee, diamond, heart, hexagon or triangle; 3 sizes each by
default) is welded to one gripper at its top centre, or to two (``n_actuators=2``) at two points
of its top face. The hole's pose is sampled in 3D (position in a box, any yaw, its axis tilted up
to ``hole_tilt_max``); the peg starts above it, offset and turned. Training samples
``cfg.shapes`` (6 shapes; star and heart are held out, :data:`HELD_OUT_SHAPES`); evaluate those
with ``task.shapes=[star,heart]``. Geometry and MJCF: :mod:`sim.tasks.hepi.insertion_model`.

Graph observation (:class:`sim.tasks.hepi.base.HepiEnv`): 24 object nodes, the peg's outline
vertices on its bottom and top faces, and one node per gripper (its held point); vectors per node,
world frame: position, displacement to its target (the same point of the peg in the inserted
pose), linear velocity, the peg's angular velocity. Action per gripper: ``[lin_vel(3), ang_vel(3)]``
world frame, scaled by ``max_lin_vel`` (0.1 m/s) and ``max_ang_vel`` (1 rad/s).

Reward per step: ``-0.8 * mean_k |x_k - x_k*|`` over the 24 keypoints (position and orientation in
one term), ``-2e-3 |a_t - a_t-1|^2``. Success: that mean error below ``success_threshold`` (1 cm)
with the peg's bottom at least half the hole depth in, at the end of the episode.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor

from sim.core.env import Scenario
from sim.core.randomization import uniform
from sim.physics.quaternion import cross, quat_conj, quat_mul, quat_rotate, quat_to_matrix
from sim.tasks.hepi.base import GROUP, HepiEnv, mocap_world, random_tilt, yaw_quat
from sim.tasks.hepi.graph import SceneGraph
from sim.tasks.hepi.insertion_config import HELD_OUT_SHAPES, InsertionCfg
from sim.tasks.hepi.insertion_model import build_variants
from sim.tasks.hepi.scenarios import insertion_scenarios
from sim.tasks.hepi.shapes import N_OUTLINE, SHAPES

__all__ = ["HELD_OUT_SHAPES", "InsertionEnv", "RigidPegGraph"]

PRE_INSERT_HEIGHT = 0.01  # m: the expert's pre-insertion pose, peg bottom this far above the opening
EXPERT_GAIN = 8.0  # 1/s: the expert's proportional gains (position and attitude)
EXPERT_ALIGN_TOL = (0.001, 0.03)  # m, rad: aligned enough to go down (the clearance is 1.5 mm)


def rotation_vector(q: Tensor) -> Tensor:
    """The rotation vector (axis times angle in [0, pi], rad) of unit quaternions ``[..., 4]``, ``[..., 3]``."""
    q = torch.where(q[..., :1] < 0, -q, q)  # the short way round
    s = torch.linalg.vector_norm(q[..., 1:], dim=-1, keepdim=True)
    angle = 2.0 * torch.atan2(s, q[..., :1])
    return q[..., 1:] * torch.where(s > 1e-9, angle / s.clamp(min=1e-9), torch.full_like(s, 2.0))


class RigidPegGraph(SceneGraph):
    """The scene graph of a rigid peg: its keypoints' k nearest neighbours never change (rigid motions
    keep distances), so they are found once per variant, not every step.

    ``variant_keypoints [Nv, No, 3]`` in the peg frame; ``variant`` (``[E]`` long, set by the env and
    updated in place) says which variant each env holds.
    """

    def __init__(self, *args, variant_keypoints: Tensor, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.variant_senders = super().knn_senders(variant_keypoints.to(self.device))  # [Nv, No * k]
        self.variant = torch.zeros(1, dtype=torch.long, device=self.device)

    def knn_senders(self, object_pos: Tensor, object_mask: Tensor | None = None) -> Tensor:
        return self.variant_senders[self.variant]


class InsertionEnv(HepiEnv):
    """Batched peg-in-hole insertion with floating grippers; see the module docstring."""

    task_name = "hepi_insertion"
    cfg_class = InsertionCfg
    best_metric = ("metrics/success", "max")
    # Window means at the last step: keypoint error below 1 cm (InsertionCfg.success_threshold) and
    # the peg in the hole (not_inserted = 0).
    success_criteria: ClassVar = {"keypoint_err_m": 0.01, "not_inserted": 0.5}
    evaluation_window_s = 0.04  # the last control step: success is where the peg ends
    renderer = "sim.tasks.hepi.insertion_render:InsertionRenderer"
    robot_builder = "sim.tasks.hepi.insertion_robot:GraphPart"

    @classmethod
    def scenarios(cls) -> dict[str, Scenario]:
        """Model variants a real setup would bring (:mod:`sim.tasks.hepi.scenarios`)."""
        return insertion_scenarios()

    def __init__(
        self,
        cfg: InsertionCfg,
        num_envs: int,
        device: str | torch.device = "cpu",
        seed: int = 0,
        compile: bool = False,
    ) -> None:
        self.variants = build_variants(cfg)
        self.n_actuator = cfg.n_actuators
        self.n_object = 2 * N_OUTLINE
        self.action_vectors = 2
        self.world = mocap_world([v.model for v in self.variants], num_envs, cfg, device)
        super().__init__(cfg, num_envs, device, seed, compile)
        E, dev = num_envs, self.device
        f32 = dict(dtype=torch.float32, device=dev)
        self.keypoints_local = torch.as_tensor(np.stack([v.keypoints for v in self.variants]), **f32)  # [Nv, 24, 3]
        self.grasp_local = torch.as_tensor(np.stack([v.grasp for v in self.variants]), **f32)  # [Nv, Na, 3]
        self.variant_shape = torch.as_tensor([SHAPES.index(v.shape) for v in self.variants], device=dev)
        self.variant_size = torch.tensor([v.size for v in self.variants], **f32)  # m, outline circumradius
        self.variant = torch.zeros(E, dtype=torch.long, device=dev)
        self.graph.variant = self.variant  # the same tensor: variant changes are seen by the graph
        self.hole_pos = torch.zeros(E, 3, device=dev)
        self.hole_quat = torch.zeros(E, 4, device=dev)
        self.hole_quat[:, 0] = 1.0
        self._ws_low = torch.tensor(cfg.hole_pos_low, **f32) - cfg.workspace_margin
        self._ws_high = torch.tensor(cfg.hole_pos_high, **f32) + cfg.workspace_margin
        self.reset()

    def _make_graph(self, device: torch.device) -> RigidPegGraph:
        keypoints = torch.as_tensor(np.stack([v.keypoints for v in self.variants]), dtype=torch.float32)
        return self._scene_graph(device, RigidPegGraph, variant_keypoints=keypoints)

    # ----------------------------------------------------------------- geometry of the current state
    @property
    def shape(self) -> Tensor:
        """``[E]`` long: each env's peg shape, an index into :data:`sim.tasks.hepi.shapes.SHAPES`."""
        return self.variant_shape[self.variant]

    def frames(self) -> dict[str, Tensor]:
        """The peg's and its target's frames now, memoised until the state changes: ``pos``, ``quat``,
        ``rot [E, 3, 3]`` of the peg frame (bottom-face centroid, z along its axis), its ``vel`` and
        ``omega`` (world frame), and ``target_pos``, ``target_rot``: the peg frame fully inserted
        (bottom on the hole floor, outlines aligned)."""
        f = self.state_cache.get("frames")
        if f is None:
            qpos, qvel = self.world.qpos.to(self.device), self.world.qvel.to(self.device)
            rot = quat_to_matrix(qpos[:, 3:7])
            target_rot = quat_to_matrix(self.hole_quat)
            f = {
                "pos": qpos[:, :3],
                "quat": qpos[:, 3:7],
                "rot": rot,
                "vel": qvel[:, :3],
                "omega": (rot @ qvel[:, 3:6, None]).squeeze(-1),  # a free joint's angular velocity is local
                "target_pos": self.hole_pos - self.cfg.hole_depth * target_rot[:, :, 2],
                "target_rot": target_rot,
            }
            self.state_cache["frames"] = f
        return f

    def peg_pose(self) -> tuple[Tensor, Tensor]:
        """``(pos [E, 3], quat [E, 4])`` of the peg frame (bottom-face centroid, z along the axis)."""
        f = self.frames()
        return f["pos"], f["quat"]

    def target_pose(self) -> tuple[Tensor, Tensor]:
        """``(pos [E, 3], quat [E, 4])``: the peg frame when fully inserted (bottom on the hole floor)."""
        return self.frames()["target_pos"], self.hole_quat

    @staticmethod
    def _points(pos: Tensor, rot: Tensor, local: Tensor) -> Tensor:
        """Points ``local [E, P, 3]`` of a frame at ``(pos [E, 3], rot [E, 3, 3])`` in the world, ``[E, P, 3]``."""
        return pos.unsqueeze(1) + local @ rot.transpose(1, 2)

    def keypoints(self) -> tuple[Tensor, Tensor]:
        """``(keypoints [E, 24, 3], their targets [E, 24, 3])`` world m."""
        f, local = self.frames(), self.keypoints_local[self.variant]
        return self._points(f["pos"], f["rot"], local), self._points(f["target_pos"], f["target_rot"], local)

    def keypoint_error(self) -> Tensor:
        """``[E]`` m: mean distance of the peg keypoints to their targets."""
        err = self.state_cache.get("keypoint_err")
        if err is None:
            kp, target = self.keypoints()
            err = self.state_cache["keypoint_err"] = torch.linalg.vector_norm(kp - target, dim=-1).mean(-1)
        return err

    def inserted(self) -> Tensor:
        """``[E]`` bool: the peg's bottom centre lies at least half the hole depth in, inside its outline
        radius from the hole axis."""
        pos, _ = self.peg_pose()
        rel = quat_rotate(quat_conj(self.hole_quat), pos - self.hole_pos)
        size = self.variant_size[self.variant]
        return (rel[:, 2] < -0.5 * self.cfg.hole_depth) & (torch.linalg.vector_norm(rel[:, :2], dim=-1) < size)

    # ----------------------------------------------------------------- HepiEnv hooks
    def _task_reset(self, env_ids: Tensor) -> None:
        cfg, k, dev, rng = self.cfg, env_ids.numel(), self.device, self.rng
        variant = torch.randint(0, len(self.variants), (k,), generator=rng, device=dev)
        lo, hi = torch.tensor(cfg.hole_pos_low, device=dev), torch.tensor(cfg.hole_pos_high, device=dev)
        hole_pos = lo + (hi - lo) * torch.rand(k, 3, generator=rng, device=dev)
        hole_quat = quat_mul(
            random_tilt(k, cfg.hole_tilt_max, rng, dev), yaw_quat(uniform(-math.pi, math.pi, (k,), rng, dev))
        )
        # Peg start in the hole frame: bottom centre above the opening, offset, turned and tilted.
        rel_pos = torch.stack(
            (
                uniform(-cfg.start_lateral, cfg.start_lateral, (k,), rng, dev),
                uniform(-cfg.start_lateral, cfg.start_lateral, (k,), rng, dev),
                uniform(*cfg.start_height, (k,), rng, dev),
            ),
            -1,
        )
        rel_quat = quat_mul(
            random_tilt(k, cfg.start_tilt_max, rng, dev),
            yaw_quat(uniform(-cfg.start_yaw_max, cfg.start_yaw_max, (k,), rng, dev)),
        )
        peg_pos = hole_pos + quat_rotate(hole_quat, rel_pos)
        peg_quat = quat_mul(hole_quat, rel_quat)
        # Grippers at their grasp points with the peg's attitude (the welds' reference pose), then the hole.
        grasp = self._points(peg_pos, quat_to_matrix(peg_quat), self.grasp_local[variant])  # [k, Na, 3]
        mocap_pos = torch.cat((grasp, hole_pos.unsqueeze(1)), 1)
        mocap_quat = torch.cat((peg_quat.unsqueeze(1).expand(-1, self.n_actuator, -1), hole_quat.unsqueeze(1)), 1)

        self.variant[env_ids] = variant
        self.hole_pos[env_ids] = hole_pos
        self.hole_quat[env_ids] = hole_quat
        self.world.set_model(env_ids, variant)
        self.world.set_state(
            env_ids,
            qpos=torch.cat((peg_pos, peg_quat), -1),
            qvel=torch.zeros(k, 6, device=dev),
            mocap_pos=mocap_pos,
            mocap_quat=mocap_quat,
        )

    def _held_positions(self) -> Tensor:
        f = self.frames()
        return self._points(f["pos"], f["rot"], self.grasp_local[self.variant])

    def _workspace(self) -> tuple[Tensor, Tensor]:
        return self._ws_low, self._ws_high

    def _node_vectors(self) -> tuple[Tensor, Tensor]:
        f = self.frames()
        w = f["omega"]
        zero = torch.zeros_like(w[:, 0])
        # [w]x, so that (w x r) = r @ [w]x^T for row vectors r.
        skew = torch.stack((zero, -w[:, 2], w[:, 1], w[:, 2], zero, -w[:, 0], -w[:, 1], w[:, 0], zero), -1)
        skew = skew.view(-1, 3, 3)

        def vectors(local: Tensor) -> Tensor:
            arm = local @ f["rot"].transpose(1, 2)  # points relative to the peg origin, world frame
            points = f["pos"].unsqueeze(1) + arm
            targets = self._points(f["target_pos"], f["target_rot"], local)
            point_vel = f["vel"].unsqueeze(1) + arm @ skew.transpose(1, 2)
            return torch.stack((points, targets - points, point_vel, w.unsqueeze(1).expand_as(points)), 2)

        return vectors(self.keypoints_local[self.variant]), vectors(self.grasp_local[self.variant])

    def _reward_terms(self) -> dict[str, Tensor]:
        return {"keypoint_distance": self.keypoint_error()}

    # ----------------------------------------------------------------- metrics
    def step_metrics(self) -> dict[str, Tensor]:
        return {"keypoint_err_m": self.keypoint_error(), "not_inserted": (~self.inserted()).float()}

    def success(self) -> Tensor:
        """``[E]`` bool: inserted with the mean keypoint error below ``success_threshold``."""
        return (self.keypoint_error() < self.cfg.success_threshold) & self.inserted()

    def _task_episode_metrics(self, env_ids: Tensor) -> dict[str, Tensor]:
        return {
            "metrics/success": self.success()[env_ids].float().mean(),
            "metrics/keypoint_err_m": self.keypoint_error()[env_ids].mean(),
        }

    def deployment_constants(self, group: str = GROUP) -> dict:
        """What the robot-side builder (:mod:`sim.tasks.hepi.insertion_robot`) needs: the keypoints'
        and grasp points' inserted positions in the hole frame (``target_points [24][3]``,
        ``grasp_target_points [Na][3]``) and k. They are those of the FIRST variant (first shape,
        smallest size): export with ``task.shapes=[<peg>] task.n_sizes=1 task.size_range=[s,s]`` for
        the peg a robot holds."""
        v = self.variants[0]
        depth = np.array([0.0, 0.0, -self.cfg.hole_depth])
        return {
            "graph_k": self.graph_k,
            "peg": {"shape": v.shape, "size_m": v.size},
            "target_points": (v.keypoints + depth).tolist(),
            "grasp_target_points": (v.grasp + depth).tolist(),
        }

    # ----------------------------------------------------------------- baselines
    def expert_policy(self):
        """A scripted proportional controller on the true state (the baseline beside learned policies):
        bring the peg to the pre-insertion pose (aligned with the hole, bottom ``PRE_INSERT_HEIGHT``
        above the opening), then, once aligned within 1 mm and 0.03 rad (or already in the hole),
        down to the inserted pose, while correcting the alignment. Each gripper gets the peg's
        commanded twist at its point."""
        cfg = self.cfg

        def act(obs) -> dict[str, Tensor]:
            pos, quat = self.peg_pose()
            target_pos, target_quat = self.target_pose()
            axis = quat_rotate(self.hole_quat, torch.tensor([0.0, 0.0, 1.0], device=self.device).expand_as(pos))
            pre_pos = target_pos + (cfg.hole_depth + PRE_INSERT_HEIGHT) * axis
            rot_err = rotation_vector(quat_mul(target_quat, quat_conj(quat)))  # world frame
            off = pos - target_pos
            along = (off * axis).sum(-1, keepdim=True)
            lateral = torch.linalg.vector_norm(off - along * axis, dim=-1)
            # Misalignment in tolerances: <= 1 goes down to the target, >= 2 back up to the pre-insertion
            # pose, in between part way (continuous, so the peg does not chatter at the threshold).
            mis = torch.maximum(
                lateral / EXPERT_ALIGN_TOL[0], torch.linalg.vector_norm(rot_err, dim=-1) / EXPERT_ALIGN_TOL[1]
            )
            up = (mis - 1.0).clamp(0.0, 1.0)
            up = torch.where(along.squeeze(-1) < cfg.hole_depth, 0.0, up)  # bottom in the hole: keep going
            goal = target_pos + up.unsqueeze(-1) * (pre_pos - target_pos)
            v = EXPERT_GAIN * (goal - pos)
            omega = EXPERT_GAIN * rot_err
            held = self._held_positions()
            v_held = v.unsqueeze(1) + cross(omega.unsqueeze(1), held - pos.unsqueeze(1))  # [E, Na, 3]
            a = torch.stack(
                (v_held / cfg.max_lin_vel, (omega / cfg.max_ang_vel).unsqueeze(1).expand_as(v_held)), 2
            )  # [E, Na, 2, 3]
            return {GROUP: a.clamp(-1.0, 1.0).flatten(1).unsqueeze(1)}

        return act
