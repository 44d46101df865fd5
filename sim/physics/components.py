"""Component-major ("structure of arrays") versions of the rigid-body, cable, multirotor and INDI maths.

The row-major modules (:mod:`~sim.physics.quaternion`, :mod:`~sim.physics.rigid_body`,
:mod:`~sim.physics.contact`, :mod:`~sim.physics.cable`, :mod:`~sim.physics.multirotor`,
:mod:`~sim.physics.controllers.indi`) keep vectors as ``[..., 3]`` rows; they stay the reference.
Here a 3-vector is a tuple of 3 tensors shaped like the batch (``[E, N]`` for MAVs, ``[E]`` or a
broadcasting ``[E, 1]`` for the load), a quaternion ``[w, x, y, z]`` is 4 tensors and a rotation
matrix is 9 (a tuple of 3 rows). Why: with ``[..., 3]`` rows every eager op loops over 3-4
components inside, and ``torch.compile`` vectorises over those instead of over the batch; with one
tensor per component every op is a plain contiguous loop over the batch (the layout study
``ComponentMajorDrones`` in ``benchmarks/multirotor_step.py``).

The formulas and their evaluation order follow the row-major code, so results agree to float32
round-off. Two deliberate differences: a rotation matrix built once per body and step replaces the
cross-product form of :func:`~sim.physics.quaternion.quat_rotate` (a few ulp apart), and terms whose
constant coefficient is exactly 0 are skipped (``0 * x`` adds nothing for finite ``x``).
Constants (allocation, gains, offsets on the body) are Python floats: compiled kernels inline them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from sim.physics.controllers.indi import INDIController
from sim.physics.multirotor import MultirotorModel
from sim.physics.rigid_body import GRAVITY, RigidBodyState

Scalar = Tensor | float
Vec3 = tuple[Tensor, Tensor, Tensor]
Quat = tuple[Tensor, Tensor, Tensor, Tensor]
Mat3 = tuple[Vec3, Vec3, Vec3]  # rows: R[i][j]
ConstVec3 = tuple[Scalar, Scalar, Scalar]  # a vector whose entries may be Python floats (constants)


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
