"""Cross-checks of the torch physics against MuJoCo on models exported by ``sim.mujoco.mjcf``.

MuJoCo integrates in float64 with the ``Euler`` (semi-implicit) integrator, the same scheme as
``rigid_body_step``; our side runs in float32. With the same step size the two trajectories may
differ only by accumulated float32 round-off, so the tolerances are a few times the measured
differences (quoted at each assertion; ``pytest -v`` prints them all).

MuJoCo free-joint conventions: ``qpos = [pos (world), quat (wxyz, body -> world)]`` and
``qvel = [linear velocity (world), angular velocity (body frame)]``, the same as ours.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import sim
from sim.mujoco.mjcf import box_load_body, cable_load_model, cable_tendon, free_multirotor_model, mjcf_document
from sim.physics.cable import cable_tension
from sim.physics.multirotor import MultirotorModel
from sim.physics.quaternion import quat_rotate
from sim.physics.rigid_body import GRAVITY, RigidBodyState, point_velocity, rigid_body_step, wrench_at_point
from sim.tasks.cable_load.config import CableLoadCfg
from sim.tasks.cable_load.geometry import box_inertia, hover_equilibrium, load_attach_points

mujoco = pytest.importorskip("mujoco")

CFG = CableLoadCfg()
PHYS_DT = CFG.control_dt / CFG.decimation / CFG.physics_substeps  # the task's physics step, 1/300 s
# Trajectory comparisons run at the task's step and at half of it (twice the steps, so twice the round-off).
STEPS = pytest.mark.parametrize("dt", [PHYS_DT, PHYS_DT / 2], ids=["task_dt", "half_dt"])


def _f32(x) -> torch.Tensor:
    return torch.tensor(np.asarray(x), dtype=torch.float32)


def _quat_to_mat(q) -> np.ndarray:
    out = np.zeros(9)
    mujoco.mju_quat2Mat(out, np.asarray(q, dtype=np.float64))
    return out.reshape(3, 3)


def _state_errors(st: RigidBodyState, data, quat_angle64, adr: int = 0, vadr: int = 0) -> np.ndarray:
    """|pos|, attitude angle, |vel|, |ang_vel| differences between our body and a MuJoCo free joint."""
    qpos, qvel = data.qpos[adr : adr + 7], data.qvel[vadr : vadr + 6]
    return np.array(
        (
            np.linalg.norm(st.pos.numpy() - qpos[:3]),
            quat_angle64(st.quat.numpy(), qpos[3:7]),
            np.linalg.norm(st.vel.numpy() - qvel[:3]),
            np.linalg.norm(st.ang_vel.numpy() - qvel[3:6]),
        )
    )


# --------------------------------------------------------------------------- 1. free multirotor
# Per-rotor speed commands as multiples of the hover speed, from the given time on. Rotors sit at
# 45, 135, 225, 315 deg from body x, spins (-1, 1, -1, 1): raising rotors 2, 3 (y < 0) gives a
# negative roll torque (tau_x = sum y_i T_i), raising the spin +1 pair (1, 3) a negative yaw torque.
ROTOR_PROGRAM = (
    (0.0, (1.06, 1.06, 1.06, 1.06)),  # climb
    (0.4, (1.00, 1.00, 1.06, 1.06)),  # roll pulse
    (0.6, (1.06, 1.06, 1.00, 1.00)),  # counter-roll pulse
    (0.8, (1.02, 1.02, 1.02, 1.02)),
    (1.0, (1.00, 1.07, 1.00, 1.07)),  # yaw
    (1.6, (1.10, 1.04, 0.99, 1.05)),  # everything at once
)


def _rotor_command(t: float, hover: float) -> torch.Tensor:
    factors = [f for t0, f in ROTOR_PROGRAM if t >= t0][-1]
    return torch.tensor(factors) * hover


@STEPS
def test_free_multirotor_matches_mujoco(dt, falcon: MultirotorModel, quat_angle64, check):
    """2 s of open-loop flight (climb, roll, yaw) under a rotor-speed program: torch vs MuJoCo.

    Both sides apply the same per-rotor thrusts k_f Omega^2 (Omega from our motor model, whose lag
    is checked in closed form elsewhere) and the same body-frame linear drag, each computed from its
    own current state. Exercises thrust direction, allocation (incl. the reaction-torque gear),
    gyroscopic torque and quaternion integration.
    """
    p = falcon.params
    mj = mujoco.MjModel.from_xml_string(free_multirotor_model(p, dt))
    data = mujoco.MjData(mj)
    body = mj.body("drone").id
    start = np.array((0.0, 0.0, 1.0))
    data.qpos[:3] = start
    data.qpos[3:7] = (1.0, 0.0, 0.0, 0.0)
    st = RigidBodyState(_f32(start), _f32((1.0, 0.0, 0.0, 0.0)), torch.zeros(3), torch.zeros(3))
    hover = falcon.hover_speed(falcon.mass * GRAVITY)
    speed = torch.full((4,), hover)
    drag = np.array(p.drag_coeff)
    errors, quats, positions = [], [], []
    for k in range(round(2.0 / dt)):
        speed = falcon.motor_step(speed, _rotor_command(k * dt, hover), dt)
        thrust, torque = falcon.body_wrench(speed)
        force = quat_rotate(st.quat, torch.stack((torch.zeros(()), torch.zeros(()), thrust)))
        st = rigid_body_step(st, force + falcon.drag_force(st.quat, st.vel), torque, falcon.mass, falcon.inertia, dt)

        data.ctrl[:] = falcon.rotor_thrusts(speed).numpy()
        # Drag from MuJoCo's own state (qpos, not xmat: xmat lags one step behind after mj_step).
        rot = _quat_to_mat(data.qpos[3:7])
        data.xfrc_applied[body, :3] = -rot @ (drag * (rot.T @ data.qvel[:3]))
        mujoco.mj_step(mj, data)
        errors.append(_state_errors(st, data, quat_angle64))
        quats.append(data.qpos[3:7].copy())
        positions.append(data.qpos[:3].copy())
    err = np.max(errors, axis=0)
    # The manoeuvre is not trivial: it travels > 0.5 m, tilts by > 20 deg and turns by > 10 deg of yaw.
    quats = np.array(quats)
    tilt = np.degrees(np.arccos(np.clip(1 - 2 * (quats[:, 1] ** 2 + quats[:, 2] ** 2), -1, 1)))
    yaw = np.degrees(
        np.arctan2(
            2 * (quats[:, 0] * quats[:, 3] + quats[:, 1] * quats[:, 2]), 1 - 2 * (quats[:, 2] ** 2 + quats[:, 3] ** 2)
        )
    )
    travel = np.linalg.norm(np.array(positions) - start, axis=-1).max()
    assert travel > 0.5 and tilt.max() > 20.0 and np.abs(yaw).max() > 10.0
    # Measured (float32 vs float64) at the task step | half of it: 9.3e-6 | 1.7e-5 m, 2.4e-6 | 6.8e-6 rad,
    # 1.6e-5 | 4.0e-5 m/s, 4.1e-6 | 1.1e-5 rad/s (the 0.6 kg Falcon turns fast: larger rates, same relative error).
    check("position (m)", err[0], 1e-4)
    check("attitude (rad)", err[1], 2e-5)
    check("velocity (m/s)", err[2], 1e-4)
    check("body rate (rad/s)", err[3], 3e-5)


# --------------------------------------------------------------------------- 2. cable pendulum
LOAD_MASS, LOAD_SIZE = CFG.load_mass, CFG.load_size
K, C, L = CFG.cable_stiffness, CFG.cable_damping, CFG.cable_length


def _pendulum_setup(kind: str):
    """Anchors ``[3, 3]`` and the released load state ``(pos, quat, vel, ang_vel_body)``, float64.

    ``parallel``: vertical, parallel cables to three anchors above the attachment points; the load
    is swung 25 deg as a translation (all cables keep their length), with a 1 rad/s yaw spin on top.
    ``pivot``: the three cables meet at one anchor; load and cables are turned 25 deg about it as a
    rigid body, with 0.8 rad/s of spin about the vertical through the pivot.
    """
    attach = load_attach_points(3, CFG.load_attach_radius, LOAD_SIZE[2]).double().numpy()
    swing = math.radians(25.0)
    axis = np.array((1.0, 0.4, 0.0)) / np.linalg.norm((1.0, 0.4, 0.0))
    q_swing = np.concatenate(([math.cos(swing / 2)], math.sin(swing / 2) * axis))
    rot = _quat_to_mat(q_swing)
    if kind == "parallel":
        stretched = L + LOAD_MASS * GRAVITY / 3 / K
        rest_pos = np.array((0.0, 0.0, 1.0))
        anchors = rest_pos + attach + (0.0, 0.0, stretched)
        pos = rest_pos + (rot - np.eye(3)) @ (0.0, 0.0, -stretched)
        return anchors, pos, np.array((1.0, 0.0, 0.0, 0.0)), np.zeros(3), np.array((0.0, 0.0, 1.0))
    # Common pivot: cable angle from vertical theta with T = m g / (3 cos theta), |cable| = L + T / k.
    r = CFG.load_attach_radius
    length = L
    for _ in range(50):
        cos = math.sqrt(length**2 - r**2) / length
        length = L + LOAD_MASS * GRAVITY / (3 * cos * K)
    pivot = np.array((0.0, 0.0, 2.0))
    hang = pivot - (0.0, 0.0, math.sqrt(length**2 - r**2) + LOAD_SIZE[2] / 2)
    pos = pivot + rot @ (hang - pivot)
    spin = np.array((0.0, 0.0, 0.8))
    return np.tile(pivot, (3, 1)), pos, q_swing, np.cross(spin, pos - pivot), rot.T @ spin


@STEPS
@pytest.mark.parametrize("kind", ["parallel", "pivot"])
def test_cable_pendulum_matches_mujoco(kind, dt, quat_angle64, check):
    """A box load on 3 tension-only cables from fixed anchors swings for 3 s: torch vs MuJoCo tendons."""
    anchors, pos, quat, vel, ang_vel = _pendulum_setup(kind)
    attach = load_attach_points(3, CFG.load_attach_radius, LOAD_SIZE[2])
    inertia = box_inertia(torch.tensor(LOAD_MASS), LOAD_SIZE)
    sites = "\n".join(f'<site name="anchor{i}" pos="{a[0]:.9g} {a[1]:.9g} {a[2]:.9g}"/>' for i, a in enumerate(anchors))
    tendons = "\n".join(cable_tendon(f"cable{i}", f"anchor{i}", f"load_attach{i}", L, K, C) for i in range(3))
    body = box_load_body("load", LOAD_MASS, LOAD_SIZE, attach.tolist(), pos=pos, quat=quat, inertia=inertia.tolist())
    mj = mujoco.MjModel.from_xml_string(
        mjcf_document(body, "", tendons, timestep=dt, floor=False, extra_world_xml=sites)
    )
    data = mujoco.MjData(mj)
    data.qvel[:3], data.qvel[3:6] = vel, ang_vel
    mujoco.mj_forward(mj, data)
    # Start from MuJoCo's (float64-parsed) state so both sides begin identically up to float32 rounding.
    st = RigidBodyState(_f32(data.qpos[:3]), _f32(data.qpos[3:7]), _f32(data.qvel[:3]), _f32(data.qvel[3:6]))
    anchor = _f32(mj.site_pos[:3])
    errors, ten_err, ten_min, mj_stretch_min, positions = [], [], [], [], []
    for _ in range(round(3.0 / dt)):
        lb = RigidBodyState(st.pos.unsqueeze(0), st.quat.unsqueeze(0), st.vel.unsqueeze(0), st.ang_vel.unsqueeze(0))
        p_attach, v_attach = point_velocity(lb, attach)
        tension, direction, _ = cable_tension(anchor, torch.zeros(3, 3), p_attach, v_attach, L, K, C)
        force = -direction * tension.unsqueeze(-1)  # pulls the load toward the anchors
        torque = wrench_at_point(lb, attach, force).sum(0)
        st = rigid_body_step(st, force.sum(0), torque, LOAD_MASS, inertia, dt)
        mujoco.mj_step(mj, data)
        # After mj_step, ten_length/ten_velocity belong to the state the step started from, as ours.
        mj_tension = K * (data.ten_length - L) + C * data.ten_velocity
        ten_err.append(np.abs(mj_tension - tension.numpy()).max())
        ten_min.append(tension.min().item())
        mj_stretch_min.append((data.ten_length - L).min())
        errors.append(_state_errors(st, data, quat_angle64))
        positions.append(data.qpos[:3].copy())
    err = np.max(errors, axis=0)
    positions = np.array(positions)
    # It really swings (> 0.3 m of travel) and the cables stay taut on both sides throughout.
    assert np.ptp(positions[:, :2], axis=0).max() > 0.3
    assert min(ten_min) > 1.0 and min(mj_stretch_min) > 1e-4
    # Measured (both setups, both steps): <= 8e-7 m, 2.8e-5 rad, 2.8e-5 m/s, 1.1e-4 rad/s, 1.5e-3 N.
    # Stiff cables (k = 3000 N/m) amplify float32 position rounding (~1e-7 m -> 3e-4 N) every step.
    check("load position (m)", err[0], 2e-5)
    check("load attitude (rad)", err[1], 2e-4)
    check("load velocity (m/s)", err[2], 3e-4)
    check("load body rate (rad/s)", err[3], 1e-3)
    check("cable tension (N)", max(ten_err), 2e-2)


# --------------------------------------------------------------------------- 3. static team tensions
def _cable_geometry(drones: RigidBodyState, load: RigidBodyState, drone_attach, load_attach) -> torch.Tensor:
    """Cable vectors load attachment -> MAV attachment, ``[..., N, 3]``."""
    lb = RigidBodyState(*(x.unsqueeze(-2) for x in (load.pos, load.quat, load.vel, load.ang_vel)))
    p_d, _ = point_velocity(drones, drone_attach)
    p_l, _ = point_velocity(lb, load_attach)
    return p_d - p_l


@pytest.mark.parametrize("num_mavs", [2, 3, 4, 6])
def test_hover_team_static_tensions(num_mavs, falcon, check):
    """Hovering team: each tension is m g / (N cos theta) with theta measured, in torch and in MuJoCo."""
    # --- torch env, INDI holding hover with zero actions for 2 s.
    env = sim.make(
        "cable_load",
        num_envs=1,
        device="cpu",
        seed=0,
        num_mavs=num_mavs,
        randomization={"enabled": False},
        obs_noise={"enabled": False},
    )
    actions = env.zero_actions()
    worst = 0.0
    for _ in range(200):
        _, _, terminated, truncated, _ = env.step(actions)
        assert not (terminated | truncated).any()
        cable = _cable_geometry(env.drones, env.load, env.model.cable_attach, env.attach)
        cos = cable[..., 2] / cable.norm(dim=-1)
        expected = env.load_mass.unsqueeze(-1) * GRAVITY / (num_mavs * cos)
        worst = max(worst, ((env.cable_tension - expected).abs() / expected).max().item())
    assert (cos > math.cos(math.radians(CFG.cable_angle_deg + 1))).all()  # cables near their 30 deg
    # Measured: 9e-5 .. 2.1e-4 relative (float32 resolution of a ~2 mm stretch of 1 m cables).
    check("torch: max relative tension error over 2 s", worst, 0.02)

    # --- MuJoCo: the same equilibrium, tendon spring forces at t = 0 and under 0.5 s of held thrust.
    attach = load_attach_points(num_mavs, CFG.load_attach_radius, CFG.load_size[2])
    load_pos = torch.tensor(((0.0, 0.0, CFG.start_height),))
    mass = torch.tensor((CFG.load_mass,))
    rest = torch.full((1, num_mavs), CFG.cable_length)
    eq = hover_equilibrium(falcon, load_pos, mass, rest, attach, math.radians(CFG.cable_angle_deg), K)
    xml = cable_load_model(
        falcon.params,
        num_mavs,
        CFG.load_mass,
        CFG.load_size,
        attach.tolist(),
        rest[0].tolist(),
        K,
        C,
        PHYS_DT,
        drone_pos=eq["drone_pos"][0].tolist(),
        drone_quat=eq["drone_quat"][0].tolist(),
        load_pos=load_pos[0].tolist(),
    )
    mj = mujoco.MjModel.from_xml_string(xml)
    data = mujoco.MjData(mj)
    mujoco.mj_forward(mj, data)
    mj_tension = K * (data.ten_length - CFG.cable_length)
    # Our tension of the same state (the env at reset computes it the same way).
    drones = RigidBodyState(eq["drone_pos"], eq["drone_quat"], torch.zeros(1, num_mavs, 3), torch.zeros(1, num_mavs, 3))
    p_d, v_d = point_velocity(drones, falcon.cable_attach)
    p_l = load_pos.unsqueeze(1) + attach
    ours, _, _ = cable_tension(p_d, v_d, p_l, torch.zeros_like(p_l), rest, K, C)
    # Measured: 4e-5 .. 1e-4 relative (MuJoCo reads the float32 equilibrium printed to 9 digits);
    # held hover: 4e-5 .. 9e-5 relative, load drift 4e-7 m.
    check("MuJoCo vs torch tension at t = 0 (relative)", np.abs(mj_tension / ours[0].numpy() - 1).max(), 0.02)
    # Hold the equilibrium rotor thrusts: MuJoCo's team stays put and its tensions stay at m g / (N cos theta).
    data.ctrl[:] = falcon.rotor_thrusts(eq["rotor_speed"][0]).flatten().numpy()
    site_d = [mj.site(f"mav{i}_attach").id for i in range(num_mavs)]
    site_l = [mj.site(f"load_attach{i}").id for i in range(num_mavs)]
    worst_mj = 0.0
    for _ in range(round(0.5 / PHYS_DT)):
        mujoco.mj_step(mj, data)
        mujoco.mj_forward(mj, data)
        vec = data.site_xpos[site_d] - data.site_xpos[site_l]
        expected = CFG.load_mass * GRAVITY * np.linalg.norm(vec, axis=-1) / (num_mavs * vec[:, 2])
        actual = K * (data.ten_length - CFG.cable_length) + C * data.ten_velocity
        worst_mj = max(worst_mj, np.abs(actual / expected - 1).max())
    check("MuJoCo held hover: max relative tension error over 0.5 s", worst_mj, 0.02)
    check(
        "MuJoCo held hover: load drift after 0.5 s (m)",
        np.linalg.norm(data.xpos[mj.body("load").id] - load_pos[0].numpy()),
        1e-3,
    )
