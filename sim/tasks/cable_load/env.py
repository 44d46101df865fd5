"""cable_load: N decentralised MAVs carry a cable-suspended load to a 6-DoF goal pose.

Group ``mavs`` (N agents, one shared or per-agent policy). Each agent sees only its own state,
the load pose/velocity and the goal, never the other MAVs (decentralised execution); the critic
gets the global ``state``. Action per MAV (5, in [-1, 1]): linear acceleration (world, 3) and
roll/pitch body-rate feed-forward (2), tracked by the INDI controller at ``decimation`` x the
policy rate; physics runs ``physics_substeps`` x the controller rate.

Shapes: E = num_envs, N = num_mavs, R = rotors per MAV.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from sim.core import native
from sim.core.env import MultiAgentEnv, Obs, Scenario, env_rows
from sim.core.randomization import DelayBuffer, uniform
from sim.core.spec import EnvSpec, GroupSpec, ObsEntry, ObsTerm
from sim.physics import components as soa
from sim.physics.cable import cable_tension
from sim.physics.contact import ground_contact
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
from sim.physics.rigid_body import GRAVITY, RigidBodyState, point_velocity, rigid_body_step, wrench_at_point
from sim.tasks.cable_load.config import GROUP, CableLoadCfg, evaluation_overrides
from sim.tasks.cable_load.geometry import box_inertia, hover_equilibrium, load_attach_points
from sim.tasks.cable_load.native import NativePostPhysics
from sim.tasks.cable_load.native import kernels as native_kernels

ACTION_NAMES = ("acc_x", "acc_y", "acc_z", "roll_rate", "pitch_rate")


def _policy_terms() -> tuple[ObsTerm, ...]:
    return (
        ObsTerm("goal_pos_rel", 3, "m", "world", "goal position minus load position"),
        ObsTerm("load_rot", 6, "", "world", "load rotation matrix, first two columns"),
        ObsTerm("goal_rot_rel", 6, "", "load", "goal rotation in the load frame, first two columns"),
        ObsTerm("load_vel", 3, "m/s", "world", "load linear velocity"),
        ObsTerm("load_ang_vel", 3, "rad/s", "load", "load angular velocity"),
        ObsTerm("own_pos_rel", 3, "m", "world", "own position minus load position"),
        ObsTerm("own_vel", 3, "m/s", "world", "own linear velocity"),
        ObsTerm("own_rot", 6, "", "world", "own rotation matrix, first two columns"),
        ObsTerm("own_ang_vel", 3, "rad/s", "body", "own body rates"),
        ObsTerm("own_attach", 3, "m", "load", "own cable attachment point on the load"),
        ObsTerm("own_slot_rel", 3, "m", "world", "own hover slot at the (yaw-limited) goal pose minus own position"),
        ObsTerm(
            "own_attach_err_int",
            3,
            "m s",
            "world",
            "leaky integral of own attachment point's error (at the yaw-limited goal pose minus now)",
        ),
        ObsTerm("last_action", 5, "", "", "previous action in [-1, 1]"),
    )


class CableLoadEnv(MultiAgentEnv):
    """Batched cable-suspended load transport; see the module docstring."""

    task_name = "cable_load"
    # Measured (benchmarks/README.md): compiled, an H200 steps 6.7x (4096 envs) to 4.1x (65,536) faster. A CPU steps
    # through the C kernels (cfg.cpu_kernels) compiled or not (4096 envs: 12-16x MuJoCo at 1 thread, 2026-11-28); the
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

    @classmethod
    def evaluation_overrides(cls) -> dict:
        """Randomisation and observation noise off (:func:`~sim.tasks.cable_load.config.evaluation_overrides`)."""
        return evaluation_overrides()

    @classmethod
    def scenarios(cls) -> dict[str, Scenario]:
        """The robustness rows of the policy report (``evaluate.py scenario=<name>``).

        Each pins the whole case, so policies trained on other cases compare on the same one: the
        default team (3 MAVs; ``task.num_mavs=<n>`` on the command line wins), goal tilt, faults,
        disturbance and team heterogeneity at the task defaults, then the scenario's own changes.
        Randomisation and noise stay as the policy was trained."""
        from dataclasses import asdict

        from sim.core.config import deep_merge

        d = CableLoadCfg()
        hetero = ("mav_mass_scale", "thrust_limit_scale", "cable_length_scale", "motor_tau_scale")
        base = {
            "num_mavs": d.num_mavs,
            "goal_tilt_deg": d.goal_tilt_deg,
            "fault": asdict(d.fault),
            "disturbance": asdict(d.disturbance),
            "randomization": {k: getattr(d.randomization, k) for k in hetero},
        }
        lost = {"enabled": True, "probability": 1.0, "time_range": (3.0, 10.0)}
        # After a MAV loss the bar is keeping the load up and bringing it back near the goal: 0.3 m
        # over the last 5 s, any orientation (a team one short cannot always hold the goal's tilt).
        recovered = {"pos_err_m": 0.3, "ori_err_deg": 180.0}
        cases = {
            "nominal": ("the default task", {}, {}),
            "mav_loss": (
                "one MAV's rotors stop for good at 3-10 s, unannounced; its cable stays on the load",
                {"fault": lost},
                recovered,
            ),
            "mav_loss_released": (
                "as mav_loss, but the lost MAV's cable lets go of the load",
                {"fault": {**lost, "cable": "released"}},
                recovered,
            ),
            "heterogeneous": (
                "each MAV's mass and thrust limit x0.85-1.15, cable length x0.8-1.2, motor lag x0.7-1.3",
                {
                    "randomization": {
                        "mav_mass_scale": (0.85, 1.15),
                        "thrust_limit_scale": (0.85, 1.15),
                        "cable_length_scale": (0.8, 1.2),
                        "motor_tau_scale": (0.7, 1.3),
                    }
                },
                {},
            ),
            "disturbance": (
                "a constant unknown force on the load, up to 15.4% of its weight, any direction",
                {"disturbance": {"enabled": True}},
                {},
            ),
            "disturbance_varying": (
                "the same force varying slowly between 0 and its amplitude (period 5 s)",
                {"disturbance": {"enabled": True, "period_s": 5.0}},
                {},
            ),
            "tilt45": ("goals tilted up to +-45 deg (the paper's range; trained on +-30)", {"goal_tilt_deg": 45.0}, {}),
        }
        return {name: Scenario(about, deep_merge(base, over), bar) for name, (about, over, bar) in cases.items()}

    def __init__(
        self, cfg: CableLoadCfg, num_envs: int, device: str | torch.device = "cpu", seed: int = 0, compile: bool = False
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
        self._layout = soa.ResolvedLayout(cfg.layout, num_envs, self.compiled)  # of the control loop
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
        self._frame_noise_std = self._noise_std()
        self._use_cpu_kernels()
        self.reset()  # compiled, this compiles the reset (for any count of envs), so no step waits for it

    # ----------------------------------------------------------------- spec
    def _build_spec(self) -> EnvSpec:
        cfg, N = self.cfg, self.n
        terms = _policy_terms()
        frame = sum(t.size for t in terms)
        state_terms = (
            ObsTerm("mav_pos_rel", 3 * N, "m", "world"),
            ObsTerm("mav_vel", 3 * N, "m/s", "world"),
            ObsTerm("mav_rot", 6 * N, "", "world"),
            ObsTerm("mav_ang_vel", 3 * N, "rad/s", "body"),
            ObsTerm("cable_tension", N, "N"),
            ObsTerm("goal_pos_rel", 3, "m", "world"),
            ObsTerm("load_rot", 6, "", "world"),
            ObsTerm("goal_rot_rel", 6, "", "load"),
            ObsTerm("load_vel", 3, "m/s", "world"),
            ObsTerm("load_ang_vel", 3, "rad/s", "load"),
            ObsTerm("time_left", 1, "fraction"),
            # Privileged (critic only), with faults on: which MAV is lost, which the value must foresee.
            *((ObsTerm("mav_lost", N, "flag"),) if cfg.fault.enabled else ()),
            ObsTerm("agent_id", N, "one-hot"),
        )
        policy = ObsEntry((cfg.history_len * frame,), terms=terms, history=cfg.history_len)
        newest = (cfg.history_len - 1) * frame  # offset of the newest frame in the flattened history
        slices = policy.slices()
        slot, vel, integ = (slices[t].start for t in ("own_slot_rel", "own_vel", "own_attach_err_int"))
        prior = []
        for k in range(3):
            if cfg.action_prior_kp:
                prior.append((newest + slot + k, k, cfg.action_prior_kp / cfg.action_acc_scale))
            if cfg.action_prior_kd:
                prior.append((newest + vel + k, k, -cfg.action_prior_kd / cfg.action_acc_scale))
            if cfg.action_prior_ki:
                prior.append((newest + integ + k, k, cfg.action_prior_ki / cfg.action_acc_scale))
        group = GroupSpec(
            n_agents=N,
            observations={
                "policy": policy,
                "state": ObsEntry((sum(t.size for t in state_terms),), terms=state_terms),
            },
            action_dim=len(ACTION_NAMES),
            action_names=ACTION_NAMES,
            action_units=("m/s^2",) * 3 + ("rad/s",) * 2,
            action_scale=(cfg.action_acc_scale,) * 3 + (cfg.action_rate_scale,) * 2,
            action_prior=tuple(prior),
        )
        return EnvSpec(
            task="cable_load",
            groups={GROUP: group},
            control_dt=cfg.control_dt,
            physics_dt=cfg.control_dt / cfg.decimation / cfg.physics_substeps,
            max_episode_steps=round(cfg.episode_length_s / cfg.control_dt),
            metadata={
                "multirotor": cfg.multirotor,
                "controller": "indi",
                "controller_hz": 1 / (cfg.control_dt / cfg.decimation),
            },
        )

    def _use_cpu_kernels(self) -> None:
        """Step with the C kernels (:mod:`sim.tasks.cable_load.native`) as ``cfg.cpu_kernels`` asks: ``"auto"``
        wherever they can run (CPU tensors, a C compiler; with or without ``compile``: the vectorised C loop runs ~3.8x
        faster than inductor's, benchmarks/README.md), ``"native"`` always, raising where they cannot run,
        ``"torch"`` the torch code (compiled with ``compile``). With the kernels' vector builds, the C pass draws the
        step's observation noise itself from a key (:meth:`_noise_key`: other numbers than ``randn``'s for the same
        seed, equally reproducible)."""
        choice = self.cfg.cpu_kernels
        # The step's observation noise and the observations after a reset (bound methods: configuration, not state
        # for state_snapshot).
        self._step_noise: Callable[[torch.Size], Tensor] = self._randn
        self._after_reset: Callable[[], Obs] = super()._observations_after_reset
        self._cached_errors: Callable[[], tuple[Tensor, Tensor] | None] = self._no_cached_errors
        # The reset's tensor code: the torch one (compiled with compile), or with the C kernels NativeReset's (no
        # compiled graph to enter: its wrappers cost ~0.4 ms a call, its kernels ~0.08).
        self._reset_rows: Callable[[Tensor], None] = super()._reset_idx
        if choice == "torch":
            return
        found = native_kernels(self)
        if isinstance(found, str):
            if choice == "native":
                raise ValueError(f"cable_load: cpu_kernels='native' cannot run here: {found}")
            return
        self._advance, self._evaluate, native_reset = found
        self._reset_rows = native_reset.reset_idx
        self._apply_actions = self._advance.apply_actions
        self._native_pass: NativePostPhysics = self._evaluate
        self._cached_errors = self._evaluate.cached_errors
        self._after_reset = self._native_observations_after_reset
        if self._evaluate.draws_noise:
            self._step_noise = self._noise_key

    @property
    def cpu_kernels(self) -> str:
        """What steps this env: "native" (the C kernels) or "torch"."""
        return "native" if isinstance(self._evaluate, NativePostPhysics) else "torch"

    # ----------------------------------------------------------------- reset
    def _reset_idx(self, env_ids: Tensor) -> None:
        """The split reset (:meth:`_reset_draws`, :meth:`_reset_envs`), which writes the history in place: inside a
        step's auto-reset into the buffer that step made (not yet returned), elsewhere into a copy, since an
        observation returned earlier (``env.reset()``'s, a step's) is a view of the current one."""
        if self._auto_reset_ids is None:
            self.history = self.history.clone()
        self._reset_rows(env_ids)

    # Split in two (MultiAgentEnv._reset_idx): the draws, eager, then the tensor code (compiled with compile; or in C,
    # NativeReset, with the C kernels).
    def _reset_draws(self, k: int) -> dict[str, Tensor]:
        """Every random number a reset of ``k`` envs uses, drawn from ``self.rng`` in a fixed order (each
        entry ``[k, ...]``; an entry is drawn only where its config needs it, so other configurations
        keep their random streams; the order is the one of the reset before its split)."""
        cfg, dev, rng, N = self.cfg, self.device, self.rng, self.n
        rnd = cfg.randomization
        draws: dict[str, Tensor] = {}
        if rnd.enabled:
            draws["load_mass"] = uniform(*rnd.load_mass, (k,), rng, dev)
            draws["load_inertia_scale"] = uniform(*rnd.load_inertia_scale, (k, 1), rng, dev)
            draws["cable_length_scale"] = uniform(*rnd.cable_length_scale, (k, N), rng, dev)
            draws["thrust_scale"] = uniform(*rnd.motor_thrust_scale, (k, N, 1), rng, dev)
            draws["tau_scale"] = uniform(*rnd.motor_tau_scale, (k, N, 1), rng, dev)
            lo, hi = rnd.action_delay_steps
            draws["delay"] = torch.randint(lo, hi + 1, (k,), generator=rng, device=dev)
            if rnd.mav_mass_scale[0] != rnd.mav_mass_scale[1]:
                draws["mav_mass_scale"] = uniform(*rnd.mav_mass_scale, (k, N, 1), rng, dev)
            if rnd.thrust_limit_scale[0] != rnd.thrust_limit_scale[1]:
                draws["thrust_limit_scale"] = uniform(*rnd.thrust_limit_scale, (k, N, 1), rng, dev)
        draws["start_xy"] = uniform(-cfg.start_xy_range, cfg.start_xy_range, (k, 2), rng, dev)
        draws["goal_xy"] = uniform(-cfg.goal_xy_range, cfg.goal_xy_range, (k, 2), rng, dev)
        draws["goal_z"] = uniform(*cfg.goal_z_range, (k,), rng, dev)
        draws["goal_rpy"] = uniform(-1.0, 1.0, (k, 3), rng, dev)
        if cfg.fault.enabled:
            draws["fault_hit"] = torch.rand(k, generator=rng, device=dev)
            draws["fault_time"] = uniform(*cfg.fault.time_range, (k,), rng, dev)
            draws["fault_agent"] = torch.randint(0, N, (k,), generator=rng, device=dev)
        if cfg.disturbance.enabled:
            draws["disturbance_dir"] = torch.randn(k, 3, generator=rng, device=dev)
            draws["disturbance_frac"] = uniform(0.0, cfg.disturbance.max_fraction, (k, 1), rng, dev)
            draws["disturbance_phase"] = uniform(0.0, 2 * math.pi, (k,), rng, dev)
        if cfg.obs_noise.enabled:
            frame_size = self.history.shape[-1]
            draws["obs_noise"] = torch.randn((k, N, frame_size), generator=rng, device=dev)
        return draws

    def _reset_envs(self, env_ids: Tensor, draws: dict[str, Tensor]) -> None:
        """Reset the envs ``env_ids [k]`` from their ``draws`` (:meth:`_reset_draws`); pure tensor code."""
        cfg, dev = self.cfg, self.device
        k = env_ids.shape[0]
        rnd = cfg.randomization
        if rnd.enabled:
            mass = draws["load_mass"]
            self.load_inertia[env_ids] = box_inertia(mass, cfg.load_size) * draws["load_inertia_scale"]
            self.cable_length[env_ids] = cfg.cable_length * draws["cable_length_scale"]
            self.thrust_scale[env_ids] = draws["thrust_scale"]
            self.tau_scale[env_ids] = draws["tau_scale"]
            self.motor_decay[env_ids] = self.model.motor_decay(self.phys_dt, draws["tau_scale"])
            self.delay.set_delay(env_ids, draws["delay"])
            if "mav_mass_scale" in draws:
                scale = draws["mav_mass_scale"]
                self.mav_mass[env_ids] = self.model.mass * scale
                self.mav_inertia[env_ids] = self.model.inertia * scale
            if "thrust_limit_scale" in draws:
                self.rotor_speed_max[env_ids] = self.params.rotor_speed_max * draws["thrust_limit_scale"].sqrt()
        else:
            mass = torch.full((k,), cfg.load_mass, device=dev)
            self.load_inertia[env_ids] = box_inertia(mass, cfg.load_size)
        self.load_mass[env_ids] = mass

        # Start: a level load with the team in static hover above it.
        start = torch.cat((draws["start_xy"], torch.full((k, 1), cfg.start_height, device=dev)), dim=-1)
        mav_mass = self.mav_mass[env_ids]
        eq = hover_equilibrium(
            self.model,
            start,
            mass,
            self.cable_length[env_ids],
            self.attach,
            self.cable_angle,
            cfg.cable_stiffness,
            drone_mass=mav_mass.squeeze(-1),
        )
        self.start_pos[env_ids] = start
        self.load.pos[env_ids] = start
        self.load.quat[env_ids] = torch.tensor((1.0, 0.0, 0.0, 0.0), device=dev)
        self.load.vel[env_ids] = 0.0
        self.load.ang_vel[env_ids] = 0.0
        self.drones.pos[env_ids] = eq["drone_pos"]
        self.drones.quat[env_ids] = eq["drone_quat"]
        self.drones.vel[env_ids] = 0.0
        self.drones.ang_vel[env_ids] = 0.0
        # Rotor speeds that hold the hover with this vehicle's true thrust coefficient.
        self.rotor_speed[env_ids] = eq["rotor_speed"] / self.thrust_scale[env_ids].sqrt()
        self.cable_tension[env_ids] = eq["tension"]
        self.hover_tension[env_ids] = eq["tension"]
        self.formation_offset[env_ids] = eq["drone_pos"] - start.unsqueeze(1)  # the load starts level
        self.indi.reset(
            env_ids,
            self.drones.vel[env_ids],
            self.drones.ang_vel[env_ids],
            eq["drone_quat"],
            eq["thrust"],
            eq["torque"],
            external_force=eq["cable_force"],
            mass=mav_mass,
        )

        # Goal pose relative to the start.
        goal = start + torch.cat((draws["goal_xy"], draws["goal_z"].unsqueeze(-1)), dim=-1)
        tilt = math.radians(cfg.goal_tilt_deg)
        yaw = math.radians(cfg.goal_yaw_deg)
        rpy = draws["goal_rpy"] * torch.tensor((tilt, tilt, yaw), device=dev)
        self.goal_pos[env_ids] = goal
        self.goal_quat[env_ids] = quat_from_euler(rpy[:, 0], rpy[:, 1], rpy[:, 2])

        # Fault: one MAV loses thrust at a random time.
        self.time[env_ids] = 0.0
        self.rotor_alive[env_ids] = 1.0
        self.failed[env_ids] = False
        self.fault_time[env_ids] = math.inf
        if cfg.fault.enabled:
            hit = draws["fault_hit"] < cfg.fault.probability
            when = draws["fault_time"]
            self.fault_time[env_ids] = torch.where(hit, when, torch.full_like(when, math.inf))
            self.fault_agent[env_ids] = draws["fault_agent"]
        if cfg.disturbance.enabled:
            direction = draws["disturbance_dir"]
            direction = direction / torch.linalg.vector_norm(direction, dim=-1, keepdim=True).clamp(min=1e-9)
            magnitude = draws["disturbance_frac"] * mass.unsqueeze(-1) * GRAVITY
            self.disturbance_amp[env_ids] = direction * magnitude
            self.disturbance_phase[env_ids] = draws["disturbance_phase"]

        # Policy interface memory.
        self.delay.reset(env_ids)
        self.last_action[env_ids] = 0.0
        self.prev_action[env_ids] = 0.0
        self.cmd[env_ids] = 0.0
        self.attach_err_int[env_ids] = 0.0
        frame = self._frame(env_ids)
        if cfg.obs_noise.enabled:
            frame = frame + draws["obs_noise"] * self._frame_noise_std
        # In place: _reset_idx made sure no observation handed out is a view of this buffer.
        self.history.index_copy_(0, env_ids, frame.unsqueeze(2).expand(-1, -1, cfg.history_len, -1))

    # ----------------------------------------------------------------- step
    def _apply_actions(self, actions: dict[str, Tensor]) -> None:
        act = actions[GROUP].clamp(-1.0, 1.0)
        self.prev_action = self.last_action
        self.last_action = act
        self.cmd = self.delay.push(act) * self.action_scale

    @property
    def layout(self) -> str:
        """The control loop's layout, ``cfg.layout`` resolved: "rows" or "components"."""
        return self._layout.name

    def loop_compile_options(self) -> dict[str, bool]:
        """Vectorised where the loop runs component-major (:data:`sim.physics.components.VECTORISED_LOOP`)."""
        return self._layout.compile_options

    def _control_step(self) -> None:
        if self.layout == "components":
            self._control_step_components()
            return
        d = self.drones
        speed_cmd = self.indi(self.cmd[..., :3], self.cmd[..., 3:], d.quat, d.vel, d.ang_vel, self.rotor_speed)
        failed = self._failed_mavs()
        self.failed = failed
        self.rotor_alive = (~failed).float().unsqueeze(-1)
        speed_cmd = torch.minimum(speed_cmd, self.rotor_speed_max) * self.rotor_alive
        for _ in range(self.cfg.physics_substeps):
            self._physics_step(speed_cmd)
        self.time = self.time + self.ctrl_dt

    def _failed_mavs(self) -> Tensor:
        """``[E, N]`` bool: the MAV whose rotors have stopped by now (none before its episode's fault time)."""
        return (self.time >= self.fault_time).unsqueeze(-1) & (
            torch.arange(self.n, device=self.device) == self.fault_agent.unsqueeze(-1)
        )

    def _physics_step(self, speed_cmd: Tensor) -> None:
        """Motors, cables, Newton-Euler for MAVs and load, ground contact. One ``phys_dt``."""
        cfg, dt, model = self.cfg, self.phys_dt, self.model
        self.rotor_speed = model.motor_step(self.rotor_speed, speed_cmd, dt, decay=self.motor_decay)
        thrust, rotor_torque = model.body_wrench(self.rotor_speed, self.thrust_scale)

        d, ld = self.drones, self.load
        load_b = self._load_per_mav()
        p_d, v_d = point_velocity(d, model.cable_attach)  # [E, N, 3]
        p_l, v_l = point_velocity(load_b, self.attach)  # [E, N, 3]
        tension, direction, _ = cable_tension(
            p_d, v_d, p_l, v_l, self.cable_length, cfg.cable_stiffness, cfg.cable_damping
        )
        if cfg.fault.enabled and cfg.fault.cable == "released":
            tension = tension * (~self.failed)  # a lost MAV's cable has let go of the load
        self.cable_tension = tension
        f_cable = direction * tension.unsqueeze(-1)  # on each MAV, toward the load

        e_z = torch.zeros_like(d.vel)
        e_z[..., 2] = thrust
        force_d = quat_rotate(d.quat, e_z) + model.drag_force(d.quat, d.vel) + f_cable
        torque_d = rotor_torque + wrench_at_point(d, model.cable_attach, f_cable)
        force_l = -f_cable.sum(1)
        if cfg.disturbance.enabled:
            force_l = force_l + self._disturbance_force()
        torque_l = wrench_at_point(load_b, self.attach, -f_cable).sum(1)

        drones = rigid_body_step(d, force_d, torque_d, self.mav_mass, self.mav_inertia, dt)
        load = rigid_body_step(ld, force_l, torque_l, self.load_mass.unsqueeze(-1), self.load_inertia, dt)
        self.drones, _ = ground_contact(drones, radius=self.mav_contact_radius)
        self.load, _ = ground_contact(load, radius=cfg.load_size[2] / 2)

    # ----------------------------------------------------------------- step, component-major layout
    def _control_step_components(self) -> None:
        """:meth:`_control_step` with one tensor per vector component (:mod:`sim.physics.components`).

        The same INDI tick and physics substeps as the rows path (to float32 round-off): the state is split
        into ``[E, N]`` / ``[E]`` components once here, and written back as rows at the end (drones, load,
        rotor speeds, cable tensions, fault flags, time and the INDI memory), so observations, rewards,
        resets and the rows path read the same attributes as ever. No host sync: compiles and runs on cuda.
        """
        ctrl = self.indi_components
        d, ld = self.drones, self.load
        drones, load = soa.Body.from_rows(d), soa.Body.from_rows(ld)
        speed = soa.split(self.rotor_speed)
        cmd = soa.split(self.cmd)
        rot = soa.quat_to_matrix(drones.quat)  # serves the INDI tick and the first substep
        speed_cmd, mem = ctrl.step(soa.INDI.load(self.indi), cmd[:3], cmd[3:], rot, drones.vel, drones.ang_vel, speed)
        failed = self._failed_mavs()
        alive = (~failed).float()  # [E, N]
        speed_max = self.rotor_speed_max[..., 0]
        speed_cmd = tuple(torch.minimum(c, speed_max) * alive for c in speed_cmd)
        # Per-episode parameters as [E, N] / [E] components (views where the last axis is a singleton).
        params = {
            "decay": self.motor_decay[..., 0],
            "thrust_scale": self.thrust_scale[..., 0],
            "mav_inertia": soa.split(self.mav_inertia),
            "mav_mass": self.mav_mass[..., 0],
            "load_inertia": soa.split(self.load_inertia),
            "attach": soa.split(self.attach),  # [N] each, broadcast over envs
            "disturbance": soa.split(self._disturbance_force()) if self.cfg.disturbance.enabled else None,
            "released": failed if self.cfg.fault.enabled and self.cfg.fault.cable == "released" else None,
        }
        tension = self.cable_tension
        for i in range(self.cfg.physics_substeps):
            if i > 0:
                rot = soa.quat_to_matrix(drones.quat)
            drones, load, speed, tension = self._physics_step_components(drones, load, speed, speed_cmd, rot, params)

        soa.INDI.store(self.indi, mem, prev_vel=d.vel, prev_ang_vel=d.ang_vel)  # the rows this tick measured
        self.drones, self.load = drones.to_rows(), load.to_rows()
        self.rotor_speed = soa.join(speed)
        self.cable_tension = tension
        self.failed = failed
        self.rotor_alive = alive.unsqueeze(-1)
        self.time = self.time + self.ctrl_dt

    def _physics_step_components(
        self,
        drones: soa.Body,
        load: soa.Body,
        speed: tuple[Tensor, ...],
        speed_cmd: tuple[Tensor, ...],
        rot: soa.Mat3,
        params: dict,
    ) -> tuple[soa.Body, soa.Body, tuple[Tensor, ...], Tensor]:
        """:meth:`_physics_step` on components: MAVs ``[E, N]``, load ``[E]``, ``rot`` the MAVs' rotation matrix
        now. Returns the new MAVs, load, rotor speeds and cable tensions ``[E, N]``."""
        cfg, dt, rotors = self.cfg, self.phys_dt, self.indi_components.rotors
        speed = rotors.motor_step(speed, speed_cmd, params["decay"])
        thrust, rotor_torque = rotors.body_wrench(speed, params["thrust_scale"])

        load_b = load.unsqueeze(-1)  # [E, 1]: broadcasts over the MAVs
        rot_l = soa.quat_to_matrix(load.quat)  # [E]
        rot_lb = tuple(tuple(c.unsqueeze(-1) for c in row) for row in rot_l)
        p_d, v_d = soa.point_velocity(drones, rot, rotors.cable_attach)
        p_l, v_l = soa.point_velocity(load_b, rot_lb, params["attach"])
        tension, direction, _ = soa.cable_tension(
            p_d, v_d, p_l, v_l, self.cable_length, cfg.cable_stiffness, cfg.cable_damping
        )
        if params["released"] is not None:
            tension = tension * (~params["released"])  # a lost MAV's cable has let go of the load
        f_cable = tuple(c * tension for c in direction)  # on each MAV, toward the load

        drag = soa.drag_force(rot, drones.vel, rotors.drag_coeff)
        force_d = tuple(rot[k][2] * thrust + drag[k] + f_cable[k] for k in range(3))
        torque_d = soa.add(rotor_torque, soa.wrench_at_point(rot, rotors.cable_attach, f_cable))
        # On the load: -f_cable at each attachment point. Negating after the sums is exact (sign-symmetric
        # rounding) and saves negating each [E, N] component.
        force_l = tuple(-f.sum(-1) for f in f_cable)
        if params["disturbance"] is not None:
            force_l = tuple(f + w for f, w in zip(force_l, params["disturbance"], strict=True))
        torque_l = tuple(-t.sum(-1) for t in soa.wrench_at_point(rot_lb, params["attach"], f_cable))

        drones = soa.rigid_body_step(drones, force_d, torque_d, params["mav_mass"], params["mav_inertia"], dt)
        load = soa.rigid_body_step(load, force_l, torque_l, self.load_mass, params["load_inertia"], dt)
        drones = soa.ground_contact(drones, radius=self.mav_contact_radius)
        load = soa.ground_contact(load, radius=cfg.load_size[2] / 2)
        return drones, load, speed, tension

    def _disturbance_force(self) -> Tensor:
        """The external force on the load now, world frame, ``[E, 3]`` (N): constant, or varying slowly
        between 0 and its drawn amplitude (``disturbance.period_s``)."""
        period = self.cfg.disturbance.period_s
        if period <= 0:
            return self.disturbance_amp
        wave = 0.5 * (1.0 + torch.sin(2 * math.pi * self.time / period + self.disturbance_phase))
        return self.disturbance_amp * wave.unsqueeze(-1)

    def _load_per_mav(self) -> RigidBodyState:
        """The load state viewed with a singleton MAV axis, ``[E, 1, ...]``, to broadcast over MAVs."""
        ld = self.load
        return RigidBodyState(ld.pos.unsqueeze(1), ld.quat.unsqueeze(1), ld.vel.unsqueeze(1), ld.ang_vel.unsqueeze(1))

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
        """Per-MAV geometry behind ``own_attach`` and ``own_slot_rel`` (nominal values, load frame, m)."""
        return {
            "own_attach": self.attach.cpu().tolist(),
            "nominal_offset": self.nominal_offset.cpu().tolist(),
            "slot_yaw_lead_deg": self.cfg.slot_yaw_lead_deg,
            "cable_attach_on_mav": self.model.cable_attach.cpu().tolist(),
            "integral": {  # own_attach_err_int, one step per control step
                "dt": self.cfg.control_dt,
                "tau_s": self.cfg.integral_tau_s,
                "err_clip": self.cfg.integral_err_clip,
                "limit": self.cfg.integral_limit,
            },
        }

    def deployment_profile(self, group: str = GROUP) -> dict:
        """ROS deployment (:mod:`deploy_ros.profile`): each MAV builds ``policy`` from its own odometry
        (``/mav<i>/odom``), the load's and the goal pose; it commands acceleration and body-rate
        feed-forward, safe = zeros (no commanded acceleration: the onboard INDI controller holds its
        velocity). The load odometry times the steps of ``own_attach_err_int``."""
        return {
            "inputs": {
                "odom": {"msg": "nav_msgs/Odometry", "topic": "odom", "qos": "sensor", "stale": True},
                "load": {"msg": "nav_msgs/Odometry", "topic": "/load/odom", "qos": "sensor", "stale": True},
                "goal": {"msg": "geometry_msgs/PoseStamped", "topic": "/load/goal", "qos": "reliable", "stale": False},
            },
            "observations": {
                "policy": {
                    "builder": "sim.tasks.cable_load.robot_observation:PolicyObservation",
                    "from": ["odom", "load", "goal"],
                }
            },
            "command": {"msg": "std_msgs/Float32MultiArray", "topic": "command", "safe": [0.0] * len(ACTION_NAMES)},
            "step_inputs": ["load", "odom"],
            "bridge": "sim.tasks.cable_load.ros_bridge:CableLoadBridge",
        }

    def _noise_std(self) -> Tensor:
        """Noise std per frame entry, ``[frame_size]`` (zeros when noise is off)."""
        nz = self.cfg.obs_noise
        std_by_term = {
            "goal_pos_rel": nz.position,
            "load_rot": nz.rotation,
            "goal_rot_rel": nz.rotation,
            "load_vel": nz.velocity,
            "load_ang_vel": nz.angular_velocity,
            "own_pos_rel": nz.position,
            "own_slot_rel": nz.position,
            "own_vel": nz.velocity,
            "own_rot": nz.rotation,
            "own_ang_vel": nz.angular_velocity,
        }
        parts = [torch.full((t.size,), std_by_term.get(t.name, 0.0) if nz.enabled else 0.0) for t in _policy_terms()]
        return torch.cat(parts).to(self.device)

    def _sample_step_noise(self) -> None:
        if self.cfg.obs_noise.enabled:
            self._obs_noise = self._step_noise(self.history[:, :, 0].shape)

    def _randn(self, shape: torch.Size) -> Tensor:
        return torch.randn(shape, generator=self.rng, device=self.device)

    def _noise_key(self, shape: torch.Size) -> Tensor:
        """The step's noise as a key, one int64 drawn from ``self.rng``: the C pass draws the numbers in place, the
        ones :func:`sim.core.native.normal` gives for this key and ``shape``."""
        return torch.randint(0, 2**62, (1,), generator=self.rng)

    def _update_observation_buffers(self) -> None:
        self._integrate_attach_error()
        frame = self._frame()
        if self.cfg.obs_noise.enabled:
            noise = self._obs_noise
            if noise.dtype == torch.int64:  # a key (_noise_key): the numbers the C pass draws from it
                noise = native.normal(tuple(frame.shape), noise)
            frame = frame + noise * self._frame_noise_std
        self.history = torch.cat((self.history[:, :, 1:], frame.unsqueeze(2)), dim=2)

    def _observations(self) -> Obs:
        return {GROUP: {"policy": self.history.flatten(2), "state": self._state()}}

    def _observations_after_reset(self) -> Obs:
        return self._after_reset()

    def _native_observations_after_reset(self) -> Obs:
        """With the C kernels: the state from the C pass (~0.4 ms at 4096 envs, ~3x faster than the compiled _state);
        in a step's auto-reset only the reset envs' rows, written into the state that step's pass made."""
        ids, state = self._auto_reset_ids, self._native_pass.last_state
        if ids is None or state is None:
            state = self._native_pass.state()
        else:
            self._native_pass.state(ids, state)
        return {GROUP: {"policy": self.history.flatten(2), "state": state}}

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
        cached = self._cached_errors()
        if cached is not None:
            return cached
        pos_err = torch.linalg.vector_norm(self.goal_pos - self.load.pos, dim=-1)
        return pos_err, quat_angle_between(self.load.quat, self.goal_quat)

    def _no_cached_errors(self) -> None:
        return None

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
            for name in ("action_smoothness", "body_rate", "cable_force", "formation"):
                raw[name] = raw[name] * alive
        weighted = {name: getattr(rc, name) * val for name, val in raw.items()}
        weighted["termination"] = (rc.termination * terminated.float()).unsqueeze(-1).expand(-1, self.n)
        reward = torch.stack(list(weighted.values())).sum(0)
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
        b, _ = point_velocity(self._load_per_mav(), self.attach)
        seg = (b - a).unsqueeze(1)  # [E, 1, N, 3]
        rel = self.drones.pos.unsqueeze(2) - a.unsqueeze(1)  # [E, N, N, 3]
        t = ((rel * seg).sum(-1) / seg.square().sum(-1).clamp(min=1e-9)).clamp(0.0, 1.0)
        return torch.linalg.vector_norm(rel - t.unsqueeze(-1) * seg, dim=-1)

    def _episode_metrics_per_env(self) -> dict[str, Tensor]:
        pos_err, ori_err = self.errors()
        return {"metrics/final_pos_err_m": pos_err, "metrics/final_ori_err_deg": torch.rad2deg(ori_err)}
