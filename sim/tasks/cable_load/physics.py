"""cable_load's torch physics: the control loop's tick (INDI, motors, cables, Newton-Euler for MAVs and load, ground
contact), row-major or component-major (:func:`sim.physics.components.choose_layout`). The reference the C loop
(``control_loop.c``) is held to.

Each function reads and replaces the state tensors of a :class:`~sim.tasks.cable_load.env.CableLoadEnv` (never
writing into them: observations handed out may be views of them). Shapes: E envs, N MAVs.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from sim.physics import components as soa
from sim.physics.cable import cable_tension
from sim.physics.contact import ground_contact
from sim.physics.quaternion import quat_rotate
from sim.physics.rigid_body import RigidBodyState, point_velocity, rigid_body_step, wrench_at_point

if TYPE_CHECKING:
    from sim.tasks.cable_load.env import CableLoadEnv


def control_step(env: CableLoadEnv) -> None:
    """One control tick: INDI, the rotor limits and faults, then ``physics_substeps`` physics steps."""
    if env.layout == "components":
        control_step_components(env)
        return
    d = env.drones
    speed_cmd = env.indi(env.cmd[..., :3], env.cmd[..., 3:], d.quat, d.vel, d.ang_vel, env.rotor_speed)
    failed = failed_mavs(env)
    env.failed = failed
    env.rotor_alive = (~failed).float().unsqueeze(-1)
    speed_cmd = torch.minimum(speed_cmd, env.rotor_speed_max) * env.rotor_alive
    for _ in range(env.cfg.physics_substeps):
        physics_step(env, speed_cmd)
    env.time = env.time + env.ctrl_dt


def failed_mavs(env: CableLoadEnv) -> Tensor:
    """``[E, N]`` bool: the MAV whose rotors have stopped by now (none before its episode's fault time)."""
    return (env.time >= env.fault_time).unsqueeze(-1) & (
        torch.arange(env.n, device=env.device) == env.fault_agent.unsqueeze(-1)
    )


def physics_step(env: CableLoadEnv, speed_cmd: Tensor) -> None:
    """Motors, cables, Newton-Euler for MAVs and load, ground contact. One ``phys_dt``."""
    cfg, dt, model = env.cfg, env.phys_dt, env.model
    env.rotor_speed = model.motor_step(env.rotor_speed, speed_cmd, dt, decay=env.motor_decay)
    thrust, rotor_torque = model.body_wrench(env.rotor_speed, env.thrust_scale)

    d, ld = env.drones, env.load
    load_b = load_per_mav(env)
    p_d, v_d = point_velocity(d, model.cable_attach)  # [E, N, 3]
    p_l, v_l = point_velocity(load_b, env.attach)  # [E, N, 3]
    tension, direction, _ = cable_tension(p_d, v_d, p_l, v_l, env.cable_length, cfg.cable_stiffness, cfg.cable_damping)
    if cfg.fault.enabled and cfg.fault.cable == "released":
        tension = tension * (~env.failed)  # a lost MAV's cable has let go of the load
    env.cable_tension = tension
    f_cable = direction * tension.unsqueeze(-1)  # on each MAV, toward the load

    e_z = torch.zeros_like(d.vel)
    e_z[..., 2] = thrust
    force_d = quat_rotate(d.quat, e_z) + model.drag_force(d.quat, d.vel) + f_cable
    torque_d = rotor_torque + wrench_at_point(d, model.cable_attach, f_cable)
    force_l = -f_cable.sum(1)
    if cfg.disturbance.enabled:
        force_l = force_l + disturbance_force(env)
    torque_l = wrench_at_point(load_b, env.attach, -f_cable).sum(1)

    drones = rigid_body_step(d, force_d, torque_d, env.mav_mass, env.mav_inertia, dt)
    load = rigid_body_step(ld, force_l, torque_l, env.load_mass.unsqueeze(-1), env.load_inertia, dt)
    env.drones, _ = ground_contact(drones, radius=env.mav_contact_radius)
    env.load, _ = ground_contact(load, radius=cfg.load_size[2] / 2)


# ----------------------------------------------------------------- step, component-major layout
def control_step_components(env: CableLoadEnv) -> None:
    """:func:`control_step` with one tensor per vector component (:mod:`sim.physics.components`).

    The same INDI tick and physics substeps as the rows path (to float32 round-off): the state is split
    into ``[E, N]`` / ``[E]`` components once here, and written back as rows at the end (drones, load,
    rotor speeds, cable tensions, fault flags, time and the INDI memory), so observations, rewards,
    resets and the rows path read the same attributes as ever. No host sync: compiles and runs on cuda.
    """
    ctrl = env.indi_components
    d, ld = env.drones, env.load
    drones, load = soa.Body.from_rows(d), soa.Body.from_rows(ld)
    speed = soa.split(env.rotor_speed)
    cmd = soa.split(env.cmd)
    rot = soa.quat_to_matrix(drones.quat)  # serves the INDI tick and the first substep
    speed_cmd, mem = ctrl.step(soa.INDI.load(env.indi), cmd[:3], cmd[3:], rot, drones.vel, drones.ang_vel, speed)
    failed = failed_mavs(env)
    alive = (~failed).float()  # [E, N]
    speed_max = env.rotor_speed_max[..., 0]
    speed_cmd = tuple(torch.minimum(c, speed_max) * alive for c in speed_cmd)
    # Per-episode parameters as [E, N] / [E] components (views where the last axis is a singleton).
    params = {
        "decay": env.motor_decay[..., 0],
        "thrust_scale": env.thrust_scale[..., 0],
        "mav_inertia": soa.split(env.mav_inertia),
        "mav_mass": env.mav_mass[..., 0],
        "load_inertia": soa.split(env.load_inertia),
        "attach": soa.split(env.attach),  # [N] each, broadcast over envs
        "disturbance": soa.split(disturbance_force(env)) if env.cfg.disturbance.enabled else None,
        "released": failed if env.cfg.fault.enabled and env.cfg.fault.cable == "released" else None,
    }
    tension = env.cable_tension
    for i in range(env.cfg.physics_substeps):
        if i > 0:
            rot = soa.quat_to_matrix(drones.quat)
        drones, load, speed, tension = physics_step_components(env, drones, load, speed, speed_cmd, rot, params)

    soa.INDI.store(env.indi, mem, prev_vel=d.vel, prev_ang_vel=d.ang_vel)  # the rows this tick measured
    env.drones, env.load = drones.to_rows(), load.to_rows()
    env.rotor_speed = soa.join(speed)
    env.cable_tension = tension
    env.failed = failed
    env.rotor_alive = alive.unsqueeze(-1)
    env.time = env.time + env.ctrl_dt


def physics_step_components(
    env: CableLoadEnv,
    drones: soa.Body,
    load: soa.Body,
    speed: tuple[Tensor, ...],
    speed_cmd: tuple[Tensor, ...],
    rot: soa.Mat3,
    params: dict,
) -> tuple[soa.Body, soa.Body, tuple[Tensor, ...], Tensor]:
    """:func:`physics_step` on components: MAVs ``[E, N]``, load ``[E]``, ``rot`` the MAVs' rotation matrix
    now. Returns the new MAVs, load, rotor speeds and cable tensions ``[E, N]``."""
    cfg, dt, rotors = env.cfg, env.phys_dt, env.indi_components.rotors
    speed = rotors.motor_step(speed, speed_cmd, params["decay"])
    thrust, rotor_torque = rotors.body_wrench(speed, params["thrust_scale"])

    load_b = load.unsqueeze(-1)  # [E, 1]: broadcasts over the MAVs
    rot_l = soa.quat_to_matrix(load.quat)  # [E]
    rot_lb = tuple(tuple(c.unsqueeze(-1) for c in row) for row in rot_l)
    p_d, v_d = soa.point_velocity(drones, rot, rotors.cable_attach)
    p_l, v_l = soa.point_velocity(load_b, rot_lb, params["attach"])
    tension, direction, _ = soa.cable_tension(
        p_d, v_d, p_l, v_l, env.cable_length, cfg.cable_stiffness, cfg.cable_damping
    )
    if params["released"] is not None:
        tension = tension * (~params["released"])  # a lost MAV's cable has let go of the load
    f_cable = tuple(c * tension for c in direction)  # on each MAV, toward the load

    drag = soa.drag_force(rot, drones.vel, rotors.drag_coeff)
    force_d = tuple(rot[k][2] * thrust + drag[k] + f_cable[k] for k in range(3))
    torque_d = soa.add(rotor_torque, soa.wrench_at_point(rot, rotors.cable_attach, f_cable))
    # On the load: -f_cable at each attachment point. Negating after the sums is exact (sign-symmetric
    # rounding) and saves negating each [E, N] component.
    force_l = tuple(-f.sum(-1) for f in f_cable)
    if params["disturbance"] is not None:
        force_l = tuple(f + w for f, w in zip(force_l, params["disturbance"], strict=True))
    torque_l = tuple(-t.sum(-1) for t in soa.wrench_at_point(rot_lb, params["attach"], f_cable))

    drones = soa.rigid_body_step(drones, force_d, torque_d, params["mav_mass"], params["mav_inertia"], dt)
    load = soa.rigid_body_step(load, force_l, torque_l, env.load_mass, params["load_inertia"], dt)
    drones = soa.ground_contact(drones, radius=env.mav_contact_radius)
    load = soa.ground_contact(load, radius=cfg.load_size[2] / 2)
    return drones, load, speed, tension


def disturbance_force(env: CableLoadEnv) -> Tensor:
    """The external force on the load now, world frame, ``[E, 3]`` (N): constant, or varying slowly
    between 0 and its drawn amplitude (``disturbance.period_s``)."""
    period = env.cfg.disturbance.period_s
    if period <= 0:
        return env.disturbance_amp
    wave = 0.5 * (1.0 + torch.sin(2 * math.pi * env.time / period + env.disturbance_phase))
    return env.disturbance_amp * wave.unsqueeze(-1)


def load_per_mav(env: CableLoadEnv) -> RigidBodyState:
    """The load state viewed with a singleton MAV axis, ``[E, 1, ...]``, to broadcast over MAVs."""
    ld = env.load
    return RigidBodyState(ld.pos.unsqueeze(1), ld.quat.unsqueeze(1), ld.vel.unsqueeze(1), ld.ang_vel.unsqueeze(1))
