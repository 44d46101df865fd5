"""Throughput of the training loop: env steps/s for collection alone and with the PPO update.

    python benchmarks/train_throughput.py --task cable_load                  # 1024 and 4096 envs
    python benchmarks/train_throughput.py --num-envs 64 --rollout-steps 4    # smoke run, seconds
    python benchmarks/train_throughput.py -o algo.epochs=3 -o sim.compile=false

The env compiles as in training (``sim.compile=auto``: cable_load from 1M ``train.total_steps``, the
default 2M, so a first run on a machine spends ~2 min compiling per size, untimed). The PPO update
runs with ``--update-threads`` fixed (default: the rollout's count), so figures are repeatable.

It builds the same :class:`training.runner.Runner` as ``train.py`` (hydra config from configs/,
``-o`` adds overrides; wandb off, a temporary run directory) and, per ``--num-envs``:

- **collect**: ``--rollouts`` timed rollouts of ``--rollout-steps`` steps (policy sampling, value,
  ``env.step``, storage writes, truncation bootstrap, GAE), after one untimed warm-up rollout.
- **train**: ``--iterations`` timed full iterations (collect + PPO update of ``algo.epochs`` x
  ``algo.minibatches``).

A sample is one env step (``num_envs`` per ``env.step``; each carries every agent). The last line
is ``train_samples_per_s_<largest n>=<float>`` for scripts.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="cable_load")
    p.add_argument("--num-envs", type=int, nargs="+", default=[1024, 4096])
    p.add_argument("--rollout-steps", type=int, default=None, help="default: train.rollout_steps of the config")
    p.add_argument("--rollouts", type=int, default=3, help="timed rollouts for 'collect'")
    p.add_argument("--iterations", type=int, default=1, help="timed iterations for 'train'")
    p.add_argument("--device", default="auto")
    p.add_argument("--torch-threads", type=int, default=0, help="0 = torch's default")
    p.add_argument(
        "--update-threads",
        type=int,
        default=0,
        help="the PPO update's threads, fixed (0: the rollout's; -1: the timed choice, training.threads.ThreadTuner)",
    )
    p.add_argument("-o", "--override", action="append", default=[], help="extra hydra override, e.g. algo.epochs=3")
    args = p.parse_args(argv)
    if min(args.num_envs) < 1 or args.rollouts < 1 or args.iterations < 1:
        p.error("--num-envs, --rollouts and --iterations must be >= 1")
    return args


def build_runner(args: argparse.Namespace, num_envs: int, runs_dir: str):
    from omegaconf import OmegaConf

    from training.config import compose  # train.py's typed config (the structured configs registered)
    from training.runner import Runner

    overrides = [
        f"task={args.task}",
        f"num_envs={num_envs}",
        f"device={args.device}",
        f"torch_threads={args.torch_threads}",
        f"update_threads={args.update_threads or args.torch_threads or torch.get_num_threads()}",
        f"runs_dir={runs_dir}",
        "wandb.mode=disabled",
        "train.progress=false",
        *([f"train.rollout_steps={args.rollout_steps}"] if args.rollout_steps else []),
        *args.override,
    ]
    return Runner(OmegaConf.to_container(compose(overrides), resolve=True))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(args: argparse.Namespace, num_envs: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as runs_dir:
        runner = build_runner(args, num_envs, runs_dir)
        steps = runner.steps_per_iter
        obs = runner.env.reset()
        obs, _ = runner.collect(obs)  # warm-up (first-call overheads, torch.compile if enabled)
        runner.alg.discard_rollout()
        _sync(runner.device)
        t0 = time.perf_counter()
        for _ in range(args.rollouts):
            obs, _ = runner.collect(obs)
            runner.alg.discard_rollout()
        _sync(runner.device)
        t_collect = (time.perf_counter() - t0) / args.rollouts
        t0 = time.perf_counter()
        for _ in range(args.iterations):
            obs, _ = runner.train_iteration(obs)
        _sync(runner.device)
        t_train = (time.perf_counter() - t0) / args.iterations
        cfg = runner.ppo_cfg
        return {
            "collect": steps / t_collect,
            "train": steps / t_train,
            "update_s": t_train - t_collect,
            "rollout_steps": runner.train_cfg.rollout_steps,
            "agents": sum(d.n_agents for d in runner.group_dims.values()),
            "epochs": cfg.epochs,
            "minibatches": cfg.minibatches,
            "device": str(runner.device),
            "env": "compiled" if runner.env.compiled else "eager",
            "update_threads": runner.update_threads.describe_count(),
        }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.torch_threads > 0:
        torch.set_num_threads(args.torch_threads)
    import sim

    if args.task not in sim.registered_tasks():
        print(f"unknown task {args.task!r}; registered tasks: {sim.registered_tasks()}", file=sys.stderr)
        return 2
    print(f"task={args.task} threads={torch.get_num_threads()} overrides={args.override}")
    print(
        "| num_envs | device | env | rollout | collect samples/s | train samples/s | update s/iter | epochs x mb "
        "| update threads |"
    )
    print("|---:|---|---|---:|---:|---:|---:|---|---|")
    res = {}
    try:
        for n in args.num_envs:
            r = res[n] = measure(args, n)
            print(
                f"| {n} | {r['device']} | {r['env']} | {r['rollout_steps']} | {r['collect']:,.0f} | "
                f"{r['train']:,.0f} | {r['update_s']:.2f} | {r['epochs']} x {r['minibatches']} | "
                f"{r['update_threads']} |",
                flush=True,
            )
    except KeyboardInterrupt:
        return 130
    largest = max(res)
    print(f"train_samples_per_s_{largest}={res[largest]['train']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
