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

from rsl_rl.env import VecEnv
from tensordict import TensorDict
from torch import Tensor

from sim.adapters.rows import AgentRows
from sim.core.env import MultiAgentEnv


class RslRlVecEnv(AgentRows, VecEnv):
    """rsl_rl ``VecEnv`` over one group of a covey env (agents as rows).

    Args:
        env: a covey env (``sim.make(task, num_envs=..., device=...)``).
        group: the group rsl_rl controls (default: the task's only group).
        action_prior: add the group's fixed action prior to rsl_rl's actions (residual learning).
    """

    def __init__(self, env: MultiAgentEnv, group: str | None = None, action_prior: bool = False) -> None:
        super().__init__(env, group, action_prior)
        self.obs_groups = {"actor": list(self.spec.actor_obs), "critic": list(self.spec.critic_obs)}

    def _wrap(self, obs: dict[str, dict[str, Tensor]]) -> TensorDict:
        entries = {key: self._rows(value) for key, value in obs[self.group].items()}
        return TensorDict(entries, batch_size=[self.num_envs], device=self.device)

    # ----------------------------------------------------------------- VecEnv
    def get_observations(self) -> TensorDict:
        return self._wrap(self._obs)

    def reset(self, seed: int | None = None) -> TensorDict:
        """Reset every env (reseeding covey's generator when ``seed`` is given)."""
        self._obs = self.env.reset(seed=seed)
        return self._wrap(self._obs)

    def step(self, actions: Tensor) -> tuple[TensorDict, Tensor, Tensor, dict]:
        """``actions [rows, action_dim]`` -> ``(obs, rewards [rows], dones [rows], extras)``."""
        reward, terminated, truncated, info = self._step_rows(actions)
        extras: dict = {"time_outs": self._per_agent(truncated), "log": {}}
        if "episode" in info:
            extras["log"] = {f"/episode/{k}": v for k, v in info["episode"].items()}
        return self._wrap(self._obs), reward, self._per_agent(terminated | truncated), extras
