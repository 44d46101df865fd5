"""IDM and MOBIL against closed forms and brute force: a ring road settles to the equilibrium gap, a free
road to the desired speed, an approach to a standing car stops at the minimum gap, the leader search
matches a Python loop, and MOBIL's safety and incentive criteria decide as constructed."""

from __future__ import annotations

import math

import pytest
import torch

from sim.physics.traffic import (
    IDMParams,
    MOBILParams,
    idm_acceleration,
    idm_equilibrium_gap,
    leader_follower,
    mobil_lane_change,
)

IDM = IDMParams()
LENGTH = 4.5


def test_ring_road_settles_to_the_equilibrium_gap() -> None:
    # Two independent rings (batch), N cars each, circumference C: uniform flow at gap C / N - L.
    n, circumference = 10, torch.tensor([[150.0], [250.0]])
    s = torch.arange(n).float() * circumference / n + torch.randn(2, n, generator=torch.Generator().manual_seed(0))
    v = torch.zeros(2, n)
    v0 = torch.full((2, n), 15.0)
    for _ in range(6000):  # 300 s at 20 Hz
        ahead = torch.roll(s, -1, dims=1)
        gap = torch.remainder(ahead - s, circumference) - LENGTH
        a = idm_acceleration(v, v0, gap, torch.roll(v, -1, dims=1), IDM)
        v = (v + a * 0.05).clamp(min=0)
        s = s + v * 0.05
    gap = torch.remainder(torch.roll(s, -1, dims=1) - s, circumference) - LENGTH
    expected_gap = circumference / n - LENGTH
    torch.testing.assert_close(gap, expected_gap.expand_as(gap), atol=0.05, rtol=0)
    # The speed at which that gap is the equilibrium gap (bisection on the closed form).
    lo, hi = torch.zeros(2, 1), torch.full((2, 1), 14.999)
    for _ in range(60):
        mid = (lo + hi) / 2
        too_far = idm_equilibrium_gap(mid, torch.full_like(mid, 15.0), IDM) < expected_gap
        lo, hi = torch.where(too_far, mid, lo), torch.where(too_far, hi, mid)
    torch.testing.assert_close(v, lo.expand_as(v), atol=0.02, rtol=0)


def test_free_road_reaches_desired_speed_not_beyond() -> None:
    v = torch.zeros(3)
    v0 = torch.tensor([5.0, 10.0, 20.0])
    top = torch.zeros(3)
    for _ in range(4000):
        v = v + 0.05 * idm_acceleration(v, v0, torch.full((3,), math.inf), torch.zeros(3), IDM)
        top = torch.maximum(top, v)
    torch.testing.assert_close(v, v0, atol=1e-3, rtol=0)
    assert (top <= v0 + 1e-4).all()
    assert (
        idm_acceleration(torch.zeros(1), torch.ones(1), torch.full((1,), math.inf), torch.zeros(1), IDM)
        == IDM.max_accel
    )


def test_no_leader_is_finite_with_finite_gradients() -> None:
    # gap = inf (no leader) and a gap closer than MIN_GAP_M must give finite values and gradients.
    v = torch.tensor([0.0, 10.0, 10.0], requires_grad=True)
    gap = torch.tensor([math.inf, math.inf, 0.0], requires_grad=True)
    a = idm_acceleration(v, torch.full((3,), 20.0), gap, torch.zeros(3), IDM)
    a.sum().backward()
    assert torch.isfinite(a).all() and torch.isfinite(v.grad).all() and torch.isfinite(gap.grad).all()
    # Free road: a_max (1 - (v / v0)^4); 10 of 20 m/s -> 1.5 * 15 / 16.
    torch.testing.assert_close(a[1], torch.tensor(1.5 * 15 / 16))
    assert gap.grad[:2].abs().max() == 0 and a[2] < -1000  # the clamped gap brakes as hard as it can


def test_approach_to_a_standing_car_stops_at_the_minimum_gap() -> None:
    x, v = torch.zeros(2), torch.tensor([10.0, 15.0])
    obstacle = torch.tensor(100.0)
    closest = torch.full((2,), math.inf)
    for _ in range(2000):
        gap = obstacle - x - LENGTH
        closest = torch.minimum(closest, gap)
        v = (v + 0.05 * idm_acceleration(v, torch.full((2,), 15.0), gap, torch.zeros(2), IDM)).clamp(min=0)
        x = x + 0.05 * v
    assert (closest > 0).all()  # never touches
    torch.testing.assert_close(obstacle - x - LENGTH, torch.full((2,), IDM.min_gap), atol=0.1, rtol=0)
    assert (v < 0.05).all()


def test_leader_follower_matches_brute_force() -> None:
    g = torch.Generator().manual_seed(1)
    E, Q, V = 6, 5, 7
    rel = (torch.rand(E, Q, V, generator=g) - 0.5) * 100
    valid = torch.rand(E, Q, V, generator=g) < 0.6
    v = torch.rand(E, V, generator=g) * 20
    length = 3.0 + 2.0 * torch.rand(E, V, generator=g)
    qlen = 3.0 + 2.0 * torch.rand(E, Q, generator=g)
    out = leader_follower(rel, valid, v, length, qlen)
    for e in range(E):
        for i in range(Q):
            ahead = [
                (float(rel[e, i, j]) - qlen[e, i] / 2 - length[e, j] / 2, j)
                for j in range(V)
                if valid[e, i, j] and rel[e, i, j] > 0
            ]
            behind = [
                (-float(rel[e, i, j]) - qlen[e, i] / 2 - length[e, j] / 2, j)
                for j in range(V)
                if valid[e, i, j] and rel[e, i, j] <= 0
            ]
            for items, gap_key, idx_key, v_key in (
                (ahead, "lead_gap", "lead_idx", "lead_v"),
                (behind, "follow_gap", "follow_idx", "follow_v"),
            ):
                if items:
                    gap, j = min(items)
                    assert abs(float(out[gap_key][e, i]) - float(gap)) < 1e-4
                    assert int(out[idx_key][e, i]) == j and float(out[v_key][e, i]) == float(v[e, j])
                else:
                    assert math.isinf(float(out[gap_key][e, i])) and int(out[idx_key][e, i]) == -1
                    assert float(out[v_key][e, i]) == 0.0
    # One length for everybody: a number serves the queries too (an int as well as a float).
    same = leader_follower(rel, valid, v, 4.0)
    torch.testing.assert_close(
        same["lead_gap"], leader_follower(rel, valid, v, torch.full((E, V), 4.0), 4.0)["lead_gap"]
    )
    torch.testing.assert_close(leader_follower(rel, valid, v, 4)["follow_gap"], same["follow_gap"])
    # Per-vehicle lengths without the queries' own: refused rather than guessed.
    with pytest.raises(ValueError, match="query_length"):
        leader_follower(rel, valid, v, length)


def test_leader_follower_compiled_form_gives_the_same_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    # Under torch.compile the minima run as a loop over vehicles (faster there); ties included (equal gaps
    # from equal positions), both forms must pick the same vehicle.
    g = torch.Generator().manual_seed(2)
    E, Q, V = 64, 9, 9
    rel = ((torch.rand(E, Q, V, generator=g) - 0.5) * 40).round()  # integer metres: many ties
    valid = torch.rand(E, Q, V, generator=g) < 0.5
    v = torch.rand(E, V, generator=g) * 20
    eager = leader_follower(rel, valid, v, 4.5)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    loop = leader_follower(rel, valid, v, 4.5)
    assert eager.keys() == loop.keys()
    for key in eager:
        assert torch.equal(eager[key], loop[key]), key
    assert (eager["lead_idx"] >= 0).any() and (eager["follow_idx"] == -1).any()


def test_mobil_changes_for_a_slow_leader_only_when_safe() -> None:
    p = MOBILParams()
    v0 = torch.tensor([20.0])
    v = torch.tensor([18.0])
    # Own lane: a slow car 20 m ahead; target lane: empty ahead.
    a_now = idm_acceleration(v, v0, torch.tensor([20.0]), torch.tensor([8.0]), IDM)
    a_target = idm_acceleration(v, v0, torch.tensor([math.inf]), torch.tensor([0.0]), IDM)
    # Safe: the new follower is far behind (80 m, same speed).
    f_now = idm_acceleration(v, v0, torch.tensor([math.inf]), torch.tensor([0.0]), IDM)
    f_after = idm_acceleration(v, v0, torch.tensor([80.0]), v, IDM)
    inc, go = mobil_lane_change(a_now, a_target, f_now, f_after, torch.zeros(1), torch.zeros(1), p, 1.0)
    assert go.all() and inc > 1.0
    # Unsafe: a fast new follower 3 m behind would have to brake harder than safe_brake.
    f_after_close = idm_acceleration(torch.tensor([25.0]), v0, torch.tensor([3.0]), v, IDM)
    assert f_after_close < -p.safe_brake
    _, go = mobil_lane_change(a_now, a_target, f_now, f_after_close, torch.zeros(1), torch.zeros(1), p, 1.0)
    assert not go.any()


def test_mobil_politeness_and_keep_right_bias() -> None:
    # A small own gain (0.5) that costs the new follower 2.0: selfish drivers change, polite ones do not.
    args = (
        torch.tensor([0.0]),
        torch.tensor([0.5]),
        torch.tensor([0.0]),
        torch.tensor([-2.0]),
        torch.zeros(1),
        torch.zeros(1),
    )
    _, go_selfish = mobil_lane_change(*args, MOBILParams(politeness=0.0), 1.0)
    _, go_polite = mobil_lane_change(*args, MOBILParams(politeness=0.5), 1.0)
    assert go_selfish.all() and not go_polite.any()
    # Gain 0.25 with threshold 0.2 and bias 0.1: goes right (0.35), not left (0.15).
    args = (torch.tensor([0.0]), torch.tensor([0.25]), torch.zeros(1), torch.zeros(1), torch.zeros(1), torch.zeros(1))
    inc_left, go_left = mobil_lane_change(*args, MOBILParams(), 1.0)
    inc_right, go_right = mobil_lane_change(*args, MOBILParams(), -1.0)
    assert go_right.all() and not go_left.any()
    torch.testing.assert_close(inc_right - inc_left, torch.tensor([0.2]))
