"""vlm_driving's observation and action layout: the ``ego`` and ``traffic`` vectors, the ``bev`` image with
``observation=bev``, the steering and pedal action; ``observations.py`` fills the entries."""

from __future__ import annotations

import torch

from sim.core.spec import EnvSpec, GroupSpec, ObsEntry, ObsTerm
from sim.physics.vehicle import VehicleParams
from sim.tasks.vlm_driving.config import DrivingCfg

GROUP = "ego"
BEV_EGO_ROW = 0.75  # the ego sits 3/4 of the way down the BEV


def build_spec(cfg: DrivingCfg, task: str) -> EnvSpec:
    """The env spec of ``cfg``: one ``ego`` agent per env."""
    ego_terms = (
        ObsTerm("speed", 1, "10 m/s"),
        ObsTerm("steer", 1, "normalised", "", "applied steering command"),
        ObsTerm("throttle", 1, "normalised", "", "applied throttle (+) / brake (-) command"),
        ObsTerm("heading_error", 2, "sin, cos", "route"),
        ObsTerm("route_offset", 1, "3 m", "route", "signed distance left of the route"),
        ObsTerm("lane_offset", 1, "2 m", "lane", "signed distance left of the nearest lane centre"),
        ObsTerm("on_road", 1, "flag"),
        ObsTerm("waypoints", 2 * cfg.num_waypoints, "20 m", "ego", "next route waypoints (x fwd, y left)"),
    )
    traffic_terms = tuple(
        ObsTerm(f"car{k}", 7, "20 m, -, 10 m/s, flag", "ego", "x, y, cos, sin rel. heading, vx, vy, present")
        for k in range(cfg.num_observed_vehicles)
    )
    entries = {"ego": ObsEntry((sum(t.size for t in ego_terms),), terms=ego_terms)}
    if traffic_terms:
        entries["traffic"] = ObsEntry((7 * cfg.num_observed_vehicles,), terms=traffic_terms)
    state_obs = tuple(entries)
    actor_obs: tuple[str, ...] = state_obs
    if cfg.observation == "bev":
        b, c = cfg.bev_size, 3 + cfg.bev_history
        entries["bev"] = ObsEntry(
            (b, b, c),
            torch.uint8,
            kind="image",
            units="mask 0/255",
            description=f"ego-centred BEV, {cfg.bev_px_per_m:g} px/m, heading up, ego at row {BEV_EGO_ROW:g}; "
            f"channels road, markings, route, cars now and {cfg.bev_history - 1} past steps",
        )
        actor_obs = ("bev", "ego")
    group = GroupSpec(
        n_agents=1,
        observations=entries,
        action_dim=2,
        action_names=("steer", "throttle_brake"),
        # The pedal as in CARLA (VLM-RL): +1 full throttle (max_accel), -1 full brake (max_brake); the car maps it.
        action_units=("rad", "pedal"),
        action_scale=(VehicleParams().max_steer, 1.0),
        actor_obs=actor_obs,
        critic_obs=state_obs,
    )
    return EnvSpec(
        task=task,
        groups={GROUP: group},
        control_dt=cfg.control_dt,
        physics_dt=cfg.control_dt,
        max_episode_steps=round(cfg.episode_length_s / cfg.control_dt),
    )
