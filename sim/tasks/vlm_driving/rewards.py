"""vlm_driving's rewards (``reward=``): the vision-language model's wiring (VLM-RL's contrasting goals or VLM-RM,
:mod:`sim.rewards.vision_language`), the vehicle-state inputs of VLM-RL's synthesis, the privileged ``expert``
safety term and CaRL's ``route_completion``."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from sim.tasks.vlm_driving.config import DrivingCfg
from sim.tasks.vlm_driving.spec import GROUP

if TYPE_CHECKING:
    from sim.rewards.vision_language import VisionLanguageReward
    from sim.tasks.vlm_driving.env import VLMDrivingEnv


def load_vlm(cfg: DrivingCfg, device: torch.device) -> VisionLanguageReward:
    """The vision-language reward of ``reward=vlm`` (VLM-RL) or ``vlm_rm``, its model loaded on ``device``."""
    from sim.rewards.vision_language import VisionLanguageReward, load_backend

    vcfg = replace(cfg.vlm, mode="vlm_rm" if cfg.reward == "vlm_rm" else "vlm_rl")
    return VisionLanguageReward(load_backend(vcfg, device), vcfg)


def reward_state(env: VLMDrivingEnv, terminated: Tensor) -> dict[str, Tensor]:
    """The vehicle-state inputs of VLM-RL's synthesis (``STATE_KEYS``), each ``[E]``."""
    return {
        "speed": env.speed(),
        "center_dist": env.derived["where_lateral"].abs(),
        "heading_err": env.derived["heading_err"],
        "lateral_std": env.lateral_hist.std(-1),
        "terminated": terminated,
    }


def rewards(env: VLMDrivingEnv, terminated: Tensor) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """This step's reward ``{GROUP: [E, 1]}`` and its term ``{cfg.reward: [E]}``; advances ``env.progress_prev``."""
    cfg, d = env.cfg, env.derived
    progress = d["progress"]
    delta = progress - env.progress_prev
    env.progress_prev = progress
    if cfg.reward == "route_completion":
        r = cfg.route_completion_scale * delta
    else:
        from sim.rewards.vision_language import hierarchical_reward

        state = env.reward_state(terminated)
        if cfg.reward == "expert":
            safety = ((d["gap_ahead"] - 5.0) / 15.0).clamp(0.0, 1.0)
            r = hierarchical_reward(safety, *state.values(), cfg.vlm)
        else:
            r = env.vlm.synthesize(env.score, state)
    return {GROUP: r.unsqueeze(-1)}, {cfg.reward: r}
