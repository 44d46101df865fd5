"""A covey task as an rsl_rl ``VecEnv`` (rsl-rl-lib 5.x: TensorDict observations), for rsl_rl's runners.

rsl_rl learns one policy over a batch of single agents, so the agents of the controlled group become
rows: row ``e * n_agents + a`` is agent ``a`` of env ``e`` (``num_envs = env.num_envs * n_agents``,
one shared policy: covey's parameter sharing). Per row:

* observations: a ``TensorDict`` with one key per entry of the group (``"policy"``, ``"state"``, image
  or graph parts), ``[num_envs * n_agents, *shape]`` in the entry's dtype (uint8 images stay uint8 and
  HWC; rsl_rl's ``CNNModel`` wants float CHW, so an image learner converts in its model). rsl_rl's
  ``obs_groups`` pick keys: :attr:`RslRlVecEnv.obs_groups` maps ``actor`` / ``critic`` to the group's
  ``actor_obs`` / ``critic_obs`` (MAPPO's privileged ``state`` critic, as covey trains);
* actions ``[num_envs * n_agents, action_dim]`` (clamped to [-1, 1]); with ``action_prior=True`` the
  group's fixed linear prior (``GroupSpec.action_prior``, which covey policies bake into their actor)
  is added here, ``a = prior(obs["policy"]) + learned``, so rsl_rl learns the same residual covey does;
* rewards ``[rows]``, dones ``[rows]`` (an env's agents end together), ``extras["time_outs"]`` the
  truncations (rsl_rl bootstraps them with the value of the pre-step observation) and
  ``extras["log"]`` covey's episode means (``"/episode/return"``, ``"/metrics/..."``) when one ended.

Finished envs reset inside ``step`` (rsl_rl's convention as well). Tasks with several groups need
``group=``; the other groups then receive zero actions.
"""

from __future__ import annotations

import torch
from rsl_rl.env import VecEnv
from tensordict import TensorDict
from torch import Tensor

from sim.core.env import MultiAgentEnv


class RslRlVecEnv(VecEnv):
    """rsl_rl ``VecEnv`` over one group of a covey env (agents as rows).

    Args:
        env: a covey env (``sim.make(task, num_envs=..., device=...)``).
        group: the group rsl_rl controls (default: the task's only group).
        action_prior: add the group's fixed action prior to rsl_rl's actions (residual learning).
    """

    def __init__(self, env: MultiAgentEnv, group: str | None = None, action_prior: bool = False) -> None:
        groups = env.spec.groups
        if group is None:
            if len(groups) != 1:
                raise ValueError(f"{env.task_name} has groups {sorted(groups)}: name the one rsl_rl controls (group=)")
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
        self.obs_groups = {"actor": list(self.spec.actor_obs), "critic": list(self.spec.critic_obs)}
        prior_entry = self.spec.observations[self.spec.actor_obs[0]]
        self._prior_key = self.spec.actor_obs[0]
        self._prior = self.spec.action_prior_matrix().to(self.device) if action_prior else None
        if self._prior is not None and not self.spec.action_prior:
            self._prior = None  # the group has none: adding zeros is a no-op
        if self._prior is not None and prior_entry.kind != "vector":
            raise ValueError(f"the action prior reads entry {self._prior_key!r}, which is not a vector")
        self._obs = env.reset()

    # ----------------------------------------------------------------- rows <-> (env, agent)
    def _rows(self, x: Tensor) -> Tensor:
        """``[E, A, *shape]`` -> ``[E * A, *shape]`` (a view)."""
        return x.reshape(self.num_envs, *x.shape[2:])

    def _per_agent(self, x: Tensor) -> Tensor:
        """``[E]`` per-env flags or values -> ``[E * A]`` (each agent of an env gets its env's)."""
        return x.repeat_interleave(self.n_agents)

    def _wrap(self, obs: dict[str, dict[str, Tensor]]) -> TensorDict:
        entries = {key: self._rows(value) for key, value in obs[self.group].items()}
        return TensorDict(entries, batch_size=[self.num_envs], device=self.device)

    # ----------------------------------------------------------------- VecEnv
    @property
    def episode_length_buf(self) -> Tensor:
        """``[rows]`` long: each row's env's step in its episode (rsl_rl randomises it at the start)."""
        return self._per_agent(self.env.episode_step)

    @episode_length_buf.setter
    def episode_length_buf(self, value: Tensor) -> None:
        # One counter per env: the first agent's row of each env decides.
        self.env.episode_step = value.reshape(self.env.num_envs, self.n_agents)[:, 0].to(self.env.episode_step)

    def get_observations(self) -> TensorDict:
        return self._wrap(self._obs)

    def reset(self, seed: int | None = None) -> TensorDict:
        """Reset every env (reseeding covey's generator when ``seed`` is given)."""
        self._obs = self.env.reset(seed=seed)
        return self._wrap(self._obs)

    def step(self, actions: Tensor) -> tuple[TensorDict, Tensor, Tensor, dict]:
        """``actions [rows, action_dim]`` -> ``(obs, rewards [rows], dones [rows], extras)``."""
        act = actions.to(self.device, torch.float32).reshape(self.env.num_envs, self.n_agents, self.num_actions)
        if self._prior is not None:
            act = act + self._obs[self.group][self._prior_key] @ self._prior
        all_actions = self.env.zero_actions()
        all_actions[self.group] = act.clamp(-1.0, 1.0)
        self._obs, reward, terminated, truncated, info = self.env.step(all_actions)
        extras: dict = {"time_outs": self._per_agent(truncated), "log": {}}
        if "episode" in info:
            extras["log"] = {f"/episode/{k}": v for k, v in info["episode"].items()}
        dones = self._per_agent(terminated | truncated)
        return self._wrap(self._obs), self._rows(reward[self.group]), dones, extras
