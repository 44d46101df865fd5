"""Training samples/s of one process against torchrun ranks (``distributed=true``, training/distributed.py).

    python benchmarks/ddp_throughput.py                                    # point_reach, 256 envs, 2 ranks
    python benchmarks/ddp_throughput.py --task cable_load --envs 128 --iterations 4 --repeats 3
    python benchmarks/ddp_throughput.py --device cuda --envs 4096 --nproc 2  # NCCL, one GPU per rank

Three configurations, each a real ``train.py`` run (evaluation off, wandb off, no progress bar), run
in turn ``--repeats`` times (alternating, so a load change on a shared machine hits all alike):

- ``single``: ``python train.py num_envs=E`` (the ordinary single-process path);
- ``ddp_same_total``: ``torchrun --nproc_per_node=N train.py distributed=true num_envs=E/N``
  (the same envs in all, split over ranks);
- ``ddp_same_per_rank``: ``torchrun --nproc_per_node=N ... num_envs=E`` (N times the envs).

A run's throughput is the median of its metrics.csv ``samples_per_s`` (env steps of every rank per
second of collection + update) over its iterations after the first (warm-up). The table shows each
configuration's median over repeats and its ratio to ``single``; the last line is
``ddp_ratio same_total=<x> same_per_rank=<y>``. Each process gets ``--threads`` torch threads: with
N ranks on a machine of C cores, N x threads <= C keeps them from fighting over cores.
"""

from __future__ import annotations

import argparse
import csv
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="point_reach")
    p.add_argument("--envs", type=int, default=256, help="envs of the single process (split over ranks)")
    p.add_argument("--nproc", type=int, default=2, help="torchrun ranks")
    p.add_argument("--rollout-steps", type=int, default=32)
    p.add_argument("--iterations", type=int, default=5, help="PPO iterations per run (the first is warm-up)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    args = p.parse_args(argv)
    if args.envs % args.nproc:
        p.error(f"--envs {args.envs} is not a multiple of --nproc {args.nproc}")
    if args.iterations < 2:
        p.error("--iterations must be >= 2 (the first is left out)")
    return args


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_once(args: argparse.Namespace, nproc: int, envs_per_proc: int, runs_dir: Path) -> float:
    """One train.py run; returns its median samples/s over the iterations after the first."""
    ranks = max(nproc, 1)
    total = envs_per_proc * args.rollout_steps * ranks * args.iterations
    overrides = [
        f"task={args.task}",
        f"device={args.device}",
        f"torch_threads={args.threads}",
        f"num_envs={envs_per_proc}",
        f"train.rollout_steps={args.rollout_steps}",
        f"train.total_steps={total}",
        "train.max_minutes=0",
        "train.eval_every=0",
        "train.checkpoint_every=0",
        "train.progress=false",
        "wandb.mode=disabled",
        f"runs_dir={runs_dir}",
    ]
    if nproc == 0:  # the plain single-process path, distributed=false
        cmd = [sys.executable, "train.py", *overrides]
    else:
        launcher = ["-m", "torch.distributed.run", f"--nproc_per_node={nproc}", "--master_addr=127.0.0.1"]
        cmd = [sys.executable, *launcher, f"--master_port={_free_port()}", "train.py", *overrides, "distributed=true"]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    (run,) = (runs_dir / args.task).iterdir()
    with open(run / "metrics.csv", newline="") as f:
        rates = [float(r["samples_per_s"]) for r in csv.DictReader(f)]
    return statistics.median(rates[1:])


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    n = args.nproc
    configs = {
        "single": (0, args.envs),
        "ddp_same_total": (n, args.envs // n),
        "ddp_same_per_rank": (n, args.envs),
    }
    results: dict[str, list[float]] = {k: [] for k in configs}
    for rep in range(args.repeats):
        for name, (nproc, envs) in configs.items():
            with tempfile.TemporaryDirectory() as tmp:
                results[name].append(run_once(args, nproc, envs, Path(tmp)))
            print(f"repeat {rep + 1}/{args.repeats} {name}: {results[name][-1]:,.0f} samples/s", flush=True)
    base = statistics.median(results["single"])
    print(f"\n{args.task}, {args.device}, {args.threads} thread(s)/process, {n} ranks, cores: {os.cpu_count()}")
    print(f"{'config':<20} {'envs/process':>12} {'samples/s':>12} {'ratio':>7}")
    for name, (_, envs) in configs.items():
        med = statistics.median(results[name])
        print(f"{name:<20} {envs:>12} {med:>12,.0f} {med / base:>7.2f}")
    same_total = statistics.median(results["ddp_same_total"]) / base
    same_per_rank = statistics.median(results["ddp_same_per_rank"]) / base
    print(f"ddp_ratio same_total={same_total:.3f} same_per_rank={same_per_rank:.3f}")


if __name__ == "__main__":
    main()
