"""Captioned reward-camera frames from the vlm_driving simulator, labelled from its ground truth, for
training the dual encoder's image tower (sim/rewards/train_image_tower.py).

    python -m sim.tasks.vlm_driving.frames --n 24000 --size 96 --out runs/vlm/sim_frames.npz
    python -m sim.rewards.train_image_tower --frames runs/vlm/sim_frames.npz --out assets/vlm/image_tower.pt

Scenes are real simulator states: envs reset on random maps and routes, driven by the scripted driver
for a random number of steps among IDM/MOBIL traffic; each frame is then given one class by
construction, checked against the ground truth:

    clear       no car within 9 m of the ego (nearer ones removed from the frame), the ego in its lane
    collision   a car overlapping the ego (aligned or crossing), or two cars overlapping each other ahead
    near_miss   a car 0.4-1.2 m beside the ego, or 0.6-2 m ahead of / behind it, not touching
    off_road    the ego moved 2-8 m beyond the road edge onto the grass (checked with the lane lookup)

The classes are ``sim.rewards.synthetic.CLASSES``, so the synthetic captions apply. Output:
``frames uint8 [N, S, S, 3]``, ``labels int [N]``, ``classes``.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from covey_common.cli import OneLineArgumentParser
from sim.physics.boxes2d import boxes_overlap
from sim.rewards.synthetic import CLASSES
from sim.tasks.vlm_driving import raster
from sim.tasks.vlm_driving.traffic import CAR_LENGTH, CAR_WIDTH


def _uniform(shape: tuple[int, ...], lo: float, hi: float, g: torch.Generator) -> Tensor:
    return lo + (hi - lo) * torch.rand(shape, generator=g)


def _sign(shape: tuple[int, ...], g: torch.Generator) -> Tensor:
    return torch.where(torch.rand(shape, generator=g) < 0.5, -1.0, 1.0)


def labelled_frames(env, labels: Tensor, g: torch.Generator) -> Tensor:
    """Frames ``uint8 [E, S, S, 3]`` of ``env``'s current scenes, edited into ``labels [E]`` (``CLASSES`` indices)."""
    E = env.num_envs
    xy, yaw = env.traffic.poses(env.map_id)
    present = env.traffic.present.clone()
    ego_xy, ego_yaw = env.ego[:, :2].clone(), env.ego[:, 2].clone()
    fwd = torch.stack((torch.cos(ego_yaw), torch.sin(ego_yaw)), -1)
    left = torch.stack((-fwd[:, 1], fwd[:, 0]), -1)

    def at(forward: Tensor, lateral: Tensor) -> Tensor:
        return ego_xy + forward.unsqueeze(-1) * fwd + lateral.unsqueeze(-1) * left

    # Clear the ego's surroundings first (every class starts from a clear scene, then adds its event).
    near = torch.linalg.vector_norm(xy - ego_xy.unsqueeze(1), dim=-1) < 9.0
    present &= ~near
    is_ = {name: labels == k for k, name in enumerate(CLASSES)}
    # Collision: car 0 overlapping the ego (half the time) or cars 0 and 1 overlapping 8-14 m ahead.
    pair_ego = is_["collision"] & (torch.rand(E, generator=g) < 0.5)
    pair_other = is_["collision"] & ~pair_ego
    crossing = torch.rand(E, generator=g) < 0.5
    d_yaw = torch.where(crossing, _uniform((E,), 0.8, 2.3, g) * _sign((E,), g), _uniform((E,), -0.5, 0.5, g))
    touch = at(_uniform((E,), -3.2, 3.2, g), _uniform((E,), -1.5, 1.5, g))
    xy[:, 0] = torch.where(pair_ego.unsqueeze(-1), touch, xy[:, 0])
    yaw[:, 0] = torch.where(pair_ego, ego_yaw + d_yaw, yaw[:, 0])
    ahead = _uniform((E,), 8.0, 14.0, g)
    first = at(ahead, _uniform((E,), -0.5, 0.5, g))
    offset = _uniform((E,), -3.2, 3.2, g).unsqueeze(-1) * fwd + _uniform((E,), -1.5, 1.5, g).unsqueeze(-1) * left
    second = first + offset
    xy[:, 0] = torch.where(pair_other.unsqueeze(-1), first, xy[:, 0])
    yaw[:, 0] = torch.where(pair_other, ego_yaw + _uniform((E,), -0.2, 0.2, g), yaw[:, 0])
    xy[:, 1] = torch.where(pair_other.unsqueeze(-1), second, xy[:, 1])
    yaw[:, 1] = torch.where(pair_other, ego_yaw + d_yaw, yaw[:, 1])
    present[:, 0] |= is_["collision"]
    present[:, 1] |= pair_other
    # Near miss: car 0 beside the ego (gap 0.4-1.2 m) or ahead / behind (gap 0.6-2 m), the same heading.
    beside = torch.rand(E, generator=g) < 0.5
    side_gap = (CAR_WIDTH + _uniform((E,), 0.4, 1.2, g)) * _sign((E,), g)
    lon_gap = (CAR_LENGTH + _uniform((E,), 0.6, 2.0, g)) * _sign((E,), g)
    near_xy = torch.where(
        beside.unsqueeze(-1), at(_uniform((E,), -2.0, 2.0, g), side_gap), at(lon_gap, _uniform((E,), -0.3, 0.3, g))
    )
    xy[:, 0] = torch.where(is_["near_miss"].unsqueeze(-1), near_xy, xy[:, 0])
    yaw[:, 0] = torch.where(is_["near_miss"], ego_yaw + 0.05 * torch.randn(E, generator=g), yaw[:, 0])
    present[:, 0] |= is_["near_miss"]
    # Off road: the ego 2-8 m beyond the edge of the road, found by stepping sideways until the lookup says grass.
    side = _sign((E,), g)
    extra = _uniform((E,), 2.0, 8.0, g)
    off_xy = ego_xy.clone()
    found = torch.zeros(E, dtype=torch.bool)
    for step in torch.arange(2.0, 30.0, 0.5):
        cand = at(torch.zeros(E), side * step)
        off = ~env.maps.locate(env.map_id, cand)["on_road"] & ~found
        off_xy = torch.where(off.unsqueeze(-1), at(torch.zeros(E), side * (step + extra)), off_xy)
        found |= off
    ok_off = found & ~env.maps.locate(env.map_id, off_xy)["on_road"]
    ego_xy = torch.where(is_["off_road"].unsqueeze(-1), off_xy, ego_xy)
    ego_yaw = torch.where(is_["off_road"], ego_yaw + _uniform((E,), -0.6, 0.6, g), ego_yaw)
    frames = raster.render_camera(
        env.maps, env.map_id, ego_xy, ego_yaw, xy, yaw, present, env.traffic.colour, env._camera_pixels,
        CAR_LENGTH, CAR_WIDTH,
    )  # fmt: skip
    # Ground-truth checks of the construction: collisions touch, near misses and clear scenes do not.
    half = torch.tensor([CAR_LENGTH / 2, CAR_WIDTH / 2])
    hits_ego = (boxes_overlap(ego_xy.unsqueeze(1), ego_yaw.unsqueeze(1), half, xy, yaw, half) & present).any(-1)
    pair01 = boxes_overlap(xy[:, 0], yaw[:, 0], half, xy[:, 1], yaw[:, 1], half) & present[:, 0] & present[:, 1]
    valid = torch.where(is_["collision"], hits_ego | pair01, ~hits_ego)
    valid &= ~is_["off_road"] | ok_off
    return frames, valid


def generate(n: int, size: int, seed: int, batch: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """``n`` labelled frames (classes uniform) of ``size`` px; see the module docstring."""
    import sim

    g = torch.Generator().manual_seed(seed)
    env = sim.make("vlm_driving", num_envs=batch, reward="expert", camera_size=size, seed=seed)
    policy = env.expert_policy()
    frames, labels = [], []
    have = 0
    round_ = 0
    while have < n:
        env.reset(seed=seed + round_)
        for _ in range(int(torch.randint(5, 300, (), generator=g))):
            env.step(policy(env.observe()))
        lab = torch.randint(0, len(CLASSES), (batch,), generator=g)
        img, ok = labelled_frames(env, lab, g)
        frames.append(img[ok].numpy())
        labels.append(lab[ok].numpy())
        have += int(ok.sum())
        round_ += 1
        print(f"round {round_}: {have}/{n} frames ({float(ok.float().mean()):.0%} of the batch kept)", flush=True)
    return np.concatenate(frames)[:n], np.concatenate(labels)[:n]


def main(argv: list[str] | None = None) -> int:
    p = OneLineArgumentParser(prog="python -m sim.tasks.vlm_driving.frames", description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=24000)
    p.add_argument("--size", type=int, default=96, help="camera pixels (the tower resizes to its input size)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/vlm/sim_frames.npz")
    args = p.parse_args(argv)
    frames, labels = generate(args.n, args.size, args.seed)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out, frames=frames, labels=labels, classes=np.array(CLASSES))
    counts = {c: int((labels == k).sum()) for k, c in enumerate(CLASSES)}
    size_mb = math.prod(frames.shape[1:]) * len(labels) / 1e6
    print(f"wrote {len(labels)} frames to {out}: {counts}; {size_mb:.0f} MB raw")
    return 0


if __name__ == "__main__":
    from covey_common.cli import run_main

    raise SystemExit(run_main("python -m sim.tasks.vlm_driving.frames", main))
