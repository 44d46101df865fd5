"""Rollout storage: preallocated ``(steps, envs, agents, ...)`` buffers for one agent group.

Shapes: T = rollout steps, E = envs, A = agents in the group.

    obs[entry]   [T, E, A, *shape]      every observation entry the actor or critic reads, in its
                                        own dtype (uint8 images stay uint8: 4x less memory)
    actions      [T, E, A, act_dim]     Gaussian samples (before clamping to [-1, 1])
    log_probs    [T, E, A]
    values       [T, E, A]              V(s_t) in return units
    rewards      [T, E, A]              after adding gamma * V(final_obs) on truncation
    dones        [T, E]                 episode ended after step t (terminated or truncated)
    returns      [T, E, A]              GAE targets: advantages + values
    advantages   [T, E, A]
    memory0[side] [E, A, L, S]          recurrent policies: the state at the rollout's first step
    strata       [T, E, A] long         stratified PPO only: each agent state's stratum (e.g. its skill)

Everything lives on the env's device. Feed-forward minibatches keep the agent axis whole (an item
is one env at one step with all its agents), so per-agent weights and statistics stay aligned.
Recurrent minibatches are whole envs (all T steps in order), replayed from ``memory0`` with the
state zeroed where an episode started (truncated back-propagation through time over the rollout).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

EntryShapes = Mapping[str, tuple[tuple[int, ...], torch.dtype]]


class RolloutStorage:
    """Buffers of one agent group for one rollout; see the module docstring for shapes.

    Args:
        entries: observation entry name -> (per-agent shape, dtype) to store.
        memory_shapes: recurrent sides ("actor", "critic") -> state shape ``(L, S)``; None = none.
    """

    def __init__(
        self,
        num_steps: int,
        num_envs: int,
        n_agents: int,
        entries: EntryShapes,
        action_dim: int,
        device: torch.device,
        memory_shapes: Mapping[str, tuple[int, ...]] | None = None,
        strata: bool = False,
    ) -> None:
        T, E, A = num_steps, num_envs, n_agents
        self.num_steps, self.num_envs, self.n_agents = T, E, A
        self.device = device
        z = lambda *shape: torch.zeros(*shape, device=device)  # noqa: E731
        self.obs = {
            name: torch.zeros(T, E, A, *shape, dtype=dtype, device=device) for name, (shape, dtype) in entries.items()
        }
        self.actions = z(T, E, A, action_dim)
        self.log_probs = z(T, E, A)
        self.values = z(T, E, A)
        self.rewards = z(T, E, A)
        self.dones = torch.zeros(T, E, dtype=torch.bool, device=device)
        self.returns = z(T, E, A)
        self.advantages = z(T, E, A)
        self.memory0 = {side: z(E, A, *shape) for side, shape in (memory_shapes or {}).items()}
        self.strata = torch.zeros(T, E, A, dtype=torch.long, device=device) if strata else None
        self.step = 0

    def add(
        self,
        obs: Mapping[str, Tensor],
        actions: Tensor,
        log_probs: Tensor,
        values: Tensor,
        rewards: Tensor,
        dones: Tensor,
        strata: Tensor | None = None,
    ) -> None:
        """Store one transition: ``obs[entry] [E, A, *shape]``, ``actions [E, A, d]``, ``log_probs``,
        ``values``, ``rewards`` ``[E, A]``, ``dones [E]``; ``strata [E, A]`` where the storage keeps them."""
        if self.step >= self.num_steps:
            raise RuntimeError(f"rollout storage is full ({self.num_steps} steps); call clear() after an update")
        t = self.step
        if self.strata is not None:
            if strata is None:
                raise ValueError("this storage is stratified: add() needs each agent's stratum [E, A]")
            self.strata[t].copy_(strata)
        for name, buf in self.obs.items():
            buf[t].copy_(obs[name])
        self.actions[t].copy_(actions)
        self.log_probs[t].copy_(log_probs)
        self.values[t].copy_(values)
        self.rewards[t].copy_(rewards)
        self.dones[t].copy_(dones)
        self.step += 1

    def set_initial_memory(self, memory: Mapping[str, Tensor]) -> None:
        """The recurrent state ``side -> [E, A, L, S]`` the rollout starts from."""
        for side, buf in self.memory0.items():
            buf.copy_(memory[side])

    def clear(self) -> None:
        self.step = 0

    def check_finite(self) -> str | None:
        """The name of the first float buffer holding NaN/inf, or None."""
        bufs = {**{f"obs/{k}": v for k, v in self.obs.items()}, "rewards": self.rewards, "values": self.values}
        bufs = {name: buf for name, buf in bufs.items() if buf.is_floating_point()}
        # A NaN or inf anywhere makes the buffer's sum NaN or inf: one fast reduction per buffer (an elementwise
        # isfinite().all() over a 1024-env rollout cost 0.3 s per iteration on one CPU core). Only a sum that is
        # not finite (NaN/inf inside, or finite values overflowing float32) is checked element by element.
        sums = torch.stack([buf.sum(dtype=torch.float32) for buf in bufs.values()])
        finite = torch.isfinite(sums).tolist()  # one host sync
        suspects = [name for name, ok in zip(bufs, finite, strict=True) if not ok]
        return next((name for name in suspects if not bool(torch.isfinite(bufs[name]).all())), None)

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

    def stratified_advantages(self, max_weight: float, eps: float = 1e-8) -> Tensor:
        """Advantages normalised within each stratum, then weighted so that every stratum present in the
        rollout carries the same total weight, ``[T, E, A]``.

        Stratum ``k`` with ``n_k`` of the ``N`` samples (``K`` strata present) gets the weight
        ``N / (K n_k)``, capped at ``max_weight``. Scaling a sample's advantage by ``w > 0`` scales its
        clipped surrogate by ``w`` (``max(-w A r, -w A clip(r)) = w max(-A r, -A clip(r))``), so this is a
        loss weighted by stratum. Without it, a stratum with 1% of the states (an attack in a match)
        gets 1% of every policy gradient, and one with a different return scale is normalised by the
        common strata's spread.
        """
        if self.strata is None:
            raise RuntimeError("stratified_advantages needs a storage built with strata=True")
        adv, s = self.advantages.flatten(), self.strata.flatten()
        k = int(s.max()) + 1 if s.numel() else 1
        ones = torch.ones_like(adv)
        count = torch.zeros(k, device=adv.device).index_add_(0, s, ones)
        mean = torch.zeros(k, device=adv.device).index_add_(0, s, adv) / count.clamp(min=1)
        var = torch.zeros(k, device=adv.device).index_add_(0, s, (adv - mean[s]).square()) / (count - 1).clamp(min=1)
        present = count > 0
        weight = torch.where(present, adv.numel() / (present.sum() * count.clamp(min=1)), 0.0).clamp(max=max_weight)
        out = (adv - mean[s]) / (var[s].sqrt() + eps) * weight[s]
        return out.view_as(self.advantages)

    def minibatch_indices(self, num_minibatches: int, generator: torch.Generator) -> list[Tensor]:
        """A random split of the ``T * E`` (step, env) items into ``num_minibatches`` index sets."""
        n = self.num_steps * self.num_envs
        if num_minibatches < 1 or num_minibatches > n:
            raise ValueError(f"num_minibatches must be in [1, {n}], got {num_minibatches}")
        perm = torch.randperm(n, generator=generator, device=generator.device).to(self.device)
        return list(perm.chunk(num_minibatches))

    def env_minibatch_indices(self, num_minibatches: int, generator: torch.Generator) -> list[Tensor]:
        """A random split of the ``E`` envs into ``num_minibatches`` sets (recurrent policies)."""
        if num_minibatches < 1 or num_minibatches > self.num_envs:
            raise ValueError(
                f"num_minibatches must be in [1, {self.num_envs}] for a recurrent policy, got {num_minibatches}"
            )
        perm = torch.randperm(self.num_envs, generator=generator, device=generator.device).to(self.device)
        return list(perm.chunk(num_minibatches))

    def _flat(self, buf: Tensor) -> Tensor:
        return buf.reshape(self.num_steps * self.num_envs, *buf.shape[2:])

    def batch(self, indices: Tensor, advantages: Tensor) -> dict[str, Any]:
        """Feed-forward minibatch of flat (step, env) ``indices``: ``obs`` entry -> ``[B, A, ...]``,
        ``actions``, ``log_probs``, ``values``, ``returns``, ``advantages`` ``[B, A, ...]``."""
        out: dict[str, Any] = {"obs": {k: self._flat(v)[indices] for k, v in self.obs.items()}}
        for name in ("actions", "log_probs", "values", "returns"):
            out[name] = self._flat(getattr(self, name))[indices]
        out["advantages"] = self._flat(advantages)[indices]
        return out

    def sequence_batch(self, env_ids: Tensor, advantages: Tensor) -> dict[str, Any]:
        """Recurrent minibatch of whole envs ``env_ids [B]``: the same fields as :meth:`batch` as
        ``[T, B, A, ...]``, plus ``memory0`` (side -> ``[B, A, L, S]``) and ``resets [T, B]``
        (an episode started at step t: the state is zeroed before it)."""
        out: dict[str, Any] = {"obs": {k: v[:, env_ids] for k, v in self.obs.items()}}
        for name in ("actions", "log_probs", "values", "returns"):
            out[name] = getattr(self, name)[:, env_ids]
        out["advantages"] = advantages[:, env_ids]
        out["memory0"] = {side: buf[env_ids] for side, buf in self.memory0.items()}
        resets = torch.zeros_like(self.dones[:, env_ids])
        resets[1:] = self.dones[:-1, env_ids]
        out["resets"] = resets
        return out

    def nbytes(self) -> int:
        """Bytes held by the buffers."""
        bufs = [*self.obs.values(), *self.memory0.values()]
        bufs += [self.actions, self.log_probs, self.values, self.rewards, self.dones, self.returns, self.advantages]
        return sum(b.numel() * b.element_size() for b in bufs)
