"""Numpy twins of ``sim/physics/quaternion.py`` (same formulas, same ``[w, x, y, z]`` order), for robots.

Quaternions rotate body -> world. Computed in float64: the sim runs float32, and float64 here keeps
the difference at float32 round-off. No torch.
"""

from __future__ import annotations

import math

import numpy as np


def quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product ``a * b``, ``[..., 4]`` (wxyz)."""
    aw, ax, ay, az = np.moveaxis(np.asarray(a, np.float64), -1, 0)
    bw, bx, by, bz = np.moveaxis(np.asarray(b, np.float64), -1, 0)
    return np.stack(
        (
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ),
        axis=-1,
    )


def quat_conj(q: np.ndarray) -> np.ndarray:
    """Conjugate (the inverse of a unit quaternion), ``[..., 4]``."""
    q = np.asarray(q, np.float64)
    return np.concatenate((q[..., :1], -q[..., 1:]), axis=-1)


def quat_rotate(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Rotate body-frame ``v [..., 3]`` into the world frame: ``R(q) v``."""
    q = np.asarray(q, np.float64)
    v = np.asarray(v, np.float64)
    w, u = q[..., :1], q[..., 1:]
    t = 2.0 * np.cross(u, v)
    return v + w * t + np.cross(u, t)


def quat_rotate_inv(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Rotate world-frame ``v [..., 3]`` into the body frame: ``R(q)^T v``."""
    return quat_rotate(quat_conj(q), v)


def quat_to_matrix(q: np.ndarray) -> np.ndarray:
    """Rotation matrix ``[..., 3, 3]`` (body -> world) of a unit quaternion ``[..., 4]``."""
    w, x, y, z = np.moveaxis(np.asarray(q, np.float64), -1, 0)
    flat = np.stack(
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
        axis=-1,
    )
    return flat.reshape(flat.shape[:-1] + (3, 3))


def matrix_to_6d(rot: np.ndarray) -> np.ndarray:
    """6D rotation encoding ``[..., 6]``: column 0 (3 numbers) then column 1 of ``rot [..., 3, 3]``."""
    return np.concatenate((rot[..., :, 0], rot[..., :, 1]), axis=-1)


def quat_from_euler(roll: float | np.ndarray, pitch: float | np.ndarray, yaw: float | np.ndarray) -> np.ndarray:
    """Quaternion ``[..., 4]`` of intrinsic z-y'-x'' (yaw, pitch, roll) Euler angles (rad)."""
    cr, sr = np.cos(np.multiply(roll, 0.5)), np.sin(np.multiply(roll, 0.5))
    cp, sp = np.cos(np.multiply(pitch, 0.5)), np.sin(np.multiply(pitch, 0.5))
    cy, sy = np.cos(np.multiply(yaw, 0.5)), np.sin(np.multiply(yaw, 0.5))
    return np.stack(
        (
            cr * cp * cy + sr * sp * sy,
            sr * cp * cy - cr * sp * sy,
            cr * sp * cy + sr * cp * sy,
            cr * cp * sy - sr * sp * cy,
        ),
        axis=-1,
    )


def quat_from_yaw(yaw: float | np.ndarray) -> np.ndarray:
    """Yaw-only quaternion ``[..., 4]`` (rotation by ``yaw`` rad about world z)."""
    zero = np.zeros_like(np.asarray(yaw, np.float64))
    return quat_from_euler(zero, zero, yaw)


def quat_yaw(q: np.ndarray) -> np.ndarray:
    """Yaw (rad) of the body x axis projected on the world xy plane, ``[...]``."""
    w, x, y, z = np.moveaxis(np.asarray(q, np.float64), -1, 0)
    return np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))


def wrap_angle(angle: float | np.ndarray) -> np.ndarray:
    """``angle`` wrapped to [-pi, pi), the same ``remainder`` form the sim uses."""
    return np.remainder(np.asarray(angle, np.float64) + math.pi, 2 * math.pi) - math.pi
