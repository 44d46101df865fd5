"""Volleyball physics: a point-mass sphere with quadratic drag, bouncing off the ground, the net and drones.

State of a ball (any leading batch shape ``[...]``): ``pos [..., 3]``, ``vel [..., 3]``, world frame (m, m/s).
The ball has no spin state: no Magnus force, and a frictional hit changes only its linear velocity.

Flight
------
Gravity plus textbook quadratic drag (no buoyancy, no added mass)::

    dv/dt = g - k |v| v,      k = drag_k = rho C_D pi r^2 / (2 m)         dp/dt = v

:func:`ball_flight_step` integrates it by Strang splitting into two sub-flows that are solved exactly::

    D(tau):  v <- v / (1 + k |v| tau)                 (drag alone: the direction is fixed, s' = -k s^2)
    F(tau):  p <- p + tau v + tau^2 / 2 g,  v <- v + tau g        (free flight under gravity alone)
    step(dt) = D(dt / 2) o F(dt) o D(dt / 2)

This is second order in ``dt`` (the splitting error), exact for a drag-free parabola (and its velocity is
exact for drag without gravity), and unconditionally stable: ``D`` only shrinks the speed, whereas explicit
drag reverses it once ``k |v| dt > 1`` (``k`` is 1.8 /m for the VolleyBots ball, so a 20 m/s spike at 1/30 s
already does). Its fixed point, the discrete terminal speed, is ``sqrt(g / k) / sqrt(1 + g k dt^2 / 4)``
(relative bias 2.5e-5 at 1/300 s). It matches MuJoCo's ellipsoid fluid model, see ``tests/test_ball_physics.py``.

Contacts
--------
A contact is a surface point ``c`` moving at ``u`` (the ground, a net point, a point on a drone's paddle).
With ``n`` the unit normal from ``c`` to the ball centre, ``depth = r - |p - c|`` and ``v_rel = v - u``::

    hit      = depth > 0  and  v_n = v_rel . n < 0             (overlapping and approaching)
    j_n      = -(1 + e) v_n                                    (normal impulse per unit ball mass, >= 0)
    v_t      = v_rel - v_n n
    v+       = v + j_n n - min(mu j_n, |v_t|) v_t / |v_t|      (Coulomb: at most mu j_n, never reversing v_t)
    p+       = c + r n  =  p + depth n                         (pushed out to exactly touch)

so the normal relative velocity leaves as ``-e v_n`` and the tangential one is reduced by the Coulomb
impulse, down to sticking. The surface is infinitely heavy: the ball (5 g) against a drone (~1.5 kg)
would move the drone by m_ball / m_drone ~ 0.3 % of the ball's velocity change, which we drop (the caller
may apply the reaction if it wants it). The impact is instantaneous, where MuJoCo's soft contact lasts a
few ms. Contacts are checked at the end of a step, so a ball crossing a thin paddle by more than its
radius in one step (relative speed above ``r / dt``, 30 m/s at 1/300 s) tunnels through it.

Geometry helpers give the closest surface point on a flat disc (a drone's paddle, two-sided, edges
included, so a rim hit gets the edge-to-centre normal) and on a flat rectangle (the net). Degenerate
input (a ball centre exactly on the surface point, a zero-length normal, zero velocity) never gives NaN:
unit vectors fall back to a given direction where their length vanishes.

Every function is pure, batched over leading dimensions that broadcast, and runs on any device.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from sim.physics.quaternion import cross, quat_rotate
from sim.physics.rigid_body import GRAVITY

_EPS = 1e-9  # lengths below this (m, m/s) are treated as zero when normalising


@dataclass(frozen=True)
class BallParams:
    """Ball constants; defaults are the VolleyBots ball (r = 0.1 m, m = 5 g) with a smooth-sphere C_D."""

    radius: float = 0.1  # m (VolleyBots)
    mass: float = 0.005  # kg (VolleyBots)
    drag_coeff: float = 0.47  # sphere C_D
    air_density: float = 1.225  # kg/m^3
    restitution_ground: float = 0.7
    restitution_drone: float = 0.8
    restitution_net: float = 0.2
    friction_drone: float = 0.0  # Coulomb coefficient for the tangential impulse at a drone hit (0 = frictionless)

    def __post_init__(self) -> None:
        if self.radius <= 0 or self.mass <= 0:
            raise ValueError("ball radius and mass must be > 0")
        if min(self.drag_coeff, self.air_density, self.friction_drone) < 0:
            raise ValueError("drag_coeff, air_density and friction_drone must be >= 0")
        for e in (self.restitution_ground, self.restitution_drone, self.restitution_net):
            if not 0.0 <= e <= 1.0:
                raise ValueError(f"restitutions must be in [0, 1], got {e}")

    @property
    def drag_k(self) -> float:
        """``k`` (1/m) of the drag acceleration ``-k |v| v``: ``0.5 rho C_D pi r^2 / m``."""
        return 0.5 * self.air_density * self.drag_coeff * math.pi * self.radius**2 / self.mass

    @property
    def terminal_speed(self) -> float:
        """``sqrt(g / k)`` (m/s) at ``GRAVITY``; infinite without drag."""
        k = self.drag_k
        return math.sqrt(GRAVITY / k) if k > 0 else math.inf


# --------------------------------------------------------------------------- small helpers
def _dot(a: Tensor, b: Tensor) -> Tensor:
    """``a . b`` over the last dim, keeping it: ``[..., 1]``."""
    return (a * b).sum(-1, keepdim=True)


def _unit_z(like: Tensor) -> Tensor:
    """``[0, 0, 1]`` shaped like ``like [..., 3]``, built on its device (no host constant)."""
    return torch.nn.functional.pad(torch.ones_like(like[..., :1]), (2, 0))


def _safe_unit(v: Tensor, fallback: Tensor) -> tuple[Tensor, Tensor]:
    """``(v / |v|, |v| [..., 1])``, with ``fallback`` (unit, broadcastable) where ``|v| <= _EPS``."""
    norm = torch.linalg.vector_norm(v, dim=-1, keepdim=True)
    unit = v / norm.clamp(min=_EPS)
    return torch.where(norm > _EPS, unit, fallback), norm


def _per_contact(x: float | Tensor) -> float | Tensor:
    """A scalar or a ``[...]`` tensor as a factor of ``[..., 1]`` quantities."""
    return x.unsqueeze(-1) if isinstance(x, Tensor) else x


def _quat_z_axis(q: Tensor) -> Tensor:
    """Body +z axis in the world frame, ``R(q) e_z``, ``[..., 3]`` from ``q [..., 4]``."""
    w, x, y, z = q.unbind(-1)
    return torch.stack((2 * (x * z + w * y), 2 * (y * z - w * x), 1 - 2 * (x * x + y * y)), dim=-1)


# --------------------------------------------------------------------------- flight
def ball_flight_step(
    pos: Tensor, vel: Tensor, params: BallParams, dt: float, gravity: float = GRAVITY
) -> tuple[Tensor, Tensor]:
    """Advance balls by ``dt`` under gravity and quadratic drag (Strang splitting, see the module docstring).

        v  <- v / (1 + k |v| dt / 2)
        p  <- p + dt v - dt^2 / 2 g e_z,   v <- v - dt g e_z
        v  <- v / (1 + k |v| dt / 2)

    Second-order accurate, exact without drag, never reverses the velocity through drag at any ``dt``.

    Args:
        pos, vel: ``[..., 3]`` world-frame position (m) and velocity (m/s).
        params: ball constants (``drag_k`` is used).
        dt: step (s). gravity: m/s^2, along -z.

    Returns:
        ``(pos, vel)``, each ``[..., 3]``.
    """
    half_kdt = 0.5 * params.drag_k * dt
    vel = vel / (1.0 + half_kdt * torch.linalg.vector_norm(vel, dim=-1, keepdim=True))
    pos = pos + dt * vel
    pos = torch.cat((pos[..., :2], pos[..., 2:] - 0.5 * gravity * dt * dt), dim=-1)
    vel = torch.cat((vel[..., :2], vel[..., 2:] - gravity * dt), dim=-1)
    vel = vel / (1.0 + half_kdt * torch.linalg.vector_norm(vel, dim=-1, keepdim=True))
    return pos, vel


# --------------------------------------------------------------------------- geometry
def closest_point_on_disc(p: Tensor, center: Tensor, normal: Tensor, radius: float | Tensor) -> Tensor:
    """Closest point to ``p`` on a flat disc, edges included.

    The offset ``p - center`` is projected on the disc's plane and clipped to ``radius``; a point over
    the disc gets its foot on the face, any other point the nearest rim point. ``normal`` need not be
    unit (it is normalised; a zero normal falls back to +z); a point exactly over the centre gives the centre.

    Args:
        p, center, normal: ``[..., 3]`` (broadcast).
        radius: scalar or ``[...]`` (m).

    Returns:
        ``[..., 3]``.
    """
    n, _ = _safe_unit(normal, _unit_z(normal))
    d = p - center
    in_plane = d - _dot(d, n) * n
    rho = torch.linalg.vector_norm(in_plane, dim=-1, keepdim=True)
    scale = (_per_contact(radius) / rho.clamp(min=_EPS)).clamp(max=1.0)
    return center + scale * in_plane


def closest_point_on_rect(
    p: Tensor, center: Tensor, axis_u: Tensor, axis_v: Tensor, half_u: float | Tensor, half_v: float | Tensor
) -> Tensor:
    """Closest point to ``p`` on the flat rectangle ``center + a u + b v``, ``|a| <= half_u``, ``|b| <= half_v``.

    ``axis_u``, ``axis_v`` are orthonormal ``[..., 3]``; the coordinates of ``p - center`` along them are
    clipped to the half extents (scalars or ``[...]`` tensors). Returns ``[..., 3]``.
    """
    d = p - center
    hu, hv = _per_contact(half_u), _per_contact(half_v)
    a = torch.clamp(_dot(d, axis_u), min=-hu, max=hu)
    b = torch.clamp(_dot(d, axis_v), min=-hv, max=hv)
    return center + a * axis_u + b * axis_v


# --------------------------------------------------------------------------- impulses
def _impulse(
    pos: Tensor,
    vel: Tensor,
    normal: Tensor,
    depth: Tensor,
    surface_vel: Tensor,
    restitution: float | Tensor,
    friction: float | Tensor,
) -> tuple[Tensor, Tensor, Tensor]:
    """The contact law of the module docstring for a unit ``normal [..., 3]`` and ``depth [..., 1]``."""
    v_rel = vel - surface_vel
    v_n = _dot(v_rel, normal)
    hit = (depth > 0) & (v_n < 0)
    j_n = -(1.0 + _per_contact(restitution)) * v_n
    v_t = v_rel - v_n * normal
    speed_t = torch.linalg.vector_norm(v_t, dim=-1, keepdim=True)
    # Fraction of v_t removed: min(mu j_n, |v_t|) / |v_t|, which is 0 (not NaN) when v_t = 0.
    slip_cut = torch.minimum(_per_contact(friction) * j_n, speed_t) / speed_t.clamp(min=_EPS)
    new_vel = vel + j_n * normal - slip_cut * v_t
    new_pos = pos + depth * normal
    return torch.where(hit, new_pos, pos), torch.where(hit, new_vel, vel), hit.squeeze(-1)


def resolve_sphere_contact(
    pos: Tensor,
    vel: Tensor,
    contact_point: Tensor,
    surface_vel: Tensor,
    radius: float,
    restitution: float | Tensor,
    friction: float | Tensor = 0.0,
    fallback_normal: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Bounce spheres off an infinitely heavy surface point moving at ``surface_vel``.

    Contact when ``|pos - contact_point| < radius`` and the normal relative velocity is approaching;
    then the normal relative velocity is reversed and scaled by ``restitution``, the tangential one
    reduced by a Coulomb impulse of at most ``friction`` times the normal impulse (never reversed), and
    the centre put at ``contact_point + radius n``. Elsewhere the inputs are returned unchanged. The
    surface is treated as infinitely heavy (a 5 g ball against a 1.5 kg drone: the drone's velocity
    change, 0.3 % of the ball's, is neglected) and the ball as a point mass without spin.

    Args:
        pos, vel: ``[..., 3]`` ball centres (m) and velocities (m/s).
        contact_point, surface_vel: ``[..., 3]`` closest surface points and their velocities.
        radius: ball radius (m).
        restitution, friction: scalars or ``[...]`` tensors.
        fallback_normal: ``[..., 3]`` unit normal used where the centre lies on the contact point
            (the normal is undefined there); default +z.

    Returns:
        ``(pos [..., 3], vel [..., 3], hit [...] bool)``, shapes broadcast over all inputs.
    """
    offset = pos - contact_point
    fallback = _unit_z(offset) if fallback_normal is None else fallback_normal
    normal, dist = _safe_unit(offset, fallback)
    return _impulse(pos, vel, normal, radius - dist, surface_vel, restitution, friction)


def ground_contact_ball(
    pos: Tensor, vel: Tensor, params: BallParams, ground_z: float = 0.0
) -> tuple[Tensor, Tensor, Tensor]:
    """Bounce balls on the plane ``z = ground_z`` (frictionless, ``params.restitution_ground``).

    The normal is +z everywhere, so a ball whose centre went below the plane is still pushed up.
    Returns ``(pos [..., 3], vel [..., 3], hit [...] bool)``; where ``hit``, ``z = ground_z + r`` and
    ``v_z = -e v_z``.
    """
    z, vz = pos[..., 2:], vel[..., 2:]
    top = ground_z + params.radius
    hit = (z < top) & (vz < 0)
    pos = torch.cat((pos[..., :2], torch.where(hit, torch.full_like(z, top), z)), dim=-1)
    vel = torch.cat((vel[..., :2], torch.where(hit, -params.restitution_ground * vz, vz)), dim=-1)
    return pos, vel, hit.squeeze(-1)


# --------------------------------------------------------------------------- drones
def paddle_surface(
    drone_pos: Tensor, drone_quat: Tensor, drone_vel: Tensor, drone_ang_vel_body: Tensor, offset_body: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """The hitting surface of drones: a disc at ``offset_body`` (body frame) whose normal is body +z.

        center = p + R r,     normal = R e_z,     velocity = v + R (omega_body x r)

    Args:
        drone_pos, drone_vel, drone_ang_vel_body: ``[..., 3]`` (world, world, body frame).
        drone_quat: ``[..., 4]`` ``[w, x, y, z]``, body -> world.
        offset_body: ``[3]`` or ``[..., 3]`` disc centre relative to the centre of mass, body frame (m).

    Returns:
        ``(center_world, normal_world, point_velocity_world)``, each ``[..., 3]``. The velocity is the
        disc centre's; :func:`ball_drone_contact` adds ``omega x (c - center)`` for an off-centre hit.
    """
    center = drone_pos + quat_rotate(drone_quat, offset_body)
    normal = _quat_z_axis(drone_quat)
    velocity = drone_vel + quat_rotate(drone_quat, cross(drone_ang_vel_body, offset_body))
    return center, normal, velocity


def ball_drone_contact(
    ball_pos: Tensor,
    ball_vel: Tensor,
    center: Tensor,
    normal: Tensor,
    disc_radius: float | Tensor,
    point_velocity: Tensor,
    params: BallParams,
    ang_vel_world: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Hit balls with drone paddles (discs from :func:`paddle_surface`) in one call.

    The contact point is the closest point of the disc (face or rim); its velocity is
    ``point_velocity`` (the disc centre's) plus, if ``ang_vel_world`` is given, ``omega x (c - center)``.
    Restitution and friction are ``params.restitution_drone`` and ``params.friction_drone``. The disc
    is two-sided; where the ball centre lies exactly on the disc, the normal is the disc normal facing
    against the relative velocity.

    Args:
        ball_pos, ball_vel: ``[..., 3]``, e.g. ``[E, 1, 3]`` for one ball per env against ``[E, N, 3]`` drones.
        center, normal, point_velocity: ``[..., 3]`` paddle discs (``normal`` unit).
        disc_radius: scalar or ``[...]`` (m).
        ang_vel_world: optional ``[..., 3]`` drone angular velocity in the world frame (``R omega_body``).

    Returns:
        ``(pos, vel, hit)`` per ball-paddle pair, broadcast shapes ``[..., 3]``, ``[..., 3]``, ``[...]``.
        With several paddles per ball the caller picks which hit to apply (e.g. the first ``hit``).
    """
    point = closest_point_on_disc(ball_pos, center, normal, disc_radius)
    surface_vel = point_velocity
    if ang_vel_world is not None:
        surface_vel = surface_vel + cross(ang_vel_world, point - center)
    facing = torch.where(_dot(ball_vel - surface_vel, normal) > 0, -normal, normal)
    return resolve_sphere_contact(
        ball_pos,
        ball_vel,
        point,
        surface_vel,
        params.radius,
        params.restitution_drone,
        params.friction_drone,
        fallback_normal=facing,
    )
