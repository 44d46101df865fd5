"""Rollout storage memory and PPO throughput with image observations (pixel_reach).

    python benchmarks/image_ppo.py                                   # 1024 envs x 64 steps of 64x64x3
    python benchmarks/image_ppo.py --num-envs 64 --rollout-steps 8   # smoke run, seconds

Two policies on the same task and the same PPO settings, measured in the same run (A, B, A, B...):

- **image**: the actor reads the ``uint8 [S, S, 3]`` camera entry through the CNN encoder (the task's
  own actor input); the critic reads the privileged ``state`` vector.
- **vector** (the reference): the same networks but the actor reads the 5-value ``state`` vector
  (an MLP policy; what a state-based task costs).

Reported per policy: rollout storage bytes (and what float32 frames would take), collect samples/s
(policy, value, env step with rasterisation, storage), update seconds (``algo.epochs`` x
``algo.minibatches``), train samples/s; medians over ``--repeats`` alternating runs, and the
image/vector ratios. The last line is ``image_train_ratio=<float>``.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--num-envs", type=int, default=1024)
    p.add_argument("--rollout-steps", type=int, default=64)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--epochs", type=int, default=1, help="PPO epochs per update (PPOCfg default: 5)")
    p.add_argument("--minibatches", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3, help="alternating timed iterations per policy")
    p.add_argument("--torch-threads", type=int, default=1)
    args = p.parse_args(argv)
    if min(args.num_envs, args.rollout_steps, args.repeats, args.epochs) < 1:
        p.error("--num-envs, --rollout-steps, --epochs and --repeats must be >= 1")
    return args


def build(args: argparse.Namespace, actor_entry: str):
    import sim
    from policies import ActorCritic, PolicyCfg
    from training.ppo import PPO, PPOCfg
    from training.runner import group_dims

    env = sim.make("pixel_reach", num_envs=args.num_envs, seed=0, image_size=args.image_size)
    g = env.spec.groups["robot"]
    dims = group_dims(dataclasses.replace(g, actor_obs=(actor_entry,)))
    models = torch.nn.ModuleDict({"robot": ActorCritic(dims, PolicyCfg())})
    cfg = PPOCfg(epochs=args.epochs, minibatches=args.minibatches)
    ppo = PPO(models, cfg, args.num_envs, args.rollout_steps, env.device, torch.Generator().manual_seed(0))
    return env, ppo


def iteration(env, ppo, steps: int) -> tuple[float, float]:
    """One collect + update; returns (collect s, update s)."""
    obs = env.observe()
    t0 = time.perf_counter()
    with torch.inference_mode():
        for _ in range(steps):
            actions = ppo.act(obs)
            obs, reward, terminated, truncated, info = env.step(actions)
            ppo.process_env_step(reward, terminated, truncated, info)
        ppo.compute_returns(obs)
    t1 = time.perf_counter()
    ppo.update()
    return t1 - t0, time.perf_counter() - t1


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.torch_threads)
    runs = {name: build(args, entry) for name, entry in (("image", "image"), ("vector", "state"))}
    samples = args.num_envs * args.rollout_steps
    for env, ppo in runs.values():  # warm-up (allocations, first-call overheads), untimed
        env.reset()
        iteration(env, ppo, args.rollout_steps)
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    for _ in range(args.repeats):
        for name, (env, ppo) in runs.items():
            times[name].append(iteration(env, ppo, args.rollout_steps))
    print(
        f"pixel_reach {args.image_size}x{args.image_size}x3, {args.num_envs} envs x {args.rollout_steps} steps, "
        f"PPO {args.epochs} epoch(s) x {args.minibatches} minibatches, {args.torch_threads} torch thread(s), "
        f"medians of {args.repeats} alternating iterations"
    )
    print(f"{'policy':8s} {'storage MiB':>12s} {'(float32)':>10s} {'collect/s':>10s} {'update s':>9s} {'train/s':>9s}")
    rates = {}
    for name, (_env, ppo) in runs.items():
        store = ppo.storage["robot"]
        mib = store.nbytes() / 2**20
        f32 = (store.nbytes() + sum(v.numel() * 3 for v in store.obs.values() if v.dtype == torch.uint8)) / 2**20
        collect = statistics.median(c for c, _ in times[name])
        update = statistics.median(u for _, u in times[name])
        rates[name] = (samples / collect, samples / (collect + update))
        print(f"{name:8s} {mib:12.1f} {f32:10.1f} {rates[name][0]:10.0f} {update:9.2f} {rates[name][1]:9.0f}")
    ratio_c = rates["image"][0] / rates["vector"][0]
    ratio_t = rates["image"][1] / rates["vector"][1]
    print(f"image / vector: collect {ratio_c:.3f}x, train {ratio_t:.3f}x")
    print(f"image_train_ratio={ratio_t:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
