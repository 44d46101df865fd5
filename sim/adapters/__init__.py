"""Adapters: a covey task seen through other learners' env interfaces (bring your own learner).

Each lives in its own module and imports its peer library only there, so ``import sim.adapters``
needs none of them:

* :mod:`sim.adapters.gym_env`: ``CoveyVectorEnv`` (``gymnasium.vector.VectorEnv``) and ``CoveyGymEnv``
  (a single-env ``gymnasium.Env`` view);
* :mod:`sim.adapters.pettingzoo_env`: ``CoveyParallelEnv`` (``pettingzoo.ParallelEnv``, one batch
  index) and ``BatchedParallelEnv`` (the same per-agent dicts with a leading ``num_envs`` axis);
* :mod:`sim.adapters.rsl_rl_env`: ``RslRlVecEnv`` (``rsl_rl.env.VecEnv``, TensorDict observations) and
  ``rsl_rl_train_cfg`` (``OnPolicyRunner``'s config with covey's MAPPO settings);
* :mod:`sim.adapters.vectask_env`: ``VecTaskView`` (Isaac Gym's ``VecTask`` buffers: ``obs_buf``,
  ``states_buf``, ``rew_buf``, ``reset_buf``, ``extras``; float vector entries only).

:mod:`sim.adapters.layout` holds what they share (spaces, the flat action layout); :mod:`sim.adapters.rows`
the agents-as-rows view the last two build on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim._lazy import lazy_exports

if TYPE_CHECKING:
    from sim.adapters.gym_env import CoveyGymEnv, CoveyVectorEnv
    from sim.adapters.pettingzoo_env import BatchedParallelEnv, CoveyParallelEnv
    from sim.adapters.rsl_rl_env import RslRlVecEnv, rsl_rl_train_cfg
    from sim.adapters.vectask_env import VecTaskView

_EXPORTS = {
    "CoveyGymEnv": "sim.adapters.gym_env",
    "CoveyVectorEnv": "sim.adapters.gym_env",
    "BatchedParallelEnv": "sim.adapters.pettingzoo_env",
    "CoveyParallelEnv": "sim.adapters.pettingzoo_env",
    "RslRlVecEnv": "sim.adapters.rsl_rl_env",
    "rsl_rl_train_cfg": "sim.adapters.rsl_rl_env",
    "VecTaskView": "sim.adapters.vectask_env",
}
__all__ = [  # noqa: F822 - loaded by __getattr__
    "BatchedParallelEnv",
    "CoveyGymEnv",
    "CoveyParallelEnv",
    "CoveyVectorEnv",
    "RslRlVecEnv",
    "VecTaskView",
    "rsl_rl_train_cfg",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
