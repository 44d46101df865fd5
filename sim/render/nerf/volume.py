"""Volume rendering of a :class:`~sim.render.nerf.field.RadianceField` (the unbaked reference renderer).

Samples sit at a fixed step along each ray inside the field's aabb; samples in empty cells of the field's
occupancy grid are skipped (never evaluated), and colour is evaluated only where the sample's weight
matters. Rays that leave the aabb take the field's background colour: ``rgb = sum_i w_i c_i + (1 - acc) bg(d)``
with ``w_i = T_i (1 - exp(-sigma_i dt))``. Works with or without autograd (training uses it too).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from sim.render.nerf.capture import Intrinsics, camera_rays
from sim.render.nerf.field import RadianceField

WEIGHT_EPS = 1e-4  # samples with less weight contribute no colour (their colour is not evaluated)


def ray_aabb(origins: Tensor, dirs: Tensor, aabb: Tensor, near: float = 0.0) -> tuple[Tensor, Tensor]:
    """Entry and exit distances [R] of rays with the box (``t_far <= t_near`` when the ray misses)."""
    inv = 1.0 / torch.where(dirs.abs() < 1e-9, torch.full_like(dirs, 1e-9), dirs)
    t0 = (aabb[0] - origins) * inv
    t1 = (aabb[1] - origins) * inv
    t_near = torch.minimum(t0, t1).amax(dim=-1).clamp(min=near)
    t_far = torch.maximum(t0, t1).amin(dim=-1)
    return t_near, t_far


def _render_chunk(
    field: RadianceField, o: Tensor, d: Tensor, step: float, jitter: bool, near: float
) -> dict[str, Tensor]:
    r = o.shape[0]
    t_near, t_far = ray_aabb(o, d, field.aabb, near)
    span = (t_far - t_near).clamp(min=0)
    s = max(1, math.ceil(float(span.max()) / step)) if r else 1
    k = torch.arange(s, device=o.device, dtype=o.dtype)
    off = torch.rand(r, 1, device=o.device, dtype=o.dtype) if jitter else torch.full((r, 1), 0.5, device=o.device)
    t = t_near[:, None] + (k[None] + off) * step  # [R, S]
    valid = t < t_far[:, None]
    x = o[:, None] + t[..., None] * d[:, None]  # [R, S, 3]
    mask = valid.clone()
    mask[valid] = field.occupied(x[valid])
    ri, si = mask.nonzero(as_tuple=True)
    sigma = torch.zeros(r, s, device=o.device, dtype=o.dtype)
    if len(ri):
        sigma = sigma.index_put((ri, si), field.density(x[ri, si]))
    alpha = 1 - torch.exp(-sigma * step)
    trans = torch.cumprod(torch.cat([torch.ones_like(alpha[:, :1]), 1 - alpha + 1e-10], dim=1), dim=1)
    w = alpha * trans[:, :-1]  # [R, S]
    acc = w.sum(dim=1)
    depth = (w * t).sum(dim=1)
    keep = (w[ri, si] > WEIGHT_EPS).detach()
    ci, cs = ri[keep], si[keep]
    rgb = torch.zeros(r, 3, device=o.device, dtype=o.dtype)
    if len(ci):
        col = field.rgb(x[ci, cs], d[ci])
        rgb = rgb.index_add(0, ci, w[ci, cs, None] * col)
    bg = field.background(d)
    rgb = rgb + (1 - acc)[:, None] * bg
    return {"rgb": rgb, "depth": depth, "acc": acc, "n_samples": torch.tensor(len(ri))}


def render_rays(
    field: RadianceField,
    origins: Tensor,
    dirs: Tensor,
    n_samples: int | None = None,
    chunk: int = 8192,
    jitter: bool = False,
    near: float = 0.05,
) -> dict[str, Tensor]:
    """Volume-render rays through a field.

    Args:
        field: any :class:`RadianceField`.
        origins, dirs: [R, 3] ray origins and unit directions (world frame, m).
        n_samples: samples along the aabb's diagonal (step = diagonal / n_samples); ``None``: the field's
            own step (half its finest cell).
        chunk: rays per batch (bounds memory: ~chunk x samples per ray floats).
        jitter: random sample offsets along each ray (training).
        near: ignore the first ``near`` metres of each ray.

    Returns:
        ``rgb`` [R, 3] in [0, 1] (background included), ``depth`` [R] expected termination distance along the
        ray (m; weighted by the field's opacity only), ``acc`` [R] opacity in [0, 1], ``n_samples`` (evaluated).
    """
    if n_samples is None:
        step = field.default_step()
    else:
        step = float((field.aabb[1] - field.aabb[0]).norm()) / n_samples
    outs = [
        _render_chunk(field, origins[i : i + chunk], dirs[i : i + chunk], step, jitter, near)
        for i in range(0, origins.shape[0], chunk)
    ]
    if not outs:
        z = origins.new_zeros(0)
        return {"rgb": origins.new_zeros(0, 3), "depth": z, "acc": z, "n_samples": torch.tensor(0)}
    res = {k: torch.cat([o[k] for o in outs]) for k in ("rgb", "depth", "acc")}
    res["n_samples"] = sum(o["n_samples"] for o in outs)
    return res


@torch.no_grad()
def render_views(
    field: RadianceField, c2w: Tensor, intr: Intrinsics, n_samples: int | None = None, chunk: int = 8192
) -> tuple[Tensor, Tensor]:
    """Render whole cameras (the unbaked reference).

    Args:
        c2w: [B, 4, 4] camera-to-world (OpenGL convention).
        intr: shared intrinsics (``width x height``).

    Returns:
        uint8 rgb [B, H, W, 3], float32 depth [B, H, W] (ray distance, m; expected termination).
    """
    dev = field.aabb.device
    o, d = camera_rays(c2w.to(dev), intr)
    out = render_rays(field, o.reshape(-1, 3), d.reshape(-1, 3), n_samples=n_samples, chunk=chunk)
    b, h, w = o.shape[:3]
    rgb = (out["rgb"].clamp(0, 1) * 255).round().to(torch.uint8).view(b, h, w, 3)
    return rgb, out["depth"].view(b, h, w)


def psnr(a: Tensor, b: Tensor) -> float:
    """Peak signal-to-noise ratio (dB) of two images or batches, uint8 or float in [0, 1]."""
    a = a.float() / 255 if a.dtype == torch.uint8 else a.float()
    b = b.float() / 255 if b.dtype == torch.uint8 else b.float()
    mse = float(((a - b) ** 2).mean())
    return float("inf") if mse == 0 else -10 * math.log10(mse)
