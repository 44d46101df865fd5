"""cable_load's step in C on a CPU (``cfg.cpu_kernels``): the control loop (``control_loop.c``) and the
post-physics pass (``post_physics.c``), each one loop over the envs, and the reset of a few envs (``reset.c``, and
the history from ``post_physics.c``).

:class:`NativeControlLoop` does what ``CableLoadEnv._control_loop`` does (INDI ticks and physics substeps),
:class:`NativePostPhysics` what ``CableLoadEnv._post_physics`` (the base's pass over the task's hooks) does,
returning the same tuple, and :class:`NativeReset` what ``CableLoadEnv._reset_envs`` does. The torch code stays
the reference (``tests/test_cable_load_native.py`` holds the two together) and runs everywhere else: on a GPU, with
``cpu_kernels="torch"``, and where no C compiler is found (:func:`sim.core.native.load`).
"""

from __future__ import annotations

import ctypes
import math
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from sim.core import native
from sim.physics.rigid_body import GRAVITY
from sim.tasks.cable_load.config import GROUP
from sim.tasks.cable_load.geometry import box_inertia, cable_directions

if TYPE_CHECKING:
    from sim.tasks.cable_load.env import CableLoadEnv

SOURCES = (Path(__file__).with_name("control_loop.c"), Path(__file__).with_name("post_physics.c"))
RESET_SOURCE = Path(__file__).with_name("reset.c")  # scalar: a reset restarts a few envs
MAX_MAVS = 6  # the C files' per-env arrays
MAX_ROTORS = 8
FRAME_SIZE = 50  # the policy frame post_physics.c writes (spec.policy_terms)
REWARD_TERMS = ("position", "orientation", "action_smoothness", "body_rate", "cable_force", "formation", "termination")
GROUND_FRICTION = 0.5  # sim.physics.components.ground_contact's default (the C file takes it as a parameter)
REASONS = ("crash", "load_ground", "drone_proximity", "cable_proximity", "out_of_bounds")


def unsupported(env: CableLoadEnv) -> str | None:
    """None when the C kernels can run ``env``, else why not."""
    if env.device.type != "cpu":
        return f"they run on CPU tensors only (the env is on {env.device})"
    if env.history.dtype != torch.float32:
        return f"they compute in float32 (the env holds {env.history.dtype})"
    if env.n > MAX_MAVS or env.params.num_rotors > MAX_ROTORS:
        return f"they hold at most {MAX_MAVS} MAVs of {MAX_ROTORS} rotors"
    if env.history.shape[-1] != FRAME_SIZE:
        return f"they write {FRAME_SIZE}-entry frames"
    return None


def kernels(env: CableLoadEnv) -> tuple[NativeControlLoop, NativePostPhysics, NativeReset] | str:
    """The kernels for ``env`` (control loop, post-physics pass, reset), or why they cannot run here."""
    reason = unsupported(env)
    if reason is not None:
        return reason
    libs = [native.load_simd(source) for source in SOURCES]
    reset_lib = native.load(RESET_SOURCE)
    if any(lib is None for lib in libs) or reset_lib is None:
        return "no C compiler could build them (see the warning above)"
    post = NativePostPhysics(env, libs[1])
    return NativeControlLoop(env, libs[0]), post, NativeReset(env, reset_lib, post)


class NativeControlLoop:
    """Callable ``()`` for a CPU ``CableLoadEnv``: ``decimation`` control steps, as ``env._control_loop``. The state
    it advances is replaced by new tensors (never written in place: others may hold the old ones). Also
    :meth:`apply_actions`, as ``env._apply_actions``."""

    MEMORY = ("spec_force_f", "thrust_f", "torque_f", "ang_acc_f", "prev_vel", "prev_ang_vel")

    def __init__(self, env: CableLoadEnv, lib: ctypes.CDLL) -> None:
        self.env = env
        self.fn = lib.cable_load_control_loop
        self.apply_fn = lib.cable_load_apply_actions
        self.fn.restype = self.apply_fn.restype = None
        self.scale = env.action_scale.float().contiguous()
        cfg, ctrl, rotors = env.cfg, env.indi_components, env.indi_components.rotors
        released = cfg.fault.enabled and cfg.fault.cable == "released"
        # The order of control_loop.c's enum C_*.
        params = (
            cfg.decimation, cfg.physics_substeps, env.ctrl_dt, env.phys_dt, GRAVITY, *ctrl.gravity,
            ctrl.alpha, ctrl.mass,
            *ctrl.inertia, *ctrl.k_rate, ctrl.attitude_gain, ctrl.yaw_gain, ctrl.cos_max_tilt, ctrl.sin_max_tilt,
            rotors.k_f, *rotors.thrust_range, *rotors.speed_range, *rotors.drag_coeff, *rotors.cable_attach,
            cfg.cable_stiffness, cfg.cable_damping, float(released), float(cfg.disturbance.enabled),
            cfg.disturbance.period_s, env.mav_contact_radius, cfg.load_size[2] / 2, GROUND_FRICTION,
            *(x for row in rotors.allocation for x in row), *(x for row in rotors.allocation_pinv for x in row),
        )  # fmt: skip
        self.params = (ctypes.c_double * len(params))(*params)

    def apply_actions(self, actions: dict[str, Tensor]) -> None:
        """``env._apply_actions`` in one pass: clamp, delay, scale."""
        env = self.env
        act = actions[GROUP].contiguous()
        E, N, A = act.shape
        last, cmd = torch.empty_like(act), torch.empty_like(act)
        delay = env.delay
        buf = torch.empty_like(delay.buf) if delay.max_delay > 0 else None
        inputs = [act, delay.buf.contiguous() if buf is not None else None, buf, delay.delay.contiguous()]
        self.apply_fn(
            *(ctypes.c_int64(x) for x in (E, N * A, delay.max_delay + 1)), ctypes.c_int(native.threads()),
            *map(native.ptr, inputs), native.ptr(self.scale), native.ptr(last), native.ptr(cmd),
        )  # fmt: skip
        if buf is not None:
            delay.buf = buf
        env.prev_action, env.last_action, env.cmd = env.last_action, last, cmd

    def __call__(self) -> None:
        env, indi = self.env, self.env.indi
        E, N, R = env.num_envs, env.n, env.params.num_rotors
        c = torch.Tensor.contiguous
        d, ld = env.drones, env.load
        # What the loop advances, in control_loop.c's order (enum OUT); it writes the new values into new tensors.
        state = [
            *(c(d.pos), c(d.quat), c(d.vel), c(d.ang_vel), c(ld.pos), c(ld.quat), c(ld.vel), c(ld.ang_vel)),
            c(env.rotor_speed),
            c(env.cable_tension),
            *(c(getattr(indi, name)) for name in self.MEMORY),
            c(env.time),
        ]
        new = [torch.empty_like(t) for t in state]
        failed = torch.empty(E, N, dtype=torch.bool)
        inputs = [
            *state[:16], c(indi.yaw_ref), c(env.cmd),
            c(env.motor_decay), c(env.thrust_scale), c(env.mav_mass), c(env.mav_inertia),
            c(env.rotor_speed_max), c(env.cable_length), c(env.load_mass), c(env.load_inertia), c(env.attach),
            state[16], c(env.fault_time), c(env.fault_agent), failed, c(env.disturbance_amp), c(env.disturbance_phase),
        ]  # fmt: skip
        out = (ctypes.c_void_p * len(new))(*(native.ptr(t).value for t in new))
        sizes = (ctypes.c_int64(E), ctypes.c_int64(N), ctypes.c_int64(R), ctypes.c_int(native.threads()))
        self.fn(*sizes, *map(native.ptr, inputs), out, self.params)
        env.drones, env.load = type(d)(*new[:4]), type(ld)(*new[4:8])
        env.rotor_speed, env.cable_tension, env.time = new[8], new[9], new[16]
        for name, value in zip(self.MEMORY, new[10:16], strict=True):
            setattr(indi, name, value)
        env.failed = failed
        env.rotor_alive = (~failed).float().unsqueeze(-1)


class NativePostPhysics:
    """Callable ``() -> (obs, reward, terms, terminated, reasons, bad)`` for a CPU ``CableLoadEnv``; it also
    advances ``env.history`` and ``env.attach_err_int`` as ``_update_observation_buffers`` does."""

    # Not env state for a checkpoint (state_snapshot): its caches hold only what the last step's pass returned.
    snapshot_constant = True

    def __init__(self, env: CableLoadEnv, lib: ctypes.CDLL) -> None:
        self.env = env
        self._errors: tuple | None = None
        self.last_state: Tensor | None = None
        self.lib = lib
        self.fn = lib.cable_load_post_physics
        self.state_fn = lib.cable_load_state
        self.fn.restype = self.state_fn.restype = None
        cfg = env.cfg
        rc, tc = cfg.rewards, cfg.terminations
        leak = 1.0 - cfg.control_dt / cfg.integral_tau_s if cfg.integral_tau_s > 0 else 1.0
        # The order of post_physics.c's enum P_*.
        params = (
            env.max_episode_steps,
            math.radians(cfg.slot_yaw_lead_deg),
            cfg.integral_err_clip,
            leak,
            cfg.control_dt,
            cfg.integral_limit,
            float(cfg.fault.enabled),
            *(getattr(rc, name) for name in REWARD_TERMS),
            rc.position_sigma,
            rc.orientation_sigma,
            tc.drone_min_height,
            math.cos(math.radians(tc.drone_max_tilt_deg)),
            cfg.load_size[2] / 2,
            tc.load_min_clearance,
            tc.drone_min_distance,
            tc.cable_min_distance,
            tc.bounds_xy,
            tc.bounds_z,
        )
        self.params = (ctypes.c_double * len(params))(*params)
        self.cable_attach = env.model.cable_attach.contiguous()

    def __call__(self) -> tuple:
        env = self.env
        E, N, H, F = env.history.shape
        d, ld, c = env.drones, env.load, torch.Tensor.contiguous
        history = torch.empty_like(env.history)
        integ = torch.empty_like(env.attach_err_int)
        state = torch.empty(E, N, self._state_size())
        reward = torch.empty(E, N)
        terms = torch.empty(len(REWARD_TERMS), E)
        terminated = torch.empty(E, dtype=torch.bool)
        reasons = torch.empty(len(REASONS), E, dtype=torch.bool)
        bad = torch.empty(E, dtype=torch.bool)
        errors = torch.empty(2, E)
        # Held in this list until the call returns: a .contiguous() copy would otherwise be freed before it.
        inputs = [
            c(d.pos), c(d.quat), c(d.vel), c(d.ang_vel),
            c(ld.pos), c(ld.quat), c(ld.vel), c(ld.ang_vel),
            c(env.goal_pos), c(env.goal_quat), c(env.start_pos),
            c(env.attach), c(env.nominal_offset), self.cable_attach,
            c(env.cable_tension), c(env.hover_tension), c(env.formation_offset),
            c(env.last_action), c(env.prev_action),
            c(env.attach_err_int), integ,
            c(env.failed), c(env.episode_step),
            c(env.history), history,
            self._noise_key(), c(env._frame_noise_std),
            state, reward, terms, terminated, reasons, bad, errors,
        ]  # fmt: skip
        sizes = (*(ctypes.c_int64(x) for x in (E, N, H, F, state.shape[-1])), ctypes.c_int(native.threads()))
        self.fn(*sizes, *map(native.ptr, inputs), self.params)
        env.history = history
        env.attach_err_int = integ
        inputs = env.error_inputs()
        # Under inference mode (training's rollouts, evaluation) no reuse: those runs have always taken their errors
        # from the torch code (CableLoadEnv.errors), and their metrics stay the same numbers.
        tracked = not any(t.is_inference() for t in inputs)
        self._errors = (inputs, (errors[0], errors[1])) if tracked else None
        self.last_state = state  # this step's, for the rows an auto-reset rewrites (CableLoadEnv)
        obs = {GROUP: {"policy": history.flatten(2), "state": state}}
        return (
            obs,
            {GROUP: reward},
            dict(zip(REWARD_TERMS, terms.unbind(0), strict=True)),
            terminated,
            dict(zip(REASONS, reasons.unbind(0), strict=True)),
            bad,
        )

    def cached_errors(self) -> tuple[Tensor, Tensor] | None:
        """``env.errors()`` as the last pass computed them, while the state they came from is unchanged: the step's
        metrics and episode statistics then need no recomputation.

        Unchanged is tracked explicitly: the control loop replaces the state tensors (so the ones the pass read are
        no longer the env's), and the env's writes into them in place call :meth:`forget_errors` (the reset,
        ``NativeReset`` and masked resets through it, and ``CableLoadEnv.load_state_snapshot``). Code outside the
        env that writes the load or goal tensors in place between steps calls ``env.backend.forget_errors()``."""
        if self._errors is None:
            return None
        inputs, errors = self._errors
        now = self.env.error_inputs()
        return errors if all(a is b for a, b in zip(inputs, now, strict=True)) else None

    def forget_errors(self) -> None:
        """Drop the cached errors: the state they came from was written in place."""
        self._errors = None

    def _noise_key(self) -> Tensor | None:
        """The step's noise key [1] (NativePhysics.step_noise), None without observation noise."""
        return self.env._obs_noise.contiguous() if self.env.cfg.obs_noise.enabled else None

    def state(self, env_ids: Tensor | None = None, out: Tensor | None = None) -> Tensor:
        """The critic's state ``[E, N, state_dim]``, as ``CableLoadEnv._state`` (the observations after a reset).
        With ``env_ids [k]``: only those envs' rows, written in place into ``out`` (the state the last pass
        returned, while an auto-reset may still write it), which is returned."""
        env = self.env
        E, N = env.num_envs, env.n
        d, ld, c = env.drones, env.load, torch.Tensor.contiguous
        if env_ids is None:
            out, rows, count = torch.empty(E, N, self._state_size()), None, E
        else:
            assert out is not None and out.shape == (E, N, self._state_size()), "rows are written into a full state"
            rows, count = env_ids.contiguous(), env_ids.numel()
        inputs = [
            c(d.pos), c(d.quat), c(d.vel), c(d.ang_vel),
            c(ld.pos), c(ld.quat), c(ld.vel), c(ld.ang_vel),
            c(env.goal_pos), c(env.goal_quat), c(env.cable_tension),
            c(env.failed), c(env.episode_step), out,
        ]  # fmt: skip
        sizes = (ctypes.c_int64(N), ctypes.c_int64(out.shape[-1]), ctypes.c_int(native.threads()))
        self.state_fn(ctypes.c_int64(count), native.ptr(rows), *sizes, *map(native.ptr, inputs), self.params)
        return out

    def _state_size(self) -> int:
        return self.env.spec.groups[GROUP].observations["state"].shape[0]


class NativeReset:
    """Callable ``(env_ids [k], draws)`` for a CPU ``CableLoadEnv``: ``env._reset_envs`` in two C calls, the state
    (``reset.c``) and then the history rows (``post_physics.c``, the frames the pass writes). Every row is written
    in place, the history too (``CableLoadEnv._reset_idx`` makes sure that is allowed)."""

    snapshot_constant = True  # configuration (state_snapshot)
    # reset.c's draw order (draw[18]); "delay" and "fault_agent" are int64.
    DRAWS = (
        "load_mass", "load_inertia_scale", "cable_length_scale", "thrust_scale", "tau_scale", "delay",
        "mav_mass_scale", "thrust_limit_scale", "start_xy", "goal_xy", "goal_z", "goal_rpy",
        "fault_hit", "fault_time", "fault_agent", "disturbance_dir", "disturbance_frac", "disturbance_phase",
    )  # fmt: skip
    # reset.c's enum O_*: the float state it writes, as env attribute paths.
    OUT = (
        "load_inertia", "cable_length", "thrust_scale", "tau_scale", "motor_decay", "mav_mass", "mav_inertia",
        "rotor_speed_max", "load_mass", "start_pos", "load.pos", "load.quat", "load.vel", "load.ang_vel",
        "drones.pos", "drones.quat", "drones.vel", "drones.ang_vel", "rotor_speed", "cable_tension",
        "hover_tension", "formation_offset", "indi.spec_force_f", "indi.thrust_f", "indi.torque_f",
        "indi.ang_acc_f", "indi.prev_vel", "indi.prev_ang_vel", "indi.yaw_ref", "goal_pos", "goal_quat", "time",
        "rotor_alive", "fault_time", "disturbance_amp", "disturbance_phase", "last_action", "prev_action", "cmd",
        "attach_err_int",
    )  # fmt: skip

    def __init__(self, env: CableLoadEnv, lib: ctypes.CDLL, post: NativePostPhysics) -> None:
        self.env, self.post = env, post
        self.fn = lib.cable_load_reset
        self.history_fn = post.lib.cable_load_reset_history
        self.fn.restype = self.history_fn.restype = None
        cfg, model, rnd = env.cfg, env.model, env.cfg.randomization
        diag = box_inertia(torch.ones(1), cfg.load_size)[0]  # the float32 values box_inertia multiplies by
        pinv = model.allocation_pinv
        params = (
            float(rnd.enabled),
            float(rnd.enabled and rnd.mav_mass_scale[0] != rnd.mav_mass_scale[1]),
            float(rnd.enabled and rnd.thrust_limit_scale[0] != rnd.thrust_limit_scale[1]),
            float(cfg.fault.enabled), float(cfg.disturbance.enabled),
            cfg.load_mass, *diag.tolist(), cfg.cable_length, env.phys_dt, env.params.motor_time_constant,
            model.mass, *model.inertia.tolist(), env.params.rotor_speed_max, cfg.start_height,
            env.n * math.cos(env.cable_angle), cfg.cable_stiffness, GRAVITY, *model.cable_attach.tolist(),
            float(model.rotor_thrust_min), float(model.rotor_thrust_max), model.k_f,
            math.radians(cfg.goal_tilt_deg), math.radians(cfg.goal_yaw_deg), cfg.fault.probability,
            *pinv.flatten().tolist(),
        )  # fmt: skip
        self.params = (ctypes.c_double * len(params))(*params)
        self.cable_dirs = cable_directions(env.n, env.cable_angle).contiguous()

    def reset_idx(self, env_ids: Tensor) -> None:
        """``NativePhysics.reset_rows``: the draws (the env's, eager), then this reset."""
        self(env_ids, self.env._reset_draws(env_ids.numel()))

    def __call__(self, env_ids: Tensor, draws: dict[str, Tensor]) -> None:
        env, c = self.env, torch.Tensor.contiguous
        rows = c(env_ids)
        k = rows.numel()
        state = []
        for path in self.OUT:
            t = native.attribute(env, path)
            if not t.is_contiguous():
                raise ValueError(f"cable_load's C reset writes {path} in place: it must be contiguous")
            state.append(t)
        draw_args = [c(draws[name]) if name in draws else None for name in self.DRAWS]
        delay = env.delay
        buf = delay.buf if delay.max_delay > 0 else None
        D = delay.max_delay + 1
        out = (ctypes.c_void_p * len(state))(*(native.ptr(t).value for t in state))
        drawn = (ctypes.c_void_p * len(draw_args))(*(native.ptr(t).value for t in draw_args))
        sizes = tuple(ctypes.c_int64(x) for x in (k, env.n, env.params.num_rotors, env.last_action.shape[-1], D))
        self.fn(
            *sizes[:1], native.ptr(rows), *sizes[1:], drawn, native.ptr(env.attach), native.ptr(self.cable_dirs),
            out, native.ptr(env.failed), native.ptr(env.fault_agent), native.ptr(delay.delay), native.ptr(buf),
            self.params,
        )  # fmt: skip
        noise = c(draws["obs_noise"]) if "obs_noise" in draws else None
        d, ld = env.drones, env.load
        # Read-only inputs as contiguous copies where they are views (an adapter's episode_step may be one), held here.
        inputs = [
            *map(c, (d.pos, d.quat, d.vel, d.ang_vel, ld.pos, ld.quat, ld.vel, ld.ang_vel, env.goal_pos)),
            *map(c, (env.goal_quat, env.cable_tension, env.failed, env.episode_step, env.attach, env.nominal_offset)),
            c(env.attach_err_int), c(env.last_action), noise, c(env._frame_noise_std), env.history,
        ]  # fmt: skip
        self.post.forget_errors()  # the state the last pass read is written in place
        H = env.history.shape[2]
        self.history_fn(
            ctypes.c_int64(k), native.ptr(rows), ctypes.c_int64(env.n), ctypes.c_int64(H),
            *map(native.ptr, inputs), self.post.params,
        )  # fmt: skip
