"""robot_soccer env steps per second: state observations (physics only) against the full vision env (physics + the
composited 40x30 head-camera frames of every agent), alternating, medians.

    OMP_NUM_THREADS=1 python benchmarks/soccer_throughput.py --envs 256 --steps 50 --repeats 3
    OMP_NUM_THREADS=1 python benchmarks/soccer_throughput.py --robot humanoid --envs 256 --steps 30 --repeats 3

Both envs are 1v1 against the scripted chaser (the humanoid: against an idle humanoid; one agent camera per env),
randomisation on, random actions; the
vision env renders over the baked arena field (assets/fields/soccer_arena_baked.pt). Each side is timed by wall clock
and by this process's CPU time (the CPU-time figure is what the env costs on a shared machine). The last line is
``ratio_vision_vs_state=<x>`` (vision steps/s over state steps/s, CPU time).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import sim  # noqa: E402
from benchmarks.env_timing import random_action_rate  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--envs", type=int, default=256)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (and MuJoCo rollout threads)")
    p.add_argument("--robot", choices=("wheeled", "humanoid"), default="wheeled")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    mj = {"mujoco": {"nthread": args.threads}}
    if args.robot == "humanoid":
        mj.update(robot_kind="humanoid", opponent="idle")
    envs = {
        "state": sim.make("robot_soccer", num_envs=args.envs, **mj),
        "vision": sim.make("robot_soccer", num_envs=args.envs, observation="vision", **mj),
    }
    runs: dict[str, list[tuple[float, float]]] = {k: [] for k in envs}
    for _ in range(args.repeats):  # alternate: A, B, A, B, ... so both see the same machine load
        for name, env in envs.items():
            runs[name].append(random_action_rate(env, args.steps))
    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in runs.items()}
    print(
        f"robot_soccer 1v1 ({args.robot}), {args.envs} envs, {args.threads} thread(s), "
        f"{args.steps} steps x {args.repeats} repeats"
    )
    for name, (w, c) in med.items():
        print(f"  {name:7s} {w:10,.0f} env-steps/s wall   {c:10,.0f} env-steps/s CPU")
    ratio = med["vision"][1] / med["state"][1]
    print(f"ratio_vision_vs_state={ratio:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
