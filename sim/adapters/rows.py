"""Agents as rows: one group of a covey env seen as a batch of single agents (rsl_rl, Isaac Gym style).

Row ``e * n_agents + a`` is agent ``a`` of env ``e``: ``[E, A, *shape]`` tensors become
``[E * A, *shape]`` views and per-env values (dones, time-outs) repeat per agent, so one shared policy
acts for every agent (covey's parameter sharing). Tasks with several groups name the controlled one;
the other groups receive zero actions.
"""

from __future__ import annotations

import torch
from torch import Tensor

from sim.core.env import MultiAgentEnv


class AgentRows:
    """Shared state and conversions of the rows adapters (:class:`~sim.adapters.rsl_rl_env.RslRlVecEnv`,
    :class:`~sim.adapters.vectask_env.VecTaskView`).

    Args:
        env: a covey env (``sim.make(task, num_envs=..., device=...)``).
        group: the controlled group (default: the task's only group).
        action_prior: add the group's fixed linear action prior (``GroupSpec.action_prior``, which covey's
            policies bake into their actors) to the learner's actions: ``a = prior(obs[actor_obs[0]]) + learned``.
    """

    def __init__(self, env: MultiAgentEnv, group: str | None = None, action_prior: bool = False) -> None:
        groups = env.spec.groups
        if group is None:
            if len(groups) != 1:
                raise ValueError(f"{env.task_name} has groups {sorted(groups)}: name the one the learner controls")
            group = next(iter(groups))
        if group not in groups:
            raise ValueError(f"group {group!r} is not one of {sorted(groups)}")
        self.env = env
        self.group = group
        self.spec = groups[group]
        self.n_agents = self.spec.n_agents
        self.num_envs = env.num_envs * self.n_agents
        self.num_actions = self.spec.action_dim
        self.max_episode_length = env.max_episode_steps
        self.device = env.device
        self.cfg = {"task": env.task_name, "group": group, "n_agents": self.n_agents, "action_prior": action_prior}
        self._prior_key = self.spec.actor_obs[0]
        self._prior: Tensor | None = None
        if action_prior and self.spec.action_prior:  # a group without one: adding zeros is a no-op
            if self.spec.observations[self._prior_key].kind != "vector":
                raise ValueError(f"the action prior reads entry {self._prior_key!r}, which is not a vector")
            self._prior = self.spec.action_prior_matrix().to(self.device)
        self._obs = env.reset()

    def _rows(self, x: Tensor) -> Tensor:
        """``[E, A, *shape]`` -> ``[E * A, *shape]`` (a view)."""
        return x.reshape(self.num_envs, *x.shape[2:])

    def _per_agent(self, x: Tensor) -> Tensor:
        """``[E]`` per-env flags or values -> ``[E * A]`` (each agent of an env gets its env's)."""
        return x.repeat_interleave(self.n_agents)

    @property
    def episode_length_buf(self) -> Tensor:
        """``[rows]`` long: each row's env's step in its episode (learners may randomise it at the start)."""
        return self._per_agent(self.env.episode_step)

    @episode_length_buf.setter
    def episode_length_buf(self, value: Tensor) -> None:
        # One counter per env: the first agent's row of each env decides.
        self.env.episode_step = value.reshape(self.env.num_envs, self.n_agents)[:, 0].to(self.env.episode_step)

    def _step_rows(self, actions: Tensor) -> tuple[Tensor, Tensor, Tensor, dict]:
        """Step with ``actions [rows, action_dim]`` (prior added, clamped to [-1, 1]); stores the new
        observation and returns ``(reward [rows], terminated [E], truncated [E], covey info)``."""
        act = actions.to(self.device, torch.float32).reshape(self.env.num_envs, self.n_agents, self.num_actions)
        if self._prior is not None:
            act = act + self._obs[self.group][self._prior_key] @ self._prior
        all_actions = self.env.zero_actions()
        all_actions[self.group] = act.clamp(-1.0, 1.0)
        self._obs, reward, terminated, truncated, info = self.env.step(all_actions)
        return self._rows(reward[self.group]), terminated, truncated, info
