"""vlm_driving's scripted driver (the expert baseline, privileged): pure pursuit on the route, IDM on the free gap
ahead."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from sim.physics.traffic import idm_acceleration
from sim.tasks.vlm_driving import raster
from sim.tasks.vlm_driving.roads import take

if TYPE_CHECKING:
    from sim.tasks.vlm_driving.env import VLMDrivingEnv


def scripted_actions(env: VLMDrivingEnv) -> Tensor:
    """``[E, 1, 2]``: steer by pure pursuit towards the route point ``max(6, 1.0 v)`` m ahead, and
    throttle/brake from IDM (desired speed = VLM-RL's 25 km/h target) on the nearest car in the path."""
    maps, p, d = env.maps, env.vehicle, env.derived
    mid, rid = env.map_id, env.route_id
    v = env.speed()
    lookahead = (1.0 * v).clamp(min=6.0)
    s_target = take(maps.route_s, mid, rid, env.route_i) + lookahead
    goal = env._route_point_at(s_target.unsqueeze(-1))
    local, _ = raster.to_ego_frame(goal, torch.zeros_like(s_target.unsqueeze(-1)), env.ego[:, :2], env.ego[:, 2])
    local = local.squeeze(1)
    alpha = torch.atan2(local[:, 1], local[:, 0])
    dist = torch.linalg.vector_norm(local, dim=-1).clamp(min=1.0)
    steer = torch.atan2(2.0 * p.wheelbase * torch.sin(alpha), dist)
    target_v = torch.full_like(v, env.cfg.vlm.target_speed_kmh / 3.6)
    accel = idm_acceleration(v, target_v, d["gap_ahead"], torch.zeros_like(v), env.idm)
    throttle = torch.where(accel >= 0, accel / p.max_accel, accel / p.max_brake)
    return torch.stack((steer / p.max_steer, throttle), -1).clamp(-1.0, 1.0).unsqueeze(1)
