"""cable_load's step in C on a CPU (``sim.kernels``): the control loop (``control_loop.c``) and the
post-physics pass (``post_physics.c``), each one loop over the envs, and the reset of a few envs (``reset.c``, and
the history from ``post_physics.c``).

:class:`NativeControlLoop` does what ``CableLoadEnv._control_loop`` does (INDI ticks and physics substeps),
:class:`NativePostPhysics` what ``CableLoadEnv._post_physics`` (the base's pass over the task's hooks) does,
returning the same tuple, and :class:`NativeReset` what ``CableLoadEnv._reset_envs`` does. Each C function is the
custom op ``covey::<function>`` (:class:`sim.core.native.KernelOp`, :data:`OPS`), called with outputs allocated
here; the files' sizes, enums and argument lists are declared once below (:data:`LAYOUTS`). The torch code stays
the reference (``tests/test_cable_load_native.py`` holds the two together) and runs everywhere else: on a GPU, with
``kernels="torch"``, and where no C compiler is found (:func:`sim.core.native.load`).
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
from sim.tasks.cable_load.spec import ACTION_NAMES, policy_terms

if TYPE_CHECKING:
    from sim.tasks.cable_load.env import CableLoadEnv

SOURCES = (Path(__file__).with_name("control_loop.c"), Path(__file__).with_name("post_physics.c"))
RESET_SOURCE = Path(__file__).with_name("reset.c")  # scalar: a reset restarts a few envs
MAX_MAVS = 6  # the C files' per-env arrays
MAX_ROTORS = 8
FRAME_SIZE = sum(t.size for t in policy_terms())  # the policy frame post_physics.c writes
FRAME_ENV = sum(t.size for t in policy_terms() if not t.name.startswith(("own_", "last_")))  # its per-env part
ACTIONS = len(ACTION_NAMES)
# The env's reward terms (CableLoadEnv._rewards), in its order; alive and penalty_bound are the plain profile's
# (RewardCfg.penalty_bound > 0), reported only there.
REWARD_TERMS = (
    "position", "orientation", "action_smoothness", "body_rate", "cable_force", "formation", "alive", "penalty_bound",
    "termination",
)  # fmt: skip
PLAIN_TERMS = ("alive", "penalty_bound")
GROUND_FRICTION = 0.5  # sim.physics.components.ground_contact's default (the C file takes it as a parameter)
REASONS = ("crash", "load_ground", "drone_proximity", "cable_proximity", "out_of_bounds")

# The C files' layouts, declared here once: native.load writes each as the <file>_layout.h its file includes, and
# the calls below pack and pass their arguments by the same names.
_F, _I64, _U8 = "const float*", "const int64_t*", "const uint8_t*"
_BODIES = ("dpos", "dquat", "dvel", "dw", "lpos", "lquat", "lvel", "lw")  # [E, N, 3 | 4] MAVs, [E, 3 | 4] load
# What the control loop advances: (its name in control_loop.c, the env's attribute), in the order of its outputs.
LOOP_STATE = (
    *zip(_BODIES, ("drones.pos", "drones.quat", "drones.vel", "drones.ang_vel",
                   "load.pos", "load.quat", "load.vel", "load.ang_vel"), strict=True),
    ("rotor_speed", "rotor_speed"), ("tension_out", "cable_tension"),
    ("spec_force_f", "indi.spec_force_f"), ("thrust_f", "indi.thrust_f"), ("torque_f", "indi.torque_f"),
    ("ang_acc_f", "indi.ang_acc_f"), ("prev_vel", "indi.prev_vel"), ("prev_w", "indi.prev_ang_vel"),
    ("time", "time"),
)  # fmt: skip
# The loop's other inputs: (name, the env's attribute); fault_agent is int64, the rest float32.
LOOP_INPUTS = (
    ("yaw_ref", "indi.yaw_ref"), ("cmd", "cmd"), ("decay", "motor_decay"), ("thrust_scale", "thrust_scale"),
    ("mav_mass", "mav_mass"), ("mav_inertia", "mav_inertia"), ("speed_max", "rotor_speed_max"),
    ("cable_length", "cable_length"), ("load_mass", "load_mass"), ("load_inertia", "load_inertia"),
    ("attach", "attach"), ("fault_time", "fault_time"), ("fault_agent", "fault_agent"),
    ("dist_amp", "disturbance_amp"), ("dist_phase", "disturbance_phase"),
)  # fmt: skip
CONTROL_LOOP = native.Layout(
    defines=(("MAX_MAVS", MAX_MAVS), ("MAX_ROTORS", MAX_ROTORS), ("A", ACTIONS)),
    parts=(
        native.Scalars("C", (
            ("decimation", 1), ("substeps", 1), ("ctrl_dt", 1), ("phys_dt", 1), ("gravity", 1), ("indi_gravity", 3),
            ("alpha", 1), ("mass", 1), ("inertia", 3), ("k_rate", 3), ("att_gain", 1), ("yaw_gain", 1),
            ("cos_tilt", 1), ("sin_tilt", 1), ("k_f", 1), ("thrust_min", 1), ("thrust_max", 1), ("speed_min", 1),
            ("speed_max", 1), ("drag", 3), ("cable_attach", 3), ("stiffness", 1), ("damping", 1), ("released", 1),
            ("dist_on", 1), ("dist_period", 1), ("mav_radius", 1), ("load_radius", 1), ("friction", 1),
            ("alloc", None),  # the allocation matrix [4, R], then its pseudo-inverse [R, 4]
        )),
        native.Names("O", tuple(name for name, _ in LOOP_STATE)),
        native.Signature("CONTROL_LOOP_ARGS", (
            ("int64_t", "E"), ("int64_t", "N"), ("int64_t", "R"), ("int", "nthreads"),
            *((_F, name) for name, _ in LOOP_STATE[:-1]),
            *((_I64 if name == "fault_agent" else _F, name) for name, _ in LOOP_INPUTS[:11]),
            (_F, "time"), *((_I64 if name == "fault_agent" else _F, name) for name, _ in LOOP_INPUTS[11:13]),
            ("uint8_t*", "failed_out"), *((_F, name) for name, _ in LOOP_INPUTS[13:]),
            ("float* const*", "out"), ("const double*", "p"),
        )),
        native.Signature("APPLY_ACTIONS_ARGS", (
            ("int64_t", "E"), ("int64_t", "NA"), ("int64_t", "D"), ("int", "nthreads"), (_F, "act"), (_F, "buf_in"),
            ("float*", "buf_out"), (_I64, "delay"), (_F, "scale"), ("float*", "last_action"), ("float*", "cmd"),
        )),
    ),
)  # fmt: skip
_VIEW = (*_BODIES, "goal_pos", "goal_quat", "tension")  # float32 inputs of every pass, then failed and episode_step
_VIEW_ARGS = (*((_F, name) for name in _VIEW), (_U8, "failed"), (_I64, "episode_step"))
POST_PHYSICS = native.Layout(
    defines=(
        ("MAX_MAVS", MAX_MAVS), ("A", ACTIONS), ("F", FRAME_SIZE), ("FRAME_ENV", FRAME_ENV),
        ("MAX_GLOB", 20 * MAX_MAVS + 22),  # the state's global part: 20 N + 22 entries at most
    ),
    parts=(
        native.Scalars("P", (
            ("max_steps", 1), ("lead", 1), ("err_clip", 1), ("leak", 1), ("dt", 1), ("int_limit", 1), ("fault", 1),
            *((f"w_{name}", 1) for name in REWARD_TERMS), ("pos_sigma", 1), ("ori_sigma", 1), ("min_height", 1),
            ("cos_tilt", 1), ("load_half", 1), ("clearance", 1), ("min_dist", 1), ("cable_dist", 1),
            ("bounds_xy", 1), ("bounds_z", 1),
        )),
        native.Names("T", REWARD_TERMS),  # the reward terms' rows of `terms`
        native.Names("WHY", REASONS),  # the termination reasons' rows of `reasons`
        native.Signature("POST_PHYSICS_ARGS", (
            ("int64_t", "E"), ("int64_t", "N"), ("int64_t", "H"), ("int64_t", "S"), ("int", "nthreads"),
            *_VIEW_ARGS[:10], (_F, "start_pos"), (_F, "attach"), (_F, "nominal"), (_F, "cable_attach"),
            (_F, "tension"), (_F, "hover_tension"), (_F, "formation_offset"), (_F, "last_action"),
            (_F, "prev_action"), (_F, "integ_in"), ("float*", "integ_out"), *_VIEW_ARGS[11:],
            (_F, "hist_in"), ("float*", "hist_out"), (_I64, "noise_key"), (_F, "noise_std"),
            ("float*", "state"), ("float*", "reward"), ("float*", "terms"), ("uint8_t*", "terminated"),
            ("uint8_t*", "reasons"), ("uint8_t*", "bad"), ("float*", "errors"), ("const double*", "p"),
        )),
        native.Signature("STATE_ARGS", (
            ("int64_t", "E"), (_I64, "rows"), ("int64_t", "N"), ("int64_t", "S"), ("int", "nthreads"), *_VIEW_ARGS,
            ("float*", "state"), ("const double*", "p"),
        )),
        native.Signature("RESET_HISTORY_ARGS", (
            ("int64_t", "k"), (_I64, "rows"), ("int64_t", "N"), ("int64_t", "H"), *_VIEW_ARGS, (_F, "attach"),
            (_F, "nominal"), (_F, "integ"), (_F, "last_action"), (_F, "noise"), (_F, "noise_std"),
            ("float*", "history"), ("const double*", "p"),
        )),
    ),
)  # fmt: skip
# The reset's draws (CableLoadEnv._reset_draws; "delay" and "fault_agent" are int64) and the state it writes: (its
# name in reset.c, the env's float32 attribute).
DRAWS = (
    "load_mass", "load_inertia_scale", "cable_length_scale", "thrust_scale", "tau_scale", "delay",
    "mav_mass_scale", "thrust_limit_scale", "start_xy", "goal_xy", "goal_z", "goal_rpy",
    "fault_hit", "fault_time", "fault_agent", "disturbance_dir", "disturbance_frac", "disturbance_phase",
)  # fmt: skip
RESET_STATE = (
    ("load_inertia", "load_inertia"), ("cable_length", "cable_length"), ("thrust_scale", "thrust_scale"),
    ("tau_scale", "tau_scale"), ("motor_decay", "motor_decay"), ("mav_mass", "mav_mass"),
    ("mav_inertia", "mav_inertia"), ("speed_max", "rotor_speed_max"), ("load_mass", "load_mass"),
    ("start_pos", "start_pos"), ("load_pos", "load.pos"), ("load_quat", "load.quat"), ("load_vel", "load.vel"),
    ("load_w", "load.ang_vel"), ("mav_pos", "drones.pos"), ("mav_quat", "drones.quat"), ("mav_vel", "drones.vel"),
    ("mav_w", "drones.ang_vel"), ("rotor_speed", "rotor_speed"), ("tension", "cable_tension"),
    ("hover_tension", "hover_tension"), ("formation", "formation_offset"), ("spec_force", "indi.spec_force_f"),
    ("thrust_f", "indi.thrust_f"), ("torque_f", "indi.torque_f"), ("ang_acc_f", "indi.ang_acc_f"),
    ("prev_vel", "indi.prev_vel"), ("prev_w", "indi.prev_ang_vel"), ("yaw_ref", "indi.yaw_ref"),
    ("goal_pos", "goal_pos"), ("goal_quat", "goal_quat"), ("time", "time"), ("alive", "rotor_alive"),
    ("fault_time", "fault_time"), ("dist_amp", "disturbance_amp"), ("dist_phase", "disturbance_phase"),
    ("last_action", "last_action"), ("prev_action", "prev_action"), ("cmd", "cmd"), ("attach_int", "attach_err_int"),
)  # fmt: skip
_DRAWS_T = native.Struct(
    "draws_t", tuple((_I64 if name in ("delay", "fault_agent") else _F, name) for name in DRAWS)
)  # NULL where the config draws none
RESET = native.Layout(
    parts=(
        native.Scalars("R", (
            ("randomized", 1), ("mav_mass_scaled", 1), ("thrust_limit_scaled", 1), ("fault", 1), ("disturbance", 1),
            ("load_mass", 1), ("inertia_diag", 3), ("cable_length", 1), ("dt", 1), ("tau", 1), ("mav_mass", 1),
            ("mav_inertia", 3), ("speed_max", 1), ("start_height", 1), ("tension_div", 1), ("stiffness", 1),
            ("gravity", 1), ("cable_attach", 3), ("thrust_min", 1), ("thrust_max", 1), ("k_f", 1), ("tilt", 1),
            ("yaw", 1), ("fault_p", 1), ("pinv", None),
        )),
        native.Names("O", tuple(name for name, _ in RESET_STATE)),
        _DRAWS_T,
        native.Signature("RESET_ARGS", (
            ("int64_t", "k"), (_I64, "rows"), ("int64_t", "N"), ("int64_t", "R"), ("int64_t", "A"), ("int64_t", "D"),
            ("const draws_t*", "d"), (_F, "attach"), (_F, "cable_dirs"), ("float* const*", "out"),
            ("uint8_t*", "failed"), ("int64_t*", "fault_agent"), ("int64_t*", "delay"), ("float*", "delay_buf"),
            ("const double*", "p"),
        )),
    ),
)  # fmt: skip
LAYOUTS = {SOURCES[0]: CONTROL_LOOP, SOURCES[1]: POST_PHYSICS, RESET_SOURCE: RESET}
for _source, _layout in LAYOUTS.items():
    native.declare(_source, _layout)
# The functions, as custom ops (covey::<function>) that write into the outputs they are given.
OPS = {
    "cable_load_control_loop": native.KernelOp("cable_load_control_loop", CONTROL_LOOP, "CONTROL_LOOP_ARGS"),
    "cable_load_apply_actions": native.KernelOp("cable_load_apply_actions", CONTROL_LOOP, "APPLY_ACTIONS_ARGS"),
    "cable_load_post_physics": native.KernelOp("cable_load_post_physics", POST_PHYSICS, "POST_PHYSICS_ARGS"),
    "cable_load_state": native.KernelOp("cable_load_state", POST_PHYSICS, "STATE_ARGS"),
    "cable_load_reset_history": native.KernelOp("cable_load_reset_history", POST_PHYSICS, "RESET_HISTORY_ARGS"),
    "cable_load_reset": native.KernelOp("cable_load_reset", RESET, "RESET_ARGS"),
}


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


# Everything one control loop advances (the C loop's and the torch loop's alike): LOOP_STATE, the fault flags and the
# yaw reference. What a parity check saves before a loop and restores to run the other implementation from it.
ADVANCED_STATE = (*(path for _, path in LOOP_STATE), "failed", "rotor_alive", "indi.yaw_ref")


def loop_state(env: CableLoadEnv) -> dict[str, Tensor]:
    """Copies of the env's :data:`ADVANCED_STATE`, by path (``"drones.pos"`` ...)."""
    return {path: native.attribute(env, path).clone() for path in ADVANCED_STATE}


def set_loop_state(env: CableLoadEnv, state: dict[str, Tensor]) -> None:
    """Put a :func:`loop_state` back (as copies: the env may advance them)."""
    for path, value in state.items():
        head, _, name = path.rpartition(".")
        setattr(native.attribute(env, head) if head else env, name, value.clone())


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

    MEMORY = tuple(path.removeprefix("indi.") for _, path in LOOP_STATE if path.startswith("indi."))

    def __init__(self, env: CableLoadEnv, lib: ctypes.CDLL) -> None:
        self.env = env
        self.fn = lib.cable_load_control_loop
        self.apply_fn = lib.cable_load_apply_actions
        self.fn.restype = self.apply_fn.restype = None
        self.scale = env.action_scale.float().contiguous()
        cfg, ctrl, rotors = env.cfg, env.indi_components, env.indi_components.rotors
        self.params = CONTROL_LOOP["C"].pack(
            decimation=cfg.decimation, substeps=cfg.physics_substeps, ctrl_dt=env.ctrl_dt, phys_dt=env.phys_dt,
            gravity=GRAVITY, indi_gravity=ctrl.gravity, alpha=ctrl.alpha, mass=ctrl.mass, inertia=ctrl.inertia,
            k_rate=ctrl.k_rate, att_gain=ctrl.attitude_gain, yaw_gain=ctrl.yaw_gain, cos_tilt=ctrl.cos_max_tilt,
            sin_tilt=ctrl.sin_max_tilt, k_f=rotors.k_f, thrust_min=rotors.thrust_range[0],
            thrust_max=rotors.thrust_range[1], speed_min=rotors.speed_range[0], speed_max=rotors.speed_range[1],
            drag=rotors.drag_coeff, cable_attach=rotors.cable_attach, stiffness=cfg.cable_stiffness,
            damping=cfg.cable_damping, released=cfg.fault.enabled and cfg.fault.cable == "released",
            dist_on=cfg.disturbance.enabled, dist_period=cfg.disturbance.period_s, mav_radius=env.mav_contact_radius,
            load_radius=cfg.load_size[2] / 2, friction=GROUND_FRICTION,
            alloc=[*(x for row in rotors.allocation for x in row), *(x for row in rotors.allocation_pinv for x in row)],
        )  # fmt: skip

    def apply_actions(self, actions: dict[str, Tensor]) -> None:
        """``env._apply_actions`` in one pass: clamp, delay, scale."""
        env = self.env
        act = actions[GROUP].contiguous()
        E, N, A = act.shape
        last, cmd = torch.empty_like(act), torch.empty_like(act)
        delay = env.delay
        buf = torch.empty_like(delay.buf) if delay.max_delay > 0 else None
        OPS["cable_load_apply_actions"](
            self.apply_fn, E=E, NA=N * A, D=delay.max_delay + 1, nthreads=native.threads(), act=act,
            buf_in=delay.buf.contiguous() if buf is not None else None, buf_out=buf, delay=delay.delay.contiguous(),
            scale=self.scale, last_action=last, cmd=cmd,
        )  # fmt: skip
        if buf is not None:
            delay.buf = buf
        env.prev_action, env.last_action, env.cmd = env.last_action, last, cmd

    def __call__(self) -> None:
        env = self.env
        c = torch.Tensor.contiguous
        # Held in these dicts until the call returns: a .contiguous() copy would otherwise be freed before it.
        state = {name: c(native.attribute(env, path)) for name, path in LOOP_STATE}
        inputs = {name: c(native.attribute(env, path)) for name, path in LOOP_INPUTS}
        new = [torch.empty_like(t) for t in state.values()]
        E, N, R = state["rotor_speed"].shape
        failed = torch.empty(E, N, dtype=torch.bool)
        OPS["cable_load_control_loop"](
            self.fn, E=E, N=N, R=R, nthreads=native.threads(), **state, **inputs, failed_out=failed, out=new,
            p=self.params,
        )  # fmt: skip
        d, ld = env.drones, env.load
        env.drones, env.load = type(d)(*new[:4]), type(ld)(*new[4:8])
        for (_, path), value in zip(LOOP_STATE[8:], new[8:], strict=True):
            head, _, name = path.rpartition(".")
            setattr(native.attribute(env, head) if head else env, name, value)
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
        self.params = POST_PHYSICS["P"].pack(
            max_steps=env.max_episode_steps, lead=math.radians(cfg.slot_yaw_lead_deg), err_clip=cfg.integral_err_clip,
            leak=1.0 - cfg.control_dt / cfg.integral_tau_s if cfg.integral_tau_s > 0 else 1.0, dt=cfg.control_dt,
            int_limit=cfg.integral_limit, fault=cfg.fault.enabled,
            **{f"w_{name}": getattr(rc, name) for name in REWARD_TERMS},
            pos_sigma=rc.position_sigma, ori_sigma=rc.orientation_sigma, min_height=tc.drone_min_height,
            cos_tilt=math.cos(math.radians(tc.drone_max_tilt_deg)), load_half=cfg.load_size[2] / 2,
            clearance=tc.load_min_clearance, min_dist=tc.drone_min_distance, cable_dist=tc.cable_min_distance,
            bounds_xy=tc.bounds_xy, bounds_z=tc.bounds_z,
        )  # fmt: skip
        self.cable_attach = env.model.cable_attach.contiguous()
        self.term_names = {n for n in REWARD_TERMS if rc.penalty_bound > 0 or n not in PLAIN_TERMS}  # as the env's

    def view(self, env_ids: Tensor | None = None) -> dict[str, Tensor]:
        """The state every pass reads (post_physics.c's ``_VIEW`` arguments), contiguous, by argument name."""
        env, c = self.env, torch.Tensor.contiguous
        d, ld = env.drones, env.load
        tensors = (
            d.pos, d.quat, d.vel, d.ang_vel, ld.pos, ld.quat, ld.vel, ld.ang_vel, env.goal_pos, env.goal_quat,
            env.cable_tension, env.failed, env.episode_step,
        )  # fmt: skip
        return {name: c(t) for (_, name), t in zip(_VIEW_ARGS, tensors, strict=True)}

    def __call__(self) -> tuple:
        env = self.env
        E, N, H, F = env.history.shape
        c = torch.Tensor.contiguous
        history = torch.empty_like(env.history)
        integ = torch.empty_like(env.attach_err_int)
        state = torch.empty(E, N, self._state_size())
        reward = torch.empty(E, N)
        terms = torch.empty(len(REWARD_TERMS), E)
        terminated = torch.empty(E, dtype=torch.bool)
        reasons = torch.empty(len(REASONS), E, dtype=torch.bool)
        bad = torch.empty(E, dtype=torch.bool)
        errors = torch.empty(2, E)
        # Held in this call's arguments until it returns: a .contiguous() copy would otherwise be freed before it.
        OPS["cable_load_post_physics"](
            self.fn, E=E, N=N, H=H, S=state.shape[-1], nthreads=native.threads(), **self.view(),
            start_pos=c(env.start_pos), attach=c(env.attach), nominal=c(env.nominal_offset),
            cable_attach=self.cable_attach, hover_tension=c(env.hover_tension),
            formation_offset=c(env.formation_offset), last_action=c(env.last_action), prev_action=c(env.prev_action),
            integ_in=c(env.attach_err_int), integ_out=integ, hist_in=c(env.history), hist_out=history,
            noise_key=self._noise_key(), noise_std=c(env._frame_noise_std), state=state, reward=reward, terms=terms,
            terminated=terminated, reasons=reasons, bad=bad, errors=errors, p=self.params,
        )  # fmt: skip
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
            {name: row for name, row in zip(REWARD_TERMS, terms.unbind(0), strict=True) if name in self.term_names},
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
        if env_ids is None:
            out, rows, count = torch.empty(E, N, self._state_size()), None, E
        else:
            assert out is not None and out.shape == (E, N, self._state_size()), "rows are written into a full state"
            rows, count = env_ids.contiguous(), env_ids.numel()
        OPS["cable_load_state"](
            self.state_fn, E=count, rows=rows, N=N, S=out.shape[-1], nthreads=native.threads(), **self.view(),
            state=out, p=self.params,
        )  # fmt: skip
        return out

    def _state_size(self) -> int:
        return self.env.spec.groups[GROUP].observations["state"].shape[0]


class NativeReset:
    """Callable ``(env_ids [k], draws)`` for a CPU ``CableLoadEnv``: ``env._reset_envs`` in two C calls, the state
    (``reset.c``) and then the history rows (``post_physics.c``, the frames the pass writes). Every row is written
    in place, the history too (``CableLoadEnv._reset_idx`` makes sure that is allowed)."""

    snapshot_constant = True  # configuration (state_snapshot)

    def __init__(self, env: CableLoadEnv, lib: ctypes.CDLL, post: NativePostPhysics) -> None:
        self.env, self.post = env, post
        self.fn = lib.cable_load_reset
        self.history_fn = post.lib.cable_load_reset_history
        self.fn.restype = self.history_fn.restype = None
        cfg, model, rnd = env.cfg, env.model, env.cfg.randomization
        diag = box_inertia(torch.ones(1), cfg.load_size)[0]  # the float32 values box_inertia multiplies by
        self.params = RESET["R"].pack(
            randomized=rnd.enabled,
            mav_mass_scaled=rnd.enabled and rnd.mav_mass_scale[0] != rnd.mav_mass_scale[1],
            thrust_limit_scaled=rnd.enabled and rnd.thrust_limit_scale[0] != rnd.thrust_limit_scale[1],
            fault=cfg.fault.enabled, disturbance=cfg.disturbance.enabled, load_mass=cfg.load_mass,
            inertia_diag=diag.tolist(), cable_length=cfg.cable_length, dt=env.phys_dt,
            tau=env.params.motor_time_constant, mav_mass=model.mass, mav_inertia=model.inertia.tolist(),
            speed_max=env.params.rotor_speed_max, start_height=cfg.start_height,
            tension_div=env.n * math.cos(env.cable_angle), stiffness=cfg.cable_stiffness, gravity=GRAVITY,
            cable_attach=model.cable_attach.tolist(), thrust_min=float(model.rotor_thrust_min),
            thrust_max=float(model.rotor_thrust_max), k_f=model.k_f, tilt=math.radians(cfg.goal_tilt_deg),
            yaw=math.radians(cfg.goal_yaw_deg), fault_p=cfg.fault.probability,
            pinv=model.allocation_pinv.flatten().tolist(),
        )  # fmt: skip
        self.cable_dirs = cable_directions(env.n, env.cable_angle).contiguous()

    def reset_idx(self, env_ids: Tensor) -> None:
        """``NativePhysics.reset_rows``: the draws (the env's, eager), then this reset."""
        self(env_ids, self.env._reset_draws(env_ids.numel()))

    def __call__(self, env_ids: Tensor, draws: dict[str, Tensor]) -> None:
        env, c = self.env, torch.Tensor.contiguous
        rows = c(env_ids)
        state = []
        for _, path in RESET_STATE:
            t = native.attribute(env, path)
            if not t.is_contiguous():
                raise ValueError(f"cable_load's C reset writes {path} in place: it must be contiguous")
            state.append(t)
        drawn = [c(draws[name]) if name in draws else None for name in DRAWS]
        delay = env.delay
        OPS["cable_load_reset"](
            self.fn, k=rows.numel(), rows=rows, N=env.n, R=env.params.num_rotors, A=env.last_action.shape[-1],
            D=delay.max_delay + 1, d=drawn, attach=env.attach, cable_dirs=self.cable_dirs, out=state,
            failed=env.failed, fault_agent=env.fault_agent, delay=delay.delay,
            delay_buf=delay.buf if delay.max_delay > 0 else None, p=self.params,
        )  # fmt: skip
        self.post.forget_errors()  # the state the last pass read is written in place
        # Read-only inputs as contiguous copies where they are views (an adapter's episode_step may be one), held here.
        OPS["cable_load_reset_history"](
            self.history_fn, k=rows.numel(), rows=rows, N=env.n, H=env.history.shape[2], **self.post.view(),
            attach=c(env.attach), nominal=c(env.nominal_offset), integ=c(env.attach_err_int),
            last_action=c(env.last_action), noise=c(draws["obs_noise"]) if "obs_noise" in draws else None,
            noise_std=c(env._frame_noise_std), history=env.history, p=self.post.params,
        )  # fmt: skip
