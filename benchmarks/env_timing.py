"""Shared timing of an env under random actions, for the per-task throughput scripts in this folder."""

from __future__ import annotations

import time

import torch


def random_action_rate(env, steps: int) -> tuple[float, float]:
    """``(env steps/s by wall clock, by process CPU time)`` over ``steps`` control steps of every env of ``env``,
    uniform random actions, after one warm-up step. The CPU-time figure is what the env costs on a shared machine."""
    gen = torch.Generator(device=env.device).manual_seed(0)
    env.step(env.sample_actions(gen))  # warm-up (and compilation, with compile=True)
    w0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        env.step(env.sample_actions(gen))
    w, c = time.perf_counter() - w0, time.process_time() - c0
    n = steps * env.num_envs
    return n / w, n / c
