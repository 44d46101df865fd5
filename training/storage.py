"""Rollout storage: preallocated ``(steps, envs, agents, ...)`` buffers for one agent group.

Shapes: T = rollout steps, E = envs, A = agents in the group.

    obs          [T, E, A, obs_dim]     raw policy observation fed to the actor
    critic_obs   [T, E, A, critic_dim]  raw critic input (env ``state`` or the policy obs)
    actions      [T, E, A, act_dim]     Gaussian samples (before clamping to [-1, 1])
    log_probs    [T, E, A]
    values       [T, E, A]              V(s_t) in return units
    rewards      [T, E, A]              after adding gamma * V(final_obs) on truncation
    dones        [T, E]                 episode ended after step t (terminated or truncated)
    returns      [T, E, A]              GAE targets: advantages + values
    advantages   [T, E, A]

Everything lives on the env's device. Minibatches keep the agent axis whole (an item is one env at
one step with all its agents), so per-agent weights and per-agent statistics stay aligned.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor


class RolloutStorage:
    """Buffers of one agent group for one rollout; see the module docstring for shapes."""

    FIELDS = ("obs", "critic_obs", "actions", "log_probs", "values", "rewards", "returns", "advantages")

    def __init__(
        self,
        num_steps: int,
        num_envs: int,
        n_agents: int,
        obs_dim: int,
        critic_dim: int,
        action_dim: int,
        device: torch.device,
    ) -> None:
        T, E, A = num_steps, num_envs, n_agents
        self.num_steps, self.num_envs, self.n_agents = T, E, A
        self.device = device
        z = lambda *shape: torch.zeros(*shape, device=device)  # noqa: E731
        self.obs = z(T, E, A, obs_dim)
        self.critic_obs = z(T, E, A, critic_dim)
        self.actions = z(T, E, A, action_dim)
        self.log_probs = z(T, E, A)
        self.values = z(T, E, A)
        self.rewards = z(T, E, A)
        self.dones = torch.zeros(T, E, dtype=torch.bool, device=device)
        self.returns = z(T, E, A)
        self.advantages = z(T, E, A)
        self.step = 0

    def add(
        self,
        obs: Tensor,
        critic_obs: Tensor,
        actions: Tensor,
        log_probs: Tensor,
        values: Tensor,
        rewards: Tensor,
        dones: Tensor,
    ) -> None:
        """Store one transition: ``obs [E, A, obs_dim]`` ... ``rewards [E, A]``, ``dones [E]``."""
        if self.step >= self.num_steps:
            raise RuntimeError(f"rollout storage is full ({self.num_steps} steps); call clear() after an update")
        t = self.step
        self.obs[t].copy_(obs)
        self.critic_obs[t].copy_(critic_obs)
        self.actions[t].copy_(actions)
        self.log_probs[t].copy_(log_probs)
        self.values[t].copy_(values)
        self.rewards[t].copy_(rewards)
        self.dones[t].copy_(dones)
        self.step += 1

    def clear(self) -> None:
        self.step = 0

    @torch.no_grad()
    def compute_returns(self, last_values: Tensor, gamma: float, lam: float) -> None:
        """Generalised advantage estimation backwards over the rollout.

        ``last_values: [E, A]`` = V(s_T) of the observation after the last step. Per step:
            delta_t = r_t + gamma * V(s_{t+1}) * (1 - done_t) - V(s_t)        (TD error)
            A_t     = delta_t + gamma * lam * (1 - done_t) * A_{t+1}
            R_t     = A_t + V(s_t)
        Truncated episodes were bootstrapped by the caller (``r_t += gamma * V(final_obs)``), so
        ``done_t`` cuts the recursion for terminations and truncations alike.
        """
        if self.step != self.num_steps:
            raise RuntimeError(f"rollout has {self.step} of {self.num_steps} steps; fill it before computing returns")
        gae = torch.zeros_like(last_values)
        next_values = last_values
        for t in reversed(range(self.num_steps)):
            not_done = (~self.dones[t]).float().unsqueeze(-1)  # [E, 1]
            delta = self.rewards[t] + gamma * next_values * not_done - self.values[t]
            gae = delta + gamma * lam * not_done * gae
            self.advantages[t] = gae
            next_values = self.values[t]
        self.returns.copy_(self.advantages + self.values)

    def normalized_advantages(self, eps: float = 1e-8) -> Tensor:
        """Advantages normalised per agent over steps and envs, ``[T, E, A]``.

        One baseline per agent slot: heterogeneous agents (different roles, different reward
        scales) are not pulled towards a global mean.
        """
        adv = self.advantages
        mean = adv.mean(dim=(0, 1), keepdim=True)
        std = adv.std(dim=(0, 1), keepdim=True)
        return (adv - mean) / (std + eps)

    def minibatch_indices(self, num_minibatches: int, generator: torch.Generator) -> list[Tensor]:
        """A random split of the ``T * E`` (step, env) items into ``num_minibatches`` index sets."""
        n = self.num_steps * self.num_envs
        if num_minibatches < 1 or num_minibatches > n:
            raise ValueError(f"num_minibatches must be in [1, {n}], got {num_minibatches}")
        perm = torch.randperm(n, generator=generator, device=generator.device).to(self.device)
        return list(perm.chunk(num_minibatches))

    def flat(self, name: str) -> Tensor:
        """Buffer ``name`` with ``(T, E)`` merged: ``[T * E, A, ...]``."""
        buf = getattr(self, name)
        return buf.reshape(self.num_steps * self.num_envs, *buf.shape[2:])

    def iter_fields(self, indices: Tensor, advantages: Tensor) -> Iterator[Tensor]:
        """Minibatch tensors ``[B, A, ...]`` in the order obs, critic_obs, actions, log_probs,
        values, returns, advantages (``advantages: [T, E, A]`` as prepared by the caller)."""
        for name in ("obs", "critic_obs", "actions", "log_probs", "values", "returns"):
            yield self.flat(name)[indices]
        yield advantages.reshape(self.num_steps * self.num_envs, -1)[indices]
