"""vlm_driving's terminations (collision, off road, overspeed, stalled, optionally wrong lane) and its step
metrics (route completion, mean speed, wrong-lane share, collision), from the env's derived values."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from sim.tasks.vlm_driving.env import VLMDrivingEnv


def terminations(env: VLMDrivingEnv) -> tuple[Tensor, dict[str, Tensor]]:
    """``(terminated [E], {reason: [E]})``."""
    cfg, d = env.cfg, env.derived
    reasons = {
        "collision": d["collision"],
        "off_road": d["where_lateral"].abs() > cfg.max_center_m,
        "overspeed": env.speed() > cfg.max_speed_kmh / 3.6,
        "stalled": env.stalled_s >= cfg.stalled_s,
    }
    if cfg.wrong_lane_terminates:
        reasons["wrong_lane"] = d["wrong_lane"]
    terminated = torch.stack(list(reasons.values())).any(0)
    return terminated, reasons


def step_metrics(env: VLMDrivingEnv) -> dict[str, Tensor]:
    """Each ``[E]``, of the episode so far."""
    d = env.derived
    t = (env.episode_step.float() * env.cfg.control_dt).clamp(min=env.cfg.control_dt)
    return {
        "route_completion": d["completion"],
        "route_left": 1.0 - d["completion"],
        "mean_speed_kmh": 3.6 * env.distance_m / t,
        "wrong_lane_share": env.wrong_lane_steps / env.episode_step.float().clamp(min=1.0),
        "collision": d["collision"].float(),
    }
