"""Frames per second of the vision-language reward (sim/rewards/), and SAC updates per second.

    python benchmarks/vlm_reward.py                           # the dual encoder (assets/vlm/image_tower.pt)
    python benchmarks/vlm_reward.py --clip-dir <dir>          # also a local transformers CLIPModel
    python benchmarks/vlm_reward.py --threads 2 --seconds 10

Each measurement scores batches of random ``uint8 [B, S, S, 3]`` frames with
``VisionLanguageReward.contrast`` (preprocessing, image tower, cosine with the two goals) for
``--seconds``; SAC runs ``SAC.update`` on a filled replay buffer of point_reach-sized transitions
(``algo=sac``'s [256, 256] networks, batch 256). Results: benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from torch import nn


def rate(fn, items: int, seconds: float) -> float:
    fn()  # warm-up
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        fn()
        n += items
    return n / (time.perf_counter() - t0)


def sac_updates_per_s(seconds: float) -> float:
    from policies import ActorCritic, GroupDims, PolicyCfg
    from training.sac import SAC, SACCfg

    dims = GroupDims(3, obs_dim=4, critic_dim=16, action_dim=2)
    cfg = PolicyCfg(squash=True, actor_hidden=(256, 256), critic_hidden=(256, 256), activation="relu")
    sac = SAC(nn.ModuleDict({"agents": ActorCritic(dims, cfg)}), SACCfg(gradient_steps=8), lr=1e-4, gamma=0.98)
    obs = {"agents": {"policy": torch.randn(4096, 3, 4), "state": torch.randn(4096, 3, 16)}}
    sac.add(obs, {"agents": torch.rand(4096, 3, 2) * 2 - 1}, {"agents": torch.randn(4096, 3)}, obs, torch.zeros(4096))
    sac.env_steps = 10**9
    return rate(lambda: sac.update(0.0), 8, seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tower", default="assets/vlm/image_tower.pt")
    parser.add_argument("--clip-dir", default="")
    parser.add_argument("--sizes", default="64,224")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from sim.rewards.vision_language import VisionLanguageReward, VLMRewardCfg, load_backend

    out: dict = {"threads": args.threads, "batch": args.batch, "torch": torch.__version__}
    backends = {"dual": VLMRewardCfg(image_tower=args.tower)}
    if args.clip_dir:
        backends["clip"] = VLMRewardCfg(backend="clip", clip_dir=args.clip_dir)
    for name, cfg in backends.items():
        vlm = VisionLanguageReward(load_backend(cfg), cfg)
        for size in (int(s) for s in args.sizes.split(",")):
            frames = torch.randint(0, 256, (args.batch, size, size, 3), dtype=torch.uint8)
            fps = rate(lambda f=frames, m=vlm: m.contrast(f), args.batch, args.seconds)
            out[f"{name}_{size}px_frames_per_s"] = round(fps, 1)
            print(f"{name} {size}x{size}: {fps:,.0f} frames/s")
    ups = sac_updates_per_s(args.seconds)
    out["sac_updates_per_s"] = round(ups, 1)
    print(f"SAC: {ups:,.1f} gradient steps/s (batch 256, 3 agents, [256, 256])")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
