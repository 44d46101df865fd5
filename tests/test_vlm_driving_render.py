"""vlm_driving's batched rasterisers held to simple references on random scenes.

The references are the straightforward versions the batched code replaced: the road lookup with plain advanced
indexing, every pixel tested against every car (``[N, S, S, K]``), the BEV coloured one float layer at a time.
The batched versions compute the same float operations on the same values, so the images must be equal, not
close.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

import sim
from sim.tasks.vlm_driving import raster
from sim.tasks.vlm_driving.render import colour_bev
from sim.tasks.vlm_driving.roads import LINE_DASHED, LINE_NONE, RoadMaps
from sim.tasks.vlm_driving.traffic import CAR_LENGTH, CAR_WIDTH


# ----------------------------------------------------------------------------- references
def reference_locate(maps: RoadMaps, map_id: Tensor, xy: Tensor) -> dict[str, Tensor]:
    """:meth:`RoadMaps.locate` with advanced indexing (``map_id`` of xy's shape without its last dim)."""
    cfg = maps.cfg
    h, w = maps.grid_lane.shape[-2:]
    p = maps.lane_xy.shape[2]
    ix = (xy[..., 0] / cfg.cell).long().clamp(0, w - 1)
    iy = (xy[..., 1] / cfg.cell).long().clamp(0, h - 1)
    inside = (xy[..., 0] >= 0) & (xy[..., 0] < w * cfg.cell) & (xy[..., 1] >= 0) & (xy[..., 1] < h * cfg.cell)
    lane = torch.where(inside, maps.grid_lane[map_id, iy, ix].long(), -1)
    u = maps.grid_point[map_id, iy, ix].long()

    def relative(lane_idx: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        yaw = maps.lane_yaw[map_id, lane_idx, u]
        d = xy - maps.lane_xy[map_id, lane_idx, u]
        cos, sin = torch.cos(yaw), torch.sin(yaw)
        return d[..., 0] * cos + d[..., 1] * sin, -d[..., 0] * sin + d[..., 1] * cos, yaw

    safe = lane.clamp(min=0)
    along, lateral, yaw = relative(safe)
    side = torch.where(lateral > 0, 0, 1)
    beside = maps.lane_beside[map_id, safe, side]
    ok = (lane >= 0) & (beside >= 0) & maps.lane_valid[map_id, beside.clamp(min=0), u.clamp(max=p - 1)]
    along2, lateral2, yaw2 = relative(beside.clamp(min=0))
    swap = ok & (lateral2.abs() < lateral.abs())
    lane = torch.where(swap, beside, lane)
    along, lateral = torch.where(swap, along2, along), torch.where(swap, lateral2, lateral)
    yaw = torch.where(swap, yaw2, yaw)
    found = lane >= 0
    return {
        "lane": lane,
        "u": u,
        "lateral": torch.where(found, lateral, torch.full_like(lateral, 1e3)),
        "along": along,
        "yaw": yaw,
        "on_road": found & (lateral.abs() <= 0.5 * maps.lane_width),
        "junction": found & maps.lane_junction[map_id, lane.clamp(min=0), u],
    }


def reference_road_layers(maps: RoadMaps, map_id: Tensor, world: Tensor) -> dict[str, Tensor]:
    mid = map_id.view(-1, 1, 1).expand(world.shape[:-1])
    where = reference_locate(maps, mid, world)
    lane = where["lane"].clamp(min=0)
    lat, w = where["lateral"], 0.5 * maps.lane_width
    station = maps.lane_s[mid, lane, where["u"]] + where["along"]
    dash_on = torch.remainder(station, raster.DASH + raster.GAP) < raster.DASH

    def painted(kind: Tensor) -> Tensor:
        return (kind != LINE_NONE) & ((kind != LINE_DASHED) | dash_on)

    on_left = ((lat - w).abs() < raster.LINE_HALF_WIDTH) & painted(maps.lane_line_left[mid, lane])
    on_right = ((lat + w).abs() < raster.LINE_HALF_WIDTH) & painted(maps.lane_line_right[mid, lane])
    marking = (where["lane"] >= 0) & ~where["junction"] & (on_left | on_right)
    return {"road": where["on_road"] | marking, "marking": marking, "where": where, "mid": mid}


def reference_boxes_mask(
    points: Tensor, centre: Tensor, yaw: Tensor, present: Tensor, half_length: float, half_width: float
) -> Tensor:
    """``[N, S, S, K]``: every pixel ``points [N, S, S, 2]`` against every car ``centre [N, K, 2]``."""
    d = points.unsqueeze(-2) - centre[:, None, None]
    c, s = torch.cos(yaw)[:, None, None], torch.sin(yaw)[:, None, None]
    fwd = d[..., 0] * c + d[..., 1] * s
    side = -d[..., 0] * s + d[..., 1] * c
    return (fwd.abs() < half_length) & (side.abs() < half_width) & present[:, None, None]


def reference_camera(maps, map_id, ego_xy, ego_yaw, cars_xy, cars_yaw, present, colour, pixels) -> Tensor:
    world = raster.to_world(pixels, ego_xy, ego_yaw)
    layers = reference_road_layers(maps, map_id, world)
    img = torch.where(layers["road"].unsqueeze(-1), torch.tensor(raster.ASPHALT), torch.tensor(raster.GRASS))
    img = torch.where(layers["marking"].unsqueeze(-1), torch.tensor(raster.PAINT), img)
    n = ego_xy.shape[0]
    all_xy = torch.cat((cars_xy, ego_xy.unsqueeze(1)), 1)
    all_yaw = torch.cat((cars_yaw, ego_yaw.unsqueeze(1)), 1)
    all_present = torch.cat((present, torch.ones(n, 1, dtype=torch.bool)), 1)
    colours = torch.cat((colour, torch.tensor(raster.EGO_COLOUR).expand(n, 1, 3)), 1)
    body = reference_boxes_mask(world, all_xy, all_yaw, all_present, CAR_LENGTH / 2, CAR_WIDTH / 2)
    shift = 0.25 * CAR_LENGTH * torch.stack((torch.cos(all_yaw), torch.sin(all_yaw)), -1)
    screen = reference_boxes_mask(world, all_xy + shift, all_yaw, all_present, 0.1 * CAR_LENGTH, 0.4 * CAR_WIDTH)
    top = (body * torch.arange(1, body.shape[-1] + 1)).amax(-1)  # the last covering car wins
    has, pick = top > 0, (top - 1).clamp(min=0)
    car_rgb = colours.gather(1, pick.view(n, -1, 1).expand(-1, -1, 3)).view(*pick.shape, 3)
    on_screen = screen.gather(-1, pick.unsqueeze(-1)).squeeze(-1)
    img = torch.where(has.unsqueeze(-1), car_rgb, img)
    img = torch.where((has & on_screen).unsqueeze(-1), torch.tensor(25.0), img)
    return img.clamp(0, 255).to(torch.uint8)


def reference_colour_bev(bev: Tensor) -> Tensor:
    m = bev.float() / 255.0
    img = torch.zeros(*bev.shape[:3], 3) + m[..., 0:1] * torch.tensor([70.0, 70.0, 70.0])
    img = torch.where(m[..., 2:3] > 0, torch.tensor([40.0, 70.0, 170.0]), img)
    img = torch.where(m[..., 1:2] > 0, torch.tensor([230.0, 230.0, 230.0]), img)
    n_hist = bev.shape[-1] - 3
    for k in reversed(range(n_hist)):
        shade = 1.0 - 0.6 * k / max(n_hist, 1)
        img = torch.where(m[..., 3 + k : 4 + k] > 0, torch.tensor([230.0 * shade, 40.0, 40.0]), img)
    return img.clamp(0, 255).to(torch.uint8)


# ----------------------------------------------------------------------------- a random scene
@pytest.fixture(scope="module")
def scene() -> dict:
    """12 envs after a few scripted steps, and 11 random cars per env around each ego (overlapping each other and
    the ego, across the image border, some absent), plus far ones out of view."""
    env = sim.make("vlm_driving", num_envs=12, reward="expert", observation="bev", seed=3)
    policy = env.expert_policy()
    for _ in range(8):
        env.step(policy(env.observe()))
    g = torch.Generator().manual_seed(0)
    E, K = env.num_envs, 11
    near = (torch.rand(E, K, 2, generator=g) - 0.5) * 30.0  # ego frame, m: the 24 m camera and its border
    near[:, :3] = (torch.rand(E, 3, 2, generator=g) - 0.5) * 4.0  # on and around the ego
    near[:, -2:] = 200.0 * torch.randn(E, 2, 2, generator=g)  # far away
    c, s = torch.cos(env.ego[:, 2:3]), torch.sin(env.ego[:, 2:3])
    f, left = near[..., 0], near[..., 1]
    xy = env.ego[:, None, :2] + torch.stack((f * c - left * s, f * s + left * c), -1)
    yaw = (torch.rand(E, K, generator=g) - 0.5) * 2 * math.pi
    present = torch.rand(E, K, generator=g) < 0.8
    colour = torch.rand(E, K, 3, generator=g) * 255.0
    return {"env": env, "xy": xy, "yaw": yaw, "present": present, "colour": colour}


def test_locate_matches_advanced_indexing(scene) -> None:
    env = scene["env"]
    g = torch.Generator().manual_seed(1)
    xy = env.ego[:, None, :2] + (torch.rand(env.num_envs, 500, 2, generator=g) - 0.5) * 60.0
    mid = env.map_id.unsqueeze(-1).expand(-1, 500)
    ref = reference_locate(env.maps, mid, xy)
    for got in (env.maps.locate(mid, xy), env.maps.locate(env.map_id.unsqueeze(-1), xy)):  # full and broadcast ids
        for key, value in ref.items():
            assert torch.equal(got[key], value), key
        point = torch.arange(env.maps.lane_s.numel()).view(env.maps.lane_s.shape)
        assert torch.equal(got["point"], point[mid, ref["lane"].clamp(min=0), ref["u"]])
    assert bool(ref["on_road"].any()) and bool((~ref["on_road"]).any())


@pytest.mark.parametrize("size", [64, 100, 17])
def test_camera_equals_testing_every_pixel_against_every_car(scene, size: int) -> None:
    env = scene["env"]
    pixels = raster.ego_frame_pixels(size, size / env.cfg.camera_view_m, 0.5, env.device)
    args = (env.map_id, env.ego[:, :2], env.ego[:, 2], scene["xy"], scene["yaw"], scene["present"], scene["colour"])
    got = raster.render_camera(env.maps, *args, pixels, CAR_LENGTH, CAR_WIDTH)
    ref = reference_camera(env.maps, *args, pixels)
    assert got.shape == (env.num_envs, size, size, 3)
    assert torch.equal(got, ref), f"{float((got != ref).any(-1).float().mean()):.2e} of the pixels differ"
    ego = (ref == torch.tensor(raster.EGO_COLOUR).to(torch.uint8)).all(-1)
    assert bool(ego.any(-1).any(-1).all())  # every frame shows its ego


def test_env_camera_and_bev_equal_the_references(scene) -> None:
    env = scene["env"]
    xy, yaw = env.traffic.poses(env.map_id)
    args = (env.map_id, env.ego[:, :2], env.ego[:, 2], xy, yaw, env.traffic.present, env.traffic.colour)
    assert torch.equal(env.camera_frames(), reference_camera(env.maps, *args, env._camera_pixels))
    bev = env.bev()
    world = raster.to_world(env._bev_pixels, env.ego[:, :2], env.ego[:, 2])
    layers = reference_road_layers(env.maps, env.map_id, world)
    where, mid = layers["where"], layers["mid"]
    lane, rid = where["lane"].clamp(min=0), env.route_id.view(-1, 1, 1).expand(mid.shape)
    route = where["on_road"] & (where["u"] >= env.maps.route_lane_lo[mid, rid, lane])
    route &= where["u"] <= env.maps.route_lane_hi[mid, rid, lane]
    for k, channel in enumerate((layers["road"], layers["marking"], route)):
        assert torch.equal(bev[..., k], channel.to(torch.uint8) * 255), k
    assert bev.shape[-1] == 3 + env.cfg.bev_history


def test_colour_bev_equals_layer_by_layer_colouring() -> None:
    g = torch.Generator().manual_seed(2)
    for channels in (3, 4, 6):
        bev = (torch.rand(2, 33, 40, channels, generator=g) < 0.4).to(torch.uint8) * 255
        assert torch.equal(colour_bev(bev), reference_colour_bev(bev))
