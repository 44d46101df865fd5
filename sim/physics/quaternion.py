"""Batched quaternion and rotation helpers.

Convention (same as MuJoCo): quaternions are ``[w, x, y, z]``, unit norm, and rotate vectors from
the body frame to the world frame: ``v_world = R(q) @ v_body``. All functions broadcast over any
leading dimensions, shapes ``[..., 4]`` / ``[..., 3]``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def cross(a: Tensor, b: Tensor) -> Tensor:
    """Cross product over the last dim with broadcasting of the leading dims, ``[..., 3]``."""
    a, b = torch.broadcast_tensors(a, b)
    return torch.linalg.cross(a, b, dim=-1)


def quat_mul(a: Tensor, b: Tensor) -> Tensor:
    """Hamilton product ``a * b``, shapes ``[..., 4]``."""
    aw, ax, ay, az = a.unbind(-1)
    bw, bx, by, bz = b.unbind(-1)
    return torch.stack(
        (
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ),
        dim=-1,
    )


def quat_conj(q: Tensor) -> Tensor:
    """Conjugate (the inverse for unit quaternions), ``[..., 4]``."""
    return torch.cat((q[..., :1], -q[..., 1:]), dim=-1)


def quat_rotate(q: Tensor, v: Tensor) -> Tensor:
    """Rotate ``v`` (body frame) into the world frame: ``R(q) v``. ``q [..., 4]``, ``v [..., 3]``."""
    w = q[..., :1]
    u = q[..., 1:]
    # v' = v + 2 w (u x v) + 2 u x (u x v), cheaper than building R.
    t = 2.0 * cross(u, v)
    return v + w * t + cross(u, t)


def quat_rotate_inv(q: Tensor, v: Tensor) -> Tensor:
    """Rotate a world-frame ``v`` into the body frame: ``R(q)^T v``."""
    return quat_rotate(quat_conj(q), v)


def quat_to_matrix(q: Tensor) -> Tensor:
    """Rotation matrix ``[..., 3, 3]`` of a unit quaternion ``[..., 4]``."""
    w, x, y, z = q.unbind(-1)
    return torch.stack(
        (
            1 - 2 * (y * y + z * z),
            2 * (x * y - w * z),
            2 * (x * z + w * y),
            2 * (x * y + w * z),
            1 - 2 * (x * x + z * z),
            2 * (y * z - w * x),
            2 * (x * z - w * y),
            2 * (y * z + w * x),
            1 - 2 * (x * x + y * y),
        ),
        dim=-1,
    ).reshape(q.shape[:-1] + (3, 3))


def matrix_to_6d(rot: Tensor) -> Tensor:
    """Continuous 6D rotation encoding (first two columns, Zhou et al. 2019), ``[..., 6]``."""
    return torch.cat((rot[..., :, 0], rot[..., :, 1]), dim=-1)


def quat_from_axis_angle(axis: Tensor, angle: Tensor) -> Tensor:
    """Quaternion of a rotation by ``angle [...]`` (rad) about unit ``axis [..., 3]``."""
    half = 0.5 * angle.unsqueeze(-1)
    return torch.cat((torch.cos(half), torch.sin(half) * axis), dim=-1)


def quat_from_euler(roll: Tensor, pitch: Tensor, yaw: Tensor) -> Tensor:
    """Quaternion from intrinsic z-y'-x'' (yaw, pitch, roll) Euler angles in rad, ``[..., 4]``."""
    cr, sr = torch.cos(roll / 2), torch.sin(roll / 2)
    cp, sp = torch.cos(pitch / 2), torch.sin(pitch / 2)
    cy, sy = torch.cos(yaw / 2), torch.sin(yaw / 2)
    return torch.stack(
        (
            cr * cp * cy + sr * sp * sy,
            sr * cp * cy - cr * sp * sy,
            cr * sp * cy + sr * cp * sy,
            cr * cp * sy - sr * sp * cy,
        ),
        dim=-1,
    )


def quat_yaw(q: Tensor) -> Tensor:
    """Yaw angle (rad) of the body x axis projected on the world xy plane, ``[...]``."""
    w, x, y, z = q.unbind(-1)
    return torch.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))


def quat_angle_between(a: Tensor, b: Tensor) -> Tensor:
    """Smallest rotation angle (rad, in [0, pi]) taking orientation ``a`` to ``b``, ``[...]``."""
    dot = (a * b).sum(-1).abs().clamp(max=1.0)
    return 2.0 * torch.acos(dot)


def quat_integrate(q: Tensor, omega_body: Tensor, dt: float | Tensor) -> Tensor:
    """Advance ``q`` by a constant body-frame angular velocity over ``dt`` (exact exponential map).

    ``q_next = q * exp(omega dt / 2)``, renormalised; the same update MuJoCo uses for free joints.
    """
    rate = torch.linalg.vector_norm(omega_body, dim=-1, keepdim=True)
    half = 0.5 * rate * dt
    # sin(half)/rate -> dt/2 as rate -> 0; guard the division without a branch.
    safe = torch.where(rate > 1e-9, rate, torch.ones_like(rate))
    scale = torch.where(rate > 1e-9, torch.sin(half) / safe, torch.full_like(rate, 0.5 * dt))
    dq = torch.cat((torch.cos(half), omega_body * scale), dim=-1)
    out = quat_mul(q, dq)
    return out / torch.linalg.vector_norm(out, dim=-1, keepdim=True)


def random_yaw_quat(shape: tuple[int, ...], generator: torch.Generator, device: torch.device) -> Tensor:
    """Uniformly random yaw-only quaternions, ``[*shape, 4]``."""
    yaw = (torch.rand(shape, generator=generator, device=device) * 2 - 1) * math.pi
    zeros = torch.zeros_like(yaw)
    return quat_from_euler(zeros, zeros, yaw)
