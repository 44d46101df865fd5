"""Batched rigid-body dynamics (Newton-Euler) with quaternion attitude.

State of a body (any leading batch shape ``[...]``):
    pos      [..., 3]  centre-of-mass position, world frame (m)
    quat     [..., 4]  attitude ``[w, x, y, z]``, body -> world
    vel      [..., 3]  linear velocity of the centre of mass, world frame (m/s)
    ang_vel  [..., 3]  angular velocity, body frame (rad/s)

Bodies have a diagonal inertia in their body frame (principal axes), which holds for every body
we simulate (multirotors, boxes, balls).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from sim.physics.quaternion import cross, quat_integrate, quat_rotate, quat_rotate_inv

GRAVITY = 9.81  # m/s^2, the value our MJCF exports use too


@dataclass
class RigidBodyState:
    """Tensors of one batch of rigid bodies; see the module docstring for shapes and frames."""

    pos: Tensor
    quat: Tensor
    vel: Tensor
    ang_vel: Tensor

    def clone(self) -> RigidBodyState:
        return RigidBodyState(self.pos.clone(), self.quat.clone(), self.vel.clone(), self.ang_vel.clone())


def rigid_body_step(
    state: RigidBodyState,
    force_world: Tensor,
    torque_body: Tensor,
    mass: Tensor | float,
    inertia: Tensor,
    dt: float,
    gravity: float = GRAVITY,
) -> RigidBodyState:
    """One semi-implicit Euler step of the Newton-Euler equations.

        v+     = v + dt * (F / m + g)
        omega+ = omega + dt * J^-1 (tau - omega x J omega)
        p+     = p + dt * v+
        q+     = q * exp(omega+ dt / 2)

    This is MuJoCo's ``Euler`` integrator for a free body (accelerations at the current state,
    positions advanced with the new velocities), which the cross-check tests rely on.

    Args:
        force_world: ``[..., 3]`` total external force except gravity, world frame (N).
        torque_body: ``[..., 3]`` total torque about the centre of mass, body frame (N m).
        mass: scalar or ``[..., 1]`` (kg).
        inertia: ``[..., 3]`` or ``[3]`` diagonal inertia in the body frame (kg m^2).
    """
    acc = force_world / mass
    acc = torch.cat((acc[..., :2], acc[..., 2:] - gravity), dim=-1)  # no per-step host->device constant
    gyro = torch.linalg.cross(state.ang_vel, inertia * state.ang_vel, dim=-1)
    ang_acc = (torque_body - gyro) / inertia
    vel = state.vel + dt * acc
    ang_vel = state.ang_vel + dt * ang_acc
    return RigidBodyState(
        pos=state.pos + dt * vel,
        quat=quat_integrate(state.quat, ang_vel, dt),
        vel=vel,
        ang_vel=ang_vel,
    )


def point_velocity(state: RigidBodyState, offset_body: Tensor) -> tuple[Tensor, Tensor]:
    """World position and velocity of a point fixed on the body.

    Args:
        offset_body: ``[..., 3]`` point in the body frame, relative to the centre of mass.

    Returns:
        ``(pos [..., 3], vel [..., 3])`` in the world frame: ``p + R r`` and ``v + R (omega x r)``.
    """
    pos = state.pos + quat_rotate(state.quat, offset_body)
    vel = state.vel + quat_rotate(state.quat, cross(state.ang_vel, offset_body))
    return pos, vel


def wrench_at_point(state: RigidBodyState, offset_body: Tensor, force_world: Tensor) -> Tensor:
    """Body-frame torque about the centre of mass of a world force applied at a body point.

    ``tau = r x (R^T F)`` with ``r`` the body-frame offset, ``[..., 3]``.
    """
    force_body = quat_rotate_inv(state.quat, force_world)
    return cross(offset_body, force_body)
