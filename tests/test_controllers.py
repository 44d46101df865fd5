"""Closed-loop checks of the low-level controllers on a free falcon, and the cable_load hover hold.

Timing as in cable_load's config: controller at 300 Hz, physics at the task's substeps per tick.
"""

from __future__ import annotations

import math

import numpy as np
import torch

import sim
from sim.physics.controllers import INDIController, RatePIDController
from sim.physics.multirotor import MultirotorModel
from sim.physics.quaternion import quat_rotate, quat_yaw
from sim.physics.rigid_body import GRAVITY, RigidBodyState, rigid_body_step
from sim.tasks.cable_load.config import CableLoadCfg

CFG = CableLoadCfg()
CTRL_DT = CFG.control_dt / CFG.decimation  # 1/300 s
SUBSTEPS = CFG.physics_substeps
PHYS_DT = CTRL_DT / SUBSTEPS


class FreeFlight:
    """A batch of free multirotors: motor lag, rotor wrench, drag, an optional external world force."""

    def __init__(self, model: MultirotorModel, batch: int, ang_vel: torch.Tensor | None = None) -> None:
        self.model = model
        self.state = RigidBodyState(
            torch.tensor((0.0, 0.0, 1.0)).repeat(batch, 1),
            torch.tensor((1.0, 0.0, 0.0, 0.0)).repeat(batch, 1),
            torch.zeros(batch, 3),
            torch.zeros(batch, 3) if ang_vel is None else ang_vel.clone(),
        )
        self.hover = model.hover_speed(model.mass * GRAVITY)
        self.speed = torch.full((batch, model.params.num_rotors), self.hover)

    def control_tick(self, speed_cmd: torch.Tensor, external_force: torch.Tensor | None = None) -> None:
        m = self.model
        for _ in range(SUBSTEPS):
            self.speed = m.motor_step(self.speed, speed_cmd, PHYS_DT)
            thrust, torque = m.body_wrench(self.speed)
            st = self.state
            force = quat_rotate(st.quat, torch.nn.functional.pad(thrust.unsqueeze(-1), (2, 0)))
            force = force + m.drag_force(st.quat, st.vel)
            if external_force is not None:
                force = force + external_force
            self.state = rigid_body_step(st, force, torque, m.mass, m.inertia, PHYS_DT)


# --------------------------------------------------------------------------- rate PID
def test_rate_pid_roll_rate_step(falcon, check):
    """A 1 rad/s roll-rate step is reached within 10 % in < 0.2 s, with < 15 % overshoot, no cross-talk.

    Row 0: the step. Row 1: thrust = weight, zero rates -> hovers. Row 2: zero rate command from an
    initial tumble of (0.5, -0.4, 0.3) rad/s -> the rates are damped out.
    """
    flight = FreeFlight(falcon, 3, ang_vel=torch.tensor(((0.0, 0.0, 0.0), (0.0, 0.0, 0.0), (0.5, -0.4, 0.3))))
    pid = RatePIDController(falcon, (3,))
    rate_cmd = torch.tensor(((1.0, 0.0, 0.0), (0.0, 0.0, 0.0), (0.0, 0.0, 0.0)))
    thrust = torch.full((3,), falcon.mass * GRAVITY)
    rates, vz = [], []
    for _ in range(round(0.5 / CTRL_DT)):
        flight.control_tick(pid(thrust, rate_cmd, flight.state.ang_vel, CTRL_DT))
        rates.append(flight.state.ang_vel.clone())
        vz.append(flight.state.vel[1, 2].item())
    rates = torch.stack(rates).numpy()  # [T, 3, 3]
    t = np.arange(1, len(rates) + 1) * CTRL_DT
    roll = rates[:, 0, 0]
    outside = np.nonzero(np.abs(roll - 1.0) > 0.1)[0]
    settle = t[outside[-1] + 1]  # from here on |p - 1| <= 0.1 up to 0.5 s
    # Measured: within 10 % from 0.097 s on, peak 1.048 rad/s, cross-axis rates < 2e-6 rad/s.
    check("roll rate: time to stay within 10 % (s)", settle, 0.2)
    check("roll rate: overshoot (fraction)", roll.max() - 1.0, 0.15)
    check("roll step: pitch/yaw cross-talk (rad/s)", np.abs(rates[:, 0, 1:]).max(), 0.02)
    # Hover at zero rates: float32 round-off only (measured 1e-6 m/s).
    check("thrust = weight: max |v_z| over 0.5 s (m/s)", max(abs(v) for v in vz), 1e-3)
    check("thrust = weight: max body rate (rad/s)", np.abs(rates[:, 1]).max(), 1e-4)
    # Tumble damped: rates well below 5 % of the initial 0.7 rad/s after 0.3 s.
    check("tumble: max body rate after 0.3 s (rad/s)", np.abs(rates[t >= 0.3, 2]).max(), 0.03)


# --------------------------------------------------------------------------- INDI
def _indi_run(falcon, acc_cmd, external_force, seconds: float):
    """Fly ``len(acc_cmd)`` falcons under INDI from a level hover; velocities ``[T, B, 3]`` and the flight."""
    batch = acc_cmd.shape[0]
    flight = FreeFlight(falcon, batch)
    indi = INDIController(falcon, (batch,), CTRL_DT)
    st = flight.state
    # Initialised at the hover wrench; the controller is NOT told about the external force.
    indi.reset(
        torch.ones(batch, dtype=torch.bool),
        st.vel,
        st.ang_vel,
        st.quat,
        torch.full((batch,), falcon.mass * GRAVITY),
        torch.zeros(batch, 3),
    )
    vel = []
    for _ in range(round(seconds / CTRL_DT)):
        st = flight.state
        cmd = indi(acc_cmd, torch.zeros(batch, 2), st.quat, st.vel, st.ang_vel, flight.speed)
        flight.control_tick(cmd, external_force)
        vel.append(flight.state.vel.clone())
    return torch.stack(vel), flight


def _mean_acc(vel: torch.Tensor, t0: float, t1: float) -> torch.Tensor:
    """Mean acceleration over ``[t0, t1]`` from the sampled velocities, ``[B, 3]``."""
    i0, i1 = round(t0 / CTRL_DT) - 1, round(t1 / CTRL_DT) - 1
    return (vel[i1] - vel[i0]) / (t1 - t0)


def test_indi_tracks_commanded_acceleration(falcon, check):
    acc_cmd = torch.tensor(((1.0, 0.0, 0.5), (-2.0, 1.5, -1.0), (0.0, 0.0, 0.0)))
    vel, flight = _indi_run(falcon, acc_cmd, None, 1.5)
    # Window 0.5 .. 1.5 s includes drag growing with speed (up to 0.15 m/s^2 here): INDI measures it.
    acc = _mean_acc(vel, 0.5, 1.5)
    rel = (acc[:2] - acc_cmd[:2]).norm(dim=-1) / acc_cmd[:2].norm(dim=-1)
    # Measured: 0.6 % (the steady-state offset of the filtered incremental loop).
    check("relative acceleration error after 0.5 s", rel.max(), 0.05)
    for t0 in (0.5, 1.0):  # already there at 0.5 s and stays
        rel_t = (_mean_acc(vel, t0, t0 + 0.1)[:2] - acc_cmd[:2]).norm(dim=-1) / acc_cmd[:2].norm(dim=-1)
        check(f"relative acceleration error over {t0}..{t0 + 0.1} s", rel_t.max(), 0.1)
    check("zero command: max |v| (m/s)", vel[:, 2].norm(dim=-1).max(), 1e-3)
    # Heading is held at its reference (yaw 0) throughout.
    check("yaw drift (rad)", quat_yaw(flight.state.quat).abs().max(), math.radians(1.0))


def test_indi_rejects_unknown_external_force(falcon, check):
    """A constant, unmodelled pull of ~2 m/s^2 (like a cable): INDI with a zero command stops accelerating.

    INDI has no velocity feedback, so the velocity picked up while the filters catch up (~0.1 s)
    remains; what it guarantees is that the measured acceleration returns to the command.
    """
    force = falcon.mass * torch.tensor(((2.1, 0.0, 0.0), (0.0, -1.5, -1.5)))
    vel, _ = _indi_run(falcon, torch.zeros(2, 3), force, 2.0)
    disturbance_acc = (force.norm(dim=-1) / falcon.mass).max().item()  # 2.1 m/s^2
    # Without compensation the vehicle would be at ~4 m/s after 2 s; measured ~0.2 m/s, reached by 0.3 s.
    check("max |v| over 2 s (m/s)", vel.norm(dim=-1).max(), 0.3)
    check("residual |acc| over 0.5..2 s (m/s^2)", _mean_acc(vel, 0.5, 2.0).norm(dim=-1).max(), 0.02 * disturbance_acc)
    check("|v(2 s) - v(0.5 s)| (m/s)", (vel[-1] - vel[round(0.5 / CTRL_DT) - 1]).norm(dim=-1).max(), 0.02)


# --------------------------------------------------------------------------- the task's hover hold
def test_cable_load_hover_hold(check):
    """Default cable_load (randomisation on) with zero actions holds the load for 10 s, no terminations."""
    env = sim.make("cable_load", num_envs=4, seed=0)
    actions = env.zero_actions()
    start = env.load.pos.clone()
    drift = torch.zeros(4)
    for _ in range(1000):
        _, _, terminated, truncated, _ = env.step(actions)
        assert not (terminated | truncated).any()
        drift = torch.maximum(drift, (env.load.pos - start).norm(dim=-1))
    # Measured: 1.1 .. 1.6 cm after 10 s (slow drift from randomised thrust scale and cable lengths).
    check("max load drift over 10 s (m)", drift.max(), 0.05)
