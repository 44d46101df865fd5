"""What masked auto-resets cost: env steps/s with ``env.masked_resets`` against the indexed reset.

Masked resets (``sim.core.env.MultiAgentEnv.masked_resets``) remove the last host sync of ``env.step``
by resetting every env each step and keeping the result where an episode ended. On a GPU that is what
lets a step run ahead of the host (or be captured in a CUDA graph); on the CPU the sync is free and the
extra reset is pure cost, which is why the CPU default stays indexed. This script measures that cost:
one env of each kind, built once, stepped in turn (indexed, masked, indexed, ...) under the same
random actions, ``--repeats`` rounds; it prints each side's median and the ratio of the medians.

    python benchmarks/masked_reset_cost.py                       # cable_load, 4096 envs, 1 thread
    python benchmarks/masked_reset_cost.py --num-envs 64 --steps 3 --repeats 1   # smoke run

The last line is ``masked_vs_indexed=<float>`` (masked steps/s over indexed steps/s).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from env_timing import random_action_rate  # noqa: E402

import sim  # noqa: E402


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="cable_load")
    p.add_argument("--num-envs", type=int, default=4096)
    p.add_argument("--steps", type=int, default=20, help="timed steps per round and side")
    p.add_argument("--repeats", type=int, default=5, help="rounds of (indexed, masked)")
    p.add_argument("--torch-threads", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--compile", action="store_true", help="sim.make(..., compile=True) on both sides")
    args = p.parse_args(argv)
    torch.set_num_threads(args.torch_threads)
    envs = {}
    for kind in ("indexed", "masked"):
        env = sim.make(args.task, num_envs=args.num_envs, device=args.device, seed=0, compile=args.compile)
        env.masked_resets = kind == "masked"
        env.reset()
        envs[kind] = env
    rates: dict[str, list[float]] = {kind: [] for kind in envs}
    for _ in range(args.repeats):
        for kind, env in envs.items():
            rates[kind].append(random_action_rate(env, args.steps)[0])
    print(f"{args.task}, {args.num_envs} envs, {args.device}, {args.torch_threads} thread(s), compile={args.compile}")
    print("| reset | median env steps/s | range |")
    print("|---|---:|---|")
    for kind, r in rates.items():
        print(f"| {kind} | {statistics.median(r):,.0f} | {min(r):,.0f} - {max(r):,.0f} |")
    ratio = statistics.median(rates["masked"]) / statistics.median(rates["indexed"])
    print(f"masked_vs_indexed={ratio:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
