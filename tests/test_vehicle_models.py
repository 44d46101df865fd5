"""Vehicle models against closed forms: the kinematic bicycle's turning circle, the dynamic bicycle's
steady-state yaw rate (understeer gradient), their agreement at low speed, and the actuator limits."""

from __future__ import annotations

import math

import torch

from sim.physics.vehicle import VehicleParams, dynamic_bicycle_step, kinematic_bicycle_step

P = VehicleParams()


def fit_circle(xy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Least-squares circle ``(centre [2], radius)`` through points ``[N, 2]`` (algebraic fit)."""
    x, y = xy[:, 0].double(), xy[:, 1].double()
    a = torch.stack((x, y, torch.ones_like(x)), -1)
    b = x**2 + y**2
    sol = torch.linalg.lstsq(a, b.unsqueeze(-1)).solution.squeeze(-1)
    cx, cy = sol[0] / 2, sol[1] / 2
    return torch.stack((cx, cy)), torch.sqrt(sol[2] + cx**2 + cy**2)


def test_kinematic_turning_radius_matches_closed_form() -> None:
    steer = torch.tensor([0.05, 0.2, 0.5])
    x = y = yaw = torch.zeros(3)
    v = torch.full((3,), 5.0)
    pts = []
    for _ in range(700):  # 70 s at 10 Hz = 350 m: more than a full circle for each (the widest is 339 m round)
        x, y, yaw, v = kinematic_bicycle_step(x, y, yaw, v, steer, torch.zeros(3), 0.1, P)
        pts.append(torch.stack((x, y), -1))
    pts = torch.stack(pts, 1)  # [3, T, 2]
    assert (yaw > 2 * math.pi).all(), yaw  # every car went all the way round
    expected = torch.sqrt(P.lr**2 + P.wheelbase**2 / torch.tan(steer) ** 2)
    for k in range(3):
        _, radius = fit_circle(pts[k])
        assert abs(float(radius) - float(expected[k])) < 1e-3 * float(expected[k]), (float(radius), float(expected[k]))


def test_kinematic_straight_line_and_limits() -> None:
    x, y, yaw, v = (torch.zeros(2, 3) for _ in range(4))
    v = v + 10.0
    for _ in range(20):
        x, y, yaw, v = kinematic_bicycle_step(x, y, yaw, v, torch.zeros(2, 3), torch.zeros(2, 3), 0.1, P)
    torch.testing.assert_close(x, torch.full((2, 3), 20.0))
    assert y.abs().max() == 0 and yaw.abs().max() == 0
    # Speed never negative (no reversing) and never above max_speed; steering and pedal are clamped.
    _, _, _, v_stop = kinematic_bicycle_step(x, y, yaw, torch.ones(2, 3), x * 0, torch.full((2, 3), -100.0), 1.0, P)
    assert (v_stop == 0).all()
    _, _, _, v_fast = kinematic_bicycle_step(
        x, y, yaw, torch.full((2, 3), 29.9), x * 0, torch.full((2, 3), 50.0), 1.0, P
    )
    assert (v_fast == P.max_speed).all()
    a = kinematic_bicycle_step(
        *(torch.zeros(1),) * 3, torch.full((1,), 5.0), torch.tensor([3.0]), torch.zeros(1), 0.1, P
    )
    b = kinematic_bicycle_step(
        *(torch.zeros(1),) * 3, torch.full((1,), 5.0), torch.tensor([P.max_steer]), torch.zeros(1), 0.1, P
    )
    torch.testing.assert_close(torch.stack(a), torch.stack(b))


def test_dynamic_steady_state_yaw_rate_matches_understeer_gradient() -> None:
    speeds = torch.tensor([8.0, 15.0, 25.0])
    steer = torch.full((3,), 0.03)
    state = torch.zeros(3, 6)
    state[:, 3] = speeds
    for _ in range(100):  # 10 s: the lateral transient has died out
        state = dynamic_bicycle_step(state, steer, torch.zeros(3), 0.1, P)
    k = P.understeer_gradient
    assert k > 0  # this car understeers (lr / Cf > lf / Cr)
    expected = speeds * steer / (P.wheelbase + k * speeds**2)
    # Closed form is for small angles (tan(alpha) ~ alpha); 0.03 rad steer keeps it within 0.5%.
    torch.testing.assert_close(state[:, 5], expected, rtol=5e-3, atol=0)
    torch.testing.assert_close(state[:, 3], speeds)  # vx tracks the (zero) acceleration command


def test_dynamic_agrees_with_kinematic_at_low_speed() -> None:
    steer = torch.tensor([0.1, -0.3])
    state = torch.zeros(2, 6)
    state[:, 3] = 2.0
    x = y = yaw = torch.zeros(2)
    v = torch.full((2,), 2.0)
    for _ in range(50):
        state = dynamic_bicycle_step(state, steer, torch.zeros(2), 0.1, P)
        x, y, yaw, v = kinematic_bicycle_step(x, y, yaw, v, steer, torch.zeros(2), 0.1, P)
    # At 2 m/s the tyres barely slip: positions after 10 m of turning agree within centimetres.
    dist = torch.linalg.vector_norm(state[:, :2] - torch.stack((x, y), -1), dim=-1)
    assert dist.max() < 0.15, dist
    assert (state[:, 2] - yaw).abs().max() < 0.02
    # From rest it stays at rest and stays finite.
    rest = dynamic_bicycle_step(torch.zeros(4, 6), torch.full((4,), 0.5), torch.zeros(4), 0.1, P)
    assert torch.isfinite(rest).all() and rest.abs().max() == 0


def test_batched_shapes() -> None:
    s = dynamic_bicycle_step(torch.zeros(5, 7, 6), torch.zeros(5, 7), torch.ones(5, 7), 0.1, P)
    assert s.shape == (5, 7, 6)
    out = kinematic_bicycle_step(*(torch.zeros(5, 7),) * 4, torch.zeros(5, 7), torch.ones(5, 7), 0.1, P)
    assert all(o.shape == (5, 7) for o in out)
    assert math.isclose(float(out[3][0, 0]), 0.1, rel_tol=1e-6)


def test_gradients_are_finite_through_straight_driving() -> None:
    # steer = 0 takes the sinc's small-angle branch: its gradient must not be NaN (torch.where evaluates both).
    steer = torch.zeros(3, requires_grad=True)
    v = torch.full((3,), 5.0, requires_grad=True)
    x, y, yaw, v1 = kinematic_bicycle_step(*(torch.zeros(3),) * 3, v, steer, torch.zeros(3), 0.1, P)
    (x + y + yaw + v1).sum().backward()
    assert torch.isfinite(steer.grad).all() and torch.isfinite(v.grad).all()
    # d/d steer at steer 0 (v dt = 0.5 m): y moves by v dt (lr / L + v dt / (2 L)) per radian (slip angle plus
    # half the turn), yaw by v dt / L; x and v do not change to first order.
    vdt, wb = 0.5, P.wheelbase
    expected = vdt * (P.lr / wb + vdt / (2 * wb)) + vdt / wb
    torch.testing.assert_close(steer.grad, torch.full((3,), expected))
