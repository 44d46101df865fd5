"""Where one ``env.step`` spends its time: the core's phases, timed by wrapping them on one env.

    python benchmarks/step_phases.py --task drone_volleyball --compile            # 4096 envs, 1 and all threads
    python benchmarks/step_phases.py --task cable_load --threads 1 --skip 110
    python benchmarks/step_phases.py --num-envs 64 --skip 3 --steps 3 --threads 1  # smoke test

One env (``sim.make(task, num_envs, seed, compile)``) is stepped with uniform random actions in [-1, 1] for
``--skip`` untimed steps (the compile happens there, and random actions let episodes end so that later steps reset
envs), then ``--steps`` timed steps per thread count (``--threads``, each count in turn on the same env). The phases
are the core's step (``sim.core.env.MultiAgentEnv.step``), whatever runs them (torch, compiled graphs, C kernels):
action checks, applying actions, the control loop (``_advance``), the post-physics pass (``_evaluate``), and on
steps where episodes end: the terminal metrics, the episode statistics, the reset of the ended envs and their new
observations. Each row is the phase's time summed over the timed steps divided by their number (ms a step) and its
share of the median step; "other" is the step's remaining Python. The last line is ``step_ms=<float>`` (the median
step at the last thread count) for scripts.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

import torch

# (label, the env attribute timed): the core's phases in step order.
PHASES = (
    ("action checks", "_check_actions"),
    ("actions", "_apply_actions"),
    ("control loop", "_advance"),
    ("post-physics pass", "_evaluate"),
    ("terminal metrics", "step_metrics"),
    ("episode statistics", "_episode_stats"),
    ("reset of the ended envs", "_reset_all_idx"),
    ("their observations", "_observe_some"),
    ("observations after a reset", "_observations_after_reset"),
)


def _timed(fn: Callable, spent: list[float]) -> Callable:
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - start)

    return wrapper


def measure(env, actions: list[dict[str, torch.Tensor]]) -> tuple[list[float], dict[str, list[float]], int]:
    """Step ``env`` once per entry of ``actions`` with every phase of :data:`PHASES` timed: (seconds of each step,
    label -> seconds of each call, envs reset in all). The env's attributes are put back afterwards."""
    spent: dict[str, list[float]] = {}
    saved = {}
    for label, name in PHASES:
        fn = getattr(env, name, None)
        if fn is None:  # e.g. no subset observations: the whole observations after a reset instead
            continue
        saved[name] = env.__dict__.get(name)
        spent[label] = []
        setattr(env, name, _timed(fn, spent[label]))
    steps, resets = [], 0
    try:
        for act in actions:
            start = time.perf_counter()
            _, _, terminated, truncated, _ = env.step(act)
            steps.append(time.perf_counter() - start)
            resets += int((terminated | truncated).sum())
    finally:
        for name, value in saved.items():
            if value is None:
                delattr(env, name)  # a method of the class: the instance's wrapper goes
            else:
                setattr(env, name, value)
    return steps, spent, resets


def format_phases(steps: list[float], spent: dict[str, list[float]], resets: int) -> str:
    """The table of one thread count: ms a step and share of the median step per phase."""
    n, median = len(steps), statistics.median(steps)
    lines = [f"{'phase':<28} {'ms/step':>8} {'share':>6}", f"{'-' * 28} {'-' * 8} {'-' * 6}"]
    total = 0.0
    for label, calls in spent.items():
        if not calls:
            continue
        per_step = sum(calls) / n
        total += per_step
        lines.append(f"{label:<28} {per_step * 1e3:8.2f} {per_step / median:6.1%}")
    lines.append(f"{'other':<28} {max(median - total, 0.0) * 1e3:8.2f} {max(median - total, 0.0) / median:6.1%}")
    lines.append(
        f"{'step (median)':<28} {median * 1e3:8.2f}   (mean {statistics.mean(steps) * 1e3:.2f}; {resets / n:.1f} "
        "envs reset a step)"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="drone_volleyball")
    p.add_argument("--num-envs", type=int, default=4096)
    p.add_argument("--compile", action="store_true", help="sim.make(..., compile=True)")
    p.add_argument("--threads", type=int, nargs="+", default=None, help="torch thread counts (default 1 and all)")
    p.add_argument("--skip", type=int, default=110, help="untimed steps first (compiles; lets episodes end)")
    p.add_argument("--steps", type=int, default=30, help="timed steps per thread count")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.num_envs < 1 or args.steps < 1 or args.skip < 0:
        p.error("--num-envs and --steps must be >= 1, --skip >= 0")

    import sim
    from training.allocator import keep_freed_memory

    if args.task not in sim.registered_tasks():
        p.error(f"unknown task {args.task!r}; registered tasks: {', '.join(sim.registered_tasks())}")
    threads = list(dict.fromkeys(args.threads or (1, os.cpu_count() or 1)))
    allocator = keep_freed_memory()  # as every CPU training run (sim_throughput.py says why)
    env = sim.make(args.task, num_envs=args.num_envs, seed=args.seed, compile=args.compile)
    gen = torch.Generator().manual_seed(args.seed)
    zero = env.zero_actions()

    def actions(k: int) -> list[dict[str, torch.Tensor]]:
        return [{g: torch.rand(a.shape, generator=gen) * 2 - 1 for g, a in zero.items()} for _ in range(k)]

    kernels = f", {env.kernels} kernels" if hasattr(env, "kernels") else ""
    print(f"task={args.task} num_envs={args.num_envs} compile={args.compile}{kernels} {allocator}", flush=True)
    torch.set_num_threads(threads[0])
    for act in actions(args.skip):
        env.step(act)
    median = float("nan")
    for count in threads:
        torch.set_num_threads(count)
        for act in actions(2):  # untimed: compiled graphs compile once per thread count
            env.step(act)
        steps, spent, resets = measure(env, actions(args.steps))
        median = statistics.median(steps)
        print(f"\n{count} thread(s), {args.steps} steps after {args.skip}:")
        print(format_phases(steps, spent, resets), flush=True)
    print(f"\nstep_ms={median * 1e3:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
