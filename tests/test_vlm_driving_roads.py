"""vlm_driving's procedural roads: geometry against closed forms, the lookup grid against the lanes."""

from __future__ import annotations

import math

import pytest
import torch

from sim.tasks.vlm_driving.roads import _reference, build_maps


@pytest.fixture(scope="module")
def maps():
    return build_maps(3, seed=5)


def test_arc_pieces_lie_on_their_circle() -> None:
    radius = 80.0
    pts = _reference([(100.0, 1.0 / radius)], (0.0, 0.0, 0.0), 1.0)
    # Starting at the origin heading +x and turning left: the centre is (0, R).
    r = torch.linalg.vector_norm(pts - torch.tensor([0.0, radius]), dim=-1)
    assert (r - radius).abs().max() < 1e-3
    step = torch.linalg.vector_norm(pts[1:] - pts[:-1], dim=-1)
    assert (step - 1.0).abs().max() < 1e-3  # the chord of a 1 m arc of an 80 m circle: 1 m to 1e-5


def test_maps_are_deterministic_in_their_seed(maps) -> None:
    again = build_maps(3, seed=5)
    for key, value in vars(maps).items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value.nan_to_num(-7.0), getattr(again, key).nan_to_num(-7.0)), key
    other = build_maps(3, seed=6)
    assert not torch.equal(maps.lane_xy, other.lane_xy)


def test_locate_recovers_lane_and_lateral_offset(maps) -> None:
    g = torch.Generator().manual_seed(0)
    n = 4000
    mid = torch.randint(0, maps.num_maps, (n,), generator=g)
    lane = torch.zeros(n, dtype=torch.long)  # the innermost forward lane: on every map, away from the junction
    lo, hi = maps.lane_range[mid, lane, 0], maps.lane_range[mid, lane, 1]
    u = lo + (torch.rand(n, generator=g) * (hi - lo - 2).float()).long() + 1
    offset = (torch.rand(n, generator=g) - 0.5) * 0.9 * maps.lane_width  # inside the lane
    xy, yaw = maps.lane_pose(mid, lane, u.float(), offset)
    where = maps.locate(mid, xy)
    away = ~where["junction"]
    assert away.float().mean() > 0.9
    hit = where["lane"] == lane
    assert hit[away].float().mean() > 0.99
    err = (where["lateral"] - offset)[away & hit].abs()
    assert err.max() < 0.05  # m: exact geometry from the nearest point of a 1 m polyline
    assert where["on_road"][away].all()
    assert ((where["yaw"] - yaw + math.pi) % (2 * math.pi) - math.pi)[away & hit].abs().max() < 0.05


def test_points_off_the_road_are_off(maps) -> None:
    mid = torch.zeros(3, dtype=torch.long)
    # Far outside the map, and 6 lane widths beside the outermost forward lane.
    lane = torch.zeros(1, dtype=torch.long) + 0
    xy_lane, _ = maps.lane_pose(mid[:1], lane, torch.tensor([30.0]), torch.tensor([-8 * maps.lane_width]))
    pts = torch.cat((torch.tensor([[-50.0, -50.0], [1e4, 3.0]]), xy_lane))
    where = maps.locate(mid, pts)
    assert not where["on_road"].any()
    assert (where["lane"][:2] == -1).all()


def test_neighbour_lanes_share_stations_one_lane_width_apart(maps) -> None:
    for m in range(maps.num_maps):
        for lane in range(maps.lane_dir.shape[1]):
            right = int(maps.lane_right[m, lane])
            if right < 0 or int(maps.lane_kind[m, lane]) != 0:
                continue
            lo, hi = maps.lane_range[m, right].tolist()
            d = torch.linalg.vector_norm(maps.lane_xy[m, lane, lo:hi] - maps.lane_xy[m, right, lo:hi], dim=-1)
            assert (d - maps.lane_width).abs().max() < 1e-3


def test_routes_are_continuous_and_the_turn_route_turns_right(maps) -> None:
    for m in range(maps.num_maps):
        for r in range(maps.route_xy.shape[1]):
            q = int(maps.route_len[m, r])
            pts = maps.route_xy[m, r, :q]
            step = torch.linalg.vector_norm(pts[1:] - pts[:-1], dim=-1)
            assert step.max() < 1.6 and step.min() > 0.3, (m, r, step.max(), step.min())
            assert q > 400
        q = int(maps.route_len[m, 1])
        yaw = maps.route_yaw[m, 1, :q]
        turn = (yaw[-1] - yaw[q // 3] + math.pi) % (2 * math.pi) - math.pi
        # From the straight before the junction (the main road's heading there) to the side road.
        jm = maps.junction_xy[m]
        near = torch.linalg.vector_norm(maps.route_xy[m, 1, :q] - jm, dim=-1).argmin()
        before = maps.route_yaw[m, 1, max(int(near) - 20, 0)]
        turned = (yaw[-1] - before + math.pi) % (2 * math.pi) - math.pi
        assert abs(float(turned) + math.pi / 2) < 0.05, float(turned)
        del turn
