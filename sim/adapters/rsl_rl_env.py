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

:func:`rsl_rl_train_cfg` builds the ``train_cfg`` dict of rsl_rl's ``OnPolicyRunner`` with covey's
``algo=mappo`` PPO settings by default (one place for the test and benchmarks/rsl_rl_vs_covey.py)::

    env = RslRlVecEnv(sim.make("cable_load", num_envs=256), action_prior=True)
    runner = OnPolicyRunner(env, rsl_rl_train_cfg(env.obs_groups, num_steps_per_env=64), log_dir=None)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

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


def rsl_rl_train_cfg(
    obs_groups: Mapping[str, Sequence[str]],
    num_steps_per_env: int,
    hidden_dims: Sequence[int] = (128, 128),
    learning_rate: float = 5e-5,
    num_learning_epochs: int = 3,
    num_mini_batches: int = 4,
    clip_param: float = 0.1,
    entropy_coef: float = 0.001,
    init_std: float = math.exp(-2.5),
    gamma: float = 0.99,
    lam: float = 0.95,
) -> dict[str, Any]:
    """The ``train_cfg`` of rsl_rl's ``OnPolicyRunner`` (rsl-rl-lib 5.x) with covey's ``algo=mappo`` PPO settings.

    The defaults are configs/algo/mappo.yaml's where rsl_rl can follow them: lr 5e-5 (constant:
    rsl_rl's ``"fixed"`` schedule), 3 epochs x 4 minibatches, ``clip_param`` 0.1 (rsl_rl clips the
    ratio and the value change with the same parameter, covey's clip and value_clip), entropy 0.001,
    gamma 0.99, lambda 0.95, grad norm 1, an initial action std of e^-2.5 learned as a log std, ELU
    MLPs with observation normalisation for the actor and the critic (which reads ``obs_groups["critic"]``:
    the privileged ``state`` under MAPPO). rsl_rl has no value-target normalisation.

    Args:
        obs_groups: rsl_rl's observation groups, :attr:`RslRlVecEnv.obs_groups`.
        num_steps_per_env: rollout length per iteration (covey's ``train.rollout_steps``).
    """
    mlp = {"hidden_dims": list(hidden_dims), "activation": "elu", "obs_normalization": True}
    return {
        "num_steps_per_env": num_steps_per_env,
        "save_interval": 10**9,  # the caller saves (or not); rsl_rl would write model_<it>.pt files
        "obs_groups": {k: list(v) for k, v in obs_groups.items()},
        "check_for_nan": True,
        "algorithm": {
            "class_name": "rsl_rl.algorithms.PPO",
            "num_learning_epochs": num_learning_epochs,
            "num_mini_batches": num_mini_batches,
            "clip_param": clip_param,
            "gamma": gamma,
            "lam": lam,
            "value_loss_coef": 1.0,
            "entropy_coef": entropy_coef,
            "learning_rate": learning_rate,
            "max_grad_norm": 1.0,
            "use_clipped_value_loss": True,
            "schedule": "fixed",
            "desired_kl": 0.01,
        },
        "actor": {
            "class_name": "rsl_rl.models.MLPModel",
            **mlp,
            "distribution_cfg": {
                "class_name": "rsl_rl.modules.GaussianDistribution",
                "init_std": init_std,
                "std_type": "log",  # covey learns a log std too
            },
        },
        "critic": {"class_name": "rsl_rl.models.MLPModel", **mlp},
    }
