"""cable_load: N decentralised MAVs carry a cable-suspended load to a 6-DoF goal pose.

Group ``mavs`` (N agents, one shared or per-agent policy). Each agent sees only its own state,
the load pose/velocity and the goal, never the other MAVs (decentralised execution); the critic
gets the global ``state``. Action per MAV (5, in [-1, 1]): linear acceleration (world, 3) and
roll/pitch body-rate feed-forward (2), tracked by the INDI controller at ``decimation`` x the
policy rate; physics runs ``physics_substeps`` x the controller rate.

This module holds the env's state, observations, rewards and terminations; beside it: ``spec.py`` (observation and
action layout), ``physics.py`` (the torch control loop), ``reset.py`` (the split reset), ``backends.py`` (torch or
the C kernels, ``native.py``), ``scenarios.py`` (evaluation cases), ``deployment.py`` (the robot side).

Shapes: E = num_envs, N = num_mavs, R = rotors per MAV.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import fields, replace
from typing import Any

import torch
from torch import Tensor

from sim.core import native
from sim.core.env import MultiAgentEnv, Obs, Scenario, env_rows
from sim.core.randomization import DelayBuffer
from sim.core.spec import EnvSpec
from sim.physics import components as soa
from sim.physics.controllers import INDIController
from sim.physics.multirotor import MultirotorModel, MultirotorParams
from sim.physics.quaternion import (
    matrix_to_6d,
    quat_angle_between,
    quat_conj,
    quat_from_euler,
    quat_mul,
    quat_rotate,
    quat_rotate_inv,
    quat_to_matrix,
    quat_yaw,
)
from sim.physics.rigid_body import RigidBodyState, point_velocity
from sim.tasks.cable_load import deployment, physics, reset, scenarios
from sim.tasks.cable_load.backends import CableLoadBackend, select_backend
from sim.tasks.cable_load.config import GROUP, PENALTY_TERMS, CableLoadCfg, evaluation_overrides
from sim.tasks.cable_load.geometry import box_inertia, hover_equilibrium, load_attach_points
from sim.tasks.cable_load.spec import ACTION_NAMES, build_spec, noise_std, pid_law

__all__ = ["ACTION_NAMES", "CableLoadEnv"]


class CableLoadEnv(MultiAgentEnv):
    """Batched cable-suspended load transport; see the module docstring."""

    task_name = "cable_load"
    # Measured (benchmarks/README.md): compiled, an H200 steps 6.7x (4096 envs) to 4.1x (65,536) faster. A CPU steps
    # through the C kernels (sim.kernels) compiled or not (4096 envs: 12-16x MuJoCo at 1 thread, 2026-11-28); the
    # README's 2M-step job took 110-116 s eager against 128-132 s compiled (~11 s of compiling with a warm cache,
    # minutes cold). So training compiles on a GPU only.
    auto_compile_min_steps = {"cuda": 0}
    cfg_class = CableLoadCfg
    # Evaluation return: it weighs position and orientation tracking as training does (the final
    # position error alone chose checkpoints that traded orientation for position).
    best_metric = ("return", "max")
    success_criteria = {"pos_err_m": 0.1, "ori_err_deg": 10.0}  # window means (training.evaluation)
    renderer = "sim.tasks.cable_load.render:CableLoadRenderer"
    mav_contact_radius = 0.05  # m: a MAV's centre stays this far above the ground
    engines = {"mujoco": "sim.tasks.cable_load.mujoco_engine:MujocoEngine"}  # sim-to-sim (sim.core.backend.use_engine)

    @classmethod
    def evaluation_overrides(cls) -> dict:
        """Randomisation and observation noise off (:func:`~sim.tasks.cable_load.config.evaluation_overrides`)."""
        return evaluation_overrides()

    @classmethod
    def scenarios(cls) -> dict[str, Scenario]:
        """The robustness rows of the policy report (:func:`sim.tasks.cable_load.scenarios.scenarios`)."""
        return scenarios.scenarios()

    @classmethod
    def has_native_kernels(cls, cfg: CableLoadCfg) -> bool:
        """Its control loop, post-physics pass and reset in C (:mod:`sim.tasks.cable_load.native`)."""
        return True

    def __init__(
        self,
        cfg: CableLoadCfg,
        num_envs: int,
        device: str | torch.device = "cpu",
        seed: int = 0,
        compile: bool = False,
        kernels: str = "auto",
    ) -> None:
        self.n = cfg.num_mavs
        self.decimation = cfg.decimation
        self.params = MultirotorParams.load(cfg.multirotor)
        super().__init__(cfg, num_envs, device, seed, compile)
        dev, E, N = self.device, num_envs, self.n
        self.model = MultirotorModel(self.params, dev)
        self.ctrl_dt = cfg.control_dt / cfg.decimation
        self.phys_dt = self.ctrl_dt / cfg.physics_substeps
        self.indi = INDIController(self.model, (E, N), self.ctrl_dt)
        self._layout = soa.ResolvedLayout(num_envs, self.compiled)  # of the torch control loop
        # Constants of the component-major control loop (layout "components"); its memory stays in self.indi.
        self.indi_components = soa.INDI(self.indi)
        self.attach = load_attach_points(N, cfg.load_attach_radius, cfg.load_size[2], dev)  # [N, 3]
        self.cable_angle = math.radians(cfg.cable_angle_deg)
        self.action_scale = torch.tensor(self.spec.groups[GROUP].action_scale, device=dev)

        zeros = lambda *s: torch.zeros(*s, device=dev)  # noqa: E731
        # Bodies.
        self.drones = RigidBodyState(zeros(E, N, 3), zeros(E, N, 4), zeros(E, N, 3), zeros(E, N, 3))
        self.load = RigidBodyState(zeros(E, 3), zeros(E, 4), zeros(E, 3), zeros(E, 3))
        self.rotor_speed = zeros(E, N, self.params.num_rotors)
        self.cable_tension = zeros(E, N)
        # Per-episode parameters.
        self.load_mass = torch.full((E,), cfg.load_mass, device=dev)
        self.load_inertia = box_inertia(self.load_mass, cfg.load_size)
        self.cable_length = torch.full((E, N), cfg.cable_length, device=dev)
        self.thrust_scale = torch.ones(E, N, 1, device=dev)
        self.tau_scale = torch.ones(E, N, 1, device=dev)
        self.motor_decay = self.model.motor_decay(self.phys_dt, self.tau_scale)  # per episode, [E, N, 1]
        # Heterogeneous teams: each MAV's mass and inertia, and its rotor speed limit (thrust limit).
        self.mav_mass = torch.full((E, N, 1), self.model.mass, device=dev)
        self.mav_inertia = self.model.inertia.expand(E, N, 3).clone()
        self.rotor_speed_max = torch.full((E, N, 1), self.params.rotor_speed_max, device=dev)
        # Unknown external force on the load: amplitude [E, 3] (N), phase [E] (rad) of a slow variation.
        self.disturbance_amp = zeros(E, 3)
        self.disturbance_phase = zeros(E)
        self.hover_tension = zeros(E, N)
        self.formation_offset = zeros(E, N, 3)  # hover offset of each MAV from the load, load frame (m)
        # The same offsets for the nominal load and cables: where each MAV hovers relative to a level load.
        # Computable onboard (no randomised parameter in it), it defines the ``own_slot_rel`` observation.
        nominal = hover_equilibrium(
            self.model,
            torch.zeros(1, 3, device=dev),
            torch.full((1,), cfg.load_mass, device=dev),
            torch.full((1, N), cfg.cable_length, device=dev),
            self.attach,
            self.cable_angle,
            cfg.cable_stiffness,
        )
        self.nominal_offset = nominal["drone_pos"][0]  # [N, 3]
        self.fault_time = torch.full((E,), math.inf, device=dev)
        self.fault_agent = torch.zeros(E, dtype=torch.long, device=dev)
        self.rotor_alive = torch.ones(E, N, 1, device=dev)
        self.failed = torch.zeros(E, N, dtype=torch.bool, device=dev)  # lost MAVs (fault)
        # Goal and bookkeeping.
        self.start_pos = zeros(E, 3)
        self.goal_pos = zeros(E, 3)
        self.goal_quat = zeros(E, 4)
        self.time = zeros(E)
        max_delay = cfg.randomization.action_delay_steps[1] if cfg.randomization.enabled else 0
        self.delay = DelayBuffer(max_delay, (E, N, len(ACTION_NAMES)), dev)
        self.last_action = zeros(E, N, len(ACTION_NAMES))
        self.prev_action = zeros(E, N, len(ACTION_NAMES))
        self.cmd = zeros(E, N, len(ACTION_NAMES))  # scaled, delayed command applied to the controller
        self.attach_err_int = zeros(E, N, 3)  # own_attach_err_int, integrated once per control step
        self.history = zeros(E, N, cfg.history_len, self.spec.groups[GROUP].observations["policy"].frame_size)
        self._frame_noise_std = noise_std(cfg, self.device)
        # The torch code or the C kernels, chosen once (kernels: sim.kernels).
        self.backend: CableLoadBackend = select_backend(self, kernels)
        self.use_backend(self.backend)
        self.reset()  # compiled, this compiles the reset (for any count of envs), so no step waits for it

    def _build_spec(self) -> EnvSpec:
        return build_spec(self.cfg)

    def expert_policy(self) -> Callable[[Obs], dict[str, Tensor]]:
        """``obs -> {"mavs": action [E, N, 5]}``: the PID formation law with the shipped prior's gains (the config's
        defaults, whatever this run's ``action_prior_k*``), clamped to [-1, 1] as the env applies it. It is the
        teacher of a plain policy (``imitation.expert=task``, every prior gain 0): the prior alone flies the task."""
        defaults = {f.name: f.default for f in fields(CableLoadCfg)}
        law = pid_law(self.cfg, *(defaults[f"action_prior_k{k}"] for k in "pdi"))
        matrix = replace(self.spec.groups[GROUP], action_prior=law).action_prior_matrix().to(self.device)
        return lambda obs: {GROUP: (obs[GROUP]["policy"] @ matrix).clamp(-1.0, 1.0)}

    @property
    def kernels(self) -> str:
        """What steps this env: "native" (the C kernels) or "torch"."""
        return self.backend.name

    def load_state_snapshot(self, state: dict[str, Any]) -> str | None:
        self.backend.forget_errors()  # written in place: errors the last pass kept are of another state
        return super().load_state_snapshot(state)

    # ----------------------------------------------------------------- reset
    def _reset_idx(self, env_ids: Tensor) -> None:
        """The split reset (:mod:`sim.tasks.cable_load.reset`, or the C one), which writes the history in place:
        inside a step's auto-reset into the buffer that step made (not yet returned), elsewhere into a copy, since an
        observation returned earlier (``env.reset()``'s, a step's) is a view of the current one."""
        if self._auto_reset_ids is None:
            self.history = self.history.clone()
        super()._reset_idx(env_ids)  # the backend's reset_rows

    def _reset_draws(self, k: int) -> dict[str, Tensor]:
        return reset.reset_draws(self, k)

    def _reset_envs(self, env_ids: Tensor, draws: dict[str, Tensor]) -> None:
        reset.reset_envs(self, env_ids, draws)

    # ----------------------------------------------------------------- step

    def _apply_actions(self, actions: dict[str, Tensor]) -> None:
        act = actions[GROUP].clamp(-1.0, 1.0)
        self.prev_action = self.last_action
        self.last_action = act
        self.cmd = self.delay.push(act) * self.action_scale

    @property
    def layout(self) -> str:
        """The torch control loop's layout, "rows" or "components" (:func:`sim.physics.components.choose_layout`)."""
        return self._layout.name

    def loop_compile_options(self) -> dict[str, bool]:
        """Vectorised where the loop runs component-major (:data:`sim.physics.components.VECTORISED_LOOP`)."""
        return self._layout.compile_options

    def _control_step(self) -> None:
        physics.control_step(self)

    def _disturbance_force(self) -> Tensor:
        return physics.disturbance_force(self)

    # ----------------------------------------------------------------- observations

    def _frame(self, env_ids: Tensor | None = None) -> Tensor:
        """One observation frame per MAV, ``[E, N, frame_size]`` (no noise, no history); ``[k, N, frame_size]``
        of the envs ``env_ids [k]`` only, when given (a reset's few envs)."""
        rows, N = env_rows(env_ids), self.n
        load_pos, load_quat, goal_quat = rows(self.load.pos), rows(self.load.quat), rows(self.goal_quat)
        pos = rows(self.drones.pos)
        load_rot = quat_to_matrix(load_quat)
        goal_rel = quat_mul(quat_conj(load_quat), goal_quat)
        per_env = torch.cat(
            (
                rows(self.goal_pos) - load_pos,
                matrix_to_6d(load_rot),
                matrix_to_6d(quat_to_matrix(goal_rel)),
                rows(self.load.vel),
                rows(self.load.ang_vel),
            ),
            dim=-1,
        )  # [E, 21]
        per_mav = torch.cat(
            (
                pos - load_pos.unsqueeze(1),
                rows(self.drones.vel),
                matrix_to_6d(quat_to_matrix(rows(self.drones.quat))),
                rows(self.drones.ang_vel),
                self.attach.expand(pos.shape[0], N, 3),
                self._goal_slot(env_ids) - pos,
                rows(self.attach_err_int),
                rows(self.last_action),
            ),
            dim=-1,
        )  # [E, N, 29]
        return torch.cat((per_env.unsqueeze(1).expand(-1, N, -1), per_mav), dim=-1)

    def _goal_carrot(self, env_ids: Tensor | None = None) -> Tensor:
        """The goal orientation with its heading limited to ``slot_yaw_lead_deg`` ahead of the
        load's, ``[E, 4]`` (``[k, 4]`` of the envs ``env_ids [k]`` only, when given): MAVs then circle
        round the load to turn it instead of cutting across each other's cables."""
        rows = env_rows(env_ids)
        goal_quat = rows(self.goal_quat)
        lead = math.radians(self.cfg.slot_yaw_lead_deg)
        yaw_err = torch.remainder(quat_yaw(goal_quat) - quat_yaw(rows(self.load.quat)) + math.pi, 2 * math.pi) - math.pi
        back = yaw_err.clamp(-lead, lead) - yaw_err  # turn the goal back to within `lead` of the load
        zero = torch.zeros_like(back)
        return quat_mul(quat_from_euler(zero, zero, back), goal_quat)

    def _attach_error(self) -> Tensor:
        """Each attachment point's position with the load at the goal carrot minus now, world frame,
        ``[E, N, 3]`` (m): all three vanish only at the goal pose, so integrating them removes the
        steady offset a PD to the nominal slots leaves (it is exact only for level loads)."""
        att = self.attach.unsqueeze(0)
        goal = self.goal_pos.unsqueeze(1) + quat_rotate(self._goal_carrot().unsqueeze(1), att)
        return goal - (self.load.pos.unsqueeze(1) + quat_rotate(self.load.quat.unsqueeze(1), att))

    def _integrate_attach_error(self) -> None:
        """One control step of ``own_attach_err_int``: leaky (time constant ``integral_tau_s``),
        per-step error clipped to ``integral_err_clip`` m and the sum to ``integral_limit`` m s
        (anti-windup while the load travels)."""
        cfg = self.cfg
        err = self._attach_error().clamp(-cfg.integral_err_clip, cfg.integral_err_clip)
        leak = 1.0 - cfg.control_dt / cfg.integral_tau_s if cfg.integral_tau_s > 0 else 1.0
        self.attach_err_int = (leak * self.attach_err_int + cfg.control_dt * err).clamp(
            -cfg.integral_limit, cfg.integral_limit
        )

    def _goal_slot(self, env_ids: Tensor | None = None) -> Tensor:
        """Each MAV's nominal hover position with the load at a carrot of the goal pose, world frame,
        ``[E, N, 3]`` (m); ``[k, N, 3]`` of the envs ``env_ids [k]`` only, when given.

        The nominal team formation rigidly moved to the goal pose, with the goal's heading limited to
        ``slot_yaw_lead_deg`` ahead of the load's: MAVs then circle round the load to turn it instead
        of cutting across each other's cables. Exact for translation and yaw, a first guess for tilted
        goals (a tilted load hangs from a different formation). Uses only the load and goal poses, so
        a robot computes it onboard.
        """
        carrot = self._goal_carrot(env_ids).unsqueeze(1)
        return env_rows(env_ids)(self.goal_pos).unsqueeze(1) + quat_rotate(carrot, self.nominal_offset)

    def deployment_constants(self, group: str = GROUP) -> dict:
        """Per-MAV geometry behind ``own_attach`` and ``own_slot_rel`` (:mod:`sim.tasks.cable_load.deployment`)."""
        return deployment.deployment_constants(self)

    def deployment_profile(self, group: str = GROUP) -> dict:
        """ROS deployment (:func:`sim.tasks.cable_load.deployment.deployment_profile`)."""
        return deployment.deployment_profile()

    def _sample_step_noise(self) -> None:
        if self.cfg.obs_noise.enabled:
            self._obs_noise = self.backend.step_noise(self.history[:, :, 0].shape)

    def _update_observation_buffers(self) -> None:
        self._integrate_attach_error()
        frame = self._frame()
        if self.cfg.obs_noise.enabled:
            noise = self._obs_noise
            if noise.dtype == torch.int64:  # a key (NativePhysics.step_noise): the numbers the C pass draws
                noise = native.normal(tuple(frame.shape), noise)
            frame = frame + noise * self._frame_noise_std
        self.history = torch.cat((self.history[:, :, 1:], frame.unsqueeze(2)), dim=2)

    def _observations(self) -> Obs:
        return {GROUP: {"policy": self.history.flatten(2), "state": self._state()}}

    def _state(self) -> Tensor:
        """Global state for a centralised critic, ``[E, N, state_dim]`` (same for all + agent id)."""
        ld, d, E, N = self.load, self.drones, self.num_envs, self.n
        goal_rel = quat_mul(quat_conj(ld.quat), self.goal_quat)
        time_left = 1.0 - self.episode_step.float() / self.max_episode_steps
        glob = torch.cat(
            (
                (d.pos - ld.pos.unsqueeze(1)).flatten(1),
                d.vel.flatten(1),
                matrix_to_6d(quat_to_matrix(d.quat)).flatten(1),
                d.ang_vel.flatten(1),
                self.cable_tension,
                self.goal_pos - ld.pos,
                matrix_to_6d(quat_to_matrix(ld.quat)),
                matrix_to_6d(quat_to_matrix(goal_rel)),
                ld.vel,
                ld.ang_vel,
                time_left.unsqueeze(-1),
                *((self.failed.float(),) if self.cfg.fault.enabled else ()),
            ),
            dim=-1,
        )
        eye = torch.eye(N, device=self.device).expand(E, N, N)
        return torch.cat((glob.unsqueeze(1).expand(-1, N, -1), eye), dim=-1)

    # ----------------------------------------------------------------- rewards and terminations
    def errors(self) -> tuple[Tensor, Tensor]:
        """Load position error (m) and orientation error (rad) to the goal, each ``[E]``. With the C kernels, the
        same tensors for every call until the state changes (do not write into them)."""
        cached = self.backend.cached_errors()
        if cached is not None:
            return cached
        pos_err = torch.linalg.vector_norm(self.goal_pos - self.load.pos, dim=-1)
        return pos_err, quat_angle_between(self.load.quat, self.goal_quat)

    def error_inputs(self) -> tuple[Tensor, ...]:
        """The tensors :meth:`errors` reads."""
        return self.goal_pos, self.load.pos, self.load.quat, self.goal_quat

    def step_metrics(self) -> dict[str, Tensor]:
        """Evaluation metrics now, each ``[E]``: load position error ``pos_err_m`` (m), orientation
        error ``ori_err_deg`` (deg) and the mean over cables of the tension ``mean_tension_n`` (N)."""
        pos_err, ori_err = self.errors()
        return {
            "pos_err_m": pos_err,
            "ori_err_deg": torch.rad2deg(ori_err),
            "mean_tension_n": self.cable_tension.mean(-1),
        }

    def _rewards(self, terminated: Tensor) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        rc = self.cfg.rewards
        pos_err, ori_err = self.errors()
        raw = {
            "position": torch.exp(-pos_err / rc.position_sigma).unsqueeze(-1).expand(-1, self.n),
            "orientation": torch.exp(-ori_err / rc.orientation_sigma).unsqueeze(-1).expand(-1, self.n),
            "action_smoothness": (self.last_action - self.prev_action).square().sum(-1),
            "body_rate": self.drones.ang_vel.square().sum(-1),
            "cable_force": ((self.cable_tension - self.hover_tension) / self.hover_tension).square(),
            "formation": (self._offsets_in_load_frame() - self.formation_offset).square().sum(-1),
        }
        if self.cfg.fault.enabled:  # a lost MAV's own shaping terms are beyond anyone's control
            alive = (~self.failed).float()
            for name in PENALTY_TERMS:
                raw[name] = raw[name] * alive
        weighted = {name: getattr(rc, name) * val for name, val in raw.items()}
        end = (rc.termination * terminated.float()).unsqueeze(-1).expand(-1, self.n)
        if rc.penalty_bound > 0:  # the plain profile (RewardCfg): alive + bounded penalties >= 0 every step
            penalty = torch.stack([weighted[name] for name in PENALTY_TERMS]).sum(0)
            bounded = rc.penalty_bound * (torch.exp(penalty / rc.penalty_bound) - 1.0)  # exp - 1: as the C pass
            reward = weighted["position"] + weighted["orientation"] + (rc.alive + bounded) + end
            weighted["alive"] = torch.full_like(penalty, rc.alive)
            weighted["penalty_bound"] = bounded - penalty  # what the bound took off the penalties (for the logs)
        else:
            reward = torch.stack([*weighted.values(), end]).sum(0)
        weighted["termination"] = end
        return {GROUP: reward}, {name: val.mean(-1) for name, val in weighted.items()}

    def _offsets_in_load_frame(self) -> Tensor:
        """MAV positions relative to the load, in the load frame, ``[E, N, 3]`` (m)."""
        return quat_rotate_inv(self.load.quat.unsqueeze(1), self.drones.pos - self.load.pos.unsqueeze(1))

    def _terminations(self) -> tuple[Tensor, dict[str, Tensor]]:
        tc = self.cfg.terminations
        d, ld = self.drones, self.load
        # A lost MAV (fault) falls where it will: only the MAVs still flying end the team's episode.
        alive = ~self.failed  # [E, N]
        tilt_cos = 1 - 2 * (d.quat[..., 1].square() + d.quat[..., 2].square())  # R[2, 2]
        finite = torch.isfinite(d.pos).all(-1).all(-1) & torch.isfinite(ld.pos).all(-1)
        crash = (
            ((d.pos[..., 2] < tc.drone_min_height) | (tilt_cos < math.cos(math.radians(tc.drone_max_tilt_deg)))) & alive
        ).any(-1) | ~finite
        load_ground = ld.pos[:, 2] - self.cfg.load_size[2] / 2 < tc.load_min_clearance
        # Pairwise MAV distances and MAV-to-other-cable distances, [E, N, N], between flying MAVs.
        diff = d.pos.unsqueeze(2) - d.pos.unsqueeze(1)
        dist = torch.linalg.vector_norm(diff, dim=-1)
        off_diag = ~torch.eye(self.n, dtype=torch.bool, device=self.device)
        pairs = off_diag & alive.unsqueeze(2) & alive.unsqueeze(1)
        too_close = ((dist < tc.drone_min_distance) & pairs).any(-1).any(-1)
        cable_hit = (self._mav_cable_distance() < tc.cable_min_distance).logical_and(pairs).any(-1).any(-1)
        mav_rel = d.pos - self.start_pos.unsqueeze(1)
        load_rel = ld.pos - self.start_pos
        mav_out = ((mav_rel[..., :2].abs() > tc.bounds_xy).any(-1) | (mav_rel[..., 2].abs() > tc.bounds_z)) & alive
        load_out = (load_rel[..., :2].abs() > tc.bounds_xy).any(-1) | (load_rel[..., 2].abs() > tc.bounds_z)
        out = mav_out.any(-1) | load_out
        reasons = {
            "crash": crash,
            "load_ground": load_ground,
            "drone_proximity": too_close,
            "cable_proximity": cable_hit,
            "out_of_bounds": out,
        }
        terminated = crash | load_ground | too_close | cable_hit | out
        return terminated, reasons

    def _mav_cable_distance(self) -> Tensor:
        """Distance from MAV ``i`` to cable ``j`` (a segment), ``[E, N_i, N_j]`` (m)."""
        a, _ = point_velocity(self.drones, self.model.cable_attach)
        b, _ = point_velocity(physics.load_per_mav(self), self.attach)
        seg = (b - a).unsqueeze(1)  # [E, 1, N, 3]
        rel = self.drones.pos.unsqueeze(2) - a.unsqueeze(1)  # [E, N, N, 3]
        t = ((rel * seg).sum(-1) / seg.square().sum(-1).clamp(min=1e-9)).clamp(0.0, 1.0)
        return torch.linalg.vector_norm(rel - t.unsqueeze(-1) * seg, dim=-1)

    def _episode_metrics_per_env(self) -> dict[str, Tensor]:
        pos_err, ori_err = self.errors()
        return {"metrics/final_pos_err_m": pos_err, "metrics/final_ori_err_deg": torch.rad2deg(ori_err)}
