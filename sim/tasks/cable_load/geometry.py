"""Team geometry and the static hover equilibrium of MAVs holding a cable-suspended load.

All MAVs sit on a circle, each cable leaving its load attachment point outward at
``cable_angle`` from vertical. In static equilibrium with the load level:

    T_i       = m_load g / (N cos(theta))                       cable tension
    f_i       = m_drone g e_z + T_i u_i                          thrust vector of MAV i
    length_i  = L + T_i / k                                      stretched cable

with ``u_i`` the unit cable direction from load to MAV. The MJCF export and the tests use the
same functions, so torch and MuJoCo start from identical states.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from sim.physics.multirotor import MultirotorModel, MultirotorParams
from sim.physics.quaternion import quat_from_axis_angle, quat_rotate
from sim.physics.rigid_body import GRAVITY


def load_attach_points(num_mavs: int, radius: float, height: float, device: torch.device | str = "cpu") -> Tensor:
    """Attachment points on the load's top face, load frame, ``[N, 3]`` (m)."""
    phi = torch.arange(num_mavs, device=device, dtype=torch.float32) * (2 * math.pi / num_mavs)
    return torch.stack((radius * torch.cos(phi), radius * torch.sin(phi), torch.full_like(phi, height / 2)), -1)


def cable_directions(num_mavs: int, angle_rad: float, device: torch.device | str = "cpu") -> Tensor:
    """Unit cable directions from load to MAV at the start hover, world frame, ``[N, 3]``."""
    phi = torch.arange(num_mavs, device=device, dtype=torch.float32) * (2 * math.pi / num_mavs)
    s, c = math.sin(angle_rad), math.cos(angle_rad)
    return torch.stack((s * torch.cos(phi), s * torch.sin(phi), torch.full_like(phi, c)), -1)


def box_inertia(mass: Tensor, size: tuple[float, float, float]) -> Tensor:
    """Principal inertia of a solid box, ``mass [...] -> [..., 3]`` (kg m^2)."""
    sx, sy, sz = size
    diag = torch.tensor(((sy**2 + sz**2), (sx**2 + sz**2), (sx**2 + sy**2)), device=mass.device) / 12.0
    return mass.unsqueeze(-1) * diag


def hover_equilibrium(
    model: MultirotorModel,
    load_pos: Tensor,
    load_mass: Tensor,
    cable_length: Tensor,
    attach: Tensor,
    angle_rad: float,
    stiffness: float,
    drone_mass: Tensor | None = None,
) -> dict[str, Tensor]:
    """Static hover of the team around a level load at ``load_pos``.

    Args:
        load_pos: ``[B, 3]`` load centre. load_mass: ``[B]``. cable_length: ``[B, N]`` rest lengths.
        attach: ``[N, 3]`` load attachment points (load frame).
        drone_mass: ``[B, N]`` each MAV's mass (kg); default the model's.

    Returns:
        dict with ``drone_pos [B, N, 3]``, ``drone_quat [B, N, 4]``, ``rotor_speed [B, N, R]``,
        ``tension [B, N]``, ``thrust [B, N]``, ``torque [B, N, 3]`` (rotor torque balancing the
        cable's moment), ``cable_force [B, N, 3]`` (force of the cable on each MAV).
    """
    n = attach.shape[0]
    dirs = cable_directions(n, angle_rad, load_pos.device)  # [N, 3]
    tension = (load_mass * GRAVITY / (n * math.cos(angle_rad))).unsqueeze(-1).expand(-1, n)  # [B, N]
    stretched = cable_length + tension / stiffness
    attach_world = load_pos.unsqueeze(1) + attach  # [B, N, 3]
    drone_attach = attach_world + dirs * stretched.unsqueeze(-1)
    cable_force = -dirs * tension.unsqueeze(-1)  # pulls each MAV toward the load
    e_z = torch.tensor((0.0, 0.0, 1.0), device=load_pos.device)
    weight = e_z * (model.mass * GRAVITY if drone_mass is None else drone_mass.unsqueeze(-1) * GRAVITY)
    thrust_vec = -cable_force + weight
    thrust = torch.linalg.vector_norm(thrust_vec, dim=-1)
    z_des = thrust_vec / thrust.unsqueeze(-1)
    # Minimal rotation taking e_z to z_des (yaw stays zero).
    e_z = torch.zeros_like(z_des)
    e_z[..., 2] = 1.0
    axis = torch.linalg.cross(e_z, z_des, dim=-1)
    sin_a = torch.linalg.vector_norm(axis, dim=-1)
    axis = axis / sin_a.clamp(min=1e-9).unsqueeze(-1)
    angle = torch.atan2(sin_a, z_des[..., 2])
    quat = quat_from_axis_angle(axis, angle)
    drone_pos = drone_attach - quat_rotate(quat, model.cable_attach.expand_as(drone_attach))
    # The cable pulls below the centre of mass: rotors must cancel that moment.
    force_body = quat_rotate(torch.cat((quat[..., :1], -quat[..., 1:]), -1), cable_force)
    torque = -torch.linalg.cross(model.cable_attach.expand_as(force_body), force_body, dim=-1)
    rotor_speed = model.wrench_to_speed_cmd(thrust, torque)
    return {
        "drone_pos": drone_pos,
        "drone_quat": quat,
        "rotor_speed": rotor_speed,
        "tension": tension,
        "thrust": thrust,
        "torque": torque,
        "cable_force": cable_force,
    }


def hover_thrust_fraction(params: MultirotorParams, num_flying: int, carried_mass: float, angle_rad: float) -> float:
    """Each flying MAV's static-hover thrust as a fraction of its maximum (> 1: the team cannot hold).

    ``num_flying`` MAVs share ``carried_mass`` (the load, plus a lost MAV hanging from it) equally on
    cables at ``angle_rad`` from vertical: ``|m g e_z + T u|`` with ``T = M g / (n cos(angle))``. A lost
    MAV hanging from one corner also tilts the load, so for that case this is a lower bound.
    """
    tension = carried_mass * GRAVITY / (num_flying * math.cos(angle_rad))
    vertical = params.mass * GRAVITY + tension * math.cos(angle_rad)
    return math.hypot(vertical, tension * math.sin(angle_rad)) / params.max_thrust
