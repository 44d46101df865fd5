"""Baking a radiance field into panoramas (sim/render/nerf/bake.py) and the egocentric camera (sim/render/camera.py)."""

from __future__ import annotations

import math

import pytest
import torch

from sim.render.camera import CameraModel, CameraMount, camera_rays, look_c2w, yaw_pitch_roll_quat
from sim.render.nerf.bake import BakedScene
from sim.render.nerf.testing import BoxArena, trace_rays

CAM = CameraModel(width=32, height=24)
REGION = ((-1.0, -0.8), (1.0, 0.8))


@pytest.fixture(scope="module")
def arena() -> BoxArena:
    return BoxArena()


@pytest.fixture(scope="module")
def bank(arena: BoxArena) -> BakedScene:
    """Four panoramas (corners of a 2 x 1.6 m region at eye height), cast exactly (~2 s)."""
    return BakedScene.bake(arena, region=REGION, spacing=1.6, heights=(0.45,), pano_width=192, render_rays=trace_rays)


def _poses(n: int, seed: int) -> torch.Tensor:
    """Robot-like cameras in the region: eye height 0.3-0.6 m, any yaw, small pitch and roll, ``[n, 4, 4]``."""
    g = torch.Generator().manual_seed(seed)

    def u(lo: float, hi: float) -> torch.Tensor:
        return lo + (hi - lo) * torch.rand(n, generator=g)

    (x0, y0), (x1, y1) = REGION
    pos = torch.stack([u(x0, x1), u(y0, y1), u(0.3, 0.6)], -1)
    return look_c2w(pos, yaw_pitch_roll_quat(u(-math.pi, math.pi), u(-0.17, 0.17), u(-0.09, 0.09)))


def _psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(-10 * torch.log10(((a.float() - b.float()) ** 2).mean()))


def test_camera_model_and_mount():
    """Identity body pose looks along +x with +z up; rays are unit; the mount's pitch tilts the view down."""
    cam = CameraModel()
    assert (cam.width, cam.height) == (40, 30)
    c2w = look_c2w(torch.zeros(1, 3), torch.tensor([[1.0, 0.0, 0.0, 0.0]]))
    _, d = camera_rays(c2w, cam)
    torch.testing.assert_close(d.norm(dim=-1), torch.ones(1, 30, 40))
    centre = d[0, 14:16, 19:21].mean((0, 1))
    assert centre[0] > 0.99 and d[0, 0, 20, 2] > 0 > d[0, -1, 20, 2]  # top row looks up, bottom row down
    assert d[0, 15, 0, 1] > 0 > d[0, 15, -1, 1]  # left column looks to +y (the body's left)
    tilted = look_c2w(torch.zeros(1, 3), torch.tensor([[1.0, 0.0, 0.0, 0.0]]), CameraMount((0.1, 0, 0.2), 30.0))
    torch.testing.assert_close(tilted[0, :3, 3], torch.tensor([0.1, 0.0, 0.2]))
    torch.testing.assert_close(-tilted[0, 2, 2], torch.tensor(-math.sin(math.radians(30))))
    # A body pitched down by the Euler helper looks down too.
    q = yaw_pitch_roll_quat(torch.tensor([0.0]), torch.tensor([0.3]), torch.tensor([0.0]))
    assert -look_c2w(torch.zeros(1, 3), q)[0, 2, 2] < -0.2


def test_baked_matches_unbaked_field(arena: BoxArena, bank: BakedScene):
    """Baked renders of held-out robot-like poses match the field's volume render (colour and depth)."""
    from sim.render.nerf.volume import render_views

    c2w = _poses(6, seed=1)
    intr = CAM.intrinsics()
    ref_rgb, _ = render_views(arena, c2w, intr)
    rgb, depth = bank.render(c2w, CAM)
    quality = _psnr(rgb, ref_rgb.float() / 255)
    constant = _psnr(torch.full_like(rgb, float(rgb.mean())), ref_rgb.float() / 255)
    # The stand-in's textures are near the 32 x 24 Nyquist limit (two exact renders of it differ by ~21 dB), and
    # these cameras stand up to 0.9 m from the nearest of only four panoramas: a loose bound, well above constant.
    assert quality > 17.0 and quality > constant + 5.0, (quality, constant)
    # Depth against the exact surface (the volume render's expected depth is blurred where opacity is partial).
    o, d = camera_rays(c2w, CAM)
    _, exact = arena.trace(o.reshape(-1, 3), d.reshape(-1, 3))
    exact = exact.reshape(depth.shape)
    seen = torch.isfinite(exact)
    err = (depth - exact).abs()[seen]
    # Misses are silhouette pixels (the wall's top edge against the sky moves by a pixel between the panorama
    # centre and a camera 0.9 m away; a ray that starts in the sky stays there).
    assert err.median() < 0.03 and (err < 0.3).float().mean() > 0.8, (err.median(), (err < 0.3).float().mean())
    assert (depth[~seen] == CAM.far).float().mean() > 0.9  # the sky is far


def test_batch_equals_each_camera_alone(bank: BakedScene):
    c2w = _poses(5, seed=2)
    rgb, depth = bank.render(c2w, CAM)
    for i in range(5):
        r1, d1 = bank.render(c2w[i : i + 1], CAM)
        # Equal up to float rounding (a batched matmul may sum in another order).
        torch.testing.assert_close(r1[0], rgb[i], atol=1e-4, rtol=0)
        torch.testing.assert_close(d1[0], depth[i], atol=1e-3, rtol=1e-4)


def test_save_load_round_trip(tmp_path, bank: BakedScene):
    """The saved bank (uint8 colour, float16 depth) renders what the bank in memory renders, within quantisation."""
    path = tmp_path / "baked.pt"
    bank.save(path)
    again = BakedScene.load(path)
    c2w = _poses(4, seed=4)
    (r0, d0), (r1, d1) = bank.render(c2w, CAM), again.render(c2w, CAM)
    assert (r0 - r1).abs().max() < 3 / 255
    assert ((d0 - d1).abs() < 0.02 + 0.01 * d0).float().mean() > 0.99
    assert path.stat().st_size < 2 * bank.num * bank.pano_h * bank.pano_w * 5
