"""Low-level flight control for the scripted volleyball drones: position -> CTBR actions.

:func:`position_ctbr` is a geometric position controller: desired acceleration (PD +
feed-forward + gravity, drag compensated, tilt limited) -> collective thrust along body z and body
rates turning body z toward the desired thrust direction (:func:`ctbr_from_thrust_direction`).
Every function is batched over ``[E, D]`` (envs, drones) and reads the env's drone state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from sim.physics.quaternion import quat_rotate, quat_rotate_inv, quat_yaw
from sim.physics.rigid_body import GRAVITY

EZ = (0.0, 0.0, 1.0)


def unit(v: Tensor, eps: float = 1e-9) -> Tensor:
    """``v [..., 3]`` normalised (zero vectors stay ~0)."""
    return v / torch.linalg.vector_norm(v, dim=-1, keepdim=True).clamp(min=eps)


def dot(a: Tensor, b: Tensor) -> Tensor:
    """``[..., 1]``: the dot product over the last dim, kept."""
    return (a * b).sum(-1, keepdim=True)


@dataclass(frozen=True)
class PositionGains:
    """Gains of :func:`position_ctbr` (per axis x, y, z where tuples)."""

    kp: tuple[float, float, float] = (7.0, 7.0, 9.0)  # 1/s^2
    kd: tuple[float, float, float] = (4.5, 4.5, 5.5)  # 1/s
    k_att: float = 6.0  # 1/s: body-rate command per rad of tilt error
    k_yaw: float = 2.0  # 1/s
    max_tilt: float = 0.9  # rad, limit of the desired thrust direction (feedback part included)
    max_acc: float = 12.0  # m/s^2, norm limit of the PD term


DEFAULT_GAINS = PositionGains()


def ctbr_from_thrust_direction(
    env, z_des: Tensor, acc_des: Tensor, yaw: Tensor | None = None, gains: PositionGains = DEFAULT_GAINS
) -> Tensor:
    """CTBR actions ``[E, D, 4]`` turning body z toward ``z_des [E, D, 3]`` (unit, world) with the
    collective thrust ``m acc_des . z`` (``acc_des [E, D, 3]``: desired specific force, world)."""
    d = env.drones
    z = quat_rotate(d.quat, torch.zeros_like(d.pos) + torch.tensor(EZ, device=d.pos.device))
    axis = torch.linalg.cross(z, z_des, dim=-1)
    sin = torch.linalg.vector_norm(axis, dim=-1, keepdim=True)
    angle = torch.atan2(sin, dot(z, z_des))
    omega_world = gains.k_att * angle * axis / sin.clamp(min=1e-6)
    omega = quat_rotate_inv(d.quat, omega_world)
    if yaw is None:
        yaw = torch.where(env.flip, math.pi, 0.0)
    err = torch.remainder(yaw - quat_yaw(d.quat) + math.pi, 2 * math.pi) - math.pi
    omega = torch.cat((omega[..., :2], (omega[..., 2] + gains.k_yaw * err).unsqueeze(-1)), -1)
    thrust = env.params.mass * dot(acc_des, z).squeeze(-1)
    a0 = 2.0 * thrust / env.params.max_thrust - 1.0
    rates = omega / env.rate_scale
    return torch.cat((a0.unsqueeze(-1), rates), -1).clamp(-1.0, 1.0)


def limit_tilt(acc: Tensor, max_tilt: float, min_up: float = 0.3 * GRAVITY) -> Tensor:
    """Scale the horizontal part of ``acc [..., 3]`` so that its angle to +z is at most ``max_tilt``."""
    up = acc[..., 2:].clamp(min=min_up)
    horiz = acc[..., :2]
    h = torch.linalg.vector_norm(horiz, dim=-1, keepdim=True)
    h_max = up * math.tan(max_tilt)
    return torch.cat((horiz * (h_max / h.clamp(min=1e-9)).clamp(max=1.0), up), -1)


def desired_acceleration(
    env,
    target_pos: Tensor,
    target_vel: Tensor | None = None,
    target_acc: Tensor | None = None,
    gains: PositionGains = DEFAULT_GAINS,
) -> Tensor:
    """Desired specific force ``[E, D, 3]`` (world): PD + feed-forward + gravity - drone drag, tilt limited."""
    d, dev = env.drones, env.device
    kp = torch.tensor(gains.kp, device=dev)
    kd = torch.tensor(gains.kd, device=dev)
    tv = torch.zeros_like(d.vel) if target_vel is None else target_vel
    pd = kp * (target_pos - d.pos) + kd * (tv - d.vel)
    n = torch.linalg.vector_norm(pd, dim=-1, keepdim=True)
    pd = pd * (gains.max_acc / n.clamp(min=1e-9)).clamp(max=1.0)
    acc = pd + (0.0 if target_acc is None else target_acc)
    acc = acc + torch.tensor(EZ, device=dev) * GRAVITY - env.model.drag_force(d.quat, d.vel) / env.params.mass
    return limit_tilt(acc, gains.max_tilt)


def position_ctbr(
    env,
    target_pos: Tensor,
    target_vel: Tensor | None = None,
    target_acc: Tensor | None = None,
    yaw: Tensor | None = None,
    gains: PositionGains = DEFAULT_GAINS,
) -> Tensor:
    """Geometric position controller: CTBR actions ``[E, D, 4]`` in [-1, 1] flying the drones to
    ``target_pos [E, D, 3]`` (world) with optional velocity / acceleration feed-forward. ``yaw [E, D]``
    defaults to each team's heading (team B: pi)."""
    acc = desired_acceleration(env, target_pos, target_vel, target_acc, gains)
    return ctbr_from_thrust_direction(env, unit(acc), acc, yaw, gains)
