"""Composite dynamic objects (robots, ball, other agents) into a static background by a per-pixel depth test.

The background is anything with ``render(c2w [B, 4, 4], cam) -> (rgb [B, H, W, 3] in [0, 1], depth [B, H, W])``:
a :class:`sim.render.nerf.bake.BakedScene` (a radiance field baked into panoramas) in practice. Dynamic objects are
analytic primitives (spheres, oriented boxes, capsules) ray-cast in torch for every env, agent camera, pixel and
primitive at once (no Python loop over any of them), shaded with their base colour and a Lambert term under a fixed
light, and drawn where they are nearer than the background along the same ray:

    comp = Compositor(BakedScene.load(path), CameraModel(), CameraMount(offset=(0.05, 0, 0.25), pitch_deg=10))
    prims = Primitives(spheres=Spheres(pos=ball_pos[:, None], radius=torch.tensor([0.07]), rgb=ORANGE[None]),
                       boxes=Boxes(pos=robot_pos, half=torch.tensor([[0.1, 0.08, 0.2]] * 2), rgb=robot_rgb))
    obs = comp.render_bodies(robot_pos, robot_quat, prims)   # uint8 [E, A, 30, 40, 3]: an image observation entry

Shapes: ``E`` envs, ``A`` cameras per env (one per agent), ``K`` primitives of a kind per env. Per-primitive
parameters (radius, half sizes, colour) may be given per env (``[E, K, ...]``) or shared (``[K, ...]``). A camera
inside a primitive (a robot's own body) does not see that primitive. Depth is distance along the ray (m).

CLI (every robot's view of a random scene): ``python -m sim.render.composite out=runs/composited.png envs=4``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from sim.render.camera import CameraModel, CameraMount, look_c2w, quat_to_matrix

LIGHT_DIR = (0.35, 0.25, 0.9)  # direction towards the light (world, normalised at use): high, slightly to one side
AMBIENT = 0.45  # share of the base colour a face turned away from the light keeps


@dataclass
class Spheres:
    """Spheres: centres ``pos [E, K, 3]`` (m), ``radius [E, K]`` or ``[K]`` (m), colour ``rgb [E, K, 3]`` or ``[K, 3]``
    in [0, 1]."""

    pos: Tensor
    radius: Tensor
    rgb: Tensor


@dataclass
class Boxes:
    """Oriented boxes: centres ``pos [E, K, 3]``, half sizes ``half [E, K, 3]`` or ``[K, 3]`` (m), colour as for
    spheres, orientation ``quat [E, K, 4]`` (wxyz, MuJoCo order; None: axis-aligned)."""

    pos: Tensor
    half: Tensor
    rgb: Tensor
    quat: Tensor | None = None


@dataclass
class Capsules:
    """Capsules: segment ends ``a, b [E, K, 3]`` (m), ``radius [E, K]`` or ``[K]``, colour as for spheres."""

    a: Tensor
    b: Tensor
    radius: Tensor
    rgb: Tensor


@dataclass
class Primitives:
    """The dynamic objects of every env (each kind optional)."""

    spheres: Spheres | None = None
    boxes: Boxes | None = None
    capsules: Capsules | None = None


def _per_env(x: Tensor, e: int, tail: int) -> Tensor:
    """A per-primitive parameter given as ``[K, *tail]`` or ``[E, K, *tail]`` -> ``[E, K, *tail]``."""
    return x.expand(e, *x.shape) if x.dim() == tail + 1 else x


def _dot(a: Tensor, b: Tensor) -> Tensor:
    return (a * b).sum(-1)


def hit_spheres(o: Tensor, d: Tensor, c: Tensor, r: Tensor, near: float) -> tuple[Tensor, Tensor]:
    """Ray-sphere: rays ``o, d [M, 3]`` against spheres ``c [M, 3]``, ``r [M]`` -> distance ``[M]`` (inf: miss or
    the camera inside), outward normal ``[M, 3]``. Nearest root of ``|o + t d - c| = r``."""
    oc = o - c
    b = _dot(d, oc)
    disc = b * b - (_dot(oc, oc) - r * r)
    t = -b - disc.clamp(min=0).sqrt()
    t = torch.where((disc > 0) & (t > near), t, torch.full_like(t, math.inf))
    normal = (o + t.clamp(max=1e6)[:, None] * d - c) / r[:, None]
    return t, normal


def hit_boxes(o: Tensor, d: Tensor, c: Tensor, half: Tensor, rot: Tensor, near: float) -> tuple[Tensor, Tensor]:
    """Ray-box (slab test in the box frame): boxes ``c [M, 3]``, ``half [M, 3]``, axes ``rot [M, 3, 3]`` (columns,
    world frame); shapes as :func:`hit_spheres`. The normal is that of the face entered last."""
    o_l = torch.einsum("mji,mj->mi", rot, o - c)  # R^T (o - c)
    d_l = torch.einsum("mji,mj->mi", rot, d)
    inv = 1.0 / torch.where(d_l.abs() < 1e-9, torch.full_like(d_l, 1e-9), d_l)
    t1, t2 = (-half - o_l) * inv, (half - o_l) * inv
    t_enter, axis = torch.minimum(t1, t2).max(-1)
    t_exit = torch.maximum(t1, t2).min(-1).values
    t = torch.where((t_exit >= t_enter) & (t_enter > near), t_enter, torch.full_like(t_enter, math.inf))
    n_local = torch.zeros_like(d_l).scatter_(-1, axis[:, None], -torch.sign(d_l.gather(-1, axis[:, None])))
    return t, torch.einsum("mij,mj->mi", rot, n_local)


def hit_capsules(o: Tensor, d: Tensor, pa: Tensor, pb: Tensor, r: Tensor, near: float) -> tuple[Tensor, Tensor]:
    """Ray-capsule (cylinder body, then the cap sphere at the end the body hit fell beyond; after Inigo Quilez's
    ``capIntersect``): segment ``pa, pb [M, 3]``, radius ``r [M]``; shapes as :func:`hit_spheres`."""
    ba, oa = pb - pa, o - pa
    baba, bard, baoa = _dot(ba, ba), _dot(ba, d), _dot(ba, oa)
    rdoa, oaoa = _dot(d, oa), _dot(oa, oa)
    qa = baba - bard * bard
    qb = baba * rdoa - baoa * bard
    qc = baba * oaoa - baoa * baoa - r * r * baba
    h = qb * qb - qa * qc
    t_body = (-qb - h.clamp(min=0).sqrt()) / torch.where(qa.abs() < 1e-12, torch.full_like(qa, 1e-12), qa)
    y = baoa + t_body * bard
    body = (h >= 0) & (y > 0) & (y < baba) & (t_body > near)
    oc = torch.where((y <= 0)[:, None], oa, o - pb)
    cb = _dot(d, oc)
    ch = cb * cb - (_dot(oc, oc) - r * r)
    t_cap = -cb - ch.clamp(min=0).sqrt()
    cap = (h >= 0) & (ch > 0) & (t_cap > near)
    t = torch.where(body, t_body, torch.where(cap, t_cap, torch.full_like(t_body, math.inf)))
    hit = o + t.clamp(max=1e6)[:, None] * d
    frac = (_dot(hit - pa, ba) / baba).clamp(0, 1)
    return t, (hit - pa - frac[:, None] * ba) / r[:, None]


def _bounds(prims: Primitives, o: Tensor) -> tuple[Tensor, Tensor, Tensor, list[tuple[str, int, int]]]:
    """Bounding spheres of every primitive: centres ``[E, K, 3]``, radii ``[E, K]`` (all kinds, in order), whether
    each camera ``o [E, A, 3]`` is inside each primitive (``[E, A, K]``: it cannot see that one, e.g. its own body)
    and each kind's range ``(kind, k0, k1)`` in ``K``."""
    e = o.shape[0]
    centres, radii, inside, ranges = [], [], [], []
    k = 0
    if prims.spheres is not None and prims.spheres.pos.shape[1]:
        sp = prims.spheres
        r = _per_env(sp.radius, e, 0)
        centres.append(sp.pos)
        radii.append(r)
        inside.append((o[:, :, None] - sp.pos[:, None]).norm(dim=-1) < r[:, None])
        ranges.append(("spheres", k, k + sp.pos.shape[1]))
        k = ranges[-1][2]
    if prims.boxes is not None and prims.boxes.pos.shape[1]:
        bx = prims.boxes
        half = _per_env(bx.half, e, 1)
        rel = o[:, :, None] - bx.pos[:, None]  # [E, A, K, 3]
        if bx.quat is not None:
            rel = torch.einsum("ekji,eakj->eaki", quat_to_matrix(bx.quat), rel)
        centres.append(bx.pos)
        radii.append(half.norm(dim=-1))
        inside.append((rel.abs() < half[:, None]).all(-1))
        ranges.append(("boxes", k, k + bx.pos.shape[1]))
        k = ranges[-1][2]
    if prims.capsules is not None and prims.capsules.a.shape[1]:
        cp = prims.capsules
        r = _per_env(cp.radius, e, 0)
        ba = (cp.b - cp.a)[:, None]
        pa = o[:, :, None] - cp.a[:, None]
        frac = (_dot(pa, ba) / _dot(ba, ba).clamp(min=1e-12)).clamp(0, 1)
        centres.append((cp.a + cp.b) / 2)
        radii.append((cp.b - cp.a).norm(dim=-1) / 2 + r)
        inside.append((pa - frac[..., None] * ba).norm(dim=-1) < r[:, None])
        ranges.append(("capsules", k, k + cp.a.shape[1]))
    if not centres:
        return o.new_zeros(e, 0, 3), o.new_zeros(e, 0), o.new_zeros(e, o.shape[1], 0, dtype=torch.bool), []
    return torch.cat(centres, 1), torch.cat(radii, 1) * 1.01 + 1e-4, torch.cat(inside, 2), ranges


def _rows(x: Tensor, e: int, tail: int, flat: Tensor) -> Tensor:
    """Rows ``flat [M]`` (``env * K + k``) of a per-primitive parameter ``[K, *tail]`` or ``[E, K, *tail]``."""
    x = _per_env(x, e, tail)
    return x.reshape(-1, *x.shape[2:]).index_select(0, flat)


def ray_cast(c2w: Tensor, d: Tensor, prims: Primitives, cam: CameraModel) -> tuple[Tensor, Tensor]:
    """Shaded colour ``[E, A, N, 3]`` in [0, 1] and distance ``[E, A, N]`` (inf: nothing) of the nearest primitive
    along the rays of cameras ``c2w [E, A, 4, 4]``, unit directions ``d [3, E, A, N]`` (one plane per component).

    Three steps, each batched over envs, cameras, pixels and primitives: the (camera, primitive) pairs whose bounding
    sphere is in the camera's view are kept; their rays are tested against the bounding sphere (a few
    multiply-adds); the exact intersection runs only on the (ray, primitive) pairs that pass, and a scatter-min keeps
    the nearest hit of each pixel. A camera inside a primitive does not see it (a robot's own body).
    """
    _, e, a, n = d.shape
    o = c2w[..., :3, 3]
    near = cam.near
    t_pix = torch.full((e * a * n,), math.inf, device=d.device, dtype=d.dtype)
    rgb_pix = torch.zeros(e * a * n, 3, device=d.device, dtype=d.dtype)
    centres, radii, inside, ranges = _bounds(prims, o)
    if not ranges:
        return rgb_pix.view(e, a, n, 3), t_pix.view(e, a, n)
    # 1. Frustum culling of bounding spheres, per (env, camera, primitive).
    oc = o[:, :, None, :] - centres[:, None]  # [E, A, K, 3]
    p_cam = torch.einsum("eaji,eakj->eaki", c2w[..., :3, :3], -oc)  # centre in the camera frame
    fwd = -p_cam[..., 2]
    tan_x, tan_y = cam.width / (2 * cam.fx), cam.height / (2 * cam.fy)
    r = radii[:, None]
    in_view = (fwd > near - r) & ~inside
    in_view &= p_cam[..., 0].abs() <= fwd * tan_x + r * math.sqrt(1 + tan_x**2)
    in_view &= p_cam[..., 1].abs() <= fwd * tan_y + r * math.sqrt(1 + tan_y**2)
    pe, pa, pk = in_view.nonzero(as_tuple=True)  # [P] pairs
    pcam = pe * a + pa
    # 2. Rays of those pairs against the bounding sphere: hit ahead of the camera.
    ocp = oc[pe, pa, pk]  # [P, 3]
    dp = d.reshape(3, e * a, n).index_select(1, pcam)  # [3, P, N]
    b = dp[0] * ocp[:, 0:1] + dp[1] * ocp[:, 1:2] + dp[2] * ocp[:, 2:3]  # d.(o - c), [P, N]
    c2 = ((ocp * ocp).sum(-1) - radii[pe, pk] ** 2)[:, None]  # < 0 when the camera is inside the bound
    pi, ni = ((b * b > c2) & ((b < 0) | (c2 < 0))).nonzero(as_tuple=True)
    ei, ki, cam_i = pe[pi], pk[pi], pcam[pi]
    ray = cam_i * n + ni
    ro = o.reshape(-1, 3).index_select(0, cam_i)
    rd = torch.stack([c.reshape(-1).index_select(0, ray) for c in d], -1)  # [M, 3]
    t = torch.full_like(ro[:, 0], math.inf)
    normal = torch.zeros_like(ro)
    base = torch.zeros_like(ro)
    for kind, k0, k1 in ranges:
        sel = ((ki >= k0) & (ki < k1)).nonzero(as_tuple=True)[0]
        nk_ = k1 - k0
        flat = ei[sel] * nk_ + (ki[sel] - k0)  # env * K_kind + k
        if kind == "spheres":
            sp = prims.spheres
            tk, nk = hit_spheres(ro[sel], rd[sel], _rows(sp.pos, e, 1, flat), _rows(sp.radius, e, 0, flat), near)
            col = _rows(sp.rgb, e, 1, flat)
        elif kind == "boxes":
            bx = prims.boxes
            if bx.quat is None:
                rot = torch.eye(3, device=d.device, dtype=d.dtype).expand(len(sel), 3, 3)
            else:
                rot = quat_to_matrix(_rows(bx.quat, e, 1, flat))
            tk, nk = hit_boxes(ro[sel], rd[sel], _rows(bx.pos, e, 1, flat), _rows(bx.half, e, 1, flat), rot, near)
            col = _rows(bx.rgb, e, 1, flat)
        else:
            cp = prims.capsules
            pa, pb = _rows(cp.a, e, 1, flat), _rows(cp.b, e, 1, flat)
            tk, nk = hit_capsules(ro[sel], rd[sel], pa, pb, _rows(cp.radius, e, 0, flat), near)
            col = _rows(cp.rgb, e, 1, flat)
        t[sel], normal[sel], base[sel] = tk.to(d.dtype), nk.to(d.dtype), col.to(d.dtype)
    light = torch.tensor(LIGHT_DIR, device=d.device, dtype=d.dtype)
    light = light / light.norm()
    shaded = base * (AMBIENT + (1 - AMBIENT) * (normal @ light).clamp(min=0.0))[:, None]
    t_pix = t_pix.scatter_reduce(0, ray, t, "amin")
    win = torch.isfinite(t) & (t == t_pix[ray])  # the nearest hit of its pixel (ties: either)
    rgb_pix[ray[win]] = shaded[win]
    return rgb_pix.view(e, a, n, 3), t_pix.view(e, a, n)


class Compositor:
    """Background (e.g. a ``BakedScene``) + dynamic primitives -> egocentric camera images.

    Args:
        background: ``render(c2w [B, 4, 4], cam) -> (rgb [B, H, W, 3], depth [B, H, W])``; None: a flat grey
            background at infinity (tests, or tasks without a scene).
        cam: the camera model (image size, field of view, near/far).
        mount: where the camera sits on the body, for :meth:`render_bodies`.
        depth_bias: a primitive wins the depth test unless the background is nearer by more than this (m): the
            baked depth is good to a few cm, and an object standing on the floor would otherwise lose pixels of its
            contact line to the floor, whose depth there equals its own.
    """

    def __init__(
        self,
        background=None,
        cam: CameraModel | None = None,
        mount: CameraMount | None = None,
        depth_bias: float = 0.03,
    ):
        self.background = background
        self.depth_bias = depth_bias
        self.cam = cam or CameraModel()
        self.mount = mount or CameraMount()

    @torch.no_grad()
    def render_float(self, c2w: Tensor, prims: Primitives | None = None) -> tuple[Tensor, Tensor]:
        """Cameras ``c2w [E, A, 4, 4]`` -> rgb ``[E, A, H, W, 3]`` in [0, 1] and depth ``[E, A, H, W]`` (m)."""
        cam = self.cam
        e, a = c2w.shape[:2]
        flat = c2w.reshape(e * a, 4, 4)
        if self.background is None:
            bg = torch.full((e * a, cam.height, cam.width, 3), 0.5, device=c2w.device)
            bg_depth = torch.full((e * a, cam.height, cam.width), math.inf, device=c2w.device)
        else:
            bg, bg_depth = self.background.render(flat, cam)
        bg = bg.reshape(e, a, -1, 3)
        bg_depth = bg_depth.reshape(e, a, -1)
        if prims is not None:
            local = cam.local_dirs(c2w.device).reshape(-1, 3).to(c2w.dtype)
            d = torch.einsum("eaij,nj->iean", c2w[..., :3, :3], local).contiguous()  # [3, E, A, N]
            fg, fg_depth = ray_cast(c2w, d, prims, cam)
            front = fg_depth < bg_depth + self.depth_bias  # the depth test
            bg = torch.where(front[..., None], fg.to(bg.dtype), bg)
            bg_depth = torch.where(front, fg_depth.to(bg_depth.dtype), bg_depth)
        shape = (e, a, cam.height, cam.width)
        return bg.reshape(*shape, 3), bg_depth.clamp(max=cam.far).reshape(shape)

    def render(self, c2w: Tensor, prims: Primitives | None = None) -> Tensor:
        """Cameras ``c2w [E, A, 4, 4]`` -> ``uint8 [E, A, H, W, 3]`` (an image observation entry)."""
        rgb, _ = self.render_float(c2w, prims)
        return (rgb.clamp(0.0, 1.0) * 255.0).round().to(torch.uint8)

    def render_bodies(self, pos: Tensor, quat_wxyz: Tensor, prims: Primitives | None = None) -> Tensor:
        """Cameras on bodies at ``pos [E, A, 3]``, ``quat [E, A, 4]`` (wxyz), through the mount -> uint8 images."""
        return self.render(look_c2w(pos, quat_wxyz, self.mount), prims)


def demo_scene(e: int, a: int, seed: int = 0) -> tuple[Tensor, Tensor, Primitives]:
    """``e`` envs of ``a`` robots (boxes 0.16 x 0.24 x 0.5 m, two team colours) and a ball on the default pitch,
    each robot turned towards the ball give or take 30 deg: body ``pos [E, A, 3]``, ``quat [E, A, 4]``, primitives."""
    g = torch.Generator().manual_seed(seed)
    xy = (torch.rand(e, a, 2, generator=g) * 2 - 1) * torch.tensor([2.2, 1.7])
    ball = torch.cat(
        [(torch.rand(e, 1, 2, generator=g) * 2 - 1) * torch.tensor([1.5, 1.2]), torch.full((e, 1, 1), 0.07)], -1
    )
    to_ball = ball[..., :2] - xy
    yaw = torch.atan2(to_ball[..., 1], to_ball[..., 0]) + (torch.rand(e, a, generator=g) - 0.5) * math.radians(60)
    pos = torch.cat([xy, torch.full((e, a, 1), 0.25)], -1)
    quat = torch.stack([torch.cos(yaw / 2), torch.zeros_like(yaw), torch.zeros_like(yaw), torch.sin(yaw / 2)], -1)
    team = torch.tensor([[0.15, 0.25, 0.85], [0.85, 0.15, 0.15]])[torch.arange(a) % 2]
    prims = Primitives(
        spheres=Spheres(pos=ball, radius=torch.tensor([0.07]), rgb=torch.tensor([[1.0, 0.45, 0.05]])),
        boxes=Boxes(pos=pos, half=torch.tensor([[0.08, 0.12, 0.25]]).expand(a, 3), rgb=team, quat=quat),
    )
    return pos, quat, prims


def main(argv: list[str]) -> None:
    """``python -m sim.render.composite [baked=assets/fields/soccer_arena_baked.pt] [out=runs/composited.png]
    [envs=4] [agents=2] [seed=0] [scale=6]``: every robot's camera view of a random scene, one row per env."""
    import imageio.v3 as iio

    from sim.render.nerf.bake import BakedScene

    args = dict(x.split("=", 1) for x in argv)
    known = {"baked", "out", "envs", "agents", "seed", "scale"}
    unknown = sorted(set(args) - known)
    if unknown:
        raise SystemExit(f"unknown argument {unknown[0]!r}; known: {sorted(known)}")
    e, a, scale = int(args.get("envs", 4)), int(args.get("agents", 2)), int(args.get("scale", 6))
    bank = BakedScene.load(args.get("baked", "assets/fields/soccer_arena_baked.pt"))
    comp = Compositor(bank, CameraModel(), CameraMount(offset=(0.05, 0.0, 0.2), pitch_deg=10.0))
    pos, quat, prims = demo_scene(e, a, int(args.get("seed", 0)))
    frames = comp.render_bodies(pos, quat, prims)  # uint8 [E, A, H, W, 3]
    img = frames.repeat_interleave(scale, 2).repeat_interleave(scale, 3)
    img = torch.nn.functional.pad(img, (0, 0, 0, 2, 0, 2), value=255)  # a white gap between views
    grid = img.permute(0, 2, 1, 3, 4).reshape(e * img.shape[2], a * img.shape[3], 3)
    out = Path(args.get("out", "runs/composited.png"))
    out.parent.mkdir(parents=True, exist_ok=True)
    iio.imwrite(out, grid.numpy())
    print(f"{out}: {e} envs x {a} robot cameras, {tuple(frames.shape)} uint8")


if __name__ == "__main__":
    import sys

    from covey_common.cli import run_main

    run_main("python -m sim.render.composite", lambda: main(sys.argv[1:]))
