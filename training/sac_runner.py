"""SAC training: the :class:`~training.runner.Runner` loop with the off-policy algorithm of training/sac.py.

    python train.py task=point_reach algo=sac                       # configs/algo/sac.yaml: VLM-RL's settings
    python train.py task=point_reach algo=sac sac.learning_starts=2000 num_envs=16 sac.lr=3e-4

Each iteration collects ``train.rollout_steps`` env steps of ``num_envs`` envs into the replay
buffers (uniform random actions until ``sac.learning_starts`` env steps), then runs
``sac.gradient_steps`` updates. Everything else is the PPO runner's: the run directory, CSV and
wandb logging, deterministic evaluation (the actor's ``tanh(mean)``), ``best.pt`` / ``latest.pt``,
Ctrl-C handling, resume (weights, optimisers, Q networks and targets, temperatures, RNG and env
state), ``export.py`` and ``evaluate.py``, since the actors are ordinary ``ActorCritic`` modules with
``algo.policy.squash=true``.

The replay buffer is not saved (at VLM-RL's 100k transitions of camera-sized observations it
would be gigabytes): after a resume it restarts empty and the updates wait until it holds a batch.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import torch

from sim.core.config import build_config
from training.rollout import EpisodeStats
from training.runner import Runner
from training.sac import SAC, SACCfg


class SACRunner(Runner):
    """:class:`~training.runner.Runner` with SAC in place of PPO (``algo=sac``)."""

    def __init__(self, cfg: Mapping[str, Any]) -> None:
        self.sac_cfg = build_config(SACCfg, cfg.get("sac", {}), where="sac")
        cfg = copy.deepcopy(dict(cfg))
        # SAC's actions are tanh-squashed: the saved config says so, so that export and evaluation
        # rebuild the same deterministic actor (tanh(mean)) from the checkpoint.
        cfg.setdefault("algo", {}).setdefault("policy", {})["squash"] = True
        super().__init__(cfg)
        if self.cfg.get("resume"):
            print("resume: SAC's replay buffer is not checkpointed: it restarts empty (updates wait for a batch)")

    def make_algorithm(self, num_envs: int) -> SAC:
        # SAC's settings are sac.* (SACCfg); from algo (PPOCfg) only the networks and the obs normaliser
        return SAC(
            self.models,
            self.sac_cfg,
            normalize_obs=self.ppo_cfg.normalize_obs,
            device=self.device,
            generator=self.generator,
        )

    def collect(self, obs: dict) -> tuple[dict, EpisodeStats]:
        """``train.rollout_steps`` env steps into the replay buffers (inference mode); random actions in the warm-up."""
        episodes = EpisodeStats()
        guard = torch.zeros(2, dtype=torch.long, device=self.device)
        step = self.state.global_step
        with torch.inference_mode():
            for _ in range(self.train_cfg.rollout_steps):
                if step < self.sac_cfg.learning_starts:
                    actions = {
                        name: a for name, a in self.env.sample_actions(self.generator).items() if name in self.models
                    }
                else:
                    actions = self.alg.act(obs)
                actions.update(self.other_actions(obs))
                next_obs, reward, terminated, truncated, info = self.env.step(actions)
                # info["final_obs"]: the observation before the auto-reset, so truncations bootstrap from it.
                self.alg.add(obs, actions, reward, info["final_obs"], terminated)
                self.after_env_step(terminated, truncated, info)
                obs = next_obs
                step += self.env.num_envs
                if "episode" in info:
                    episodes.add(info["episode"])
                if "nonfinite_reset" in info:
                    guard += torch.stack([info["actions_out_of_range"].sum(), info["nonfinite_reset"].sum()])
        self.alg.env_steps = step
        self._guard_counts = guard.tolist()
        return obs, episodes
