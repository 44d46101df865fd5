"""cable_load's reset of a few envs, split in two (``MultiAgentEnv._reset_idx``): :func:`reset_draws` (every random
number, eager, from the env's generator) and :func:`reset_envs` (pure tensor code, compiled with ``compile``; the C
reset, ``reset.c``, is held to it). A reset starts a level load with the team in static hover above it, a goal pose,
and, as configured, randomised parameters, a MAV fault and a disturbance on the load.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from sim.core.randomization import uniform
from sim.physics.quaternion import quat_from_euler
from sim.physics.rigid_body import GRAVITY
from sim.tasks.cable_load.geometry import box_inertia, hover_equilibrium

if TYPE_CHECKING:
    from sim.tasks.cable_load.env import CableLoadEnv


def reset_draws(env: CableLoadEnv, k: int) -> dict[str, Tensor]:
    """Every random number a reset of ``k`` envs uses, drawn from ``env.rng`` in a fixed order (each
    entry ``[k, ...]``; an entry is drawn only where its config needs it, so other configurations
    keep their random streams; the order is the one of the reset before its split)."""
    cfg, dev, rng, N = env.cfg, env.device, env.rng, env.n
    rnd = cfg.randomization
    draws: dict[str, Tensor] = {}
    if rnd.enabled:
        draws["load_mass"] = uniform(*rnd.load_mass, (k,), rng, dev)
        draws["load_inertia_scale"] = uniform(*rnd.load_inertia_scale, (k, 1), rng, dev)
        draws["cable_length_scale"] = uniform(*rnd.cable_length_scale, (k, N), rng, dev)
        draws["thrust_scale"] = uniform(*rnd.motor_thrust_scale, (k, N, 1), rng, dev)
        draws["tau_scale"] = uniform(*rnd.motor_tau_scale, (k, N, 1), rng, dev)
        lo, hi = rnd.action_delay_steps
        draws["delay"] = torch.randint(lo, hi + 1, (k,), generator=rng, device=dev)
        if rnd.mav_mass_scale[0] != rnd.mav_mass_scale[1]:
            draws["mav_mass_scale"] = uniform(*rnd.mav_mass_scale, (k, N, 1), rng, dev)
        if rnd.thrust_limit_scale[0] != rnd.thrust_limit_scale[1]:
            draws["thrust_limit_scale"] = uniform(*rnd.thrust_limit_scale, (k, N, 1), rng, dev)
    draws["start_xy"] = uniform(-cfg.start_xy_range, cfg.start_xy_range, (k, 2), rng, dev)
    draws["goal_xy"] = uniform(-cfg.goal_xy_range, cfg.goal_xy_range, (k, 2), rng, dev)
    draws["goal_z"] = uniform(*cfg.goal_z_range, (k,), rng, dev)
    draws["goal_rpy"] = uniform(-1.0, 1.0, (k, 3), rng, dev)
    if cfg.fault.enabled:
        draws["fault_hit"] = torch.rand(k, generator=rng, device=dev)
        draws["fault_time"] = uniform(*cfg.fault.time_range, (k,), rng, dev)
        draws["fault_agent"] = torch.randint(0, N, (k,), generator=rng, device=dev)
    if cfg.disturbance.enabled:
        draws["disturbance_dir"] = torch.randn(k, 3, generator=rng, device=dev)
        draws["disturbance_frac"] = uniform(0.0, cfg.disturbance.max_fraction, (k, 1), rng, dev)
        draws["disturbance_phase"] = uniform(0.0, 2 * math.pi, (k,), rng, dev)
    if cfg.obs_noise.enabled:
        frame_size = env.history.shape[-1]
        draws["obs_noise"] = torch.randn((k, N, frame_size), generator=rng, device=dev)
    return draws


def reset_envs(env: CableLoadEnv, env_ids: Tensor, draws: dict[str, Tensor]) -> None:
    """Reset the envs ``env_ids [k]`` from their ``draws`` (:func:`reset_draws`); pure tensor code."""
    cfg, dev = env.cfg, env.device
    k = env_ids.shape[0]
    rnd = cfg.randomization
    if rnd.enabled:
        mass = draws["load_mass"]
        env.load_inertia[env_ids] = box_inertia(mass, cfg.load_size) * draws["load_inertia_scale"]
        env.cable_length[env_ids] = cfg.cable_length * draws["cable_length_scale"]
        env.thrust_scale[env_ids] = draws["thrust_scale"]
        env.tau_scale[env_ids] = draws["tau_scale"]
        env.motor_decay[env_ids] = env.model.motor_decay(env.phys_dt, draws["tau_scale"])
        env.delay.set_delay(env_ids, draws["delay"])
        if "mav_mass_scale" in draws:
            scale = draws["mav_mass_scale"]
            env.mav_mass[env_ids] = env.model.mass * scale
            env.mav_inertia[env_ids] = env.model.inertia * scale
        if "thrust_limit_scale" in draws:
            env.rotor_speed_max[env_ids] = env.params.rotor_speed_max * draws["thrust_limit_scale"].sqrt()
    else:
        mass = torch.full((k,), cfg.load_mass, device=dev)
        env.load_inertia[env_ids] = box_inertia(mass, cfg.load_size)
    env.load_mass[env_ids] = mass

    # Start: a level load with the team in static hover above it.
    start = torch.cat((draws["start_xy"], torch.full((k, 1), cfg.start_height, device=dev)), dim=-1)
    mav_mass = env.mav_mass[env_ids]
    eq = hover_equilibrium(
        env.model,
        start,
        mass,
        env.cable_length[env_ids],
        env.attach,
        env.cable_angle,
        cfg.cable_stiffness,
        drone_mass=mav_mass.squeeze(-1),
    )
    env.start_pos[env_ids] = start
    env.load.pos[env_ids] = start
    env.load.quat[env_ids] = torch.tensor((1.0, 0.0, 0.0, 0.0), device=dev)
    env.load.vel[env_ids] = 0.0
    env.load.ang_vel[env_ids] = 0.0
    env.drones.pos[env_ids] = eq["drone_pos"]
    env.drones.quat[env_ids] = eq["drone_quat"]
    env.drones.vel[env_ids] = 0.0
    env.drones.ang_vel[env_ids] = 0.0
    # Rotor speeds that hold the hover with this vehicle's true thrust coefficient.
    env.rotor_speed[env_ids] = eq["rotor_speed"] / env.thrust_scale[env_ids].sqrt()
    env.cable_tension[env_ids] = eq["tension"]
    env.hover_tension[env_ids] = eq["tension"]
    env.formation_offset[env_ids] = eq["drone_pos"] - start.unsqueeze(1)  # the load starts level
    env.indi.reset(
        env_ids,
        env.drones.vel[env_ids],
        env.drones.ang_vel[env_ids],
        eq["drone_quat"],
        eq["thrust"],
        eq["torque"],
        external_force=eq["cable_force"],
        mass=mav_mass,
    )

    # Goal pose relative to the start.
    goal = start + torch.cat((draws["goal_xy"], draws["goal_z"].unsqueeze(-1)), dim=-1)
    tilt = math.radians(cfg.goal_tilt_deg)
    yaw = math.radians(cfg.goal_yaw_deg)
    rpy = draws["goal_rpy"] * torch.tensor((tilt, tilt, yaw), device=dev)
    env.goal_pos[env_ids] = goal
    env.goal_quat[env_ids] = quat_from_euler(rpy[:, 0], rpy[:, 1], rpy[:, 2])

    # Fault: one MAV loses thrust at a random time.
    env.time[env_ids] = 0.0
    env.rotor_alive[env_ids] = 1.0
    env.failed[env_ids] = False
    env.fault_time[env_ids] = math.inf
    if cfg.fault.enabled:
        hit = draws["fault_hit"] < cfg.fault.probability
        when = draws["fault_time"]
        env.fault_time[env_ids] = torch.where(hit, when, torch.full_like(when, math.inf))
        env.fault_agent[env_ids] = draws["fault_agent"]
    if cfg.disturbance.enabled:
        direction = draws["disturbance_dir"]
        direction = direction / torch.linalg.vector_norm(direction, dim=-1, keepdim=True).clamp(min=1e-9)
        magnitude = draws["disturbance_frac"] * mass.unsqueeze(-1) * GRAVITY
        env.disturbance_amp[env_ids] = direction * magnitude
        env.disturbance_phase[env_ids] = draws["disturbance_phase"]

    # Policy interface memory.
    env.delay.reset(env_ids)
    env.last_action[env_ids] = 0.0
    env.prev_action[env_ids] = 0.0
    env.cmd[env_ids] = 0.0
    env.attach_err_int[env_ids] = 0.0
    frame = env._frame(env_ids)
    if cfg.obs_noise.enabled:
        frame = frame + draws["obs_noise"] * env._frame_noise_std
    # In place: CableLoadEnv._reset_idx made sure no observation handed out is a view of this buffer.
    env.history.index_copy_(0, env_ids, frame.unsqueeze(2).expand(-1, -1, cfg.history_len, -1))
