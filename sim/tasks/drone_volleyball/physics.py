"""drone_volleyball's torch physics: one control step's ``decimation`` ticks (rate PID, rotors, Newton-Euler, the
drones' crashes, ball flight and at most one ball contact per tick: the nearest paddle, else the net, else the
ground), row-major (:func:`control_step` then :func:`ball_substep`, ``[..., 3]`` rows) or component-major
(:func:`control_loop_components`, one tensor per vector component, :mod:`sim.physics.components`, chosen by
:func:`~sim.physics.components.choose_layout`).

Each function reads and replaces the state tensors of a :class:`~sim.tasks.drone_volleyball.env.DroneVolleyballEnv`
(never writing into them: observations handed out may be views of them). Shapes: E envs, D drones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from sim.physics import components as soa
from sim.physics.ball import (
    ball_drone_contact,
    ball_flight_step,
    closest_point_on_rect,
    ground_contact_ball,
    paddle_surface,
    resolve_sphere_contact,
)
from sim.physics.quaternion import quat_rotate
from sim.physics.rigid_body import rigid_body_step

if TYPE_CHECKING:
    from sim.tasks.drone_volleyball.env import DroneVolleyballEnv


class LoopLayout(soa.ResolvedLayout):
    """Which layout the control loop runs (``name``, :func:`~sim.physics.components.choose_layout`), and the
    constants of the component-major one as Python floats and small index tensors. Not episode state: outside
    :meth:`~sim.core.env.MultiAgentEnv.state_snapshot`, so restoring a snapshot keeps the env's own layout."""

    def __init__(self, env: DroneVolleyballEnv) -> None:
        super().__init__(env.num_envs, env.compiled)
        self.rate_pid = soa.RatePID(env.rate_ctrl)  # its memory stays in env.rate_ctrl
        self.rotors = self.rate_pid.rotors
        self.motor_decay = float(env.model.motor_decay(env.phys_dt))  # the float32 factor motor_step computes
        self.rate_scale: tuple[float, ...] = tuple(env.rate_scale.tolist())
        self.paddle_offset = (0.0, 0.0, float(env.paddle_offset[2]))
        # The net rectangle: centre, in-plane axes (the rows path's float32 constants) and half extents.
        self.net = tuple(tuple(row) for row in env._net_frame.tolist())
        self.net_half = (env.cfg.court.antenna_y, env.cfg.court.net_height / 2)
        self.drone_ids = torch.arange(env.num_drones, device=env.device)
        self.not_self = ~torch.eye(env.num_drones, dtype=torch.bool, device=env.device)


def drones_within(pos: soa.Vec3, radius: float, not_self: Tensor, pairwise: bool = False) -> Tensor:
    """``[E, D]`` bool: drones whose centre is closer than ``radius`` to another's; ``pos`` components ``[E, D]``,
    ``not_self [D, D]`` the off-diagonal mask.

    Either as one ``[E, D, D]`` distance matrix reduced over its last axis (few ops: eager), or pair by pair on ``[E]``
    columns (``pairwise``: no reduction, which inductor fuses into the control loop's kernel; 13.1 against 14.9 ms
    for volleyball's compiled loop at 4096 envs). Both compute the same distances, so the same flags.
    """
    if not pairwise:
        gap = soa.norm(tuple(c.unsqueeze(-1) - c.unsqueeze(-2) for c in pos))  # torch.cdist's, computed directly
        return ((gap < radius) & not_self).any(-1)
    D = pos[0].shape[-1]
    if D == 1:  # a lone drone collides with none
        return torch.zeros_like(pos[0], dtype=torch.bool)
    near: list[Tensor | None] = [None] * D
    for i in range(D):
        for j in range(i + 1, D):
            close = soa.norm(tuple(c[..., i] - c[..., j] for c in pos)) < radius
            near[i] = close if near[i] is None else near[i] | close
            near[j] = close if near[j] is None else near[j] | close
    return torch.stack(near, -1)


# ----------------------------------------------------------------- row-major layout
def control_step(env: DroneVolleyballEnv) -> None:
    """One tick on ``[..., 3]`` rows: rate PID (``ctbr``) or rotor commands, motors, Newton-Euler, the drones'
    crashes (ground, net, another drone), then :func:`ball_substep`."""
    cfg, dt, model, d = env.cfg, env.phys_dt, env.model, env.drones
    if cfg.action == "ctbr":
        thrust = (env.cmd[..., 0] + 1.0) * 0.5 * env.params.max_thrust
        speed_cmd = env.rate_ctrl(thrust, env.cmd[..., 1:] * env.rate_scale, d.ang_vel, dt)
    else:
        speed_cmd = (env.cmd + 1.0) * 0.5 * env.params.rotor_speed_max
    env.rotor_speed = model.motor_step(env.rotor_speed, speed_cmd, dt)
    thrust, torque = model.body_wrench(env.rotor_speed)
    e_z = torch.zeros_like(d.vel)
    e_z[..., 2] = thrust
    force = quat_rotate(d.quat, e_z) + model.drag_force(d.quat, d.vel)
    drones = rigid_body_step(d, force, torque, model.mass, model.inertia, dt)
    ground = drones.pos[..., 2] < env.params.collision_radius * 0.5
    court = cfg.court
    at_net = (drones.pos[..., 0].abs() < env.params.collision_radius) & (drones.pos[..., 2] < court.net_height)
    at_net = at_net & (drones.pos[..., 1].abs() < court.antenna_y)
    # Drone-drone collisions: centres closer than one collision radius (both crash).
    gap = torch.cdist(drones.pos, drones.pos)
    eye = torch.eye(env.num_drones, dtype=torch.bool, device=env.device)
    collide = ((gap < env.params.collision_radius) & ~eye).any(-1)
    env.drone_crash = env.drone_crash | ground | at_net | collide
    env.drones = drones
    ball_substep(env, dt)


def ball_substep(env: DroneVolleyballEnv, dt: float) -> None:
    """The ball's flight over ``dt``, then at most one contact: the first paddle touching it, the net, the ground
    (the step's contact flags and the first landing point accumulate)."""
    cfg, bp = env.cfg, env.cfg.ball
    pos, vel = ball_flight_step(env.ball_pos, env.ball_vel, bp, dt)
    d = env.drones
    center, normal, pvel = paddle_surface(d.pos, d.quat, d.vel, d.ang_vel, env.paddle_offset)
    new_pos, new_vel, hit = ball_drone_contact(
        pos.unsqueeze(1), vel.unsqueeze(1), center, normal, cfg.paddle_radius, pvel, bp
    )  # [E, D, 3], [E, D]
    # At most one paddle per substep: the first drone in contact (contacts of two paddles at once are rare).
    first = hit.long().argmax(-1)
    any_hit = hit.any(-1)
    idx = torch.arange(env.num_envs, device=env.device)
    hit_one = torch.nn.functional.one_hot(first, env.num_drones).bool() & any_hit.unsqueeze(-1)
    pos = torch.where(any_hit.unsqueeze(-1), new_pos[idx, first], pos)
    vel = torch.where(any_hit.unsqueeze(-1), new_vel[idx, first], vel)
    # The net: a rectangle in the plane x = 0.
    court = cfg.court
    net_c, u, v = (x.expand_as(pos) for x in env._net_frame)
    point = closest_point_on_rect(pos, net_c, u, v, court.antenna_y, court.net_height / 2)
    pos, vel, net_hit = resolve_sphere_contact(pos, vel, point, torch.zeros_like(vel), bp.radius, bp.restitution_net)
    pos, vel, ground_hit = ground_contact_ball(pos, vel, bp)
    env.landed_at = torch.where((ground_hit & ~env.ball_ground).unsqueeze(-1), pos, env.landed_at)
    env.ball_pos, env.ball_vel = pos, vel
    env.hits = env.hits | hit_one
    env.ball_net = env.ball_net | net_hit
    env.ball_ground = env.ball_ground | ground_hit


# ----------------------------------------------------------------- component-major layout
def control_loop_components(env: DroneVolleyballEnv) -> None:
    """The ``decimation`` ticks of :func:`control_step` with one tensor per vector component
    (:mod:`sim.physics.components`, layout "components").

    The same rate PID, motors, Newton-Euler, crash checks and ball contacts as the rows path (to float32
    round-off): the state is split into ``[E, D]`` / ``[E]`` components once per control step and written back
    as rows at its end (drones, rotor speeds, the rate-PID memory, ball, landing point and the step's contact
    and crash flags), so observations, rules, rewards, resets and the rows path read the same attributes as
    ever. One rotation matrix per substep serves its paddles and the next substep's forces. No host sync:
    compiles and runs on cuda.
    """
    cfg, dt, const = env.cfg, env.phys_dt, env._loop
    pid, rotors = const.rate_pid, const.rotors
    body = soa.Body.from_rows(env.drones)
    speed = soa.split(env.rotor_speed)
    cmd = soa.split(env.cmd)
    ctbr = cfg.action == "ctbr"
    if ctbr:  # the commands hold over the control step: scaled once
        thrust_cmd = (cmd[0] + 1.0) * 0.5 * env.params.max_thrust
        rate_cmd = tuple(c * s for c, s in zip(cmd[1:], const.rate_scale, strict=True))
        mem = soa.RatePID.load(env.rate_ctrl)
    else:
        speed_cmd = tuple((c + 1.0) * 0.5 * env.params.rotor_speed_max for c in cmd)
    ball = (soa.split(env.ball_pos), soa.split(env.ball_vel), soa.split(env.landed_at))
    flags = (env.hits, env.ball_net, env.ball_ground)
    crash = env.drone_crash
    rot = soa.quat_to_matrix(body.quat)
    for _ in range(env.decimation):
        if ctbr:
            speed_cmd, mem = pid.step(mem, thrust_cmd, rate_cmd, body.ang_vel, dt)
        speed = rotors.motor_step(speed, speed_cmd, const.motor_decay)
        thrust, torque = rotors.body_wrench(speed)
        drag = soa.drag_force(rot, body.vel, rotors.drag_coeff)
        force = tuple(rot[k][2] * thrust + drag[k] for k in range(3))
        body = soa.rigid_body_step(body, force, torque, rotors.mass, rotors.inertia, dt)
        rot = soa.quat_to_matrix(body.quat)
        crash = crash | crashes_components(env, body.pos)
        ball, flags = ball_substep_components(env, ball, flags, body, rot, dt)

    env.drones = body.to_rows()
    env.rotor_speed = soa.join(speed)
    if ctbr:
        soa.RatePID.store(env.rate_ctrl, mem)
    env.drone_crash = crash
    env.ball_pos, env.ball_vel, env.landed_at = (soa.join(v) for v in ball)
    env.hits, env.ball_net, env.ball_ground = flags


def crashes_components(env: DroneVolleyballEnv, pos: soa.Vec3) -> Tensor:
    """``[E, D]``: drones on the ground, in the net or within one collision radius of another drone."""
    r, court = env.params.collision_radius, env.cfg.court
    x, y, z = pos
    ground = z < r * 0.5
    at_net = (x.abs() < r) & (z < court.net_height) & (y.abs() < court.antenna_y)
    return ground | at_net | drones_within(pos, r, env._loop.not_self, pairwise=torch.compiler.is_compiling())


def ball_substep_components(
    env: DroneVolleyballEnv,
    ball: tuple[soa.Vec3, soa.Vec3, soa.Vec3],
    flags: tuple[Tensor, Tensor, Tensor],
    body: soa.Body,
    rot: soa.Mat3,
    dt: float,
) -> tuple[tuple[soa.Vec3, soa.Vec3, soa.Vec3], tuple[Tensor, Tensor, Tensor]]:
    """:func:`ball_substep` on components: ``ball`` = (pos, vel, landed_at) ``[E]`` each, ``flags`` = (hits
    ``[E, D]``, net ``[E]``, ground ``[E]``) so far this step, ``body`` / ``rot`` the drones after this substep."""
    cfg, bp, const = env.cfg, env.cfg.ball, env._loop
    pos, vel, landed = ball
    hits, ball_net, ball_ground = flags
    pos, vel = soa.ball_flight_step(pos, vel, bp, dt)
    center, normal, pvel = soa.paddle_surface(body, rot, const.paddle_offset)
    new_pos, new_vel, hit = soa.ball_drone_contact(
        soa.unsqueeze(pos), soa.unsqueeze(vel), center, normal, cfg.paddle_radius, pvel, bp
    )  # [E, D] each
    # At most one paddle per substep: the first drone in contact.
    first = hit.long().argmax(-1, keepdim=True)  # [E, 1]
    any_hit = hit.any(-1)
    hit_one = (const.drone_ids == first) & any_hit.unsqueeze(-1)
    pos = tuple(torch.where(any_hit, n.gather(-1, first).squeeze(-1), p) for n, p in zip(new_pos, pos, strict=True))
    vel = tuple(torch.where(any_hit, n.gather(-1, first).squeeze(-1), v) for n, v in zip(new_vel, vel, strict=True))
    # The net: a rectangle in the plane x = 0.
    point = soa.closest_point_on_rect(pos, *const.net, *const.net_half)
    pos, vel, net_hit = soa.resolve_sphere_contact(pos, vel, point, (0.0, 0.0, 0.0), bp.radius, bp.restitution_net)
    pos, vel, ground_hit = soa.ground_contact_ball(pos, vel, bp)
    first_landing = ground_hit & ~ball_ground
    landed = tuple(torch.where(first_landing, p, q) for p, q in zip(pos, landed, strict=True))
    return (pos, vel, landed), (hits | hit_one, ball_net | net_hit, ball_ground | ground_hit)
