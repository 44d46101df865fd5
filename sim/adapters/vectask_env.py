"""A covey task in Isaac Gym's ``VecTask`` convention (IsaacGymEnvs, rl_games-era code).

The controlled group's agents are rows (:mod:`sim.adapters.rows`: ``num_envs = env.num_envs * n_agents``)
and the observation is flat, as ``VecTask`` has it:

* ``obs_buf``    ``[rows, num_obs]`` float32: the group's ``actor_obs`` vector entries concatenated;
* ``states_buf`` ``[rows, num_states]`` float32: its ``critic_obs`` entries (the privileged ``state``);
* ``rew_buf`` ``[rows]``, ``reset_buf`` ``[rows]`` long (1 where the env's episode ended this step),
  ``timeout_buf`` ``[rows]`` long (the time-limit ends), ``progress_buf`` ``[rows]`` (episode step),
  ``extras`` (``"time_outs"`` bool ``[rows]``; ``"episode"``: covey's episode means when one ended).

``step(actions [rows, num_actions]) -> ({"obs": obs_buf, "states": states_buf}, rew_buf, reset_buf, extras)``;
finished envs are already reset (covey resets inside ``step``; ``VecTask`` resets at the start of the
next step, which a learner does not see). Only float vector entries fit a flat buffer: a task whose
actor or critic reads an image or graph entry is refused with the entry named (use
:class:`~sim.adapters.rsl_rl_env.RslRlVecEnv` or the Gymnasium adapter, which carry every kind).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from sim.adapters.rows import AgentRows
from sim.core.env import MultiAgentEnv


class VecTaskView(AgentRows):
    """Isaac Gym ``VecTask``-style buffers over one group of a covey env (agents as rows).

    Args:
        env: a covey env (``sim.make(task, num_envs=..., device=...)``).
        group: the controlled group (default: the task's only group).
        action_prior: add the group's fixed action prior to the actions (residual learning).

    Raises:
        ValueError: an actor or critic entry that is not a float vector (named in the message).
    """

    def __init__(self, env: MultiAgentEnv, group: str | None = None, action_prior: bool = False) -> None:
        super().__init__(env, group, action_prior)
        for side, names in (("actor", self.spec.actor_obs), ("critic", self.spec.critic_obs)):
            for name in names:
                entry = self.spec.observations[name]
                if entry.kind != "vector":
                    raise ValueError(
                        f"{env.task_name}: {side} entry {name!r} is a {entry.kind}; the VecTask view carries float "
                        "vectors only (use RslRlVecEnv or CoveyVectorEnv)"
                    )
        self.num_obs = sum(self.spec.observations[k].shape[0] for k in self.spec.actor_obs)
        self.num_states = sum(self.spec.observations[k].shape[0] for k in self.spec.critic_obs)
        self.clip_actions, self.clip_obs = 1.0, float("inf")
        self.rew_buf = torch.zeros(self.num_envs, device=self.device)
        self.reset_buf = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)
        self.timeout_buf = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)
        self.extras: dict = {}
        self._fill(self._obs)

    # ----------------------------------------------------------------- spaces (gym-style, one row)
    @property
    def observation_space(self):
        from gymnasium import spaces

        return spaces.Box(-np.inf, np.inf, (self.num_obs,), np.float32)

    @property
    def state_space(self):
        from gymnasium import spaces

        return spaces.Box(-np.inf, np.inf, (self.num_states,), np.float32)

    @property
    def action_space(self):
        from gymnasium import spaces

        return spaces.Box(-1.0, 1.0, (self.num_actions,), np.float32)

    @property
    def progress_buf(self) -> Tensor:
        """``[rows]`` long: each row's env's step in its episode."""
        return self.episode_length_buf

    def get_number_of_agents(self) -> int:
        return 1  # rows are single agents (rl_games asks)

    # ----------------------------------------------------------------- VecTask
    def _fill(self, obs: dict[str, dict[str, Tensor]]) -> None:
        entries = obs[self.group]
        self.obs_buf = torch.cat([self._rows(entries[k]) for k in self.spec.actor_obs], -1)
        self.states_buf = torch.cat([self._rows(entries[k]) for k in self.spec.critic_obs], -1)

    def _obs_dict(self) -> dict[str, Tensor]:
        return {"obs": self.obs_buf, "states": self.states_buf}

    def reset(self, seed: int | None = None) -> dict[str, Tensor]:
        """Reset every env (reseeding covey's generator when ``seed`` is given); ``{"obs", "states"}``."""
        self._obs = self.env.reset(seed=seed)
        self._fill(self._obs)
        return self._obs_dict()

    def step(self, actions: Tensor) -> tuple[dict[str, Tensor], Tensor, Tensor, dict]:
        """``actions [rows, num_actions]`` -> ``({"obs", "states"}, rew_buf, reset_buf, extras)``."""
        self.rew_buf, terminated, truncated, info = self._step_rows(actions)
        self.reset_buf = self._per_agent(terminated | truncated).long()
        self.timeout_buf = self._per_agent(truncated).long()
        self.extras = {"time_outs": self.timeout_buf.bool()}
        if "episode" in info:
            self.extras["episode"] = info["episode"]
        self._fill(self._obs)
        return self._obs_dict(), self.rew_buf, self.reset_buf, self.extras
