"""An analytic stand-in radiance field for tests and benchmarks: a small arena of boxes with procedural colours.

``BoxArena`` has the ``RadianceField`` interface of ``sim.render.nerf.field`` (``aabb``, ``query``, ``density``,
``background``) but no parameters to train: the scene is a union of axis-aligned solid boxes (a floor slab, boards
around a pitch, an outer wall, goal-like blocks) whose density is a steep sigmoid of the signed distance, and whose
colour is a function of position (stripes, lines, gradients) so that reprojection errors show. Tests use it to check
baking and compositing against exact geometry without a trained field.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def _box_sdf(x: Tensor, lo: Tensor, hi: Tensor) -> Tensor:
    """Signed distance (m) from points ``x [N, 3]`` to the boxes ``lo, hi [K, 3]``, ``[N, K]`` (< 0 inside)."""
    c, h = (lo + hi) / 2, (hi - lo) / 2
    q = (x[:, None, :] - c).abs() - h
    outside = torch.linalg.vector_norm(q.clamp(min=0.0), dim=-1)
    inside = q.max(-1).values.clamp(max=0.0)
    return outside + inside


class BoxArena(nn.Module):
    """A pitch (``half_x`` x ``half_y`` m) with boards, an outer wall and two goal blocks, as a density field.

    Attributes:
        aabb: ``[2, 3]`` scene bounds (m); rays leaving it see ``background``.
    """

    def __init__(self, half_x: float = 2.5, half_y: float = 2.0, sharpness: float = 0.01, sigma_max: float = 400.0):
        super().__init__()
        hx, hy = half_x, half_y
        boxes = [
            ((-hx - 2.0, -hy - 2.0, -0.5), (hx + 2.0, hy + 2.0, 0.0)),  # floor slab, top at z = 0
            ((-hx - 0.3, -hy - 0.3, 0.0), (-hx - 0.2, hy + 0.3, 0.4)),  # boards
            ((hx + 0.2, -hy - 0.3, 0.0), (hx + 0.3, hy + 0.3, 0.4)),
            ((-hx - 0.3, -hy - 0.3, 0.0), (hx + 0.3, -hy - 0.2, 0.4)),
            ((-hx - 0.3, hy + 0.2, 0.0), (hx + 0.3, hy + 0.3, 0.4)),
            ((-hx - 1.6, -hy - 1.6, 0.0), (-hx - 1.4, hy + 1.6, 2.0)),  # outer wall
            ((hx + 1.4, -hy - 1.6, 0.0), (hx + 1.6, hy + 1.6, 2.0)),
            ((-hx - 1.6, -hy - 1.6, 0.0), (hx + 1.6, -hy - 1.4, 2.0)),
            ((-hx - 1.6, hy + 1.4, 0.0), (hx + 1.6, hy + 1.6, 2.0)),
            ((-hx + 0.1, -0.5, 0.0), (-hx + 0.3, 0.5, 0.5)),  # goal blocks on the goal lines
            ((hx - 0.3, -0.5, 0.0), (hx - 0.1, 0.5, 0.5)),
            ((0.6, 0.8, 0.0), (0.9, 1.1, 0.3)),  # an occluder on the pitch (parallax and disocclusion)
        ]
        self.register_buffer("lo", torch.tensor([b[0] for b in boxes]))
        self.register_buffer("hi", torch.tensor([b[1] for b in boxes]))
        self.register_buffer("aabb", torch.tensor([[-hx - 1.7, -hy - 1.7, -0.1], [hx + 1.7, hy + 1.7, 2.5]]))
        self.sharpness = sharpness
        self.sigma_max = sigma_max
        self.half = (hx, hy)

    def sdf(self, x: Tensor) -> Tensor:
        """Signed distance to the scene (m), ``[N]``."""
        return _box_sdf(x, self.lo, self.hi).min(-1).values

    def density(self, x: Tensor) -> Tensor:
        """Density ``[N]`` (1/m) at points ``x [N, 3]``: ``sigma_max`` inside the solids, 0 outside."""
        return self.sigma_max * torch.sigmoid(-self.sdf(x) / self.sharpness)

    def colour(self, x: Tensor) -> Tensor:
        """Procedural colour ``[N, 3]`` in [0, 1] at points ``x [N, 3]``."""
        hx, hy = self.half
        px, py, pz = x.unbind(-1)
        floor = _box_sdf(x, self.lo, self.hi).argmin(-1) == 0  # nearest solid: the floor slab (box 0)
        on_pitch = floor & (px.abs() < hx + 0.15) & (py.abs() < hy + 0.15)
        stripes = 0.5 + 0.5 * torch.cos(px * 3.0)  # mown stripes
        # Pitch lines as soft 8 cm bands (a trained field at capture resolution holds nothing much sharper).
        dist = (
            torch.stack(
                [px.abs(), (px.abs() - hx).abs(), (py.abs() - hy).abs(), (torch.sqrt(px**2 + py**2) - 0.6).abs()], -1
            )
            .min(-1)
            .values
        )
        line = torch.exp(-((dist / 0.04) ** 2))[:, None]
        grass = torch.stack([0.15 + 0.1 * stripes, 0.45 + 0.15 * stripes, 0.15 + 0.05 * stripes], -1)
        grass = grass + (0.95 - grass) * line
        wall = torch.stack(
            [
                0.5 + 0.25 * torch.sin(2.1 * px + 1.3 * py) + 0.15 * torch.sin(6.0 * (px - py) + 4.0 * pz),
                0.5 + 0.4 * torch.sin(3.0 * pz + 0.7 * px),
                0.5 + 0.4 * torch.cos(1.7 * py - 2.3 * pz),
            ],
            -1,
        )
        return torch.where(on_pitch[:, None], grass, wall).clamp(0.0, 1.0)

    def occupied(self, x: Tensor) -> Tensor:
        """Whether points ``x [N, 3]`` may hold density (``[N]`` bool; for ``volume.render_rays``' skipping)."""
        return self.sdf(x) < 6 * self.sharpness

    def rgb(self, x: Tensor, d: Tensor) -> Tensor:
        """Colour ``[N, 3]`` at points ``x [N, 3]`` (view-independent)."""
        return self.colour(x)

    def default_step(self) -> float:
        """Volume-rendering step (m): a fraction of the surfaces' soft shell."""
        return 0.01

    def query(self, x: Tensor, d: Tensor) -> tuple[Tensor, Tensor]:
        """Density ``[N]`` and colour ``[N, 3]`` at points ``x [N, 3]`` seen along ``d [N, 3]`` (view-independent)."""
        return self.density(x), self.colour(x)

    def background(self, d: Tensor) -> Tensor:
        """Sky colour ``[N, 3]`` of rays ``d [N, 3]`` that leave the aabb."""
        up = d[:, 2:3].clamp(0.0, 1.0)
        return torch.cat([0.6 - 0.3 * up, 0.7 - 0.2 * up, 0.9 + 0.0 * up], -1)

    def trace(self, origins: Tensor, dirs: Tensor, steps: int = 200) -> tuple[Tensor, Tensor]:
        """Exact surface hit by sphere tracing the SDF: colour ``[R, 3]`` and ray distance ``[R]`` (inf: sky)."""
        t = torch.zeros(origins.shape[0], device=origins.device)
        for _ in range(steps):
            t = t + self.sdf(origins + t[:, None] * dirs).clamp(min=1e-4)
        x = origins + t[:, None] * dirs
        hit = (self.sdf(x) < 1e-2) & (t < 50.0)
        rgb = torch.where(hit[:, None], self.colour(x), self.background(dirs))
        return rgb, torch.where(hit, t, torch.full_like(t, float("inf")))


def render_rays_simple(
    field: nn.Module, origins: Tensor, dirs: Tensor, n_samples: int = 384, chunk: int = 16384
) -> dict[str, Tensor]:
    """A plain volume renderer (uniform samples between the ray's aabb entry and exit), for fields without one.

    Returns ``rgb [R, 3]`` (background composited), ``depth [R]`` (sum of weight x distance along the ray, m, as
    ``sim.render.nerf.volume.render_rays``) and ``acc [R]`` (opacity).
    """
    out: dict[str, list[Tensor]] = {"rgb": [], "depth": [], "acc": []}
    lo, hi = field.aabb[0], field.aabb[1]
    for s in range(0, origins.shape[0], chunk):
        o, d = origins[s : s + chunk], dirs[s : s + chunk]
        inv = 1.0 / torch.where(d.abs() < 1e-9, torch.full_like(d, 1e-9), d)
        t1, t2 = (lo - o) * inv, (hi - o) * inv
        t_near = torch.minimum(t1, t2).max(-1).values.clamp(min=0.0)
        t_far = torch.maximum(t1, t2).min(-1).values.clamp(min=0.0)
        u = (torch.arange(n_samples, device=o.device) + 0.5) / n_samples
        t = t_near[:, None] + (t_far - t_near)[:, None] * u  # [R, S]
        delta = ((t_far - t_near) / n_samples)[:, None].expand_as(t)
        x = o[:, None, :] + t[..., None] * d[:, None, :]
        sigma, rgb = field.query(x.reshape(-1, 3), d[:, None, :].expand_as(x).reshape(-1, 3))
        alpha = 1.0 - torch.exp(-sigma.reshape(t.shape) * delta)
        trans = torch.cumprod(torch.cat([torch.ones_like(alpha[:, :1]), 1.0 - alpha[:, :-1] + 1e-10], -1), -1)
        w = alpha * trans
        acc = w.sum(-1)
        colour = (w[..., None] * rgb.reshape(*t.shape, 3)).sum(-2) + (1.0 - acc)[:, None] * field.background(d)
        out["rgb"].append(colour)
        out["depth"].append((w * t).sum(-1))
        out["acc"].append(acc)
    return {k: torch.cat(v) for k, v in out.items()}


def trace_rays(field: BoxArena, origins: Tensor, dirs: Tensor, chunk: int = 65536, **_) -> dict[str, Tensor]:
    """``render_rays``-compatible exact renderer of a :class:`BoxArena` (sphere tracing; fast, for tests)."""
    rgb, t = field.trace(origins, dirs, steps=100)
    hit = torch.isfinite(t)
    return {"rgb": rgb, "depth": torch.where(hit, t, torch.zeros_like(t)), "acc": hit.float()}
