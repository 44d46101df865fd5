"""Radiance fields: density and colour at world points, a background for rays that leave the box.

Two fields share the :class:`RadianceField` interface (and :meth:`RadianceField.save` / :func:`load_field`):

- :class:`TensorVMField`, covey's built-in field: TensoRF's vector-matrix factorisation (each of density
  and appearance is a sum of plane x line products, ``sum_r P_r^XY(x, y) L_r^Z(z) + ...``), a linear
  appearance basis to RGB (diffuse: no view dependence), trained by :mod:`sim.render.nerf.train`.
  Axis-aligned textured planes (floors, walls) are exactly rank one, so it learns arenas quickly.
- :class:`GridField`: a dense density + RGB voxel grid, e.g. a nerfstudio model sampled on a grid
  (:mod:`sim.render.nerf.nerfstudio_route`).

Both carry an **occupancy grid** (bool, coarse) for empty-space skipping: ``occupied(x)`` is False where
the density is negligible, so renderers may skip those samples. Units: metres, sigma in 1/m, world frame
z up.
"""

from __future__ import annotations

import importlib
import math
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from covey_common.files import atomic_path

FORMAT_VERSION = 1


class EnvMap(nn.Module):
    """A learned colour per direction (equirectangular, ``height x width``), for rays that leave the aabb."""

    def __init__(self, width: int = 32, height: int = 16, init: float = 0.5) -> None:
        super().__init__()
        logit = math.log(init / (1 - init))
        self.raw = nn.Parameter(torch.full((1, 3, height, width), logit))

    def forward(self, d: Tensor) -> Tensor:
        """d [N, 3] unit directions -> rgb [N, 3]."""
        u = torch.atan2(d[:, 1], d[:, 0]) / math.pi  # azimuth in [-1, 1]
        v = -torch.asin(d[:, 2].clamp(-1, 1)) / (math.pi / 2)  # up (+z) = top row
        grid = torch.stack([u, v], dim=-1).view(1, 1, -1, 2)
        out = F.grid_sample(self.raw, grid, mode="bilinear", padding_mode="border", align_corners=True)
        return torch.sigmoid(out.view(3, -1).t())


class RadianceField(nn.Module):
    """Base class: ``aabb`` [2, 3] (m), an occupancy grid, ``query``, ``density``, ``background``, ``save``.

    Subclasses implement ``_features_density(xn)`` and ``_rgb(xn, d)`` on points normalised to
    ``[-1, 1]^3`` over the aabb, and ``config()`` (constructor keyword arguments).
    """

    aabb: Tensor
    occ: Tensor

    def __init__(self, aabb: Tensor | list, occ_res: tuple[int, int, int] = (64, 64, 32)) -> None:
        super().__init__()
        self.register_buffer("aabb", torch.as_tensor(aabb, dtype=torch.float32).view(2, 3).clone())
        self.register_buffer("occ", torch.ones(occ_res, dtype=torch.bool))
        self.env = EnvMap()

    # ---------------------------------------------------------------- interface
    def normalise(self, x: Tensor) -> Tensor:
        """World points [N, 3] -> [-1, 1]^3 over the aabb."""
        return (x - self.aabb[0]) / (self.aabb[1] - self.aabb[0]) * 2 - 1

    def inside(self, x: Tensor) -> Tensor:
        """bool [N]: the point lies in the aabb."""
        return ((x >= self.aabb[0]) & (x <= self.aabb[1])).all(dim=-1)

    def occupied(self, x: Tensor) -> Tensor:
        """bool [N]: in the aabb and in an occupied cell of the occupancy grid (renderers may skip the rest)."""
        res = torch.tensor(self.occ.shape, device=x.device)
        idx = ((self.normalise(x) + 1) / 2 * res).long()
        ok = ((idx >= 0) & (idx < res)).all(dim=-1)
        idx = torch.minimum(idx.clamp(min=0), res - 1)
        return ok & self.occ[idx[:, 0], idx[:, 1], idx[:, 2]]

    def density(self, x: Tensor) -> Tensor:
        """sigma [N] (1/m) at world points x [N, 3]; 0 outside the aabb and in empty occupancy cells (the
        occupancy grid is part of the model: training never sampled those cells)."""
        sigma = self._density(self.normalise(x))
        return torch.where(self.occupied(x), sigma, torch.zeros_like(sigma))

    def rgb(self, x: Tensor, d: Tensor) -> Tensor:
        """Colour [N, 3] in [0, 1] at world points x [N, 3] seen along unit directions d [N, 3]."""
        return self._rgb(self.normalise(x), d)

    def query(self, x: Tensor, d: Tensor) -> tuple[Tensor, Tensor]:
        """x, d [N, 3] -> sigma [N] (1/m), rgb [N, 3] in [0, 1]."""
        return self.density(x), self.rgb(x, d)

    def background(self, d: Tensor) -> Tensor:
        """Colour [N, 3] of rays (unit directions d [N, 3]) that leave the aabb without stopping."""
        return self.env(d)

    def default_step(self) -> float:
        """Ray-marching step (m) that resolves this field (half its finest cell)."""
        return 0.01

    @torch.no_grad()
    def update_occupancy(self, threshold: float = 0.5, samples: int = 2, dilate: int = 1) -> float:
        """Recompute ``occ`` from the density at ``samples`` jittered points per cell; ``threshold`` in 1/m.

        Returns:
            the occupied fraction.
        """
        res = self.occ.shape
        dev = self.aabb.device
        axes = [torch.arange(n, device=dev, dtype=torch.float32) for n in res]
        cells = torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1).view(-1, 3)
        size = torch.tensor(res, device=dev, dtype=torch.float32)
        occ = torch.zeros(cells.shape[0], dtype=torch.bool, device=dev)
        for _ in range(samples):
            for part in torch.split(torch.arange(cells.shape[0], device=dev), 1 << 18):
                xn = (cells[part] + torch.rand(len(part), 3, device=dev)) / size * 2 - 1
                occ[part] |= self._density(xn) > threshold
        occ = occ.view(res)
        if dilate:
            k = 2 * dilate + 1
            occ = F.max_pool3d(occ[None, None].float(), k, stride=1, padding=dilate)[0, 0] > 0
        self.occ.copy_(occ)
        return occ.float().mean().item()

    @torch.no_grad()
    def occupancy_from_points(self, x: Tensor, dilate: int = 1) -> Tensor:
        """bool grid (``occ``'s shape) marking the cells that hold any of the world points x [N, 3], dilated."""
        res = torch.tensor(self.occ.shape, device=x.device)
        idx = ((self.normalise(x) + 1) / 2 * res).long()
        idx = idx[((idx >= 0) & (idx < res)).all(dim=-1)]
        grid = torch.zeros(self.occ.shape, dtype=torch.bool, device=x.device)
        grid[idx[:, 0], idx[:, 1], idx[:, 2]] = True
        if dilate:
            k = 2 * dilate + 1
            grid = F.max_pool3d(grid[None, None].float(), k, stride=1, padding=dilate)[0, 0] > 0
        return grid

    # ---------------------------------------------------------------- subclass hooks
    def _density(self, xn: Tensor) -> Tensor:
        raise NotImplementedError

    def _rgb(self, xn: Tensor, d: Tensor) -> Tensor:
        raise NotImplementedError

    def config(self) -> dict[str, Any]:
        raise NotImplementedError

    # ---------------------------------------------------------------- persistence
    def save(self, path: str | Path, half: bool = True) -> None:
        """Write the field (class, constructor config, state; float tensors as float16 when ``half``)."""
        state = {
            k: (v.half() if half and v.is_floating_point() and k != "aabb" else v).cpu()
            for k, v in self.state_dict().items()
        }
        blob = {
            "format": FORMAT_VERSION,
            "class": f"{type(self).__module__}:{type(self).__qualname__}",
            "config": self.config(),
            "state": state,
        }
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:  # a reader never sees half a checkpoint
            torch.save(blob, tmp)


def load_field(path: str | Path, map_location: str | torch.device = "cpu") -> RadianceField:
    """Load any field written by :meth:`RadianceField.save` (built-in or nerfstudio-baked), float32, eval mode."""
    blob = torch.load(path, map_location=map_location, weights_only=True)
    if not isinstance(blob, dict) or blob.get("format") != FORMAT_VERSION:
        raise ValueError(f"{path}: not a covey radiance field (format {FORMAT_VERSION})")
    module, _, name = blob["class"].partition(":")
    if not module.startswith("sim.render.nerf."):
        raise ValueError(f"{path}: field class {blob['class']!r} is not a covey class")
    cls = getattr(importlib.import_module(module), name)
    cfg = blob["config"]
    state = {k: v.float() if v.is_floating_point() else v for k, v in blob["state"].items()}
    field = cls(**cfg)
    field.load_state_dict(state)
    return field.to(map_location).eval()


# ----------------------------------------------------------------------------- built-in field
def _plane_line_coords(xn: Tensor) -> tuple[Tensor, Tensor]:
    """xn [N, 3] -> plane coords [3, 1, N, 2] (XY, XZ, YZ) and line coords [3, 1, N, 2] (Z, Y, X)."""
    planes = torch.stack([xn[:, [0, 1]], xn[:, [0, 2]], xn[:, [1, 2]]]).unsqueeze(1)
    lines_1d = torch.stack([xn[:, 2], xn[:, 1], xn[:, 0]])
    lines = torch.stack([torch.zeros_like(lines_1d), lines_1d], dim=-1).unsqueeze(1)
    return planes, lines


class TensorVMField(RadianceField):
    """TensoRF-VM density + diffuse colour on the aabb.

    Args:
        aabb: [2, 3] scene bounds (m).
        res: grid resolution (x, y, z) in cells.
        density_rank, app_rank: components per plane/line pair (x3 pairs).
        occ_res: occupancy grid resolution.
        density_bias: softplus shift (start nearly empty); ``density_scale``: 1/m per unit softplus.
    """

    def __init__(
        self,
        aabb: Tensor | list,
        res: tuple[int, int, int] = (64, 64, 24),
        density_rank: int = 8,
        app_rank: int = 24,
        occ_res: tuple[int, int, int] = (64, 64, 24),
        density_bias: float = -6.0,
        density_scale: float = 20.0,
    ) -> None:
        super().__init__(aabb, tuple(occ_res))
        self.res = tuple(int(r) for r in res)
        self.density_rank, self.app_rank = density_rank, app_rank
        self.density_bias, self.density_scale = density_bias, density_scale
        self.density_planes, self.density_lines = self._make(density_rank, 0.1)
        self.app_planes, self.app_lines = self._make(app_rank, 0.1)
        self.basis = nn.Linear(3 * app_rank, 3, bias=True)

    def _make(self, rank: int, scale: float) -> tuple[nn.ParameterList, nn.ParameterList]:
        rx, ry, rz = self.res
        plane_shapes = [(ry, rx), (rz, rx), (rz, ry)]  # grid_sample: [H, W] indexed by (v, u) = (2nd, 1st) coord
        line_shapes = [rz, ry, rx]
        planes = nn.ParameterList([nn.Parameter(scale * torch.randn(1, rank, h, w)) for h, w in plane_shapes])
        lines = nn.ParameterList([nn.Parameter(scale * torch.randn(1, rank, n, 1)) for n in line_shapes])
        return planes, lines

    def config(self) -> dict[str, Any]:
        return {
            "aabb": self.aabb.tolist(),
            "res": list(self.res),
            "density_rank": self.density_rank,
            "app_rank": self.app_rank,
            "occ_res": list(self.occ.shape),
            "density_bias": self.density_bias,
            "density_scale": self.density_scale,
        }

    def default_step(self) -> float:
        cell = (self.aabb[1] - self.aabb[0]) / torch.tensor(self.res, dtype=torch.float32, device=self.aabb.device)
        return float(cell.min()) * 0.5

    @staticmethod
    def _vm(planes: nn.ParameterList, lines: nn.ParameterList, xn: Tensor) -> Tensor:
        """[N, 3 * rank] plane x line features."""
        pc, lc = _plane_line_coords(xn)
        feats = []
        for i in range(3):
            p = F.grid_sample(planes[i], pc[i : i + 1], mode="bilinear", align_corners=True)  # [1, R, 1, N]
            ln = F.grid_sample(lines[i], lc[i : i + 1], mode="bilinear", align_corners=True)
            feats.append((p * ln)[0, :, 0])
        return torch.cat(feats, dim=0).t()

    def _density(self, xn: Tensor) -> Tensor:
        raw = self._vm(self.density_planes, self.density_lines, xn).sum(dim=-1)
        return F.softplus(raw + self.density_bias) * self.density_scale

    def _rgb(self, xn: Tensor, d: Tensor) -> Tensor:
        return torch.sigmoid(self.basis(self._vm(self.app_planes, self.app_lines, xn)))

    @torch.no_grad()
    def upsample(self, res: tuple[int, int, int]) -> None:
        """Resample the planes and lines to ``res`` cells (coarse-to-fine); rebuild the optimiser after."""
        self.res = tuple(int(r) for r in res)
        rx, ry, rz = self.res
        plane_shapes = [(ry, rx), (rz, rx), (rz, ry)]
        line_shapes = [rz, ry, rx]
        for plist, llist in ((self.density_planes, self.density_lines), (self.app_planes, self.app_lines)):
            for i in range(3):
                plist[i] = nn.Parameter(
                    F.interpolate(plist[i].data, size=plane_shapes[i], mode="bilinear", align_corners=True)
                )
                llist[i] = nn.Parameter(
                    F.interpolate(llist[i].data, size=(line_shapes[i], 1), mode="bilinear", align_corners=True)
                )

    def grid_parameters(self) -> list[nn.Parameter]:
        return [*self.density_planes, *self.density_lines, *self.app_planes, *self.app_lines]


# ----------------------------------------------------------------------------- dense grid (baked)
class GridField(RadianceField):
    """A dense voxel grid of density (1/m) and RGB, trilinearly interpolated (e.g. a baked nerfstudio model).

    Args:
        aabb: [2, 3] bounds (m).
        res: (x, y, z) grid points (values sit on the points, corners included).
    """

    def __init__(
        self, aabb: Tensor | list, res: tuple[int, int, int] = (64, 64, 32), occ_res: tuple[int, int, int] | None = None
    ) -> None:
        occ_res = tuple(occ_res) if occ_res is not None else tuple(max(1, r // 2) for r in res)
        super().__init__(aabb, occ_res)
        self.res = tuple(int(r) for r in res)
        rx, ry, rz = self.res
        # [1, C, D=z, H=y, W=x] for grid_sample's (x, y, z) point order
        self.sigma = nn.Parameter(torch.zeros(1, 1, rz, ry, rx))
        self.color = nn.Parameter(torch.full((1, 3, rz, ry, rx), 0.5))

    def config(self) -> dict[str, Any]:
        return {"aabb": self.aabb.tolist(), "res": list(self.res), "occ_res": list(self.occ.shape)}

    def default_step(self) -> float:
        cell = (self.aabb[1] - self.aabb[0]) / (
            torch.tensor(self.res, dtype=torch.float32, device=self.aabb.device) - 1
        )
        return float(cell.min()) * 0.5

    @torch.no_grad()
    def set_values(self, sigma: Tensor, rgb: Tensor) -> None:
        """sigma [X, Y, Z] (1/m), rgb [X, Y, Z, 3] in [0, 1] on the grid points."""
        self.sigma.copy_(sigma.permute(2, 1, 0)[None, None])
        self.color.copy_(rgb.permute(3, 2, 1, 0)[None])

    def grid_points(self) -> Tensor:
        """World coordinates [X, Y, Z, 3] of the grid points."""
        axes = [
            torch.linspace(float(self.aabb[0, i]), float(self.aabb[1, i]), self.res[i], device=self.aabb.device)
            for i in range(3)
        ]
        return torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1)

    def _sample(self, grid: Tensor, xn: Tensor) -> Tensor:
        out = F.grid_sample(grid, xn.view(1, 1, 1, -1, 3), mode="bilinear", align_corners=True)
        return out.view(grid.shape[1], -1).t()

    def _density(self, xn: Tensor) -> Tensor:
        return self._sample(self.sigma, xn)[:, 0].clamp(min=0)

    def _rgb(self, xn: Tensor, d: Tensor) -> Tensor:
        return self._sample(self.color, xn).clamp(0, 1)
