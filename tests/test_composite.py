"""Compositing dynamic primitives into a baked background (sim/render/composite.py) and image augmentations."""

from __future__ import annotations

import math

import pytest
import torch

from sim.render.augment import AugmentConfig, ImageAugment
from sim.render.camera import CameraModel, CameraMount, camera_rays, look_c2w, yaw_pitch_roll_quat
from sim.render.composite import Boxes, Capsules, Compositor, Primitives, Spheres
from sim.render.nerf.bake import BakedScene
from sim.render.nerf.testing import BoxArena, trace_rays

RED = torch.tensor([[0.9, 0.1, 0.1]])
CAM = CameraModel(width=16, height=12)


@pytest.fixture(scope="module")
def arena_bank() -> BakedScene:
    """A bank of one panorama at the pitch centre, eye height, of the analytic arena (exact ray casts, ~1 s)."""
    return BakedScene.bake(
        BoxArena(), region=((0.0, 0.0), (0.0, 0.0)), heights=(0.45,), pano_width=128, render_rays=trace_rays
    )


def _look_along_x(e: int = 1, a: int = 1) -> torch.Tensor:
    """Cameras at the panorama centre looking along +x (at the goal block 2.2 m away), ``[E, A, 4, 4]``."""
    pos = torch.tensor([0.0, 0.0, 0.45]).expand(e, a, 3)
    return look_c2w(pos, torch.tensor([1.0, 0.0, 0.0, 0.0]).expand(e, a, 4))


def _kind(kind: str, x: float, z: float = 0.45) -> Primitives:
    """One red primitive of ``kind`` centred at (x, 0, z), about 0.3 m across."""
    c = torch.tensor([[[x, 0.0, z]]])
    if kind == "sphere":
        return Primitives(spheres=Spheres(pos=c, radius=torch.tensor([0.15]), rgb=RED))
    if kind == "box":
        quat = torch.tensor([[[math.cos(0.3), 0.0, 0.0, math.sin(0.3)]]])  # turned 0.6 rad about z
        return Primitives(boxes=Boxes(pos=c, half=torch.tensor([[0.15, 0.15, 0.15]]), rgb=RED, quat=quat))
    off = torch.tensor([0.0, 0.0, 0.1])
    return Primitives(capsules=Capsules(a=c - off, b=c + off, radius=torch.tensor([0.12]), rgb=RED))


def _centre(img: torch.Tensor) -> torch.Tensor:
    return img[..., CAM.height // 2 - 1 : CAM.height // 2 + 1, CAM.width // 2 - 1 : CAM.width // 2 + 1, :].float()


@pytest.mark.parametrize("kind", ["sphere", "box", "capsule"])
def test_near_object_in_front_far_object_behind(arena_bank: BakedScene, kind: str):
    """A primitive nearer than the goal block shows its colour; the same one behind the block is hidden."""
    comp = Compositor(arena_bank, CAM)
    c2w = _look_along_x()
    empty = comp.render(c2w)
    near = comp.render(c2w, _kind(kind, 1.0))
    far = comp.render(c2w, _kind(kind, 3.2, z=0.25))  # between the boards and the outer wall, behind the goal block
    assert near.shape == (1, 1, CAM.height, CAM.width, 3) and near.dtype == torch.uint8
    red = _centre(near)
    assert (red[..., 0] > red[..., 1] + 60).all() and (red[..., 0] > red[..., 2] + 60).all()
    assert torch.equal(far, empty)
    # The depth test works on ray distance: the front face of the near object is ~0.85 m away.
    _, depth = comp.render_float(c2w, _kind(kind, 1.0))
    assert 0.7 < float(depth[0, 0, CAM.height // 2, CAM.width // 2]) < 0.9
    _, bg_depth = comp.render_float(c2w)
    assert 2.1 < float(bg_depth[0, 0, CAM.height // 2, CAM.width // 2]) < 2.3


def test_sphere_depth_and_silhouette_are_exact():
    """Against a flat background at infinity, a sphere's depth is |c| - r at the centre and covers its disc."""
    comp = Compositor(None, CAM)
    c2w = _look_along_x()
    prims = Primitives(spheres=Spheres(pos=torch.tensor([[[2.0, 0.0, 0.45]]]), radius=torch.tensor([0.3]), rgb=RED))
    rgb, depth = comp.render_float(c2w, prims)
    _, dirs = camera_rays(c2w[0], CAM)
    o = torch.tensor([0.0, 0.0, 0.45])
    c = torch.tensor([2.0, 0.0, 0.45])
    b = (dirs * (o - c)).sum(-1)
    disc = b * b - ((o - c).square().sum() - 0.09)
    expected = torch.where(disc > 0, -b - disc.clamp(min=0).sqrt(), torch.full_like(b, math.inf))
    hit = torch.isfinite(expected)
    assert hit.sum() > 4 and (~hit).sum() > 4
    torch.testing.assert_close(depth[0][hit], expected[hit], atol=1e-4, rtol=1e-4)
    assert (depth[0][~hit] == CAM.far).all()
    assert (rgb[0][~hit] == 0.5).all()


def test_camera_inside_its_own_body_sees_out():
    """A robot's camera inside its own box (and an other agent's capsule in view) renders the other agent only."""
    comp = Compositor(None, CAM, CameraMount(offset=(0.05, 0.0, 0.1)))
    pos = torch.tensor([[[0.0, 0.0, 0.3], [1.5, 0.0, 0.3]]])  # two robots facing each other
    quat = yaw_pitch_roll_quat(torch.tensor([[0.0, math.pi]]), torch.zeros(1, 2), torch.zeros(1, 2))
    bodies = Boxes(
        pos=pos, half=torch.tensor([[0.1, 0.1, 0.3]] * 2), rgb=torch.tensor([[0.2, 0.2, 0.9]] * 2), quat=quat
    )
    img = comp.render_bodies(pos, quat, Primitives(boxes=bodies))
    centre = _centre(img)
    assert (centre[..., 2] > centre[..., 0] + 40).all()  # each sees the other (blue), not its own inside


def test_batch_equals_each_camera_alone(arena_bank: BakedScene):
    """Rendering E x A cameras at once equals rendering each camera on its own."""
    g = torch.Generator().manual_seed(0)
    e, a = 3, 2
    pos = torch.cat([torch.rand(e, a, 2, generator=g) - 0.5, 0.3 + 0.3 * torch.rand(e, a, 1, generator=g)], -1)
    yaw = (torch.rand(e, a, generator=g) - 0.5) * 2 * math.pi
    quat = yaw_pitch_roll_quat(yaw, 0.1 * torch.randn(e, a, generator=g), 0.05 * torch.randn(e, a, generator=g))
    prims = Primitives(
        spheres=Spheres(
            pos=torch.rand(e, 2, 3, generator=g) * 2 - 1, radius=torch.tensor([0.2, 0.3]), rgb=RED.repeat(2, 1)
        ),
        boxes=Boxes(pos=pos, half=torch.tensor([[0.1, 0.1, 0.3]] * a), rgb=torch.rand(e, a, 3, generator=g)),
        capsules=Capsules(
            a=torch.rand(e, 1, 3, generator=g), b=torch.rand(e, 1, 3, generator=g), radius=torch.tensor([0.1]), rgb=RED
        ),
    )
    comp = Compositor(arena_bank, CAM, CameraMount(offset=(0.12, 0.0, 0.0)))
    batch = comp.render_bodies(pos, quat, prims)
    for i in range(e):
        env_prims = Primitives(
            spheres=Spheres(pos=prims.spheres.pos[i : i + 1], radius=prims.spheres.radius, rgb=prims.spheres.rgb),
            boxes=Boxes(pos=pos[i : i + 1], half=prims.boxes.half, rgb=prims.boxes.rgb[i : i + 1]),
            capsules=Capsules(
                a=prims.capsules.a[i : i + 1], b=prims.capsules.b[i : i + 1], radius=prims.capsules.radius, rgb=RED
            ),
        )
        for j in range(a):
            alone = comp.render(look_c2w(pos[i : i + 1, j : j + 1], quat[i : i + 1, j : j + 1], comp.mount), env_prims)
            assert torch.equal(alone[0, 0], batch[i, j])


def _frames(steps: int, e: int = 4, a: int = 2) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, 256, (e, a, 12, 16, 3), generator=g, dtype=torch.uint8) for _ in range(steps)]


def test_augmentations_off_are_identity():
    aug = ImageAugment(AugmentConfig(), num_envs=4, n_agents=2)
    for f in _frames(3):
        assert torch.equal(aug(f), f)


def test_augmentations_on_are_seeded_and_bounded():
    cfg = AugmentConfig(brightness=0.2, contrast=0.2, saturation=0.3, channel_gain=0.1, noise_std=0.02, blur_sigma=0.7)
    frames = _frames(3)
    outs = []
    for seed in (0, 0, 1):
        aug = ImageAugment(cfg, num_envs=4, n_agents=2, seed=seed)
        outs.append(torch.stack([aug(f) for f in frames]))
    assert torch.equal(outs[0], outs[1]) and not torch.equal(outs[0], outs[2])
    src = torch.stack(frames).float()
    diff = (outs[0].float() - src).abs()
    assert diff.mean() > 2.0  # it does something
    # bounded: blur averages neighbours, so compare means per image: the jitter moves them by < ~35%
    assert ((outs[0].float().mean(dim=(3, 4, 5)) - src.mean(dim=(3, 4, 5))).abs() < 0.35 * 255).all()
    with pytest.raises(KeyError, match="unknown augmentation 'brightnes'"):
        AugmentConfig.from_dict({"brightnes": 0.1})


def test_latency_delays_by_k_frames_and_restarts_on_reset():
    frames = _frames(6)
    aug = ImageAugment(AugmentConfig(latency_frames=2), num_envs=4, n_agents=2)
    out = [aug(f) for f in frames[:4]]
    assert torch.equal(out[0], frames[0]) and torch.equal(out[1], frames[0])  # no past yet: the first frame
    assert torch.equal(out[2], frames[0]) and torch.equal(out[3], frames[1])
    aug.reset(torch.tensor([1]))
    o4 = aug(frames[4])
    assert torch.equal(o4[1], frames[4][1])  # env 1 restarted: its new first frame
    assert torch.equal(o4[0], frames[2][0])  # the others keep their delay


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
def test_cuda_matches_cpu(arena_bank: BakedScene):
    """Baked background and primitives render on CUDA as on the CPU (within one grey level at a few pixels)."""
    comp = Compositor(arena_bank, CAM)
    c2w = _look_along_x(2, 2)
    prims = _kind("box", 1.0)
    prims.boxes = Boxes(pos=prims.boxes.pos.expand(2, 1, 3), half=prims.boxes.half, rgb=RED, quat=None)
    cpu = comp.render(c2w, prims)
    try:
        gpu = Compositor(arena_bank.to("cuda"), CAM).render(c2w.cuda(), _to(prims, "cuda")).cpu()
    finally:
        arena_bank.to("cpu")
    assert ((gpu.int() - cpu.int()).abs() > 1).float().mean() < 0.01


def _to(prims: Primitives, device: str) -> Primitives:
    b = prims.boxes
    return Primitives(boxes=Boxes(pos=b.pos.to(device), half=b.half.to(device), rgb=b.rgb.to(device)))


def test_composite_cli_renders_the_shipped_bank(tmp_path):
    """`python -m sim.render.composite` draws every robot's view of a random scene from the shipped baked arena."""
    import subprocess
    import sys
    from pathlib import Path

    import imageio.v3 as iio

    bank = Path(__file__).resolve().parents[1] / "assets" / "fields" / "soccer_arena_baked.pt"
    if not bank.exists():
        pytest.skip("no shipped baked arena")
    out = tmp_path / "views.png"
    cmd = [sys.executable, "-m", "sim.render.composite", f"baked={bank}", f"out={out}", "envs=2", "agents=3", "scale=2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=bank.parents[2], check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    img = iio.imread(out)
    assert img.shape == (2 * 62, 3 * 82, 3)
    assert img.std() > 20  # a picture, not a flat colour
