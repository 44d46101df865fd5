"""Train covey's built-in radiance field (:class:`~sim.render.nerf.field.TensorVMField`) on a capture.

    python -m sim.render.nerf.train capture=assets/captures/soccer_arena out=assets/fields/soccer_arena.pt

Pure torch on any device, sized for a 2-core CPU: random ray batches from the training views, volume
rendering with occupancy-grid skipping (:mod:`sim.render.nerf.volume`), Adam, coarse-to-fine grid
upsampling on a wall-clock schedule (the budget is ``minutes``), photometric MSE plus, when the capture
has depth files and ``depth=true`` (the default), an L1 loss on the expected ray distance and an opacity
loss on rays that hit something (as nerfstudio's depth-nerfacto supervises depth). Every ``eval_minutes``
it prints the PSNR on the held-out views and checkpoints the field (``field.save``).
"""

from __future__ import annotations

import functools
import math
import resource
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from sim.core.config import ConfigError
from sim.render.nerf.capture import Capture, camera_rays, load_capture
from sim.render.nerf.field import TensorVMField
from sim.render.nerf.volume import psnr, render_rays, render_views


@dataclass
class TrainArgs:
    """``python -m sim.render.nerf.train key=value ...``"""

    capture: str = field(default="assets/captures/soccer_arena", metadata={"help": "capture folder"})
    out: str = field(default="runs/nerf/field.pt", metadata={"help": "field checkpoint (.pt)"})
    minutes: float = field(default=20.0, metadata={"help": "wall-clock budget, final evaluation included"})
    iters: int = field(default=0, metadata={"help": "stop after this many steps (0: the budget decides)"})
    batch: int = field(default=4096, metadata={"help": "rays per step"})
    aabb: list[float] | None = field(
        default=None, metadata={"help": "scene box [x0,y0,z0,x1,y1,z1] (m); default: from depth, else the cameras"}
    )
    cell: float = field(default=0.03, metadata={"help": "final grid cell (m)"})
    coarse: int = field(default=4, metadata={"help": "start with cells this many times larger"})
    density_rank: int = field(default=8, metadata={"help": "density components per plane"})
    app_rank: int = field(default=16, metadata={"help": "appearance components per plane"})
    lr: float = field(default=0.02, metadata={"help": "grid learning rate (decays to 1/10)"})
    depth: bool = field(default=True, metadata={"help": "supervise depth when the capture has depth files"})
    depth_weight: float = field(default=0.05, metadata={"help": "weight of the L1 ray-distance loss (per m)"})
    eval_minutes: float = field(default=5.0, metadata={"help": "held-out PSNR + checkpoint interval"})
    downscale: int = field(default=1, metadata={"help": "shrink the capture's images by this factor"})
    device: str = field(default="cpu", metadata={"help": "torch device"})
    seed: int = field(default=0, metadata={"help": "seed"})


def cpu_seconds() -> float:
    """CPU time (user + system) of this process so far (s)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def scene_aabb(cap: Capture, margin: float = 0.05) -> torch.Tensor:
    """[2, 3] box holding every depth hit point and camera (from depth), else the cameras grown by their extent."""
    centres = cap.c2w[:, :3, 3]
    lo, hi = centres.min(0).values, centres.max(0).values
    if cap.depths is not None and (cap.depths > 0).any():
        o, d = camera_rays(cap.c2w, cap.intrinsics)
        valid = cap.depths > 0
        pts = o[valid] + d[valid] * cap.depths[valid, None]
        lo, hi = torch.minimum(lo, pts.min(0).values), torch.maximum(hi, pts.max(0).values)
    else:
        ext = (hi - lo).max().clamp(min=1.0)
        lo, hi = lo - ext, hi + ext
    return torch.stack([lo - margin, hi + margin])


def _res(aabb: torch.Tensor, cell: float) -> tuple[int, int, int]:
    return tuple(max(2, math.ceil(float(s) / cell)) for s in aabb[1] - aabb[0])  # type: ignore[return-value]


def _optimiser(f: TensorVMField, lr: float) -> torch.optim.Optimizer:
    return torch.optim.Adam(
        [
            {"params": f.grid_parameters(), "lr": lr},
            {"params": [*f.basis.parameters(), *f.env.parameters()], "lr": lr * 0.1},
        ],
        betas=(0.9, 0.99),
    )


def evaluate(f: TensorVMField, cap: Capture, indices: Sequence[int], chunk: int = 16384) -> float:
    """Mean PSNR (dB) over views ``indices`` of the capture (the mean of per-view PSNRs)."""
    if not indices:
        return float("nan")
    f.eval()
    scores = []
    for i in indices:
        rgb, _ = render_views(f, cap.c2w[i : i + 1], cap.intrinsics, chunk=chunk)
        scores.append(psnr(rgb, cap.images[i : i + 1]))
    f.train()
    return sum(scores) / len(scores)


def train_field(
    cap: Capture,
    args: TrainArgs,
    log: Callable[[str], None] = print,
    aabb: torch.Tensor | None = None,
) -> tuple[TensorVMField, dict[str, float]]:
    """Fit a :class:`TensorVMField` to the capture's training views.

    Returns:
        the field (eval mode) and stats: ``psnr`` (held-out, dB), ``train_psnr`` (last batches), ``iters``,
        ``wall_s``, ``cpu_s``.
    """
    torch.manual_seed(args.seed)
    dev = torch.device(args.device)
    if aabb is None and args.aabb is not None:
        if len(args.aabb) != 6:
            raise ConfigError("aabb", f"give 6 numbers [x0,y0,z0,x1,y1,z1], got {args.aabb}")
        aabb = torch.tensor([float(v) for v in args.aabb]).view(2, 3)
    aabb = scene_aabb(cap) if aabb is None else torch.as_tensor(aabb, dtype=torch.float32)
    final_res = _res(aabb, args.cell)
    coarse_res = _res(aabb, args.cell * args.coarse)
    f = TensorVMField(aabb, coarse_res, args.density_rank, args.app_rank, occ_res=_res(aabb, args.cell * 2)).to(dev)
    # coarse-to-fine: the cell shrinks geometrically to args.cell at these fractions of the budget
    stages = [0.08, 0.2, 0.35]
    stage_res = [_res(aabb, args.cell * args.coarse ** (1 - (k + 1) / len(stages))) for k in range(len(stages))]
    stage_res[-1] = final_res

    train_idx = cap.train_indices
    o, d = camera_rays(cap.c2w[train_idx], cap.intrinsics)
    rays_o, rays_d = o.reshape(-1, 3).to(dev), d.reshape(-1, 3).to(dev)
    rays_rgb = (cap.images[train_idx].reshape(-1, 3).float() / 255).to(dev)
    use_depth = args.depth and cap.depths is not None
    rays_depth = cap.depths[train_idx].reshape(-1).to(dev) if use_depth else None
    n_rays = rays_o.shape[0]
    log(
        f"capture {cap.root}: {len(train_idx)} training / {len(cap.eval_indices)} held-out views "
        f"{cap.intrinsics.width}x{cap.intrinsics.height}, depth supervision {'on' if use_depth else 'off'}; "
        f"aabb {[round(v, 2) for v in aabb.view(-1).tolist()]}, grid {coarse_res} -> {final_res}"
    )

    # Depth carves space: only cells near the depth hit points can hold density (a prior the density-based
    # updates keep), so the first steps already skip the empty hall. Without depth every cell starts occupied.
    prior = None
    if rays_depth is not None:
        hit = rays_depth > 0
        prior = f.occupancy_from_points(rays_o[hit] + rays_d[hit] * rays_depth[hit, None], dilate=1)
        f.occ.copy_(prior)

    opt = _optimiser(f, args.lr)
    budget = args.minutes * 60
    t0, c0 = time.perf_counter(), cpu_seconds()
    next_eval = args.eval_minutes * 60
    eval_s = 0.0  # how long a held-out evaluation takes: the budget keeps room for the final one
    stage = 0
    it = 0
    train_psnr_ema = 0.0
    held = float("nan")
    while True:
        elapsed = time.perf_counter() - t0
        frac = elapsed / max(budget - eval_s, 1e-9) if args.iters <= 0 else it / args.iters
        if frac >= 1.0:
            break
        if stage < len(stages) and frac >= stages[stage]:
            f.upsample(stage_res[stage])
            stage += 1
            opt = _optimiser(f, args.lr)  # new tensors; Adam state restarts (as TensoRF does)
        # occupancy: from iteration 100 on, every 100 steps (earlier the field has not carved space yet)
        if it >= 100 and it % 100 == 0:
            _update_occupancy(f, prior)
        lr_scale = 0.1**frac
        for g, base in zip(opt.param_groups, (args.lr, args.lr * 0.1), strict=True):
            g["lr"] = base * lr_scale

        idx = torch.randint(0, n_rays, (args.batch,), device=dev)
        out = render_rays(f, rays_o[idx], rays_d[idx], jitter=True, chunk=args.batch)
        mse = ((out["rgb"] - rays_rgb[idx]) ** 2).mean()
        loss = mse
        if rays_depth is not None:
            gt = rays_depth[idx]
            hit = gt > 0
            if hit.any():
                loss = loss + args.depth_weight * (out["depth"][hit] - gt[hit]).abs().mean()
                loss = loss + 0.01 * ((1 - out["acc"][hit]) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        it += 1
        train_psnr_ema = 0.95 * train_psnr_ema + 0.05 * (-10 * math.log10(max(mse.item(), 1e-10)))
        if it % 50 == 0 and not math.isfinite(loss.item()):
            raise FloatingPointError(f"loss is {loss.item()} at step {it}")
        elapsed = time.perf_counter() - t0
        if elapsed >= next_eval and (args.iters > 0 or elapsed + 2 * eval_s < budget):
            next_eval += args.eval_minutes * 60
            te = time.perf_counter()
            held = evaluate(f, cap, cap.eval_indices)
            eval_s = time.perf_counter() - te
            _report(log, it, t0, c0, train_psnr_ema, held, f, out)
            if args.out:
                f.save(args.out)
    _update_occupancy(f, prior)
    held = evaluate(f, cap, cap.eval_indices)
    _report(log, it, t0, c0, train_psnr_ema, held, f, None)
    f.eval()
    stats = {
        "psnr": held,
        "train_psnr": train_psnr_ema,
        "iters": it,
        "wall_s": time.perf_counter() - t0,
        "cpu_s": cpu_seconds() - c0,
    }
    return f, stats


def _update_occupancy(f: TensorVMField, prior: torch.Tensor | None, threshold: float = 0.5) -> None:
    """Occupied = near a depth hit point (with depth; fixed), else density above ``threshold`` (1/m)."""
    if prior is None:
        f.update_occupancy(threshold=threshold)


def _report(
    log: Callable[[str], None],
    it: int,
    t0: float,
    c0: float,
    train: float,
    held: float,
    f: TensorVMField,
    out: dict | None,
) -> None:
    load = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"
    spr = f"{int(out['n_samples']) / len(out['rgb']):.0f} samples/ray, " if out is not None else ""
    log(
        f"[{(time.perf_counter() - t0) / 60:5.1f} min wall, {(cpu_seconds() - c0) / 60:5.1f} min cpu, load {load}] "
        f"step {it}: train PSNR {train:.2f} dB, held-out PSNR {held:.2f} dB; grid {f.res}, "
        f"{spr}occupied {f.occ.float().mean().item():.1%}"
    )


def main(argv: Sequence[str] | None = None) -> None:
    from sim.core.cli import exit_on_user_error, parse_args
    from sim.render.nerf.capture import CaptureError

    def run() -> None:
        args, _ = parse_args(TrainArgs, list(sys.argv[1:] if argv is None else argv))
        cap = load_capture(args.capture, downscale=args.downscale)
        f, stats = train_field(cap, args, log=functools.partial(print, flush=True))
        if args.out:
            f.save(args.out)
            size = Path(args.out).stat().st_size / 1e6
            print(f"saved {args.out} ({size:.1f} MB)")
        print(
            f"held-out PSNR {stats['psnr']:.2f} dB after {stats['iters']} steps, "
            f"{stats['wall_s'] / 60:.1f} min wall, {stats['cpu_s'] / 60:.1f} min CPU"
        )

    exit_on_user_error("sim.render.nerf.train", run, (CaptureError,))


if __name__ == "__main__":
    main()
