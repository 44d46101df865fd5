"""Bake a radiance field into a bank of RGB + depth panoramas, and render batches of views from it by reprojection.

Volume rendering a field costs tens of field queries per pixel; RL wants thousands of 40 x 30 frames per second.
Cameras on a robot live in a thin slab (eye height 0.3-0.6 m over the pitch, small pitch and roll), so the field is
rendered once into equirectangular panoramas (colour and ray distance) on a grid of centres over that slab, and a view
is drawn from the panorama nearest each camera:

    for each pixel ray o + t d (camera at o), panorama centre p, panorama depth D(u) in direction u:
        t0      = D(d) - (o - p).d                      # the surface p + D(d) d projected onto the ray
        repeat: u = (o + t d - p) / |o + t d - p|        # where the current point lies as seen from p
                t = D(u) (u.d) - (o - p).d               # the surface there, projected onto the ray
        colour  = C(u), depth = t

``iterations`` counts the lookups after the first (the last one also fetches colour); 3 is best measured (more
oscillate). Each lookup is a bilinear fetch of 4 texels per channel from flat 1-D tables (``index_select``; the
panoramas are padded so that longitude wraps without a modulo), so a frame costs a handful of gathers per pixel and
no Python loop over cameras. Where the camera is away from the centre, surfaces the panorama cannot see
(disocclusions behind an obstacle, a wall's top edge against the sky) take a neighbour's colour; with the second
nearest panorama (``n_panoramas=2``) each pixel keeps the panorama whose depth agrees best with the point it found
(+0.4 dB, half the speed). Measured figures: ``benchmarks/README.md`` (``render_throughput.py``).

    baked = BakedScene.bake(field, region=((-2.3, -1.8), (2.3, 1.8)), heights=(0.45,))
    baked.save("assets/fields/soccer_arena_baked.pt")
    rgb, depth = BakedScene.load(path).render(c2w, CameraModel())   # [B, 30, 40, 3] in [0, 1], [B, 30, 40] m

CLI: ``python -m sim.render.nerf.bake field=assets/fields/soccer_arena.pt out=assets/fields/soccer_arena_baked.pt``.
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from sim.render.camera import CameraModel

ARENA_REGION = ((-2.3, -1.8), (2.3, 1.8))  # where robot cameras go on the default 5 x 4 m pitch (m)
FORMAT = "covey-panorama-bank-v1"
SKY_DEPTH = 1000.0  # ray distance stored for rays that leave the field's aabb (m): reprojects as a direction


def panorama_dirs(width: int, height: int, device: torch.device | str = "cpu") -> Tensor:
    """Unit world directions ``[H, W, 3]`` through the texel centres of an equirectangular panorama.

    Column 0 starts at longitude -pi (atan2(y, x)), row 0 is straight up (z), the last row straight down.
    """
    lon = (torch.arange(width, device=device, dtype=torch.float32) + 0.5) / width * 2 * math.pi - math.pi
    lat = math.pi / 2 - (torch.arange(height, device=device, dtype=torch.float32) + 0.5) / height * math.pi
    lat, lon = torch.meshgrid(lat, lon, indexing="ij")
    return torch.stack([lat.cos() * lon.cos(), lat.cos() * lon.sin(), lat.sin()], -1)


def _packed(a: np.ndarray) -> Tensor:
    """zlib-compressed bytes of ``a`` as a uint8 tensor (torch.save would pickle ``bytes`` as text, 1.5x larger)."""
    return torch.frombuffer(bytearray(zlib.compress(np.ascontiguousarray(a).tobytes(), 9)), dtype=torch.uint8)


def _unpacked(t: Tensor) -> np.ndarray:
    """Inverse of :func:`_packed`: a flat uint8 array."""
    return np.frombuffer(zlib.decompress(t.numpy().tobytes()), np.uint8)


def _pad(pano: Tensor) -> Tensor:
    """``[P, H, W, C]`` -> ``[P, H + 1, W + 2, C]``: wrapped columns on both sides, the last row repeated."""
    pano = torch.cat([pano[:, :, -1:], pano, pano[:, :, :1]], 2)
    return torch.cat([pano, pano[:, -1:]], 1)


class BakedScene:
    """A bank of RGB + depth equirectangular panoramas on a grid of centres, rendered by reprojection.

    Attributes:
        planes: ``[4, M]`` float32 texel planes (r, g, b in [0, 1]; ray distance in m) of the ``P`` panoramas,
            each padded to ``(Hp + 1) x (Wp + 2)`` texels (``M = P (Hp + 1) (Wp + 2)``).
        origin, spacing, counts: the centre grid: centre ``(i, j, k)`` is ``origin + (i, j, k) * spacing``,
            ``counts = (nx, ny, nz)``; panorama index ``(i * ny + j) * nz + k``.
    """

    def __init__(
        self,
        rgb: Tensor,
        depth: Tensor,
        origin: Sequence[float],
        spacing: Sequence[float],
        counts: Sequence[int],
        iterations: int = 3,
        n_panoramas: int = 1,
    ):
        """``rgb [P, Hp, Wp, 3]`` (uint8 or float in [0, 1]), ``depth [P, Hp, Wp]`` (m), grid as in the class doc."""
        if rgb.dtype == torch.uint8:
            rgb = rgb.float() / 255.0
        self.num, self.pano_h, self.pano_w = depth.shape
        if self.num != math.prod(counts):
            raise ValueError(f"{self.num} panoramas for a grid of {tuple(counts)} centres")
        rgbd = _pad(torch.cat([rgb.float(), depth.float().unsqueeze(-1)], -1))  # [P, Hp + 1, Wp + 2, 4]
        self.planes = rgbd.reshape(-1, 4).T.contiguous()  # [4, M]: r, g, b, depth planes
        self.origin = torch.tensor(origin, dtype=torch.float32, device=depth.device)
        self.spacing = torch.tensor(spacing, dtype=torch.float32, device=depth.device)
        self.counts = tuple(int(c) for c in counts)
        self.iterations = iterations
        self.n_panoramas = n_panoramas

    # ------------------------------------------------------------------ building
    @classmethod
    @torch.no_grad()
    def bake(
        cls,
        field: torch.nn.Module,
        region: tuple[tuple[float, float], tuple[float, float]] = ARENA_REGION,
        heights: Sequence[float] = (0.45,),
        spacing: float = 0.5,
        pano_width: int = 384,
        render_rays: Callable[..., dict] | None = None,
        chunk: int = 8192,
        log: bool = False,
        **render_kwargs,
    ) -> BakedScene:
        """Render the field into panoramas of ``pano_width x pano_width / 2`` texels on a grid over ``region``.

        Args:
            field: a ``RadianceField`` (``aabb``, ``query``, ``background``).
            region: ``((x_min, y_min), (x_max, y_max))`` (m) where cameras go; centres cover it at ``spacing`` m.
            heights: centre heights (m); one layer at mid eye height serves 0.3-0.6 m.
            render_rays: the volume renderer (``sim.render.nerf.volume.render_rays`` by default); it must return
                ``rgb [R, 3]`` with the background composited, ``depth [R]`` (sum of weight x distance) and
                ``acc [R]`` (opacity).
            render_kwargs: passed on to ``render_rays`` (e.g. ``n_samples``).
        """
        if render_rays is None:
            from sim.render.nerf.volume import render_rays
        device = field.aabb.device
        (x0, y0), (x1, y1) = region
        nx = max(1, round((x1 - x0) / spacing) + 1)
        ny = max(1, round((y1 - y0) / spacing) + 1)
        sx = (x1 - x0) / max(nx - 1, 1)
        sy = (y1 - y0) / max(ny - 1, 1)
        hs = list(heights)
        sz = (hs[-1] - hs[0]) / max(len(hs) - 1, 1) if len(hs) > 1 else 1.0
        ii, jj, kk = torch.meshgrid(torch.arange(nx), torch.arange(ny), torch.arange(len(hs)), indexing="ij")
        grid = torch.stack([ii, jj, kk], -1).reshape(-1, 3).float().to(device)
        origin = torch.tensor([x0, y0, hs[0]], device=device)
        centres = origin + grid * torch.tensor([sx, sy, sz], device=device)
        dirs = panorama_dirs(pano_width, pano_width // 2, device).reshape(-1, 3)
        rgbs, depths = [], []
        start = time.perf_counter()
        for n, c in enumerate(centres):
            out = render_rays(field, c.expand_as(dirs).contiguous(), dirs, chunk=chunk, **render_kwargs)
            # A ray that mostly leaves the aabb shows the background: store it far away so it reprojects as a
            # direction (the background depends on the direction only).
            # Expected termination over the opaque part (the renderer weights depth by opacity only).
            acc = out["acc"]
            depth = torch.where(acc > 0.5, out["depth"] / acc.clamp(min=1e-6), torch.full_like(acc, SKY_DEPTH))
            rgbs.append((out["rgb"].clamp(0, 1) * 255).round().to(torch.uint8))
            depths.append(depth)
            if log and (n + 1) % max(1, len(centres) // 10) == 0:
                print(f"baked {n + 1}/{len(centres)} panoramas, {time.perf_counter() - start:.0f} s", flush=True)
        h, w = pano_width // 2, pano_width
        rgb = torch.stack(rgbs).reshape(-1, h, w, 3)
        depth = torch.stack(depths).reshape(-1, h, w)
        return cls(rgb, depth, (x0, y0, hs[0]), (sx, sy, sz), (nx, ny, len(hs)))

    def save(self, path: str | Path) -> None:
        """Write the bank and its grid to ``path`` (a torch file; colour uint8 and depth float16, zlib-compressed:
        colour as differences along each row, depth as separate low/high byte planes; ~3x smaller)."""
        p, h, w = self.num, self.pano_h, self.pano_w
        rgbd = self.planes.T.reshape(p, h + 1, w + 2, 4)[:, :h, 1 : w + 1].cpu()
        rgb = (rgbd[..., :3].clamp(0, 1) * 255).round().to(torch.uint8).numpy()
        depth = rgbd[..., 3].half().numpy()
        rgb_delta = np.diff(rgb, axis=2, prepend=np.zeros_like(rgb[:, :, :1]))  # uint8 wraps: exact inverse by cumsum
        planes = depth.view(np.uint8).reshape(*depth.shape, 2)
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        state = {
            "format": FORMAT,
            "shape": [p, h, w],
            "rgb_delta_zlib": _packed(rgb_delta),
            "depth_f16_planes_zlib": [_packed(planes[..., i]) for i in (0, 1)],
            "origin": self.origin.tolist(),
            "spacing": self.spacing.tolist(),
            "counts": list(self.counts),
        }
        torch.save(state, path)

    @classmethod
    def load(cls, path: str | Path, device: torch.device | str = "cpu", **kwargs) -> BakedScene:
        """Read a bank written by :meth:`save` onto ``device``; ``kwargs`` set ``iterations`` / ``n_panoramas``."""
        state = torch.load(path, map_location="cpu", weights_only=True)
        if state.get("format") != FORMAT:
            raise ValueError(f"{path}: not a covey baked scene (format {state.get('format')!r}, expected {FORMAT!r})")
        p, h, w = state["shape"]
        delta = _unpacked(state["rgb_delta_zlib"]).reshape(p, h, w, 3)
        rgb = np.cumsum(delta, axis=2, dtype=np.uint8)
        lo, hi = (_unpacked(b) for b in state["depth_f16_planes_zlib"])
        depth = np.stack([lo, hi], -1).reshape(-1).view(np.float16).reshape(p, h, w)
        rgb_t = torch.from_numpy(rgb.copy()).to(device)
        depth_t = torch.from_numpy(depth.astype(np.float32)).to(device)
        return cls(rgb_t, depth_t, state["origin"], state["spacing"], state["counts"], **kwargs)

    def to(self, device: torch.device | str) -> BakedScene:
        """Move the tables to ``device`` (in place; returns self)."""
        for name in ("planes", "origin", "spacing"):
            setattr(self, name, getattr(self, name).to(device))
        return self

    @property
    def device(self) -> torch.device:
        return self.planes.device

    def centres(self) -> Tensor:
        """Panorama centres ``[P, 3]`` (m), in panorama index order."""
        nx, ny, nz = self.counts
        ii, jj, kk = torch.meshgrid(torch.arange(nx), torch.arange(ny), torch.arange(nz), indexing="ij")
        grid = torch.stack([ii, jj, kk], -1).reshape(-1, 3).float().to(self.device)
        return self.origin + grid * self.spacing

    # ------------------------------------------------------------------ rendering
    def _nearest(self, pos: Tensor, second: bool = False) -> Tensor:
        """Index ``[B]`` of the panorama whose centre is nearest ``pos [B, 3]`` (or the next one along the axis
        where the camera is farthest from the centre, when ``second``)."""
        counts = torch.tensor(self.counts, device=pos.device)
        g = (pos - self.origin) / self.spacing
        cell = g.round()
        if second:
            frac = g - cell
            axis = (frac * torch.tensor([1.0, 1.0, 0.0], device=pos.device)).abs().argmax(-1, keepdim=True)
            step = torch.zeros_like(cell).scatter_(-1, axis, frac.gather(-1, axis).sign())
            cell = cell + step
        cell = torch.minimum(cell.clamp(min=0).long(), counts - 1)
        return (cell[:, 0] * counts[1] + cell[:, 1]) * counts[2] + cell[:, 2]

    def _fetch(self, planes: Sequence[Tensor], base: Tensor, vx: Tensor, vy: Tensor, vz: Tensor) -> list[Tensor]:
        """Bilinear lookups in texel planes (each ``[M]``, padded panoramas) in the direction of ``(vx, vy, vz)``
        (each ``[B, N]``, any length) in the panoramas starting at flat texel ``base [B, 1]`` -> one ``[B, N]`` each."""
        h, w = self.pano_h, self.pano_w
        lon = torch.atan2(vy, vx)
        lat = torch.atan2(vz, torch.hypot(vx, vy))
        # Padded texel coordinates: column c of the panorama is stored at c + 1 (a wrapped copy on each side), so
        # the 2 x 2 neighbourhood never needs a modulo; the bottom row is repeated once.
        col = lon.mul_(w / (2 * math.pi)).add_(w / 2 + 0.5)
        row = lat.mul_(-h / math.pi).add_(h / 2 - 0.5).clamp_(0.0, h - 1.0)
        c0, r0 = col.floor(), row.floor()
        fc, fr = col.sub_(c0), row.sub_(r0)
        stride = w + 2
        i00 = r0.mul_(stride).add_(c0).long().add_(base).reshape(-1)
        i10 = i00 + stride
        corners = (i00, i00 + 1, i10, i10 + 1)
        out = []
        for plane in planes:  # 1-D index_select per channel plane: several times faster than a row gather
            v00, v01, v10, v11 = (plane.index_select(0, i).view_as(fc) for i in corners)
            out.append(torch.lerp(torch.lerp(v00, v01, fc), torch.lerp(v10, v11, fc), fr))
        return out

    def _reproject(self, pano: Tensor, o: Tensor, d: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Colour ``[B, N, 3]``, ray distance ``[B, N]`` and depth disagreement ``[B, N]`` (m) of rays ``o + t d``
        (``o [B, 3]``, unit ``d [3, B, N]``: one contiguous plane per component) seen through panorama ``pano [B]``.

        With ``v = o - p + t d`` (the point seen from the centre p), ``v.d = (o - p).d + t`` and
        ``|v|^2 = |o - p|^2 + t (2 (o - p).d + t)``, so each step needs ``v`` only for the lookup angles.
        """
        p = self.origin + self._grid_of(pano) * self.spacing  # [B, 3]
        rel = (o - p).unsqueeze(-1)  # [B, 3, 1]
        rx, ry, rz = rel[:, 0], rel[:, 1], rel[:, 2]  # [B, 1]
        dx, dy, dz = d[0], d[1], d[2]  # [B, N]
        rel_d = rx * dx + ry * dy + rz * dz
        rr = rel.square().sum(1)  # [B, 1]
        base = pano[:, None] * ((self.pano_h + 1) * (self.pano_w + 2))
        depth = self.planes[3:]
        t = self._fetch(depth, base, dx, dy, dz)[0] - rel_d
        for n in range(self.iterations):
            r = (rr + t * (2 * rel_d + t)).clamp_(min=1e-12).sqrt_()
            v = (torch.addcmul(rx, t, dx), torch.addcmul(ry, t, dy), torch.addcmul(rz, t, dz))
            cos = (rel_d + t) / r  # u.d, u = v / |v|
            if n + 1 < self.iterations:
                t = self._fetch(depth, base, *v)[0] * cos - rel_d
            else:
                red, green, blue, dist = self._fetch(self.planes, base, *v)
                return torch.stack([red, green, blue], -1), dist * cos - rel_d, (dist - r).abs()
        raise AssertionError("unreachable")  # iterations >= 1 is checked by render

    def _grid_of(self, pano: Tensor) -> Tensor:
        nx, ny, nz = self.counts
        return torch.stack([pano // (ny * nz), (pano // nz) % ny, pano % nz], -1).float()

    @torch.no_grad()
    def render(self, c2w: Tensor, cam: CameraModel) -> tuple[Tensor, Tensor]:
        """Render cameras ``c2w [B, 4, 4]`` (OpenGL convention): rgb ``[B, H, W, 3]`` in [0, 1], depth ``[B, H, W]``
        (m along the ray, ``cam.far`` at most). No loop over cameras; runs on the bank's device."""
        if self.iterations < 1:
            raise ValueError("iterations must be >= 1")
        c2w = c2w.to(self.device, torch.float32)
        b = c2w.shape[0]
        d = torch.einsum("bij,nj->ibn", c2w[:, :3, :3], cam.local_dirs(self.device).reshape(-1, 3)).contiguous()
        o = c2w[:, :3, 3]
        rgb, t, err = self._reproject(self._nearest(o), o, d)
        if self.n_panoramas > 1:
            rgb2, t2, err2 = self._reproject(self._nearest(o, second=True), o, d)
            take = err2 < err
            rgb = torch.where(take[..., None], rgb2, rgb)
            t = torch.where(take, t2, t)
        t = t.clamp(cam.near, cam.far)
        return rgb.reshape(b, cam.height, cam.width, 3), t.reshape(b, cam.height, cam.width)


def main(argv: list[str]) -> None:
    """``python -m sim.render.nerf.bake field=<field.pt> out=<baked.pt> [spacing=0.5] [width=384] [heights=0.45]``."""
    args = dict(a.split("=", 1) for a in argv)
    known = {"field", "out", "spacing", "width", "heights", "region"}
    unknown = sorted(set(args) - known)
    if unknown or "field" not in args or "out" not in args:
        raise SystemExit(f"usage: field=<field.pt> out=<baked.pt> [{', '.join(sorted(known - {'field', 'out'}))}]")
    from sim.render.nerf.field import load_field

    field = load_field(args["field"])
    (x0, y0), (x1, y1) = ARENA_REGION
    if "region" in args:
        x0, y0, x1, y1 = (float(v) for v in args["region"].split(","))
    start, cpu = time.perf_counter(), time.process_time()
    baked = BakedScene.bake(
        field,
        region=((x0, y0), (x1, y1)),
        heights=[float(h) for h in args.get("heights", "0.45").split(",")],
        spacing=float(args.get("spacing", 0.5)),
        pano_width=int(args.get("width", 384)),
        log=True,
    )
    baked.save(args["out"])
    size = Path(args["out"]).stat().st_size / 2**20
    print(
        f"{args['out']}: {baked.num} panoramas {baked.pano_w}x{baked.pano_h}, {size:.1f} MB; "
        f"{time.perf_counter() - start:.0f} s wall, {time.process_time() - cpu:.0f} s CPU"
    )


if __name__ == "__main__":
    import sys

    from covey_common.cli import run_main

    run_main("python -m sim.render.nerf.bake", lambda: main(sys.argv[1:]))
