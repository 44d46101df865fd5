"""Randomisation helpers: seeded uniform sampling and per-env action latency."""

from __future__ import annotations

import torch
from torch import Tensor


def uniform(low: float, high: float, shape: tuple[int, ...], rng: torch.Generator, device: torch.device) -> Tensor:
    """Uniform samples in ``[low, high)`` drawn from the env's generator."""
    return low + (high - low) * torch.rand(shape, generator=rng, device=device)


class DelayBuffer:
    """Delays actions by a per-env number of control steps (0 = no delay).

    Keeps the last ``max_delay + 1`` actions, ``buf [E, max_delay + 1, ...]`` (env axis first, as all
    per-env state: the env's masked reset merges state along the first axis); ``push`` stores the new
    action and returns, per env, the one from ``delay[e]`` steps ago.
    """

    def __init__(self, max_delay: int, shape: tuple[int, ...], device: torch.device) -> None:
        self.buf = torch.zeros(shape[0], max_delay + 1, *shape[1:], device=device)
        self.delay = torch.zeros(shape[0], dtype=torch.long, device=device)
        self.max_delay = max_delay

    def set_delay(self, env_ids: Tensor, steps: Tensor) -> None:
        """Delays ``steps [k]`` (each in ``[0, max_delay]``) for the envs ``env_ids [k]``.

        Checked on the device (``torch._assert_async``): it runs on every reset, and a host sync there
        would stall a GPU step (a CUDA device asserts at the next sync; the CPU raises at once)."""
        torch._assert_async(((steps >= 0) & (steps <= self.max_delay)).all(), "delay outside [0, max_delay]")
        self.delay[env_ids] = steps

    def reset(self, env_ids: Tensor) -> None:
        self.buf[env_ids] = 0.0

    def push(self, action: Tensor) -> Tensor:
        """``action [E, ...]`` -> the action of ``delay[e]`` steps ago per env (zeros before the first)."""
        if self.max_delay == 0:
            return action
        self.buf = torch.cat((action.unsqueeze(1), self.buf[:, :-1]), dim=1)
        idx = self.delay.view(-1, 1, *([1] * (action.dim() - 1))).expand(-1, 1, *action.shape[1:])
        return self.buf.gather(1, idx).squeeze(1)
