"""Moved to :mod:`covey_common.quaternion` (shared with the simulator side); this name stays for existing imports."""

from covey_common.quaternion import (
    matrix_to_6d,
    quat_conj,
    quat_from_euler,
    quat_from_yaw,
    quat_mul,
    quat_rotate,
    quat_rotate_inv,
    quat_to_matrix,
    quat_yaw,
    wrap_angle,
)

__all__ = [
    "matrix_to_6d",
    "quat_conj",
    "quat_from_euler",
    "quat_from_yaw",
    "quat_mul",
    "quat_rotate",
    "quat_rotate_inv",
    "quat_to_matrix",
    "quat_yaw",
    "wrap_angle",
]
