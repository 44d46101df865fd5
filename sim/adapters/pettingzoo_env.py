"""A covey task as PettingZoo parallel envs: per-agent dicts, for MARL libraries (BenchMARL, MARLlib, ...).

Agents are named ``"<group>_<i>"`` (``i`` the agent's index in its group), groups in spec order. Each
agent observes a ``Dict`` of its group's entries (``"policy"``, ``"state"``, image or graph parts; the
per-agent slice ``[*shape]`` of ``obs[group][entry]``, dtypes kept: ``sim.adapters.layout.entry_space``)
and acts with ``Box(-1, 1, (action_dim,), float32)`` (clamped). Rewards are per agent; covey's
``terminated`` / ``truncated`` are per env, so every agent of an env ends together.

* :class:`CoveyParallelEnv`: one PettingZoo env over a covey env with ``num_envs=1`` (numpy values,
  passes ``pettingzoo.test.parallel_api_test``). When the episode ends it returns the final
  observation, ``agents`` becomes empty and the caller resets (PettingZoo's contract).
* :class:`BatchedParallelEnv`: the same agents, spaces and dicts over a batch, every value with a
  leading ``num_envs`` axis (torch tensors on the env's device): ``obs[agent][entry]`` ``[num_envs, *shape]``,
  ``rewards[agent]`` ``[num_envs]``, ``actions[agent]`` ``[num_envs, action_dim]``. Finished envs reset
  inside ``step`` (covey's auto-reset); ``infos[agent]["final_obs"]`` holds the observation before it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from pettingzoo import ParallelEnv
from torch import Tensor

from sim.adapters import layout
from sim.core.env import MultiAgentEnv


def agent_names(env: MultiAgentEnv) -> list[tuple[str, str, int]]:
    """``[(agent name, group, index in group)]`` in spec order."""
    return [(f"{g}_{i}", g, i) for g, spec in env.spec.groups.items() for i in range(spec.n_agents)]


class _PerAgent:
    """Names, spaces and the dict <-> group-tensor conversions both PettingZoo views share."""

    env: MultiAgentEnv

    def _init_agents(self, env: MultiAgentEnv) -> None:
        self.env = env
        self._agents = agent_names(env)
        self.possible_agents = [name for name, _, _ in self._agents]
        self._obs_spaces = {
            name: spaces.Dict(
                {k: layout.entry_space(k, e, env.spec.groups[g]) for k, e in env.spec.groups[g].observations.items()}
            )
            for name, g, _ in self._agents
        }
        self._act_spaces = {name: layout.action_space(env.spec.groups[g]) for name, g, _ in self._agents}

    def observation_space(self, agent: str) -> spaces.Dict:
        return self._obs_spaces[agent]  # the same object every call (PettingZoo seeds spaces per agent)

    def action_space(self, agent: str) -> spaces.Box:
        return self._act_spaces[agent]

    def _split_obs(self, obs: dict[str, dict[str, Tensor]]) -> dict[str, dict[str, Tensor]]:
        """``obs[group][entry] [E, A, *shape]`` -> ``{agent: {entry: [E, *shape]}}`` (views)."""
        return {name: {k: v[:, i] for k, v in obs[g].items()} for name, g, i in self._agents}

    def _group_actions(self, actions: dict[str, Any], num_envs: int) -> dict[str, Tensor]:
        """``{agent: [num_envs, action_dim]}`` -> ``{group: [num_envs, n_agents, action_dim]}`` (clamped)."""
        missing = [name for name in self.possible_agents if name not in actions]
        if missing:
            raise ValueError(f"actions missing for agents {missing[:4]} (every agent acts each step)")
        out = {}
        for g, spec in self.env.spec.groups.items():
            per_agent = [layout.to_tensor(actions[f"{g}_{i}"], self.env.device) for i in range(spec.n_agents)]
            out[g] = torch.stack([a.reshape(num_envs, spec.action_dim) for a in per_agent], 1).clamp(-1.0, 1.0)
        return out

    def _split_reward(self, reward: dict[str, Tensor]) -> dict[str, Tensor]:
        return {name: reward[g][:, i] for name, g, i in self._agents}


class CoveyParallelEnv(_PerAgent, ParallelEnv):
    """``pettingzoo.ParallelEnv`` over a covey env with ``num_envs=1`` (numpy observations)."""

    metadata = {"name": "covey", "render_modes": [], "is_parallelizable": True}

    def __init__(self, env: MultiAgentEnv) -> None:
        if env.num_envs != 1:
            raise ValueError(
                f"CoveyParallelEnv wraps a covey env with num_envs=1, got {env.num_envs} (use BatchedParallelEnv)"
            )
        self._init_agents(env)
        self.agents: list[str] = []
        self.metadata = {**CoveyParallelEnv.metadata, "name": f"covey_{env.task_name}"}

    def _first(self, per_agent: dict[str, Any]) -> dict[str, Any]:
        return layout.to_numpy({name: {k: v[0] for k, v in d.items()} for name, d in per_agent.items()})

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.agents = list(self.possible_agents)
        obs = self.env.reset(seed=seed)
        return self._first(self._split_obs(obs)), {name: {} for name in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        if not self.agents:
            raise RuntimeError("the episode is over: call reset() before step()")
        _, reward, terminated, truncated, info = self.env.step(self._group_actions(actions, 1))
        # info["final_obs"] is the terminal observation where the env finished (and the observation elsewhere).
        obs = self._first(self._split_obs(info["final_obs"]))
        rewards = {name: float(r[0]) for name, r in self._split_reward(reward).items()}
        term, trunc = bool(terminated[0]), bool(truncated[0])
        terminations = dict.fromkeys(self.agents, term)
        truncations = dict.fromkeys(self.agents, trunc)
        infos: dict[str, dict] = {name: {} for name in self.agents}
        if term or trunc:
            self.agents = []
        return obs, rewards, terminations, truncations, infos

    def render(self) -> None:
        return None

    def close(self) -> None:
        return None


class BatchedParallelEnv(_PerAgent):
    """PettingZoo's parallel API with a batch axis: every value ``[num_envs, ...]`` (torch, env device).

    All agents stay live (finished envs reset inside ``step``), so ``agents == possible_agents``.
    ``step`` returns ``(obs, rewards, terminated, truncated, infos)``: per-agent dicts of
    ``[num_envs, ...]`` tensors; ``infos[agent]["final_obs"]`` is that agent's pre-reset observation dict,
    ``infos[agent]["episode"]`` covey's episode means (when an episode ended this step).
    """

    metadata = {"name": "covey_batched", "render_modes": []}

    def __init__(self, env: MultiAgentEnv) -> None:
        self._init_agents(env)
        self.agents = list(self.possible_agents)
        self.num_envs = env.num_envs

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        obs = self.env.reset(seed=seed)
        return self._split_obs(obs), {name: {} for name in self.agents}

    def step(self, actions: dict[str, Tensor | np.ndarray]) -> tuple[dict, dict, dict, dict, dict]:
        obs, reward, terminated, truncated, info = self.env.step(self._group_actions(actions, self.num_envs))
        final = self._split_obs(info["final_obs"])
        infos = {name: {"final_obs": final[name]} for name in self.agents}
        if "episode" in info:
            for name in self.agents:
                infos[name]["episode"] = info["episode"]
        return (
            self._split_obs(obs),
            self._split_reward(reward),
            dict.fromkeys(self.agents, terminated),
            dict.fromkeys(self.agents, truncated),
            infos,
        )
