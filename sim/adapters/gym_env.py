"""A covey task as a Gymnasium vector env (:class:`CoveyVectorEnv`) and a single-env view (:class:`CoveyGymEnv`).

Layout (every group of a multi-agent task in one sub-env, a central-controller view):

* observation: ``Dict({"group/entry": Box((n_agents, *shape), entry dtype)})``, one key per entry of
  every group (``sim.adapters.layout.entry_space``: uint8 images stay uint8, graph parts keep their
  dtypes); the vector env's values carry a leading ``num_envs`` axis;
* action: one flat ``Box(-1, 1, (sum over groups of n_agents * action_dim,), float32)``, groups in
  spec order, each agent-major (``layout.action_slices``); values outside [-1, 1] are clamped;
* reward: the mean over every agent of every group (each group's mean, then the mean over groups:
  covey's episode ``return``); ``info["rewards"][group]`` holds each agent's ``[num_envs, n_agents]``.
  For two-team (competitive) tasks the mean is meaningless: use the PettingZoo adapter there.

Auto-reset: covey resets finished envs inside ``step``, which is gymnasium's
``AutoresetMode.SAME_STEP`` (``metadata["autoreset_mode"]``): the returned observation of a finished
env is already its next episode's first one; ``info["final_obs"]`` is gymnasium's object array
(that env's last observation dict, ``None`` elsewhere) with the mask ``info["_final_obs"]``, and
``info["final_obs_batched"]`` holds the same as one batched dict (equal to the observation where
nothing finished) for vectorised learners bootstrapping on truncation; all three only on steps where
some env finished. ``info["episode"]`` holds
covey's per-step episode means (return, length, terms, reasons) when an episode ended.

``numpy=True`` (default) returns numpy arrays (copies, as gymnasium's checkers and most learners
expect); ``numpy=False`` returns the env's own torch tensors on its device and accepts tensors (GPU
learners: no host copies; never write into them, and the spaces' ``contains`` no longer applies).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from sim.adapters import layout
from sim.core.env import MultiAgentEnv


def observation_space(env: MultiAgentEnv) -> spaces.Dict:
    """One sub-env's observation space: ``"group/entry"`` -> ``Box((n_agents, *shape))``."""
    return spaces.Dict(
        {
            f"{group_name}{layout.SEP}{key}": layout.entry_space(key, entry, group, (group.n_agents,))
            for group_name, group in env.spec.groups.items()
            for key, entry in group.observations.items()
        }
    )


def flat_action_space(env: MultiAgentEnv) -> spaces.Box:
    """One sub-env's action space: every group's ``n_agents * action_dim`` actions in one vector."""
    size = sum(g.n_agents * g.action_dim for g in env.spec.groups.values())
    return spaces.Box(-1.0, 1.0, (size,), np.float32)


def _mean_reward(reward: dict[str, torch.Tensor]) -> torch.Tensor:
    """``{group: [E, A]}`` -> ``[E]``: each group's mean over agents, then the mean over groups."""
    return torch.stack([r.float().mean(-1) for r in reward.values()]).mean(0)


class CoveyVectorEnv(VectorEnv):
    """``gymnasium.vector.VectorEnv`` over a batched covey env (``num_envs`` sub-envs, one step call).

    Args:
        env: a covey env (``sim.make(task, num_envs=..., device=...)``).
        numpy: return numpy arrays (True) or torch tensors on ``env.device`` (False).
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(self, env: MultiAgentEnv, numpy: bool = True) -> None:
        self.env = env
        self.numpy = numpy
        self.num_envs = env.num_envs
        self.single_observation_space = observation_space(env)
        self.single_action_space = flat_action_space(env)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.spec = None  # gymnasium's EnvSpec (registration); covey's spec is env.spec

    def _out(self, tree: Any) -> Any:
        return layout.to_numpy(tree) if self.numpy else tree

    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Reset every sub-env. covey seeds one generator for the whole batch, so a list of seeds
        uses its first (sub-env ``i`` then draws from that stream after sub-envs ``0..i-1``)."""
        if options:
            raise ValueError(f"CoveyVectorEnv.reset takes no options (partial resets happen in step), got {options}")
        if isinstance(seed, (list, tuple)):
            seed = seed[0] if seed else None
        if seed is not None:
            self._np_random, self._np_random_seed = gym.utils.seeding.np_random(seed)
        obs = self.env.reset(seed=seed)
        return self._out(layout.flatten_groups(obs)), {}

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """``actions [num_envs, action_size]`` -> ``(obs, reward [num_envs], terminated, truncated, info)``."""
        flat = layout.to_tensor(actions, self.env.device).reshape(self.num_envs, -1)
        obs, reward, terminated, truncated, info = self.env.step(layout.split_actions(self.env.spec, flat))
        out_info: dict[str, Any] = {"rewards": self._out(reward)}
        done_np = (terminated | truncated).cpu().numpy()
        if done_np.any():
            batched = out_info["final_obs_batched"] = self._out(layout.flatten_groups(info["final_obs"]))
            # gymnasium's SAME_STEP form: an object array of the finished sub-envs' observation dicts
            # (a loop over the finished envs only, on the steps where some finished).
            per_env = np.full(self.num_envs, None, dtype=object)
            for i in np.flatnonzero(done_np):
                per_env[i] = {k: v[i] for k, v in batched.items()}
            out_info["final_obs"], out_info["_final_obs"] = per_env, done_np
            out_info["episode"] = {k: float(v) for k, v in info["episode"].items()}
        return (
            self._out(layout.flatten_groups(obs)),
            self._out(_mean_reward(reward)),
            self._out(terminated),
            self._out(truncated),
            out_info,
        )


class CoveyGymEnv(gym.Env):
    """A single-env ``gymnasium.Env`` view of a covey env built with ``num_envs=1`` (gymnasium's
    ``check_env``, Stable-Baselines3 and other single-env tools). Same layout as :class:`CoveyVectorEnv`
    without the batch axis; at the end of an episode it returns the final observation and the caller
    resets (gymnasium's single-env contract), although covey has already started the next episode.
    """

    metadata = {"render_modes": []}

    def __init__(self, env: MultiAgentEnv) -> None:
        if env.num_envs != 1:
            raise ValueError(f"CoveyGymEnv wraps a covey env with num_envs=1, got {env.num_envs} (use CoveyVectorEnv)")
        self.env = env
        self.observation_space = observation_space(env)
        self.action_space = flat_action_space(env)

    @staticmethod
    def _first(obs: dict[str, dict[str, torch.Tensor]]) -> dict[str, np.ndarray]:
        return layout.to_numpy({k: v[0] for k, v in layout.flatten_groups(obs).items()})

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        return self._first(self.env.reset(seed=seed)), {}

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        flat = layout.to_tensor(action, self.env.device).reshape(1, -1)
        _, reward, terminated, truncated, info = self.env.step(layout.split_actions(self.env.spec, flat))
        # info["final_obs"] equals the observation where nothing finished, and is the terminal one where it did.
        obs = self._first(info["final_obs"])
        rewards = layout.to_numpy({g: r[0] for g, r in reward.items()})
        return obs, float(_mean_reward(reward)[0]), bool(terminated[0]), bool(truncated[0]), {"rewards": rewards}
