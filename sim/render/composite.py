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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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


def _pick(values: Tensor, idx: Tensor) -> Tensor:
    """``values [E, A or 1, N or 1, K, C]``, winner ``idx [E, A, N]`` -> ``[E, A, N, C]``."""
    e, a, n = idx.shape
    values = values.expand(e, a, n, *values.shape[3:])
    index = idx[..., None, None].expand(e, a, n, 1, values.shape[-1])
    return values.gather(3, index).squeeze(3)


def _closest(t: Tensor) -> tuple[Tensor, Tensor]:
    """Nearest hit over primitives: ``t [E, A, N, K]`` (inf: miss) -> distance ``[E, A, N]`` and index."""
    return t.min(-1)


def ray_spheres(o: Tensor, d: Tensor, s: Spheres, near: float) -> tuple[Tensor, Tensor, Tensor]:
    """Nearest sphere hit of rays ``o [E, A, 1, 3]``, ``d [E, A, N, 3]``: distance ``[E, A, N]`` (inf: miss), world
    normal ``[E, A, N, 3]``, base colour ``[E, A, N, 3]``."""
    e = o.shape[0]
    c = s.pos[:, None, None]  # [E, 1, 1, K, 3]
    r = _per_env(s.radius, e, 0)[:, None, None]  # [E, 1, 1, K]
    oc = o.unsqueeze(3) - c  # [E, A, 1, K, 3]
    b = (d.unsqueeze(3) * oc).sum(-1)  # [E, A, N, K]
    disc = b * b - ((oc * oc).sum(-1) - r * r)
    t = -b - disc.clamp(min=0).sqrt()
    t = torch.where((disc > 0) & (t > near), t, torch.full_like(t, math.inf))
    t, idx = _closest(t)
    hit = o + t.clamp(max=1e6)[..., None] * d
    normal = (hit - _pick(c, idx)) / _pick(r[..., None], idx)
    return t, normal, _pick(_per_env(s.rgb, e, 1)[:, None, None], idx)


def ray_boxes(o: Tensor, d: Tensor, bx: Boxes, near: float) -> tuple[Tensor, Tensor, Tensor]:
    """Nearest oriented-box hit (slab test in each box's frame); shapes as :func:`ray_spheres`."""
    e = o.shape[0]
    k = bx.pos.shape[1]
    if bx.quat is None:
        rot = torch.eye(3, device=o.device, dtype=o.dtype).expand(e, k, 3, 3)
    else:
        rot = quat_to_matrix(bx.quat)  # [E, K, 3, 3]: box axes as columns, world frame
    half = _per_env(bx.half, e, 1)[:, None, None]  # [E, 1, 1, K, 3]
    oc = o.squeeze(2)[:, :, None, :] - bx.pos[:, None]  # [E, A, K, 3]
    o_l = torch.einsum("ekji,eakj->eaki", rot, oc).unsqueeze(2)  # [E, A, 1, K, 3]: R^T (o - c)
    d_l = torch.einsum("ekji,eanj->eanki", rot, d)  # [E, A, N, K, 3]
    inv = 1.0 / torch.where(d_l.abs() < 1e-9, torch.full_like(d_l, 1e-9), d_l)
    t1, t2 = (-half - o_l) * inv, (half - o_l) * inv
    t_enter, axis = torch.minimum(t1, t2).max(-1)
    t_exit = torch.maximum(t1, t2).min(-1).values
    t = torch.where((t_exit >= t_enter) & (t_enter > near), t_enter, torch.full_like(t_enter, math.inf))
    t, idx = _closest(t)
    # The entered face's outward normal is -sign(d) along the axis where the ray entered last.
    ax = axis.gather(-1, idx[..., None]).squeeze(-1)  # [E, A, N]
    d_ax = _pick(d_l, idx).gather(-1, ax[..., None])  # [E, A, N, 1]
    n_local = torch.zeros_like(d).scatter_(-1, ax[..., None], -torch.sign(d_ax))
    rot_sel = _pick(rot[:, None, None].flatten(-2), idx).unflatten(-1, (3, 3))  # [E, A, N, 3, 3]
    normal = (rot_sel @ n_local.unsqueeze(-1)).squeeze(-1)
    return t, normal, _pick(_per_env(bx.rgb, e, 1)[:, None, None], idx)


def ray_capsules(o: Tensor, d: Tensor, cp: Capsules, near: float) -> tuple[Tensor, Tensor, Tensor]:
    """Nearest capsule hit (cylinder body, then the cap spheres; after Inigo Quilez's ``capIntersect``); shapes as
    :func:`ray_spheres`."""
    e = o.shape[0]
    pa, pb = cp.a[:, None, None], cp.b[:, None, None]  # [E, 1, 1, K, 3]
    r = _per_env(cp.radius, e, 0)[:, None, None]  # [E, 1, 1, K]
    ba = pb - pa
    oa = o.unsqueeze(3) - pa  # [E, A, 1, K, 3]
    dk = d.unsqueeze(3)  # [E, A, N, 1, 3]
    baba = (ba * ba).sum(-1)
    bard = (ba * dk).sum(-1)  # [E, A, N, K]
    baoa = (ba * oa).sum(-1)
    rdoa = (dk * oa).sum(-1)
    oaoa = (oa * oa).sum(-1)
    qa = baba - bard * bard
    qb = baba * rdoa - baoa * bard
    qc = baba * oaoa - baoa * baoa - r * r * baba
    h = qb * qb - qa * qc
    t_body = (-qb - h.clamp(min=0).sqrt()) / torch.where(qa.abs() < 1e-12, torch.full_like(qa, 1e-12), qa)
    y = baoa + t_body * bard
    body = (h >= 0) & (y > 0) & (y < baba) & (t_body > near)
    # Cap: the sphere at whichever end the body hit fell beyond.
    oc = torch.where((y <= 0).unsqueeze(-1), oa, o.unsqueeze(3) - pb)  # [E, A, N, K, 3]
    cb = (dk * oc).sum(-1)
    ch = cb * cb - ((oc * oc).sum(-1) - r * r)
    t_cap = -cb - ch.clamp(min=0).sqrt()
    cap = (h >= 0) & (ch > 0) & (t_cap > near)
    inf = torch.full_like(t_body, math.inf)
    t = torch.where(body, t_body, torch.where(cap, t_cap, inf))
    t, idx = _closest(t)
    hit = o + t.clamp(max=1e6)[..., None] * d
    a_sel, ba_sel = _pick(pa, idx), _pick(ba, idx)
    frac = (((hit - a_sel) * ba_sel).sum(-1, keepdim=True) / (ba_sel * ba_sel).sum(-1, keepdim=True)).clamp(0, 1)
    normal = (hit - a_sel - frac * ba_sel) / _pick(r[..., None], idx)
    return t, normal, _pick(_per_env(cp.rgb, e, 1)[:, None, None], idx)


def ray_cast(o: Tensor, d: Tensor, prims: Primitives, near: float) -> tuple[Tensor, Tensor]:
    """Shaded colour ``[E, A, N, 3]`` in [0, 1] and distance ``[E, A, N]`` (inf: nothing) of the nearest primitive
    along rays ``o [E, A, 1, 3]``, unit ``d [E, A, N, 3]``."""
    t = torch.full(d.shape[:-1], math.inf, device=d.device, dtype=d.dtype)
    rgb = torch.zeros_like(d)
    light = torch.tensor(LIGHT_DIR, device=d.device, dtype=d.dtype)
    light = light / light.norm()
    for kind, cast in ((prims.spheres, ray_spheres), (prims.boxes, ray_boxes), (prims.capsules, ray_capsules)):
        if kind is None or kind.rgb.shape[-2] == 0:
            continue
        tk, normal, base = cast(o, d, kind, near)
        lambert = (normal * light).sum(-1, keepdim=True).clamp(min=0.0)
        shaded = base * (AMBIENT + (1 - AMBIENT) * lambert)
        nearer = tk < t
        t = torch.where(nearer, tk, t)
        rgb = torch.where(nearer[..., None], shaded, rgb)
    return rgb, t


class Compositor:
    """Background (e.g. a ``BakedScene``) + dynamic primitives -> egocentric camera images.

    Args:
        background: ``render(c2w [B, 4, 4], cam) -> (rgb [B, H, W, 3], depth [B, H, W])``; None: a flat grey
            background at infinity (tests, or tasks without a scene).
        cam: the camera model (image size, field of view, near/far).
        mount: where the camera sits on the body, for :meth:`render_bodies`.
    """

    def __init__(self, background=None, cam: CameraModel | None = None, mount: CameraMount | None = None):
        self.background = background
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
            d = torch.einsum("eaij,nj->eani", c2w[..., :3, :3], local)
            o = c2w[:, :, None, :3, 3]
            fg, fg_depth = ray_cast(o, d, prims, cam.near)
            front = fg_depth < bg_depth  # the depth test
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
