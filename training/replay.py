"""A replay buffer on the env's device for off-policy algorithms (training/sac.py).

    buf = ReplayBuffer(capacity=100_000, n_agents=A, entries={"policy": ((12,), torch.float32),
                       "image": ((64, 64, 3), torch.uint8)}, action_dim=2, device=env.device)
    buf.add(obs, action, reward, next_obs, terminated)      # a batch of E transitions, [E, A, ...]
    batch = buf.sample(256, generator)                       # Transition, each field [256, A, ...]

Every field is one preallocated tensor ``[capacity, A, ...]`` in the entry's own dtype (uint8
images stay uint8: a 64x64 RGB frame costs 12 KiB a transition, float32 would cost 48 KiB).
``add`` writes ``E`` transitions at once with one indexed copy per field (no loop over envs) and
wraps around: once full, the oldest transitions are overwritten first (a ring). ``sample``
draws uniformly with replacement from the filled part.

The buffer holds the observation and the next observation (for a done env: the observation
*before* the auto-reset, ``info["final_obs"]``), so a time-limit truncation bootstraps from the
true last state and only ``terminated`` stops the bootstrap.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class Transition:
    """A sampled batch; ``B`` transitions of ``A`` agents each."""

    obs: dict[str, Tensor]  # entry -> [B, A, *shape] in the entry's dtype
    action: Tensor  # [B, A, act_dim] (in [-1, 1], what env.step received)
    reward: Tensor  # [B, A]
    next_obs: dict[str, Tensor]  # entry -> [B, A, *shape]
    terminated: Tensor  # [B] float, 1 where the episode ended in a terminal state (no bootstrap)


class ReplayBuffer:
    """Ring buffer of ``capacity`` env transitions, each holding all ``n_agents`` agents of a group."""

    def __init__(
        self,
        capacity: int,
        n_agents: int,
        entries: Mapping[str, tuple[tuple[int, ...], torch.dtype]],
        action_dim: int,
        device: torch.device | str,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"replay capacity must be >= 1, got {capacity}")
        self.capacity, self.n_agents, self.device = int(capacity), int(n_agents), torch.device(device)
        c, a = self.capacity, self.n_agents
        self.obs = {k: torch.zeros((c, a, *shape), dtype=dt, device=self.device) for k, (shape, dt) in entries.items()}
        self.next_obs = {k: torch.zeros_like(v) for k, v in self.obs.items()}
        self.action = torch.zeros(c, a, action_dim, device=self.device)
        self.reward = torch.zeros(c, a, device=self.device)
        self.terminated = torch.zeros(c, device=self.device)
        self.pos = 0  # next slot to write
        self.size = 0  # filled slots

    def __len__(self) -> int:
        return self.size

    def nbytes(self) -> int:
        """Memory held by the buffer's tensors (bytes)."""
        tensors = [*self.obs.values(), *self.next_obs.values(), self.action, self.reward, self.terminated]
        return sum(t.numel() * t.element_size() for t in tensors)

    def add(
        self,
        obs: Mapping[str, Tensor],
        action: Tensor,
        reward: Tensor,
        next_obs: Mapping[str, Tensor],
        terminated: Tensor,
    ) -> None:
        """Store ``E`` transitions: ``obs``/``next_obs`` entry -> ``[E, A, *shape]``, ``action [E, A, act_dim]``,
        ``reward [E, A]``, ``terminated [E]`` (bool or float). ``E`` may exceed the capacity (the last ones stay)."""
        n = action.shape[0]
        keep = min(n, self.capacity)
        first = n - keep  # a batch larger than the ring: only its last `capacity` transitions survive anyway
        idx = (self.pos + torch.arange(keep, device=self.device)) % self.capacity
        for key, store in self.obs.items():
            store[idx] = obs[key][first:].to(store.dtype)
            self.next_obs[key][idx] = next_obs[key][first:].to(store.dtype)
        self.action[idx] = action[first:].float()
        self.reward[idx] = reward[first:].float()
        self.terminated[idx] = terminated[first:].float()
        self.pos = (self.pos + keep) % self.capacity
        self.size = min(self.size + keep, self.capacity)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> Transition:
        """``batch_size`` transitions drawn uniformly (with replacement) from the filled slots."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        idx = torch.randint(0, self.size, (batch_size,), generator=generator, device=self.device)
        return Transition(
            obs={k: v[idx] for k, v in self.obs.items()},
            action=self.action[idx],
            reward=self.reward[idx],
            next_obs={k: v[idx] for k, v in self.next_obs.items()},
            terminated=self.terminated[idx],
        )
