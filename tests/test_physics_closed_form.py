"""Closed-form checks of the torch physics: hover, free fall, motor lag, drag, quaternions, cables.

Everything runs in float32 (the only precision the physics uses); each tolerance is derived from
float32 round-off or from the discretisation, and stated next to the assertion.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sim.physics.cable import cable_tension
from sim.physics.multirotor import MultirotorModel
from sim.physics.quaternion import (
    quat_angle_between,
    quat_conj,
    quat_from_axis_angle,
    quat_from_euler,
    quat_integrate,
    quat_mul,
    quat_rotate,
    quat_rotate_inv,
    quat_to_matrix,
    quat_yaw,
)
from sim.physics.rigid_body import GRAVITY, RigidBodyState, rigid_body_step

EPS32 = float(np.finfo(np.float32).eps)  # 1.19e-7
PHYS_DT = 1.0 / 600.0  # a physics step (cable_load uses 1/300 s); the closed forms hold for any step


def _state(batch: int, pos=(0.0, 0.0, 0.0), quat: torch.Tensor | None = None) -> RigidBodyState:
    q = torch.tensor((1.0, 0.0, 0.0, 0.0)).repeat(batch, 1) if quat is None else quat.clone()
    return RigidBodyState(torch.tensor(pos).repeat(batch, 1), q, torch.zeros(batch, 3), torch.zeros(batch, 3))


def _multirotor_step(model: MultirotorModel, st: RigidBodyState, speed, speed_cmd, dt: float):
    """Motors, rotor wrench, drag and Newton-Euler: the free-flight part of the task's physics step."""
    speed = model.motor_step(speed, speed_cmd, dt)
    thrust, torque = model.body_wrench(speed)
    thrust_vec = torch.nn.functional.pad(thrust.unsqueeze(-1), (2, 0))
    force = quat_rotate(st.quat, thrust_vec) + model.drag_force(st.quat, st.vel)
    return rigid_body_step(st, force, torque, model.mass, model.inertia, dt), speed


def _random_quats(n: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(n, 4, generator=g)
    return q / q.norm(dim=-1, keepdim=True)


# --------------------------------------------------------------------------- hover and free fall
@pytest.mark.parametrize("name", ["falcon", "crazyflie"])
def test_hover_speed_holds_still(name, request, check):
    """Equal rotor speeds from ``hover_speed(m g)`` hold the vehicle still for 1 s (any heading)."""
    model: MultirotorModel = request.getfixturevalue(name)
    yaw = torch.tensor((0.0, 0.7, -2.5))
    quat = quat_from_euler(torch.zeros(3), torch.zeros(3), yaw)
    st = _state(3, (0.0, 0.0, 1.0), quat)
    hover = model.hover_speed(model.mass * GRAVITY)
    speed = torch.full((3, model.params.num_rotors), hover)
    # The formula itself: per-rotor thrust k_f Omega^2 = m g / R.
    assert model.rotor_thrusts(speed).sum(-1) == pytest.approx(model.mass * GRAVITY, rel=1e-6)
    for _ in range(600):
        st, speed = _multirotor_step(model, st, speed, speed, PHYS_DT)
    # Residual acceleration is float32 round-off of thrust vs weight (~1e-7 relative, ~1e-6 m/s^2);
    # a 0.1 % thrust error would give 1e-2 m/s after 1 s, 100x the tolerance.
    check("velocity after 1 s (m/s)", st.vel.abs().max(), 1e-4)
    check("position drift after 1 s (m)", (st.pos - torch.tensor((0.0, 0.0, 1.0))).abs().max(), 1e-4)
    check("body rate after 1 s (rad/s)", st.ang_vel.abs().max(), 1e-4)


def test_free_fall_matches_discrete_and_continuous_solution(falcon, check):
    """Zero rotor speed: z follows semi-implicit Euler exactly, within O(dt) of z0 + v0 t - g t^2 / 2."""
    z0, v0, n, dt = 10.0, 1.5, 600, PHYS_DT
    # Round-off of 600 additions to |z| <= 11 m (ulp 9.5e-7): measured 6e-6 m; the O(dt) offset of
    # semi-implicit Euler from the continuous solution, g dt t / 2 = 8.2 mm after 1 s, is 160x larger.
    # Velocity: dt * g rounds to float32 with a fixed 3e-8 bias per step, 4.6e-5 m/s after 600 steps.
    tol_z, tol_v = 5e-5, 1e-4
    # 1) The full multirotor path at zero rotor speed (no thrust, linear drag d_z): exact discrete
    #    recursion v_k = v_inf + (v0 - v_inf) a^k, a = 1 - dt d_z / m, z_k = z_{k-1} + dt v_k.
    st = _state(1, (0.3, -0.2, z0))
    st.vel[:, 2] = v0
    speed = torch.zeros(1, 4)
    zs, vs = [], []
    for _ in range(n):
        st, speed = _multirotor_step(falcon, st, speed, speed, dt)
        zs.append(st.pos[0, 2].item())
        vs.append(st.vel[0, 2].item())
    assert st.vel[0, :2].abs().max().item() == 0.0 and st.ang_vel.abs().max().item() == 0.0
    k = np.arange(1, n + 1, dtype=np.float64)
    a = 1.0 - dt * falcon.params.drag_coeff[2] / falcon.mass
    v_inf = -GRAVITY * falcon.mass / falcon.params.drag_coeff[2]
    v_exact = v0 * a**k + v_inf * (1 - a**k)
    z_exact = z0 + dt * np.cumsum(v_exact)
    check("with drag: z vs discrete solution (m)", np.abs(np.array(zs) - z_exact).max(), tol_z)
    check("with drag: v vs discrete solution (m/s)", np.abs(np.array(vs) - v_exact).max(), tol_v)
    # 2) Without drag: z_k = z0 + v0 t - g t^2 / 2 - g dt t / 2 exactly (t = k dt).
    st = _state(1, (0.0, 0.0, z0))
    st.vel[:, 2] = v0
    zero = torch.zeros(1, 3)
    z_err, v_err, z_cont_err = [], [], []
    for i in range(1, n + 1):
        st = rigid_body_step(st, zero, zero, falcon.mass, falcon.inertia, dt)
        t = i * dt
        z_cont = z0 + v0 * t - GRAVITY * t * t / 2
        z_err.append(abs(st.pos[0, 2].item() - (z_cont - GRAVITY * dt * t / 2)))
        z_cont_err.append(abs(st.pos[0, 2].item() - z_cont))
        v_err.append(abs(st.vel[0, 2].item() - (v0 - GRAVITY * t)))
    check("no drag: z vs discrete solution (m)", max(z_err), tol_z)
    check("no drag: v vs discrete solution (m/s)", max(v_err), tol_v)
    # The continuous solution is only matched to within the O(dt) offset, which is resolved here.
    check("no drag: |z - continuous| - g dt t / 2 at 1 s (m)", abs(max(z_cont_err) - GRAVITY * dt / 2), tol_z)


# --------------------------------------------------------------------------- motor lag
@pytest.mark.parametrize("dt", [PHYS_DT, 1.0 / 100.0])
def test_motor_lag_step_response_is_exact(falcon, dt, check):
    """Omega(t) = Omega_c + (Omega_0 - Omega_c) exp(-t / tau) at every sample, for any step size."""
    tau = falcon.params.motor_time_constant
    w0 = torch.tensor((100.0, 700.0, 400.0, 0.0))
    wc = torch.tensor((600.0, 200.0, 400.0, 838.0))
    speed, got = w0.clone(), []
    for _ in range(100):
        speed = falcon.motor_step(speed, wc, dt)
        got.append(speed)
    t = torch.arange(1, 101, dtype=torch.float64).unsqueeze(-1) * dt
    expected = wc.double() + (w0 - wc).double() * torch.exp(-t / tau)
    # One float32 rounding per step of values <= 838 rad/s (ulp 6e-5): measured ~1e-4 after 100 steps.
    check("max |Omega - closed form| over 100 steps (rad/s)", (torch.stack(got).double() - expected).abs().max(), 1e-3)
    # tau_scale lengthens the time constant: one step with 2 tau equals exp(-dt / (2 tau)).
    one = falcon.motor_step(w0, wc, dt, tau_scale=torch.tensor(2.0))
    torch.testing.assert_close(one, wc + (w0 - wc) * math.exp(-dt / (2 * tau)), rtol=1e-6, atol=1e-4)
    # Exact discretisation: two half steps equal one full step.
    half = falcon.motor_step(falcon.motor_step(w0, wc, dt / 2), wc, dt / 2)
    torch.testing.assert_close(half, falcon.motor_step(w0, wc, dt), rtol=0, atol=2e-4)


def test_motor_commands_are_clipped(falcon, crazyflie):
    for model in (falcon, crazyflie):
        lo, hi = model.params.rotor_speed_min, model.params.rotor_speed_max
        cmd = torch.tensor((-500.0, hi * 1.5, 1e6, 0.5 * hi))
        speed = torch.full((4,), 0.5 * hi)
        for _ in range(2000):  # 3.3 s = 130 time constants
            speed = model.motor_step(speed, cmd, PHYS_DT)
        torch.testing.assert_close(speed, torch.tensor((lo, hi, hi, 0.5 * hi)), rtol=1e-6, atol=1e-3)
        assert speed.max().item() <= hi * (1 + EPS32) and speed.min().item() >= lo


# --------------------------------------------------------------------------- drag
def test_drag_terminal_velocity(crazyflie, falcon, check):
    """Constant force F on a tilted body: v -> R diag(1/d) R^T F, approached as the discrete exponential."""
    force_world = torch.tensor((0.02, -0.01, 0.015))
    quat = quat_from_euler(torch.tensor([0.3]), torch.tensor([-0.2]), torch.tensor([0.8]))
    rot = quat_to_matrix(quat)[0]
    for model, dt, steps in ((crazyflie, 0.03, 1000), (falcon, 0.05, 300)):
        d = model.drag_coeff
        v_term = rot @ ((rot.T @ force_world) / d)
        st = _state(1, quat=quat)
        body_steps = []
        for _ in range(steps):
            drag = model.drag_force(st.quat, st.vel)
            st = rigid_body_step(st, force_world + drag, torch.zeros(1, 3), model.mass, model.inertia, dt, gravity=0.0)
            body_steps.append(quat_rotate_inv(st.quat, st.vel)[0])
        # Discrete solution per body axis: v_b,k = v_inf (1 - (1 - dt d / m)^k).
        k = torch.arange(1, steps + 1, dtype=torch.float64).unsqueeze(-1)
        v_inf_b = (rot.T @ force_world / d).double()
        expected_b = v_inf_b * (1 - (1 - dt * d.double() / model.mass) ** k)
        rel = (torch.stack(body_steps).double() - expected_b).abs().max() / v_inf_b.abs().max()
        check(f"{model.params.name}: body velocity vs discrete solution (relative)", rel, 1e-4)
        if model is crazyflie:  # 30 s = 10 time constants (m / d <= 3 s): at terminal velocity
            check("crazyflie: |v(30 s) - F/d| / |F/d|", (st.vel[0] - v_term).norm() / v_term.norm(), 1e-3)
        # Terminal velocity is a fixed point of the step: start there and nothing changes.
        st = _state(1, quat=quat)
        st.vel[:] = v_term
        for _ in range(20):
            drag = model.drag_force(st.quat, st.vel)
            st = rigid_body_step(st, force_world + drag, torch.zeros(1, 3), model.mass, model.inertia, dt, gravity=0.0)
        torch.testing.assert_close(st.vel[0], v_term, rtol=1e-5, atol=1e-6)
        assert st.ang_vel.abs().max().item() == 0.0  # drag acts at the centre of mass: no torque


# --------------------------------------------------------------------------- quaternions
def test_quat_rotate_matches_matrix_and_inverse():
    q = _random_quats(256)
    v = torch.randn(256, 3, generator=torch.Generator().manual_seed(1))
    rv = quat_rotate(q, v)
    torch.testing.assert_close(rv, (quat_to_matrix(q) @ v.unsqueeze(-1)).squeeze(-1), rtol=0, atol=1e-5)
    torch.testing.assert_close(quat_rotate_inv(q, rv), v, rtol=0, atol=1e-5)
    rot = quat_to_matrix(q)
    torch.testing.assert_close(rot @ rot.transpose(-1, -2), torch.eye(3).expand(256, 3, 3), rtol=0, atol=1e-5)
    torch.testing.assert_close(torch.linalg.det(rot), torch.ones(256), rtol=0, atol=1e-5)
    # Composition: R(a b) = R(a) R(b); q and -q are the same rotation.
    p = _random_quats(256, seed=2)
    torch.testing.assert_close(quat_to_matrix(quat_mul(q, p)), rot @ quat_to_matrix(p), rtol=0, atol=1e-5)
    torch.testing.assert_close(quat_to_matrix(-q), rot, rtol=0, atol=1e-6)
    # Body -> world: a rotation by +90 deg about z takes body x to world y.
    qz = quat_from_axis_angle(torch.tensor((0.0, 0.0, 1.0)), torch.tensor(math.pi / 2))
    torch.testing.assert_close(
        quat_rotate(qz, torch.tensor((1.0, 0.0, 0.0))), torch.tensor((0.0, 1.0, 0.0)), rtol=0, atol=1e-6
    )


@pytest.mark.parametrize("steps", [1, 10, 600])
def test_quat_integrate_constant_rate_is_axis_angle(quat_angle64, steps, check):
    """n steps of a constant body rate w over T equal q0 * exp(w T / 2), the axis-angle rotation."""
    q0 = _random_quats(64, seed=3)
    g = torch.Generator().manual_seed(4)
    omega = torch.randn(64, 3, generator=g) * 3.0  # up to ~10 rad/s
    omega[0] = 0.0  # the zero-rate branch
    omega[1] = torch.tensor((1e-10, 0.0, 0.0))  # below the small-rate guard
    total_t = 1.0
    q = q0.clone()
    for _ in range(steps):
        q = quat_integrate(q, omega, total_t / steps)
    rate = omega.double().norm(dim=-1)
    axis = omega.double() / rate.clamp(min=1e-300).unsqueeze(-1)
    half = (rate * total_t / 2).unsqueeze(-1)
    dq = torch.cat((torch.cos(half), torch.sin(half) * axis), -1)
    expected = quat_mul(q0.double(), dq)
    err = quat_angle64(q.numpy(), expected.numpy())
    # Each step rounds a few float32 products (~1e-7 rad); measured 4.8e-7 / 8.2e-7 / 5.5e-6 rad.
    check("angle to q0 * exp(w T / 2) (rad)", err.max(), 1e-7 * steps + 1e-6)
    assert (q.norm(dim=-1) - 1).abs().max().item() < 1e-6
    # In the world frame the body rate axis is R(q) w, and it is invariant (torque-free spin about w).
    torch.testing.assert_close(quat_rotate(q, omega), quat_rotate(q0, omega), rtol=0, atol=1e-4)


def test_euler_and_yaw_round_trip(check):
    g = torch.Generator().manual_seed(5)
    n = 500
    roll = (torch.rand(n, generator=g) * 2 - 1) * math.pi
    pitch = (torch.rand(n, generator=g) * 2 - 1) * (math.pi / 2 - 0.05)
    yaw = (torch.rand(n, generator=g) * 2 - 1) * math.pi
    q = quat_from_euler(roll, pitch, yaw)
    torch.testing.assert_close(q.norm(dim=-1), torch.ones(n), rtol=0, atol=1e-6)
    # Intrinsic z-y'-x'': R = Rz(yaw) Ry(pitch) Rx(roll).
    c, s = torch.cos, torch.sin
    one, zero = torch.ones(n), torch.zeros(n)
    rz = torch.stack((c(yaw), -s(yaw), zero, s(yaw), c(yaw), zero, zero, zero, one), -1).reshape(n, 3, 3)
    ry = torch.stack((c(pitch), zero, s(pitch), zero, one, zero, -s(pitch), zero, c(pitch)), -1).reshape(n, 3, 3)
    rx = torch.stack((one, zero, zero, zero, c(roll), -s(roll), zero, s(roll), c(roll)), -1).reshape(n, 3, 3)
    torch.testing.assert_close(quat_to_matrix(q), rz @ ry @ rx, rtol=0, atol=1e-5)
    # quat_yaw recovers yaw (heading of body x) whatever roll and pitch are (|pitch| < 90 deg).
    yaw_err = torch.remainder(quat_yaw(q) - yaw + math.pi, 2 * math.pi) - math.pi
    check("quat_yaw(quat_from_euler(r, p, y)) - y (rad)", yaw_err.abs().max(), 1e-5)
    # Yaw of a pure-yaw quaternion, and the axis-angle constructor agrees with quat_from_euler.
    qz = quat_from_axis_angle(torch.tensor((0.0, 0.0, 1.0)), yaw)
    torch.testing.assert_close(quat_from_euler(zero, zero, yaw), qz, rtol=0, atol=1e-6)


def test_quat_angle_between():
    q0 = _random_quats(100, seed=6)
    axis = torch.nn.functional.normalize(torch.randn(100, 3, generator=torch.Generator().manual_seed(7)), dim=-1)
    angle = torch.linspace(0.01, math.pi - 0.01, 100)
    q1 = quat_mul(q0, quat_from_axis_angle(axis, angle))
    torch.testing.assert_close(quat_angle_between(q0, q1), angle, rtol=0, atol=2e-3)
    torch.testing.assert_close(quat_angle_between(q0, -q1), angle, rtol=0, atol=2e-3)  # double cover
    torch.testing.assert_close(
        quat_mul(q0, quat_conj(q0)), torch.tensor((1.0, 0, 0, 0)).expand(100, 4), rtol=0, atol=1e-6
    )


# --------------------------------------------------------------------------- cables
K, C, L = 3000.0, 8.0, 1.0


def _tension(pos_b, vel_b, rest=L):
    a = torch.zeros_like(pos_b)
    return cable_tension(a, torch.zeros_like(a), pos_b, vel_b, rest, K, C)


def test_cable_slack_transmits_nothing():
    g = torch.Generator().manual_seed(8)
    direction = torch.nn.functional.normalize(torch.randn(200, 3, generator=g), dim=-1)
    length = torch.rand(200, generator=g) * 0.999 * L + 1e-3
    vel = torch.randn(200, 3, generator=g) * 20.0  # fast opening or closing: the damper must stay silent
    ten, u, ln = _tension(direction * length.unsqueeze(-1), vel)
    assert (ten == 0).all()
    torch.testing.assert_close(ln, length, rtol=1e-6, atol=0)
    torch.testing.assert_close(u, direction, rtol=0, atol=1e-6)


def test_cable_static_tension_is_hooke(check):
    g = torch.Generator().manual_seed(9)
    direction = torch.nn.functional.normalize(torch.randn(200, 3, generator=g), dim=-1)
    stretch = torch.rand(200, generator=g) * 0.01 + 1e-4
    rest = torch.rand(200, generator=g) + 0.5
    ten, u, ln = _tension(direction * (rest + stretch).unsqueeze(-1), torch.zeros(200, 3), rest)
    # The stretch is a difference of lengths <= 1.51 m (ulp 1.2e-7 m): a few ulp times k = 3000 N/m,
    # 4 ulp = 1.4e-3 N. Measured 5e-4 N.
    check("|T - k stretch| (N)", (ten - K * stretch).abs().max(), 1.5e-3)
    # Rigid motion of both ends (same velocity) adds no damping force.
    vel = torch.randn(200, 3, generator=g)
    pos_b = direction * (rest + stretch).unsqueeze(-1)
    ten2, _, _ = cable_tension(torch.zeros(200, 3), vel, pos_b, vel, rest, K, C)
    torch.testing.assert_close(ten2, ten, rtol=0, atol=1e-5)


def test_cable_damper_never_pushes():
    direction = torch.tensor((0.0, 0.6, 0.8)).expand(5, 3)
    stretch = torch.full((5,), 0.002)  # k s = 6 N
    rate = torch.tensor((-5.0, -0.75, 0.0, 0.5, 5.0))  # c rate = -40, -6, 0, 4, 40 N
    ten, _, _ = _tension(direction * (L + stretch).unsqueeze(-1), direction * rate.unsqueeze(-1))
    expected = (K * stretch + C * rate).clamp(min=0.0)
    torch.testing.assert_close(ten, expected, rtol=0, atol=1e-3)
    assert ten[0].item() == 0.0 and ten[4].item() == pytest.approx(46.0, abs=1e-3)
    assert (ten >= 0).all()
