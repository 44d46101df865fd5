"""vlm_driving's observation entries (the layout: ``spec.py``) and the images behind them: the ``ego`` and
``traffic`` vectors from the env's derived values, the BEV mask stack and the reward camera's frames
(:mod:`sim.tasks.vlm_driving.raster` draws both).

Each function reads a :class:`~sim.tasks.vlm_driving.env.VLMDrivingEnv` and returns new tensors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from sim.core.env import Obs
from sim.tasks.vlm_driving import raster
from sim.tasks.vlm_driving.spec import BEV_EGO_ROW, GROUP
from sim.tasks.vlm_driving.traffic import CAR_LENGTH, CAR_WIDTH

if TYPE_CHECKING:
    from sim.tasks.vlm_driving.env import VLMDrivingEnv


def observe(env: VLMDrivingEnv) -> Obs:
    """Every env's observation ``{GROUP: {entry: [E, 1, ...]}}`` from ``env.derived``."""
    cfg, d = env.cfg, env.derived
    herr = d["heading_err"]
    ego = torch.cat(
        (
            (env.speed() / 10.0).unsqueeze(-1),
            env.command,
            torch.stack((torch.sin(herr), torch.cos(herr)), -1),
            (d["route_offset"] / 3.0).clamp(-3, 3).unsqueeze(-1),
            (d["where_lateral"] / 2.0).clamp(-3, 3).unsqueeze(-1),
            d["on_road"].float().unsqueeze(-1),
            (d["waypoints"] / 20.0).flatten(1),
        ),
        -1,
    )
    out = {"ego": ego.unsqueeze(1)}
    K = cfg.num_observed_vehicles
    if K:
        out["traffic"] = traffic_obs(env, K).unsqueeze(1)
    if cfg.observation == "bev":
        out["bev"] = bev(env).unsqueeze(1)
    return {GROUP: out}


def traffic_obs(env: VLMDrivingEnv, K: int) -> Tensor:
    """``[E, 7 K]``: the ``K`` nearest cars in the ego frame, nearest first (zeros where fewer are present)."""
    d, E, dev = env.derived, env.num_envs, env.device
    V = d["cars_dist"].shape[1]
    feats = torch.zeros(E, K, 7, device=dev)
    if V == 0:
        return feats.flatten(1)
    k = min(K, V)
    dist, order = d["cars_dist"].topk(k, dim=-1, largest=False)
    local = d["cars_local"].gather(1, order.unsqueeze(-1).expand(-1, -1, 2))
    rel_yaw = d["cars_local_yaw"].gather(1, order)
    speed = env.traffic.v.gather(1, order)
    vel = speed.unsqueeze(-1) * torch.stack((torch.cos(rel_yaw), torch.sin(rel_yaw)), -1)
    ego_v = torch.stack((env.speed(), torch.zeros_like(env.speed())), -1).unsqueeze(1)
    present = torch.isfinite(dist)
    f = torch.cat(
        (
            local / 20.0,
            torch.cos(rel_yaw).unsqueeze(-1),
            torch.sin(rel_yaw).unsqueeze(-1),
            (vel - ego_v) / 10.0,
            present.unsqueeze(-1).float(),
        ),
        -1,
    )
    feats[:, :k] = torch.where(present.unsqueeze(-1), f, torch.zeros_like(f))
    return feats.flatten(1)


def camera_frames(env: VLMDrivingEnv, env_ids: Tensor | None = None, pixels: Tensor | None = None) -> Tensor:
    """The reward camera's frames ``uint8 [k, S, S, 3]`` of ``env_ids`` (all when None); ``pixels``: another
    ego-frame pixel grid (:func:`raster.ego_frame_pixels`, e.g. a video's), else the camera's own."""
    ids = torch.arange(env.num_envs, device=env.device) if env_ids is None else env_ids
    xy, yaw = env.traffic.poses(env.map_id)
    return raster.render_camera(
        env.maps,
        env.map_id[ids],
        env.ego[ids, :2],
        env.ego[ids, 2],
        xy[ids],
        yaw[ids],
        env.traffic.present[ids],
        env.traffic.colour[ids],
        env._camera_pixels if pixels is None else pixels,
        CAR_LENGTH,
        CAR_WIDTH,
    )


def bev(
    env: VLMDrivingEnv, env_ids: Tensor | None = None, pixels: Tensor | None = None, px_per_m: float | None = None
) -> Tensor:
    """The BEV mask stack ``uint8 [k, B, B, 3 + bev_history]`` of ``env_ids`` (all when None); ``pixels`` and
    ``px_per_m``: another grid of the same ego placement (a video's), else the observation's."""
    ids = torch.arange(env.num_envs, device=env.device) if env_ids is None else env_ids
    hist = [(h[ids, :, :2], h[ids, :, 2], h[ids, :, 3] > 0.5) for h in env.car_history]
    return raster.render_bev(
        env.maps,
        env.map_id[ids],
        env.route_id[ids],
        env.ego[ids, :2],
        env.ego[ids, 2],
        hist,
        env._bev_pixels if pixels is None else pixels,
        env.cfg.bev_px_per_m if px_per_m is None else px_per_m,
        BEV_EGO_ROW,
        CAR_LENGTH,
        CAR_WIDTH,
    )
