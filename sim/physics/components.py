"""Component-major ("structure of arrays") versions of the rigid-body, cable, multirotor, INDI, rate-PID and ball maths.

The row-major modules (:mod:`~sim.physics.quaternion`, :mod:`~sim.physics.rigid_body`,
:mod:`~sim.physics.contact`, :mod:`~sim.physics.cable`, :mod:`~sim.physics.multirotor`,
:mod:`~sim.physics.controllers.indi`, :mod:`~sim.physics.controllers.rate_pid`, :mod:`~sim.physics.ball`) keep
vectors as ``[..., 3]`` rows; they stay the reference.
Here a 3-vector is a tuple of 3 tensors shaped like the batch (``[E, N]`` for MAVs, ``[E]`` or a
broadcasting ``[E, 1]`` for the load), a quaternion ``[w, x, y, z]`` is 4 tensors and a rotation
matrix is 9 (a tuple of 3 rows). Why: with ``[..., 3]`` rows every eager op loops over 3-4
components inside, and ``torch.compile`` vectorises over those instead of over the batch; with one
tensor per component every op is a plain contiguous loop over the batch (the layout study
``ComponentMajorDrones`` in ``benchmarks/multirotor_step.py``).

The formulas and their evaluation order follow the row-major code, so results agree to float32
round-off. Two deliberate differences: a rotation matrix built once per body and step replaces the
cross-product form of :func:`~sim.physics.quaternion.quat_rotate` (a few ulp apart), and terms whose
constant coefficient is exactly 0 are skipped (``0 * x`` adds nothing for finite ``x``; e.g. the yaw ``kd`` of the
rate PID, a frictionless ball contact's Coulomb term, the net's zero axis entries).
Constants (allocation, gains, offsets on the body) are Python floats: compiled kernels inline them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import NamedTuple

import torch
from torch import Tensor

from sim.physics.ball import BallParams
from sim.physics.controllers.indi import INDIController
from sim.physics.controllers.rate_pid import RatePIDController
from sim.physics.multirotor import MultirotorModel
from sim.physics.rigid_body import GRAVITY, RigidBodyState

Scalar = Tensor | float
Vec3 = tuple[Tensor, Tensor, Tensor]
Quat = tuple[Tensor, Tensor, Tensor, Tensor]
Mat3 = tuple[Vec3, Vec3, Vec3]  # rows: R[i][j]
ConstVec3 = tuple[Scalar, Scalar, Scalar]  # a vector whose entries may be Python floats (constants)

# ----------------------------------------------------------------- which layout a task's control loop takes
# Chosen, not configured: components when compiled or from COMPONENTS_MIN_ENVS envs, rows below (eager small
# batches, e.g. the one-env ROS bridge, where twice the number of small ops costs more than the vectorisation gains:
# benchmarks/layout_compare.py). Both run the same physics to float32 round-off.
LAYOUTS = ("rows", "components")
COMPONENTS_MIN_ENVS = 1024
_forced: str | None = None  # force_layout's, for tests and benchmarks


def choose_layout(num_envs: int, compiled: bool) -> str:
    """The layout a control loop of ``num_envs`` envs runs: components when ``compiled`` or from
    :data:`COMPONENTS_MIN_ENVS` envs, rows below; the one :func:`force_layout` pins, inside one."""
    if _forced is not None:
        return _forced
    return "components" if compiled or num_envs >= COMPONENTS_MIN_ENVS else "rows"


@contextmanager
def force_layout(layout: str) -> Iterator[None]:
    """For tests and benchmarks only: envs built inside run their control loop in ``layout`` (one of
    :data:`LAYOUTS`), e.g. to hold the two layouts together or to time them at one size."""
    global _forced
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    before, _forced = _forced, layout
    try:
        yield
    finally:
        _forced = before


# Inductor options of a compiled component-major control loop. On a CPU inductor leaves a kernel scalar (one element
# at a time) where 35 or more of its loads and stores, or 12% of its ops, are not contiguous (its "tiling
# heuristics"). A component-major loop's kernels read contiguous components but its fused kernels also split the
# [E, N, 3] rows at the start and join them at the end, which trips the heuristics; vectorised anyway they run ~2x
# faster (4096 envs, 1 thread: drone_volleyball's loop 14-16 -> 6.5-7 ms, cable_load's 8.3 -> 5.4 ms). A rows loop
# runs 3.4x slower vectorised (cable_load 15.5 -> 53 ms), as does a post-physics pass of gathers and strided
# stores (volleyball 13.9 -> 19.5 ms): they keep inductor's defaults. GPU code (triton) ignores the option.
VECTORISED_LOOP: dict[str, bool] = {"cpp.enable_tiling_heuristics": False}


class ResolvedLayout:
    """The layout an env's control loop runs (:func:`choose_layout`). Chosen at construction, not episode state:
    outside :meth:`~sim.core.env.MultiAgentEnv.state_snapshot`, so restoring a snapshot keeps the env's own layout."""

    snapshot_constant = True

    def __init__(self, num_envs: int, compiled: bool) -> None:
        self.name = choose_layout(num_envs, compiled)

    @property
    def compile_options(self) -> dict[str, bool]:
        """Inductor options of the compiled loop in this layout (``MultiAgentEnv.loop_compile_options``)."""
        return VECTORISED_LOOP if self.name == "components" else {}


# ----------------------------------------------------------------- layout conversion
def split(rows: Tensor) -> tuple[Tensor, ...]:
    """``[..., C]`` rows -> ``C`` contiguous tensors ``[...]``.

    One copy kernel (to ``[C, ...]``) then views: every later op reads a contiguous component, not a
    stride-``C`` one."""
    return tuple(rows.movedim(-1, 0).contiguous().unbind(0))


def join(components: Sequence[Tensor]) -> Tensor:
    """``C`` tensors ``[...]`` -> ``[..., C]`` rows (one kernel)."""
    return torch.stack(tuple(components), dim=-1)


def unsqueeze(v: Sequence[Tensor], dim: int = -1) -> tuple[Tensor, ...]:
    """Each component with a singleton axis at ``dim`` (e.g. the load ``[E]`` -> ``[E, 1]`` to broadcast over MAVs)."""
    return tuple(c.unsqueeze(dim) for c in v)


class Body(NamedTuple):
    """A batch of rigid bodies by components; shapes as :class:`~sim.physics.rigid_body.RigidBodyState`."""

    pos: Vec3  # world (m)
    quat: Quat  # body -> world, [w, x, y, z]
    vel: Vec3  # world (m/s)
    ang_vel: Vec3  # body (rad/s)

    @staticmethod
    def from_rows(state: RigidBodyState) -> Body:
        """Split ``[..., 3]`` / ``[..., 4]`` rows into components ``[...]``."""
        return Body(split(state.pos), split(state.quat), split(state.vel), split(state.ang_vel))

    def to_rows(self) -> RigidBodyState:
        """Join the components back into a :class:`RigidBodyState` of rows."""
        return RigidBodyState(join(self.pos), join(self.quat), join(self.vel), join(self.ang_vel))

    def unsqueeze(self, dim: int = -1) -> Body:
        """Every component with a singleton axis at ``dim`` (views)."""
        return Body(
            unsqueeze(self.pos, dim), unsqueeze(self.quat, dim), unsqueeze(self.vel, dim), unsqueeze(self.ang_vel, dim)
        )


# ----------------------------------------------------------------- small vector algebra
def lincomb(coeffs: Sequence[Scalar], xs: Sequence[Tensor]) -> Tensor:
    """``sum_i c_i x_i`` left to right. A Python-float coefficient 0 drops its term and 1 / -1 its multiply
    (exact for finite ``x``): constant allocation matrices and body offsets are mostly zeros and ones."""
    out: Tensor | None = None
    for c, x in zip(coeffs, xs, strict=True):
        if _is_const(c) and c == 0:
            continue
        if _is_const(c) and abs(c) == 1:
            if out is None:
                out = x if c > 0 else -x
            else:
                out = out + x if c > 0 else out - x
            continue
        term = c * x
        out = term if out is None else out + term
    if out is None:  # every coefficient 0
        return torch.zeros_like(xs[0])
    return out


def dot(a: Sequence[Tensor], b: Sequence[Tensor]) -> Tensor:
    """``a . b``, summed in component order (as ``(a * b).sum(-1)``)."""
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]


def norm(a: Sequence[Tensor]) -> Tensor:
    """Euclidean norm of a 3- or 4-vector."""
    total = a[0] * a[0]
    for c in a[1:]:
        total = total + c * c
    return torch.sqrt(total)


def cross(a: Sequence[Scalar], b: Sequence[Scalar]) -> ConstVec3:
    """``a x b`` (as ``torch.linalg.cross``: ``a1 b2 - a2 b1``, ...); either may hold Python-float constants.

    A component that is identically 0 (both its products hold a constant 0 factor, e.g. ``omega x r`` along ``r``)
    comes back as the Python float 0.0, which :func:`lincomb` and :func:`add` then skip."""
    return (_mul_sub(a[1], b[2], a[2], b[1]), _mul_sub(a[2], b[0], a[0], b[2]), _mul_sub(a[0], b[1], a[1], b[0]))


def add(a: Sequence[Scalar], b: Sequence[Scalar]) -> ConstVec3:
    """``a + b`` by components, a Python-float 0 adding nothing."""
    out = []
    for x, y in zip(a, b, strict=True):
        out.append(y if _is_const(x) and x == 0 else x if _is_const(y) and y == 0 else x + y)
    return tuple(out)  # type: ignore[return-value]


def _is_const(x: Scalar) -> bool:
    return isinstance(x, float | int)


def _mul(x: Scalar, y: Scalar) -> Scalar:
    """``x y``; a Python-float factor 0 gives the constant 0.0 and a factor 1 no multiply."""
    if (_is_const(x) and x == 0) or (_is_const(y) and y == 0):
        return 0.0
    if _is_const(x) and x == 1:
        return y
    if _is_const(y) and y == 1:
        return x
    return x * y


def _mul_sub(p: Scalar, q: Scalar, r: Scalar, s: Scalar) -> Scalar:
    """``p q - r s``, dropping a product that is the constant 0 (exact for finite factors)."""
    left, right = _mul(p, q), _mul(r, s)
    if _is_const(right) and right == 0:
        return left
    if _is_const(left) and left == 0:
        return -right
    return left - right


# ----------------------------------------------------------------- rotations
def quat_to_matrix(q: Sequence[Tensor]) -> Mat3:
    """Rotation matrix (9 tensors, rows) of a unit quaternion, same expressions as
    :func:`sim.physics.quaternion.quat_to_matrix`. Built once per body and step, then reused by every
    rotation of that step (each costs 9 multiply-adds instead of two cross products)."""
    w, x, y, z = q
    # Each product once (the row-major code forms some twice: the same numbers, fewer eager ops).
    xx, yy, zz, xy, xz, yz, wx, wy, wz = x * x, y * y, z * z, x * y, x * z, y * z, w * x, w * y, w * z
    return (
        (1 - 2 * (yy + zz), 2 * (xy - wz), 2 * (xz + wy)),
        (2 * (xy + wz), 1 - 2 * (xx + zz), 2 * (yz - wx)),
        (2 * (xz - wy), 2 * (yz + wx), 1 - 2 * (xx + yy)),
    )


def rotate(rot: Mat3, v: Sequence[Scalar]) -> Vec3:
    """``R v`` (body -> world); ``v`` may hold Python-float constants (a body offset)."""
    return tuple(lincomb(v, row) for row in rot)  # type: ignore[return-value]


def rotate_inv(rot: Mat3, v: Sequence[Scalar]) -> Vec3:
    """``R^T v`` (world -> body)."""
    return tuple(lincomb(v, (rot[0][j], rot[1][j], rot[2][j])) for j in range(3))  # type: ignore[return-value]


def yaw(rot: Mat3) -> Tensor:
    """Yaw (rad) of the body x axis, ``atan2(R10, R00)``: the same numbers as
    :func:`sim.physics.quaternion.quat_yaw` (its two arguments are these matrix entries)."""
    return torch.atan2(rot[1][0], rot[0][0])


def quat_mul(a: Sequence[Tensor], b: Sequence[Tensor]) -> Quat:
    """Hamilton product ``a * b`` (as :func:`sim.physics.quaternion.quat_mul`)."""
    aw, ax, ay, az = a
    bw, bx, by, bz = b
    return (
        aw * bw - ax * bx - ay * by - az * bz,
        aw * bx + ax * bw + ay * bz - az * by,
        aw * by - ax * bz + ay * bw + az * bx,
        aw * bz + ax * by - ay * bx + az * bw,
    )


def quat_integrate(q: Sequence[Tensor], omega_body: Sequence[Tensor], dt: float) -> Quat:
    """``q * exp(omega dt / 2)``, renormalised (as :func:`sim.physics.quaternion.quat_integrate`)."""
    rate = norm(omega_body)
    half = 0.5 * rate * dt
    moving = rate > 1e-9
    # sin(half)/rate -> dt/2 as rate -> 0; guard the division without a branch.
    scale = torch.where(moving, torch.sin(half) / torch.where(moving, rate, 1.0), 0.5 * dt)
    dq = (torch.cos(half), omega_body[0] * scale, omega_body[1] * scale, omega_body[2] * scale)
    out = quat_mul(q, dq)
    n = norm(out)
    return (out[0] / n, out[1] / n, out[2] / n, out[3] / n)


# ----------------------------------------------------------------- rigid bodies
def rigid_body_step(
    body: Body,
    force_world: Vec3,
    torque_body: Vec3,
    mass: Scalar,
    inertia: ConstVec3,
    dt: float,
    gravity: float = GRAVITY,
) -> Body:
    """One semi-implicit Euler step (:func:`sim.physics.rigid_body.rigid_body_step`): velocities from the
    accelerations at the current state (gyroscopic term included), positions and attitude from the new velocities.

    ``mass`` and each ``inertia`` entry broadcast against the batch (e.g. ``[E, N]`` per MAV, ``[E]`` per load).
    """
    w = body.ang_vel
    acc = [f / mass for f in force_world]
    acc[2] = acc[2] - gravity
    gyro = cross(w, (inertia[0] * w[0], inertia[1] * w[1], inertia[2] * w[2]))
    vel = tuple(v + dt * a for v, a in zip(body.vel, acc, strict=True))
    ang_vel = tuple(w[k] + dt * ((torque_body[k] - gyro[k]) / inertia[k]) for k in range(3))
    pos = tuple(p + dt * v for p, v in zip(body.pos, vel, strict=True))
    return Body(pos, quat_integrate(body.quat, ang_vel, dt), vel, ang_vel)  # type: ignore[arg-type]


def ground_contact(body: Body, radius: float, restitution: float = 0.0, friction: float = 0.5) -> Body:
    """Project bodies out of the ground plane ``z = 0`` (:func:`sim.physics.contact.ground_contact`): the lowest
    point back on the plane, downward velocity removed (times ``restitution`` kept), tangential velocity and spin
    damped by ``friction``."""
    px, py, pz = body.pos
    vx, vy, vz = body.vel
    depth = radius - pz
    contact = depth > 0
    pz = torch.where(contact, pz + depth, pz)
    vz = torch.where(contact & (vz < 0), -restitution * vz, vz)
    keep = 1.0 - friction
    vx, vy = (torch.where(contact, keep * v, v) for v in (vx, vy))
    ang_vel = tuple(torch.where(contact, keep * a, a) for a in body.ang_vel)
    return Body((px, py, pz), body.quat, (vx, vy, vz), ang_vel)  # type: ignore[arg-type]


def point_velocity(body: Body, rot: Mat3, offset_body: ConstVec3) -> tuple[Vec3, Vec3]:
    """World position ``p + R r`` and velocity ``v + R (omega x r)`` of a point ``r`` fixed on the body."""
    pos = add(body.pos, rotate(rot, offset_body))
    vel = add(body.vel, rotate(rot, cross(body.ang_vel, offset_body)))
    return pos, vel  # type: ignore[return-value]


def wrench_at_point(rot: Mat3, offset_body: ConstVec3, force_world: Vec3) -> Vec3:
    """Body-frame torque ``r x (R^T F)`` of a world force at body point ``r``."""
    return cross(offset_body, rotate_inv(rot, force_world))


# ----------------------------------------------------------------- cables and drag
def cable_tension(
    pos_a: Vec3, vel_a: Vec3, pos_b: Vec3, vel_b: Vec3, rest_length: Scalar, stiffness: float, damping: float
) -> tuple[Tensor, Vec3, Tensor]:
    """Tension-only spring-damper cables from ``a`` to ``b`` (:func:`sim.physics.cable.cable_tension`).

    Returns ``tension [...]`` (N, >= 0), ``direction`` (unit, a -> b) and ``length [...]`` (m).
    """
    delta = tuple(b - a for a, b in zip(pos_a, pos_b, strict=True))
    length = norm(delta)
    safe = length.clamp(min=1e-6)
    direction = tuple(d / safe for d in delta)
    length_rate = dot(tuple(b - a for a, b in zip(vel_a, vel_b, strict=True)), direction)
    stretch = length - rest_length
    tension = (stiffness * stretch + damping * length_rate).clamp(min=0.0)
    tension = torch.where(stretch > 0, tension, 0.0)
    return tension, direction, length  # type: ignore[return-value]


def drag_force(rot: Mat3, vel: Vec3, coeff: Sequence[float]) -> Vec3:
    """Linear drag ``-R diag(d) R^T v`` (world). The minus sign rides on the coefficients: bit-identical to
    negating the result, one op less per component."""
    body = rotate_inv(rot, vel)
    return rotate(rot, tuple(-c * b for c, b in zip(coeff, body, strict=True)))


# ----------------------------------------------------------------- multirotor
class RotorModel:
    """:class:`~sim.physics.multirotor.MultirotorModel`'s rotor maths on per-rotor tensors ``[...]`` (a tuple of
    ``R``), with the allocation as explicit sums of Python-float coefficients (zeros dropped)."""

    snapshot_constant = True  # constants only: not episode state (MultiAgentEnv.state_snapshot)

    def __init__(self, model: MultirotorModel) -> None:
        self.num_rotors = model.params.num_rotors
        self.k_f = model.k_f
        self.allocation: list[list[float]] = model.allocation.tolist()  # [4, R]
        self.allocation_pinv: list[list[float]] = model.allocation_pinv.tolist()  # [R, 4]
        self.thrust_range = (model.rotor_thrust_min, model.rotor_thrust_max)
        self.speed_range = (model.params.rotor_speed_min, model.params.rotor_speed_max)
        self.inertia: tuple[float, float, float] = tuple(model.inertia.tolist())
        self.drag_coeff: tuple[float, float, float] = tuple(model.drag_coeff.tolist())
        self.cable_attach: tuple[float, float, float] = tuple(model.cable_attach.tolist())
        self.mass = model.mass

    def motor_step(self, speed: Sequence[Tensor], speed_cmd: Sequence[Tensor], decay: Scalar) -> tuple[Tensor, ...]:
        """First-order motor lag: ``cmd + (speed - cmd) decay``, ``cmd`` clipped to the motor's range."""
        out = []
        for s, c in zip(speed, speed_cmd, strict=True):
            c = c.clamp(*self.speed_range)
            out.append(c + (s - c) * decay)
        return tuple(out)

    def body_wrench(self, speed: Sequence[Tensor], thrust_scale: Scalar = 1.0) -> tuple[Tensor, Vec3]:
        """Collective thrust ``[...]`` (N) and body torque (N m) as per-rotor sums ``sum_r A[j][r] k_f Omega_r^2``."""
        k = self.k_f * thrust_scale
        f = [k * (s * s) for s in speed]
        thrust, tx, ty, tz = (lincomb(row, f) for row in self.allocation)
        return thrust, (tx, ty, tz)

    def wrench_to_speed_cmd(self, thrust: Tensor, torque: Vec3, thrust_scale: Scalar = 1.0) -> tuple[Tensor, ...]:
        """Rotor speed commands realising a wrench (allocation pseudo-inverse), each rotor's thrust clipped."""
        wrench = (thrust, *torque)
        k = self.k_f * thrust_scale
        return tuple(torch.sqrt(lincomb(row, wrench).clamp(*self.thrust_range) / k) for row in self.allocation_pinv)


# ----------------------------------------------------------------- INDI controller
class INDIMemory(NamedTuple):
    """:class:`~sim.physics.controllers.indi.INDIController`'s memory by components, batch ``[...]``."""

    spec_force_f: Vec3  # filtered specific force, world (m/s^2)
    thrust_f: Tensor  # filtered collective thrust (N)
    torque_f: Vec3  # filtered rotor torque, body (N m)
    ang_acc_f: Vec3  # filtered angular acceleration, body (rad/s^2)
    prev_vel: Vec3
    prev_ang_vel: Vec3
    yaw_ref: Tensor  # heading held (rad)


class INDI:
    """The INDI step of :class:`~sim.physics.controllers.indi.INDIController` on components: the same filters,
    tilt cone and yaw wrap; constants copied from the row-major controller, whose tensors keep the memory between
    control steps (:meth:`load` / :meth:`store`)."""

    snapshot_constant = True  # constants only: not episode state

    def __init__(self, ctrl: INDIController) -> None:
        self.rotors = RotorModel(ctrl.model)
        self.dt = ctrl.dt
        self.alpha = ctrl.alpha
        self.mass = ctrl.model.mass
        self.inertia = self.rotors.inertia  # the nominal inertia, as the row-major controller uses
        self.k_rate: tuple[float, float, float] = tuple(ctrl.k_rate.tolist())
        self.gravity: tuple[float, float, float] = tuple(ctrl.gravity.tolist())
        self.attitude_gain = ctrl.gains.attitude
        self.yaw_gain = ctrl.gains.yaw
        self.cos_max_tilt = ctrl.cos_max_tilt
        self.sin_max_tilt = math.sqrt(1 - ctrl.cos_max_tilt**2)

    @staticmethod
    def load(ctrl: INDIController) -> INDIMemory:
        """The controller's memory tensors split into components."""
        return INDIMemory(
            split(ctrl.spec_force_f),
            ctrl.thrust_f,
            split(ctrl.torque_f),
            split(ctrl.ang_acc_f),
            split(ctrl.prev_vel),
            split(ctrl.prev_ang_vel),
            ctrl.yaw_ref,
        )

    @staticmethod
    def store(
        ctrl: INDIController, mem: INDIMemory, prev_vel: Tensor | None = None, prev_ang_vel: Tensor | None = None
    ) -> None:
        """Write ``mem`` back into the controller's row tensors (new tensors, as its own step assigns them).

        ``prev_vel`` / ``prev_ang_vel``: those rows when the caller still holds them (the state the step read), which
        saves joining them again."""
        ctrl.spec_force_f = join(mem.spec_force_f)
        ctrl.thrust_f = mem.thrust_f
        ctrl.torque_f = join(mem.torque_f)
        ctrl.ang_acc_f = join(mem.ang_acc_f)
        ctrl.prev_vel = join(mem.prev_vel) if prev_vel is None else prev_vel
        ctrl.prev_ang_vel = join(mem.prev_ang_vel) if prev_ang_vel is None else prev_ang_vel
        ctrl.yaw_ref = mem.yaw_ref

    def step(
        self,
        mem: INDIMemory,
        acc_cmd: Sequence[Tensor],
        rate_ff: Sequence[Tensor],
        rot: Mat3,
        vel: Vec3,
        ang_vel: Vec3,
        rotor_speed: Sequence[Tensor],
        thrust_scale: Scalar = 1.0,
    ) -> tuple[tuple[Tensor, ...], INDIMemory]:
        """Rotor speed commands (``R`` tensors, rad/s) and the updated memory.

        Args:
            acc_cmd: commanded linear acceleration, world (m/s^2). rate_ff: roll/pitch body-rate feed-forward (rad/s).
            rot: the attitude's rotation matrix (:func:`quat_to_matrix`). vel (world), ang_vel (body): measured.
            rotor_speed: measured rotor speeds. thrust_scale: as the controller believes it.
        """
        a, dt, g = self.alpha, self.dt, self.gravity
        # Measurements, differentiated over one controller period and low-passed (subtracting a 0 gravity
        # component is the identity, so only z pays for it).
        spec_force = tuple(
            (v - p) / dt - g[k] if g[k] != 0 else (v - p) / dt
            for k, (v, p) in enumerate(zip(vel, mem.prev_vel, strict=True))
        )
        ang_acc = tuple((w - p) / dt for w, p in zip(ang_vel, mem.prev_ang_vel, strict=True))
        thrust, torque = self.rotors.body_wrench(rotor_speed, thrust_scale)
        spec_force_f = tuple(f + a * (m - f) for f, m in zip(mem.spec_force_f, spec_force, strict=True))
        ang_acc_f = tuple(f + a * (m - f) for f, m in zip(mem.ang_acc_f, ang_acc, strict=True))
        thrust_f = mem.thrust_f + a * (thrust - mem.thrust_f)
        torque_f = tuple(f + a * (m - f) for f, m in zip(mem.torque_f, torque, strict=True))

        # Outer loop: incremental thrust vector along the body z axis (the matrix's third column).
        z_b = (rot[0][2], rot[1][2], rot[2][2])
        f_des = tuple(
            z_b[k] * thrust_f + self.mass * ((acc_cmd[k] - g[k] if g[k] != 0 else acc_cmd[k]) - spec_force_f[k])
            for k in range(3)
        )
        thrust_cmd = dot(f_des, z_b).clamp(min=0.0)
        f_norm = norm(f_des).clamp(min=1e-6)
        z_des = self._limit_tilt(tuple(f / f_norm for f in f_des))

        # Attitude: tilt error as a body-frame rotation vector, plus the policy's feed-forward; yaw held.
        tilt_err = rotate_inv(rot, cross(z_b, z_des))
        yaw_err = torch.remainder(mem.yaw_ref - yaw(rot) + math.pi, 2 * math.pi) - math.pi
        rate_cmd = (
            self.attitude_gain * tilt_err[0] + rate_ff[0],
            self.attitude_gain * tilt_err[1] + rate_ff[1],
            self.yaw_gain * yaw_err,
        )

        # Inner loop: incremental torque.
        torque_cmd = tuple(
            torque_f[k] + self.inertia[k] * (self.k_rate[k] * (rate_cmd[k] - ang_vel[k]) - ang_acc_f[k])
            for k in range(3)
        )
        speed_cmd = self.rotors.wrench_to_speed_cmd(thrust_cmd, torque_cmd, thrust_scale)  # type: ignore[arg-type]
        new = INDIMemory(spec_force_f, thrust_f, torque_f, ang_acc_f, tuple(vel), tuple(ang_vel), mem.yaw_ref)  # type: ignore[arg-type]
        return speed_cmd, new

    def _limit_tilt(self, z_des: Vec3) -> Vec3:
        """Keep the desired thrust axis inside the cone of ``max_tilt_deg`` about world z."""
        x, y, z = z_des
        horiz_norm = torch.sqrt(x * x + y * y).clamp(min=1e-9)
        outside = z < self.cos_max_tilt
        return (
            torch.where(outside, x / horiz_norm * self.sin_max_tilt, x),
            torch.where(outside, y / horiz_norm * self.sin_max_tilt, y),
            torch.where(outside, self.cos_max_tilt, z),
        )


# ----------------------------------------------------------------- rate PID controller
class RatePIDMemory(NamedTuple):
    """:class:`~sim.physics.controllers.rate_pid.RatePIDController`'s memory by components, batch ``[...]``."""

    integral: Vec3  # integrated body-rate error (rad), clipped to the integral limit
    prev_rate: Vec3  # body rates of the previous call (rad/s)


class RatePID:
    """The step of :class:`~sim.physics.controllers.rate_pid.RatePIDController` on components: the same error
    integral (clipped), rate derivative from the previous call, gyroscopic feed-forward and allocation. Constants
    are copied from the row-major controller, whose tensors keep the memory between control steps (:meth:`load` /
    :meth:`store`); a gain that is exactly 0 (the yaw ``kd``) drops its term."""

    snapshot_constant = True  # constants only: not episode state (MultiAgentEnv.state_snapshot)

    def __init__(self, ctrl: RatePIDController) -> None:
        self.rotors = RotorModel(ctrl.model)
        self.inertia = self.rotors.inertia
        self.kp: tuple[float, float, float] = tuple(ctrl.kp.tolist())
        self.ki: tuple[float, float, float] = tuple(ctrl.ki.tolist())
        self.kd: tuple[float, float, float] = tuple(ctrl.kd.tolist())
        self.integral_limit = ctrl.integral_limit

    @staticmethod
    def load(ctrl: RatePIDController) -> RatePIDMemory:
        """The controller's memory tensors split into components."""
        return RatePIDMemory(split(ctrl.integral), split(ctrl.prev_rate))

    @staticmethod
    def store(ctrl: RatePIDController, mem: RatePIDMemory) -> None:
        """Write ``mem`` back into the controller's row tensors (new tensors, as its own call assigns them)."""
        ctrl.integral = join(mem.integral)
        ctrl.prev_rate = join(mem.prev_rate)

    def step(
        self,
        mem: RatePIDMemory,
        thrust_cmd: Tensor,
        rate_cmd: Sequence[Tensor],
        ang_vel: Vec3,
        dt: float,
        thrust_scale: Scalar = 1.0,
    ) -> tuple[tuple[Tensor, ...], RatePIDMemory]:
        """Rotor speed commands (``R`` tensors, rad/s) and the updated memory.

        Args:
            thrust_cmd: collective thrust (N). rate_cmd: desired body rates (rad/s). ang_vel: measured body rates.
            dt: the time since the previous call (s).
        """
        lim = self.integral_limit
        err = tuple(c - w for c, w in zip(rate_cmd, ang_vel, strict=True))
        integral = tuple((i + e * dt).clamp(-lim, lim) for i, e in zip(mem.integral, err, strict=True))
        ang_acc_cmd = []
        for k in range(3):
            acc = self.kp[k] * err[k] + self.ki[k] * integral[k]
            if self.kd[k] != 0:
                acc = acc - self.kd[k] * ((ang_vel[k] - mem.prev_rate[k]) / dt)
            ang_acc_cmd.append(acc)
        inertia = self.inertia
        gyro = cross(ang_vel, (inertia[0] * ang_vel[0], inertia[1] * ang_vel[1], inertia[2] * ang_vel[2]))
        torque = tuple(inertia[k] * ang_acc_cmd[k] + gyro[k] for k in range(3))
        speed_cmd = self.rotors.wrench_to_speed_cmd(thrust_cmd, torque, thrust_scale)  # type: ignore[arg-type]
        return speed_cmd, RatePIDMemory(integral, tuple(ang_vel))  # type: ignore[arg-type]


# ----------------------------------------------------------------- ball (sim.physics.ball)
_EPS = 1e-9  # as sim.physics.ball: lengths below this (m, m/s) are treated as zero when normalising


def sub(a: Sequence[Scalar], b: Sequence[Scalar]) -> ConstVec3:
    """``a - b`` by components, a Python-float 0 in ``b`` subtracting nothing."""
    return tuple(x if _is_const(y) and y == 0 else x - y for x, y in zip(a, b, strict=True))  # type: ignore[return-value]


def scale(v: Sequence[Scalar], s: Tensor) -> ConstVec3:
    """``s v`` for a tensor ``s``; a Python-float entry 0 stays the constant 0.0 and 1 gives ``s``."""
    return tuple(_mul(x, s) for x in v)  # type: ignore[return-value]


def safe_unit(v: Sequence[Tensor], fallback: Sequence[Scalar]) -> tuple[Vec3, Tensor]:
    """``(v / |v|, |v|)``, with ``fallback`` (unit; tensors or constants) where ``|v| <= 1e-9``."""
    n = norm(v)
    inv_ok = n > _EPS
    safe = n.clamp(min=_EPS)
    return tuple(torch.where(inv_ok, c / safe, f) for c, f in zip(v, fallback, strict=True)), n  # type: ignore[return-value]


def ball_flight_step(
    pos: Vec3, vel: Vec3, params: BallParams, dt: float, gravity: float = GRAVITY
) -> tuple[Vec3, Vec3]:
    """Gravity and quadratic drag over ``dt`` by Strang splitting (:func:`sim.physics.ball.ball_flight_step`)."""
    half_kdt = 0.5 * params.drag_k * dt
    damp = 1.0 + half_kdt * norm(vel)
    vel = tuple(v / damp for v in vel)
    px, py, pz = (p + dt * v for p, v in zip(pos, vel, strict=True))
    pz = pz - 0.5 * gravity * dt * dt
    vel = (vel[0], vel[1], vel[2] - gravity * dt)
    damp = 1.0 + half_kdt * norm(vel)
    return (px, py, pz), tuple(v / damp for v in vel)  # type: ignore[return-value]


def closest_point_on_disc(p: Sequence[Tensor], center: Vec3, normal: Vec3, radius: Scalar) -> Vec3:
    """Closest point to ``p`` on a flat disc, edges included (:func:`sim.physics.ball.closest_point_on_disc`).

    ``normal`` must be unit: a rotation matrix column, used as it is where the row-major function renormalises
    it (the two differ by round-off)."""
    d = sub(p, center)
    along = dot(d, normal)
    in_plane = tuple(c - along * n for c, n in zip(d, normal, strict=True))
    rho = norm(in_plane)
    s = (radius / rho.clamp(min=_EPS)).clamp(max=1.0)
    return tuple(c + s * q for c, q in zip(center, in_plane, strict=True))  # type: ignore[return-value]


def closest_point_on_rect(
    p: Sequence[Tensor], center: ConstVec3, axis_u: ConstVec3, axis_v: ConstVec3, half_u: Scalar, half_v: Scalar
) -> ConstVec3:
    """Closest point to ``p`` on the rectangle ``center + a u + b v``, ``|a| <= half_u``, ``|b| <= half_v``
    (:func:`sim.physics.ball.closest_point_on_rect`). Constant axes (the net: world y and z) drop their zero
    terms, so a component may come back as the constant 0.0."""
    d = sub(p, center)
    a = lincomb(axis_u, d).clamp(min=-half_u, max=half_u)
    b = lincomb(axis_v, d).clamp(min=-half_v, max=half_v)
    return add(add(center, scale(axis_u, a)), scale(axis_v, b))


def resolve_sphere_contact(
    pos: Vec3,
    vel: Vec3,
    contact_point: Sequence[Scalar],
    surface_vel: Sequence[Scalar],
    radius: float,
    restitution: Scalar,
    friction: Scalar = 0.0,
    fallback_normal: Sequence[Scalar] = (0.0, 0.0, 1.0),
) -> tuple[Vec3, Vec3, Tensor]:
    """Bounce spheres off an infinitely heavy surface point (:func:`sim.physics.ball.resolve_sphere_contact`):
    ``(pos, vel, hit)``. ``contact_point``, ``surface_vel`` and ``fallback_normal`` may hold constants (a fixed
    net: a surface velocity of 0.0); a ``friction`` of the constant 0 skips the Coulomb term (it removes nothing)."""
    normal, dist = safe_unit(sub(pos, contact_point), fallback_normal)  # type: ignore[arg-type]
    depth = radius - dist
    v_rel = sub(vel, surface_vel)
    v_n = dot(v_rel, normal)
    hit = (depth > 0) & (v_n < 0)
    j_n = -(1.0 + restitution) * v_n
    new_vel = tuple(v + j_n * n for v, n in zip(vel, normal, strict=True))
    if not (_is_const(friction) and friction == 0):
        v_t = tuple(r - v_n * n for r, n in zip(v_rel, normal, strict=True))
        speed_t = norm(v_t)
        slip_cut = torch.minimum(friction * j_n, speed_t) / speed_t.clamp(min=_EPS)
        new_vel = tuple(v - slip_cut * t for v, t in zip(new_vel, v_t, strict=True))
    out_pos = tuple(torch.where(hit, p + depth * n, p) for p, n in zip(pos, normal, strict=True))
    out_vel = tuple(torch.where(hit, nv, v) for nv, v in zip(new_vel, vel, strict=True))
    return out_pos, out_vel, hit  # type: ignore[return-value]


def ground_contact_ball(pos: Vec3, vel: Vec3, params: BallParams, ground_z: float = 0.0) -> tuple[Vec3, Vec3, Tensor]:
    """Bounce balls on the plane ``z = ground_z`` (:func:`sim.physics.ball.ground_contact_ball`)."""
    z, vz = pos[2], vel[2]
    top = ground_z + params.radius
    hit = (z < top) & (vz < 0)
    z = torch.where(hit, top, z)
    vz = torch.where(hit, -params.restitution_ground * vz, vz)
    return (pos[0], pos[1], z), (vel[0], vel[1], vz), hit


def paddle_surface(body: Body, rot: Mat3, offset_body: ConstVec3) -> tuple[Vec3, Vec3, Vec3]:
    """Drones' hitting discs (:func:`sim.physics.ball.paddle_surface`): centre ``p + R r``, normal ``R e_z`` (the
    matrix's third column) and the centre's velocity ``v + R (omega x r)``."""
    center, velocity = point_velocity(body, rot, offset_body)
    return center, (rot[0][2], rot[1][2], rot[2][2]), velocity


def ball_drone_contact(
    ball_pos: Vec3,
    ball_vel: Vec3,
    center: Vec3,
    normal: Vec3,
    disc_radius: Scalar,
    point_velocity: Vec3,
    params: BallParams,
) -> tuple[Vec3, Vec3, Tensor]:
    """Hit balls with drone paddles (:func:`sim.physics.ball.ball_drone_contact` without ``ang_vel_world``): per
    ball-paddle pair, broadcast (e.g. balls ``[E, 1]`` against paddles ``[E, D]``), ``(pos, vel, hit)``."""
    point = closest_point_on_disc(ball_pos, center, normal, disc_radius)
    v_rel = sub(ball_vel, point_velocity)
    away = dot(v_rel, normal) > 0
    facing = tuple(torch.where(away, -n, n) for n in normal)
    return resolve_sphere_contact(
        ball_pos,
        ball_vel,
        point,
        point_velocity,
        params.radius,
        params.restitution_drone,
        params.friction_drone,
        fallback_normal=facing,
    )
