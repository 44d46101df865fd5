"""A task's control-loop layouts head to head: ``env.step`` in rows vs in components (``force_layout``).

    OMP_NUM_THREADS=1 python benchmarks/layout_compare.py                                # cable_load, 4096 envs, eager
    OMP_NUM_THREADS=1 python benchmarks/layout_compare.py --compile                      # compiled (once per layout)
    OMP_NUM_THREADS=1 python benchmarks/layout_compare.py --task drone_volleyball        # 3v3 match
    OMP_NUM_THREADS=1 python benchmarks/layout_compare.py --task drone_volleyball --num-envs 64   # small eager batch
    python benchmarks/layout_compare.py --num-envs 64 --steps 3 --rounds 1               # smoke test

Both envs are built with the same seed and stepped with the same random actions: the task's hover actions (zeros where
it has none) plus uniform noise of +-``--noise`` on every entry, clamped to [-1, 1] (cable_load by default: uniform in
[-1, 1], so MAVs crash and reset; drone_volleyball: +-0.2 around hover, so drones fly, crash, rallies end). Task
defaults otherwise, so randomisation, observation noise and auto-resets are in both. The timing alternates the
layouts, A B A B, ``--rounds`` times, each round ``--steps`` timed steps after the warm-up; each layout's number is the
median over rounds of the mean time per ``env.step``; then the control loop alone (``env._advance``), alternated the
same way. The last line is ``components_vs_rows=<rows time / components time>`` of ``env.step``: above 1, components
is faster.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

import sim
from sim.physics.components import LAYOUTS, force_layout


def random_actions(env, gen: torch.Generator, noise: float) -> dict[str, torch.Tensor]:
    """Hover thrust, zero rates, plus uniform noise in [-noise, noise], per group ``[E, n, 4]``."""
    out = {}
    hover = env.hover_actions() if hasattr(env, "hover_actions") else env.zero_actions()
    for group, act in hover.items():
        out[group] = (act + (torch.rand(act.shape, generator=gen, device=act.device) * 2 - 1) * noise).clamp(-1, 1)
    return out


def timed_steps(env, actions: list[dict[str, torch.Tensor]], sync) -> float:
    """Mean seconds per ``env.step`` over ``actions``."""
    sync()
    t0 = time.perf_counter()
    for act in actions:
        env.step(act)
    sync()
    return (time.perf_counter() - t0) / len(actions)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--num-envs", type=int, default=4096)
    p.add_argument("--task", default="cable_load", help="a task with a layout option (cable_load, drone_volleyball)")
    p.add_argument("--mode", default=None, help="drone_volleyball: a match (1v1, 2v2, 3v3) or a skill (serve, ...)")
    p.add_argument("--steps", type=int, default=20, help="timed env steps per layout and round")
    p.add_argument("--rounds", type=int, default=5, help="A B rounds; the median over rounds is reported")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps per layout first (compiles with --compile)")
    p.add_argument("--noise", type=float, default=None, help="action noise around hover (cable_load 1.0, else 0.2)")
    p.add_argument("--compile", action="store_true", help="torch.compile the control loop and the post-physics pass")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (CPU)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.noise is None:
        args.noise = 1.0 if args.task == "cable_load" else 0.2
    torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    envs = {}
    for layout in LAYOUTS:
        t0 = time.perf_counter()
        make = {"num_envs": args.num_envs, "device": args.device, "seed": args.seed, "compile": args.compile}
        with force_layout(layout):  # else the env chooses by its size and compile (components.choose_layout)
            env = sim.make(args.task, **make, **({"mode": args.mode} if args.mode else {}))
        assert env.layout == layout
        gen = torch.Generator(device=dev).manual_seed(args.seed + 1)
        warm = [random_actions(env, gen, args.noise) for _ in range(args.warmup)]
        if warm:
            timed_steps(env, warm, sync)
        envs[layout] = env
        print(f"{layout}: built and warmed up ({args.warmup} steps) in {time.perf_counter() - t0:.1f} s", flush=True)

    gen = torch.Generator(device=dev).manual_seed(args.seed + 2)
    times: dict[str, list[float]] = {layout: [] for layout in LAYOUTS}
    for r in range(args.rounds):
        actions = [random_actions(envs["rows"], gen, args.noise) for _ in range(args.steps)]
        for layout in LAYOUTS:  # the same actions for both
            times[layout].append(timed_steps(envs[layout], actions, sync))
        print(f"round {r}: " + "  ".join(f"{k} {v[-1] * 1e3:.2f} ms" for k, v in times.items()), flush=True)

    # The control loop alone (what the layout changes): env._advance, the decimation ticks of one env.step,
    # alternated the same way after the env.step rounds (no resets here; the last actions stay applied).
    loop: dict[str, list[float]] = {layout: [] for layout in LAYOUTS}
    for _ in range(args.rounds):
        for layout in LAYOUTS:
            env = envs[layout]
            sync()
            t0 = time.perf_counter()
            for _ in range(args.steps):
                env._advance()
            sync()
            loop[layout].append((time.perf_counter() - t0) / args.steps)

    median = {k: statistics.median(v) for k, v in times.items()}
    loop_median = {k: statistics.median(v) for k, v in loop.items()}
    mode = "compiled" if args.compile else "eager"
    print(
        f"{args.task} {args.mode or ''}, {args.num_envs} envs, {args.device}, {args.threads} thread(s), {mode}, "
        f"torch {torch.__version__}: median of {args.rounds} rounds x {args.steps} steps"
    )
    print(f"  {'layout':<11} {'env.step':>10} {'control loop':>14}")
    for layout in LAYOUTS:
        print(f"  {layout:<11} {median[layout] * 1e3:7.2f} ms {loop_median[layout] * 1e3:11.2f} ms")
    print(f"control_loop_components_vs_rows={loop_median['rows'] / loop_median['components']:.3f}")
    print(f"components_vs_rows={median['rows'] / median['components']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
