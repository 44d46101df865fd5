"""vlm_driving env steps per second: the simulator with state observations (ego, route, traffic), with the BEV
mask stack, and with the VLM reward (reward camera frames + the dual encoder every step), alternating, medians.

    OMP_NUM_THREADS=1 python benchmarks/driving_throughput.py --envs 4096 --steps 20 --repeats 3 [--compile]
    OMP_NUM_THREADS=1 python benchmarks/driving_throughput.py --envs 64 --vlm --camera 224

``state`` uses the hand-written expert reward (no frames); ``bev`` adds the 48x48x6 BEV observation; ``--vlm``
adds an env with ``reward=vlm`` (camera frames of ``--camera`` px rendered and scored every step, the dual-encoder
backend), which needs the ``vlm`` extra. Random actions; each side is timed by wall clock and by this process's
CPU time. The reference in the same run is the state env: the last line is ``ratio_bev_vs_state=<x>``
(CPU-time steps/s).
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
    p.add_argument("--envs", type=int, default=4096)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--device", default="cpu")
    p.add_argument("--vlm", action="store_true", help="also time reward=vlm (camera frames + dual encoder)")
    p.add_argument("--camera", type=int, default=224, help="reward camera size (px) with --vlm")
    p.add_argument("--bev-envs", type=int, default=0, help="envs of the BEV env (default: --envs)")
    p.add_argument("--compile", action="store_true", help="torch.compile the control step and observation pass")
    p.add_argument("--no-bev", action="store_true", help="time the state env alone")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    kw = {"device": args.device, "compile": args.compile}
    envs = {"state": sim.make("vlm_driving", num_envs=args.envs, reward="expert", **kw)}
    if not args.no_bev:
        bev_envs = args.bev_envs or args.envs
        envs["bev"] = sim.make("vlm_driving", num_envs=bev_envs, reward="expert", observation="bev", **kw)
    if args.vlm:
        envs["vlm"] = sim.make("vlm_driving", num_envs=args.envs, reward="vlm", camera_size=args.camera, **kw)
    runs: dict[str, list[tuple[float, float]]] = {k: [] for k in envs}
    for _ in range(args.repeats):  # alternate: A, B, A, B, ... so both see the same machine load
        for name, env in envs.items():
            runs[name].append(random_action_rate(env, args.steps))
    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in runs.items()}
    print(
        f"vlm_driving, {args.envs} envs, {args.threads} thread(s), {args.device}, {args.steps} steps x {args.repeats}"
    )
    for name, (w, c) in med.items():
        print(f"  {name:6s} {envs[name].num_envs:5d} envs {w:11,.0f} env-steps/s wall   {c:11,.0f} env-steps/s CPU")
    if "bev" in med:
        print(f"ratio_bev_vs_state={med['bev'][1] / med['state'][1]:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
