"""vlm_driving's derived values: what the observation, reward and termination read, from the state (route tracking
and progress, the route's waypoints ahead, the lane lookup, the cars in the ego frame, collision, the free gap
ahead), and the route geometry around the ego (the points ahead handed to the traffic spawner, interpolated points).

Each function reads a :class:`~sim.tasks.vlm_driving.env.VLMDrivingEnv` and returns new tensors.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from sim.physics.boxes2d import boxes_overlap
from sim.tasks.vlm_driving import raster
from sim.tasks.vlm_driving.roads import take
from sim.tasks.vlm_driving.traffic import CAR_LENGTH, CAR_WIDTH

if TYPE_CHECKING:
    from sim.tasks.vlm_driving.env import VLMDrivingEnv

ROUTE_AHEAD = 100  # route points (about 1 m apart) handed to the traffic spawner


def wrap(angle: Tensor) -> Tensor:
    return torch.atan2(torch.sin(angle), torch.cos(angle))


def derived_of(env: VLMDrivingEnv, rows: Tensor | None) -> tuple[Tensor, dict[str, Tensor]]:
    """``(route point [k], derived values)`` of the envs ``rows [k]`` (all when None): :meth:`VLMDrivingEnv._derive`'s
    values, computed per env (a reset recomputes its few envs only)."""
    maps, cfg, dev = env.maps, env.cfg, env.device

    def pick(x: Tensor) -> Tensor:
        return x if rows is None else x[rows]

    xy, yaw = pick(env.ego[:, :2]), pick(env.ego[:, 2])
    mid, rid = pick(env.map_id), pick(env.route_id)
    E = xy.shape[0]
    # Route tracking: the nearest route point in a window ahead of the last one.
    q = maps.route_xy.shape[2]
    window = (pick(env.route_i).unsqueeze(-1) + torch.arange(-2, 16, device=dev)).clamp(0, q - 1)
    pts = take(maps.route_xy, mid.unsqueeze(-1), rid.unsqueeze(-1), window)
    nearest = torch.linalg.vector_norm(pts - xy.unsqueeze(1), dim=-1).argmin(-1)
    route_i = window.gather(1, nearest.unsqueeze(-1)).squeeze(-1)
    r_xy = take(maps.route_xy, mid, rid, route_i)
    r_yaw = take(maps.route_yaw, mid, rid, route_i)
    d = xy - r_xy
    route_offset = -d[:, 0] * torch.sin(r_yaw) + d[:, 1] * torch.cos(r_yaw)
    heading_err = wrap(yaw - r_yaw)
    s_now = take(maps.route_s, mid, rid, route_i)
    progress = s_now - take(maps.route_s, mid, rid, pick(env.route_start))
    completion = (progress / cfg.route_length_m).clamp(0.0, 1.0)
    # Waypoints every waypoint_spacing_m ahead on the route.
    targets = s_now.unsqueeze(-1) + cfg.waypoint_spacing_m * torch.arange(1, cfg.num_waypoints + 1, device=dev)
    waypoints = route_point_at(env, targets, (mid, rid, route_i))
    wp_local, _ = raster.to_ego_frame(waypoints, torch.zeros_like(targets), xy, yaw)
    where = maps.locate(mid, xy)
    wrong = where["on_road"] & ~where["junction"] & (wrap(yaw - where["yaw"]).abs() > math.radians(120.0))
    # Cars: poses, collision, the nearest ones, the free gap ahead.
    cars_xy, cars_yaw = env.traffic.poses(mid, rows)
    present = pick(env.traffic.present)
    half_ego = torch.tensor([CAR_LENGTH / 2, CAR_WIDTH / 2], device=dev)
    collision = (boxes_overlap(xy.unsqueeze(1), yaw.unsqueeze(1), half_ego, cars_xy, cars_yaw, half_ego) & present).any(
        -1
    )
    local, local_yaw = raster.to_ego_frame(cars_xy, cars_yaw, xy, yaw)
    dist = torch.where(present, torch.linalg.vector_norm(local, dim=-1), math.inf)
    in_path = present & (local[..., 0] > 0) & (local[..., 1].abs() < 2.5)
    gap_ahead = (
        torch.where(in_path, local[..., 0] - CAR_LENGTH, math.inf).amin(-1)
        if present.shape[1]
        else (torch.full((E,), math.inf, device=dev))
    )
    return route_i, {
        "where_lateral": where["lateral"],
        "on_road": where["on_road"],
        "wrong_lane": wrong,
        "route_offset": route_offset,
        "heading_err": heading_err,
        "progress": progress,
        "completion": completion,
        "waypoints": wp_local,
        "collision": collision,
        "cars_xy": cars_xy,
        "cars_local": local,
        "cars_local_yaw": local_yaw,
        "cars_dist": dist,
        "cars_yaw": cars_yaw,
        "gap_ahead": gap_ahead,
    }


def route_ahead(env: VLMDrivingEnv, env_ids: Tensor | None = None) -> Tensor:
    """``[E, ROUTE_AHEAD, 2]`` route points from the ego's on (``[k, ...]`` of ``env_ids`` when given)."""
    q = env.maps.route_xy.shape[2]
    route_i, mid, rid = env.route_i, env.map_id, env.route_id
    if env_ids is not None:
        route_i, mid, rid = route_i[env_ids], mid[env_ids], rid[env_ids]
    idx = (route_i.unsqueeze(-1) + torch.arange(ROUTE_AHEAD, device=env.device)).clamp(max=q - 1)
    return take(env.maps.route_xy, mid.unsqueeze(-1), rid.unsqueeze(-1), idx)


def route_point_at(
    env: VLMDrivingEnv, station: Tensor, route_ids: tuple[Tensor, Tensor, Tensor] | None = None
) -> Tensor:
    """Route positions ``[E, K, 2]`` at arc lengths ``station [E, K]`` (m), interpolated between route points,
    up to ~60 m past the ego's route point (a search in that window of points about 1 m apart).
    ``route_ids``: ``(map_id, route_id, route point)`` ``[k]`` each, for other envs than all (default)."""
    maps, q = env.maps, env.maps.route_xy.shape[2]
    mid, rid, route_i = (env.map_id, env.route_id, env.route_i) if route_ids is None else route_ids
    window = (route_i.unsqueeze(-1) + torch.arange(64, device=env.device)).clamp(max=q - 1)
    mid, rid = mid.unsqueeze(-1), rid.unsqueeze(-1)
    s = take(maps.route_s, mid, rid, window)
    pos = torch.searchsorted(s, station.contiguous()).clamp(1, window.shape[1] - 1)
    s0, s1 = s.gather(1, pos - 1), s.gather(1, pos)
    frac = ((station - s0) / (s1 - s0).clamp(min=1e-6)).clamp(0.0, 1.0).unsqueeze(-1)
    a = take(maps.route_xy, mid, rid, window.gather(1, pos - 1))
    b = take(maps.route_xy, mid, rid, window.gather(1, pos))
    return a + (b - a) * frac
