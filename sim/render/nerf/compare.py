"""Side-by-side picture: held-out capture image | unbaked field | baked | composited (ball and robot in front).

    python -m sim.render.nerf.compare capture=assets/captures/soccer_arena field=assets/fields/soccer_arena.pt \
        baked=assets/fields/soccer_arena_baked.pt out=docs/nerf_compare.png [views=4] [scale=6]

Rows are held-out views of the capture taken at robot eye height (0.3-0.6 m), rendered at 40 x 30 with the capture's
field of view; the capture image is area-averaged down to 40 x 30. The composited column puts a ball (orange sphere)
1 m ahead of the camera and a robot (blue box) 1.6 m ahead to the left. Pixels are upscaled by nearest neighbour so
that 40 x 30 stays visible. Prints the PSNR of each column against the capture and of baked against unbaked.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from sim.render.camera import CameraModel
from sim.render.composite import Boxes, Compositor, Primitives, Spheres


def _psnr(a: Tensor, b: Tensor) -> float:
    a = a.float() / 255 if a.dtype == torch.uint8 else a.float()
    b = b.float() / 255 if b.dtype == torch.uint8 else b.float()
    return float(-10 * torch.log10(((a - b) ** 2).mean()))


def props_in_front(c2w: Tensor) -> Primitives:
    """A ball 1 m ahead and a robot box 1.6 m ahead, 0.4 m to the left, of each camera ``c2w [E, 4, 4]`` (one per
    env); both on the floor (z = 0)."""
    fwd = -c2w[:, :3, 2].clone()
    fwd[:, 2] = 0
    fwd = fwd / fwd.norm(dim=-1, keepdim=True).clamp(min=1e-6)
    left = torch.stack([-fwd[:, 1], fwd[:, 0], torch.zeros_like(fwd[:, 0])], -1)
    base = c2w[:, :3, 3] * torch.tensor([1.0, 1.0, 0.0])
    ball = base + 1.0 * fwd + torch.tensor([0.0, 0.0, 0.07])
    robot = base + 1.6 * fwd + 0.4 * left + torch.tensor([0.0, 0.0, 0.25])
    yaw = torch.atan2(fwd[:, 1], fwd[:, 0]) + math.pi  # facing the camera
    quat = torch.stack([torch.cos(yaw / 2), torch.zeros_like(yaw), torch.zeros_like(yaw), torch.sin(yaw / 2)], -1)
    return Primitives(
        spheres=Spheres(pos=ball[:, None], radius=torch.tensor([0.07]), rgb=torch.tensor([[1.0, 0.45, 0.05]])),
        boxes=Boxes(
            pos=robot[:, None], half=torch.tensor([[0.08, 0.12, 0.25]]), rgb=torch.tensor([[0.15, 0.25, 0.85]]),
            quat=quat[:, None],
        ),
    )  # fmt: skip


def compare(capture: str, field: str, baked: str | None, out: str, views: int = 4, scale: int = 6) -> dict:
    """Write the PNG; returns the PSNRs (dB) of unbaked / baked / composited against the capture and baked vs
    unbaked."""
    import imageio.v3 as iio

    from sim.render.nerf.bake import BakedScene
    from sim.render.nerf.capture import load_capture
    from sim.render.nerf.field import load_field
    from sim.render.nerf.volume import render_views

    cap = load_capture(capture)
    low = [i for i in cap.eval_indices if 0.25 < float(cap.c2w[i, 2, 3]) < 0.65][:views]
    if not low:
        raise SystemExit(f"{capture}: no held-out view at robot eye height")
    intr = cap.intrinsics
    cam = CameraModel(width=40, height=30, fov_y_deg=math.degrees(2 * math.atan(0.5 * intr.height / intr.fy)))
    k = intr.width // cam.width
    c2w = cap.c2w[low]
    ref = cap.images[low].float().reshape(len(low), cam.height, k, cam.width, k, 3).mean((2, 4))
    ref = ref.round().to(torch.uint8)
    fld = load_field(field)
    unbaked, _ = render_views(fld, c2w, cam.intrinsics())
    bank = BakedScene.load(baked) if baked else BakedScene.bake(fld)
    rgb, _ = bank.render(c2w, cam)
    baked_u8 = (rgb * 255).round().to(torch.uint8)
    comp = Compositor(bank, cam).render(c2w[:, None], props_in_front(c2w))[:, 0]
    cols = [ref, unbaked, baked_u8, comp]
    gap = 2
    tiles = torch.stack(cols, 1).repeat_interleave(scale, 2).repeat_interleave(scale, 3)  # [V, 4, h, w, 3]
    v, c, h, w, _ = tiles.shape
    canvas = torch.full((v * (h + gap) - gap, c * (w + gap) - gap, 3), 255, dtype=torch.uint8)
    for i in range(v):
        for j in range(c):
            canvas[i * (h + gap) : i * (h + gap) + h, j * (w + gap) : j * (w + gap) + w] = tiles[i, j]
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    iio.imwrite(out, canvas.numpy().astype(np.uint8))
    scores = {
        "unbaked_vs_capture": _psnr(unbaked, ref),
        "baked_vs_capture": _psnr(baked_u8, ref),
        "composited_vs_capture": _psnr(comp, ref),
        "baked_vs_unbaked": _psnr(baked_u8, unbaked),
    }
    print(f"{out}: {len(low)} held-out views (frames {low}); columns: capture | unbaked | baked | composited")
    print("  " + ", ".join(f"{name} {value:.2f} dB" for name, value in scores.items()))
    return scores


def main(argv: list[str]) -> None:
    args = dict(a.split("=", 1) for a in argv)
    known = {"capture", "field", "baked", "out", "views", "scale"}
    unknown = sorted(set(args) - known)
    if unknown:
        raise SystemExit(f"unknown argument {unknown[0]!r}; known: {sorted(known)}")
    compare(
        args.get("capture", "assets/captures/soccer_arena"),
        args.get("field", "assets/fields/soccer_arena.pt"),
        args.get("baked"),
        args.get("out", "docs/nerf_compare.png"),
        int(args.get("views", 4)),
        int(args.get("scale", 6)),
    )


if __name__ == "__main__":
    from covey_common.cli import run_main

    run_main("python -m sim.render.nerf.compare", lambda: main(sys.argv[1:]))
