"""The GPU route: bake a trained nerfstudio model into a covey :class:`~sim.render.nerf.field.GridField`.

On a GPU machine with ``pip install -e ".[nerf]"``::

    ns-train nerfacto --data assets/captures/soccer_arena           # nerfstudio's own training
    python -m sim.render.nerf.nerfstudio_route config=outputs/soccer_arena/nerfacto/<time>/config.yml \\
        out=assets/fields/soccer_arena_nerfacto.pt

The model is loaded through nerfstudio's API (``nerfstudio.utils.eval_utils.eval_setup``) and its field is
queried on a grid over an axis-aligned box **in the capture's world frame**; the result is saved with
:meth:`RadianceField.save`, so the rest of covey (baking, compositing) never imports nerfstudio.

Coordinates: nerfstudio's dataparser maps world points to its normalised frame with a 3x4 transform ``T``
and a scale ``s`` (written to ``dataparser_transforms.json`` beside ``config.yml``): ``x_ns = s (R x + t)``,
``d_ns = R d``. Densities are per unit length, so ``sigma_world = s * sigma_ns``. Nerfacto's scene
contraction is applied inside its field; the baked box defaults to nerfstudio's scene box ``[-1, 1]^3``
mapped back to the world (where contraction is the identity). Colour is view-dependent in nerfacto; the
grid stores its mean over a few directions (covey's baked fields are diffuse). Rays leaving the box take
an environment map filled from the model's far field (points beyond the box along each direction).

nerfstudio is imported only inside :func:`bake_nerfstudio`. On CPU-only machines it installs but does not
import (its torchvision wheel needs a CUDA torch: ``operator torchvision::nms does not exist``); the error
says so in one line.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from sim.render.nerf.field import GridField

# (points_ns [N, 3], unit dirs_ns [N, 3]) -> (sigma_ns [N] per nerfstudio length unit, rgb [N, 3])
NsQuery = Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]
# four directions (a tetrahedron): the mean colour over them stands for the diffuse colour
_MEAN_DIRS = torch.nn.functional.normalize(
    torch.tensor([[1.0, 1.0, 1.0], [1.0, -1.0, -1.0], [-1.0, 1.0, -1.0], [-1.0, -1.0, 1.0]]), dim=-1
)


class NerfstudioUnavailable(RuntimeError):
    """nerfstudio cannot be imported here (one line: why)."""


# ----------------------------------------------------------------------------- coordinates (pure)
def world_to_dataparser(x: Tensor, transform: Tensor, scale: float) -> Tensor:
    """World points [N, 3] -> nerfstudio's normalised frame: ``s (R x + t)`` (``transform`` [3, 4] = [R | t])."""
    transform = transform.to(x)
    return scale * (x @ transform[:, :3].T + transform[:, 3])


def dataparser_to_world(x_ns: Tensor, transform: Tensor, scale: float) -> Tensor:
    """Inverse of :func:`world_to_dataparser`: ``R^-1 (x_ns / s - t)`` (R may include a reflection-free scale)."""
    transform = transform.to(x_ns)
    return torch.linalg.solve(transform[:, :3], (x_ns / scale - transform[:, 3]).T).T


def directions_to_dataparser(d: Tensor, transform: Tensor) -> Tensor:
    """Unit world directions [N, 3] -> unit directions in nerfstudio's frame."""
    return torch.nn.functional.normalize(d @ transform[:, :3].to(d).T, dim=-1)


def read_dataparser_transform(config_path: str | Path) -> tuple[Tensor, float]:
    """``(transform [3, 4], scale)`` from the ``dataparser_transforms.json`` nerfstudio writes beside ``config.yml``."""
    path = Path(config_path).parent / "dataparser_transforms.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found (nerfstudio writes it beside config.yml when training starts)")
    meta = json.loads(path.read_text())
    transform = torch.tensor(meta["transform"], dtype=torch.float32)
    if transform.shape != (3, 4):
        raise ValueError(f"{path}: 'transform' must be 3x4, got {tuple(transform.shape)}")
    return transform, float(meta["scale"])


def world_box_of_ns_box(ns_box: Tensor, transform: Tensor, scale: float) -> Tensor:
    """Axis-aligned world box [2, 3] holding nerfstudio's box ``ns_box`` [2, 3] (its 8 corners mapped back)."""
    corners = torch.stack(torch.meshgrid(*[ns_box[:, i] for i in range(3)], indexing="ij"), dim=-1).reshape(-1, 3)
    w = dataparser_to_world(corners.float(), transform, scale)
    return torch.stack([w.min(0).values, w.max(0).values])


# ----------------------------------------------------------------------------- baking (pure given a query)
@torch.no_grad()
def bake_grid(
    query: NsQuery,
    transform: Tensor,
    scale: float,
    aabb: Tensor,
    res: Sequence[int],
    chunk: int = 1 << 16,
    device: torch.device | str = "cpu",
) -> GridField:
    """Sample a nerfstudio-frame field on a world grid into a :class:`GridField`.

    Args:
        query: the field in nerfstudio's frame (see ``NsQuery``).
        transform, scale: the dataparser transform (world -> nerfstudio).
        aabb: [2, 3] world box to bake; ``res``: grid points per axis (x, y, z).
    """
    grid = GridField(aabb.to(device), tuple(int(r) for r in res)).to(device)
    pts = grid.grid_points().reshape(-1, 3)
    sig = torch.empty(pts.shape[0], device=device)
    rgb = torch.empty(pts.shape[0], 3, device=device)
    dirs_ns = directions_to_dataparser(_MEAN_DIRS.to(device), transform)
    for i in range(0, pts.shape[0], chunk):
        x_ns = world_to_dataparser(pts[i : i + chunk], transform, scale)
        n = x_ns.shape[0]
        s_ns, c = query(x_ns.repeat(len(dirs_ns), 1), dirs_ns.repeat_interleave(n, 0))
        sig[i : i + n] = s_ns.view(len(dirs_ns), n)[0] * scale  # density does not depend on direction
        rgb[i : i + n] = c.view(len(dirs_ns), n, 3).mean(0)
    grid.set_values(sig.view(*grid.res), rgb.view(*grid.res, 3))
    grid.update_occupancy(threshold=0.5)
    _fill_env(grid, query, transform, scale, device)
    return grid.eval()


def _fill_env(
    grid: GridField, query: NsQuery, transform: Tensor, scale: float, device: torch.device | str, n_samples: int = 64
) -> None:
    """Composite the far field (from the box's half-diagonal out to 100x it) into the field's environment map."""
    h, w = grid.env.raw.shape[-2:]
    az = (torch.arange(w, device=device) / (w - 1)) * 2 * math.pi - math.pi
    el = math.pi / 2 - torch.arange(h, device=device) / (h - 1) * math.pi  # top row looks up (+z)
    el, az = torch.meshgrid(el, az, indexing="ij")
    d = torch.stack([el.cos() * az.cos(), el.cos() * az.sin(), el.sin()], dim=-1).reshape(-1, 3)
    centre = grid.aabb.mean(0)
    half = float((grid.aabb[1] - grid.aabb[0]).norm()) / 2
    t = half * torch.logspace(0, 2, n_samples + 1, device=device)  # geometric spacing into the far field
    x = centre + d[:, None] * ((t[:-1] + t[1:]) / 2)[None, :, None]  # [D, S, 3]
    x_ns = world_to_dataparser(x.reshape(-1, 3), transform, scale)
    d_ns = directions_to_dataparser(d, transform).repeat_interleave(n_samples, 0)
    s_ns, c = query(x_ns, d_ns)
    alpha = 1 - torch.exp(-s_ns.view(-1, n_samples) * scale * (t[1:] - t[:-1]))
    trans = torch.cumprod(torch.cat([torch.ones_like(alpha[:, :1]), 1 - alpha + 1e-10], 1), 1)[:, :-1]
    wts = alpha * trans
    col = (wts[..., None] * c.view(-1, n_samples, 3)).sum(1) + (1 - wts.sum(1, keepdim=True)) * 0.5
    logit = torch.logit(col.clamp(1e-3, 1 - 1e-3))
    grid.env.raw.data.copy_(logit.t().reshape(1, 3, h, w))


# ----------------------------------------------------------------------------- nerfstudio
def _import_eval_setup() -> Callable:
    try:
        from nerfstudio.utils.eval_utils import eval_setup
    except Exception as err:  # ImportError, or torchvision's RuntimeError on a CPU torch
        why = " ".join(str(err).split()) or type(err).__name__
        hint = " (its torchvision needs a CUDA torch: run this on a GPU machine)" if "torchvision" in why else ""
        raise NerfstudioUnavailable(f"nerfstudio cannot be imported: {why}{hint}; install covey[nerf]") from None
    return eval_setup


def nerfstudio_query(pipeline: object, chunk: int = 1 << 15) -> NsQuery:
    """A :data:`NsQuery` over a loaded nerfstudio pipeline's field (nerfacto and fields with the same API)."""
    from nerfstudio.cameras.rays import Frustums, RaySamples
    from nerfstudio.field_components.field_heads import FieldHeadNames

    model = pipeline.model  # type: ignore[attr-defined]
    ns_field = model.field
    dev = next(model.parameters()).device

    def query(x_ns: Tensor, d_ns: Tensor) -> tuple[Tensor, Tensor]:
        sig, rgb = [], []
        for i in range(0, x_ns.shape[0], chunk):
            x = x_ns[i : i + chunk].to(dev)[:, None]  # [n, 1 sample, 3]
            d = d_ns[i : i + chunk].to(dev)[:, None]
            n = x.shape[0]
            zeros = torch.zeros(n, 1, 1, device=dev)
            frustums = Frustums(origins=x, directions=d, starts=zeros, ends=zeros, pixel_area=torch.ones_like(zeros))
            samples = RaySamples(frustums=frustums, camera_indices=torch.zeros(n, 1, 1, dtype=torch.long, device=dev))
            out = ns_field.forward(samples)  # positions = origins + directions * (starts + ends) / 2 = x
            sig.append(out[FieldHeadNames.DENSITY].reshape(n).float().to(x_ns.device))
            rgb.append(out[FieldHeadNames.RGB].reshape(n, 3).float().to(x_ns.device))
        return torch.cat(sig), torch.cat(rgb)

    return query


@torch.no_grad()
def bake_nerfstudio(
    config_path: str | Path,
    out: str | Path | None = None,
    aabb: Tensor | Sequence[Sequence[float]] | None = None,
    cell: float = 0.04,
) -> GridField:
    """Load a trained nerfstudio model (``config.yml`` of its run) and bake it into a :class:`GridField`.

    Args:
        config_path: ``outputs/<name>/<method>/<time>/config.yml``.
        out: where to :meth:`~RadianceField.save` the field (optional).
        aabb: world box [2, 3] to bake; default: nerfstudio's scene box mapped back to the world.
        cell: grid spacing (m).

    Raises:
        NerfstudioUnavailable: nerfstudio cannot be imported (one line saying why).
    """
    eval_setup = _import_eval_setup()
    config_path = Path(config_path)
    _, pipeline, _, _ = eval_setup(config_path, test_mode="inference")
    transform, scale = read_dataparser_transform(config_path)
    if aabb is None:
        ns_box = pipeline.model.scene_box.aabb.detach().cpu().float()  # type: ignore[attr-defined]
        box = world_box_of_ns_box(ns_box, transform, scale)
    else:
        box = torch.as_tensor(aabb, dtype=torch.float32)
    res = [max(2, math.ceil(float(s) / cell) + 1) for s in box[1] - box[0]]
    dev = next(pipeline.model.parameters()).device  # type: ignore[attr-defined]
    field_out = bake_grid(nerfstudio_query(pipeline), transform, scale, box, res, device=dev).cpu()
    if out is not None:
        field_out.save(out)
    return field_out


@dataclass
class RouteArgs:
    """``python -m sim.render.nerf.nerfstudio_route key=value ...``"""

    config: str = field(default="", metadata={"help": "nerfstudio run's config.yml"})
    out: str = field(default="runs/nerf/nerfstudio_field.pt", metadata={"help": "covey field to write"})
    cell: float = field(default=0.04, metadata={"help": "grid spacing (m)"})
    aabb: list[float] | None = field(
        default=None, metadata={"help": "world box [x0,y0,z0,x1,y1,z1] to bake (m); default: nerfstudio's scene box"}
    )


def main(argv: Sequence[str] | None = None) -> None:
    from sim.core.cli import exit_on_user_error, parse_args
    from sim.core.config import ConfigError

    def run() -> None:
        args, _ = parse_args(RouteArgs, list(sys.argv[1:] if argv is None else argv))
        if not args.config:
            raise NerfstudioUnavailable("give config=<outputs/.../config.yml>")
        box = None
        if args.aabb is not None:
            if len(args.aabb) != 6:
                raise ConfigError("aabb", f"give 6 numbers [x0,y0,z0,x1,y1,z1], got {args.aabb}")
            box = torch.tensor([float(v) for v in args.aabb]).view(2, 3)
        f = bake_nerfstudio(args.config, args.out, aabb=box, cell=args.cell)
        print(f"baked {args.config} into {args.out}: grid {f.res}, aabb {f.aabb.tolist()}")

    exit_on_user_error("sim.render.nerf.nerfstudio_route", run, (NerfstudioUnavailable, FileNotFoundError))


if __name__ == "__main__":
    main()
