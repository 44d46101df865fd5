"""sim.render.nerf.capture: nerfstudio captures round-trip, rays hit the points they should, bad captures fail
with one line naming the file."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch
from PIL import Image

from sim.render.nerf.capture import (
    CaptureError,
    Intrinsics,
    camera_dirs,
    camera_rays,
    distort_points,
    load_capture,
    write_capture,
)
from sim.render.nerf.scenes import look_c2w


def _poses(n: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    pos = torch.rand(n, 3, generator=g) * torch.tensor([2.0, 2.0, 0.5]) + torch.tensor([-1.0, -1.0, 0.3])
    return look_c2w(pos, torch.rand(n, generator=g) * 6.28, torch.rand(n, generator=g) * 0.4 - 0.2)


def _capture(tmp_path, intr: Intrinsics, n: int = 9) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (n, intr.height, intr.width, 3), dtype=torch.uint8, generator=g)
    depths = 0.5 + 4 * torch.rand(n, intr.height, intr.width, generator=g)
    depths[:, 0, 0] = 0  # unknown depth stays unknown
    c2w = _poses(n)
    write_capture(tmp_path, images, c2w, intr, depths)
    return images, c2w, depths


def test_round_trip_with_depth(tmp_path):
    intr = Intrinsics(30.0, 28.0, 15.5, 11.0, 32, 24)
    images, c2w, depths = _capture(tmp_path, intr)
    meta = json.loads((tmp_path / "transforms.json").read_text())
    assert meta["camera_model"] == "PINHOLE" and meta["fl_x"] == 30.0 and meta["h"] == 24
    assert meta["frames"][3]["depth_file_path"] == "depths/frame_00003.png"

    cap = load_capture(tmp_path)
    assert torch.equal(cap.images, images)
    assert torch.allclose(cap.c2w, c2w, atol=1e-6)
    assert cap.intrinsics == intr
    assert cap.depths is not None and cap.depths.shape == depths.shape
    # stored as 16-bit z-depth in mm: ray distance comes back within a millimetre (times the ray's slant)
    assert (cap.depths - depths).abs().max() < 2e-3
    assert cap.depths[:, 0, 0].eq(0).all()
    assert cap.eval_indices == [0, 8] and len(cap.train_indices) == 7


def test_depth_files_hold_z_depth_in_mm(tmp_path):
    """nerfstudio reads 16-bit PNG depth in mm as z-depth (depth-nerfacto's is_euclidean_depth=False)."""
    intr = Intrinsics(20.0, 20.0, 16.0, 12.0, 32, 24)
    _, _, depths = _capture(tmp_path, intr, n=1)
    raw = np.asarray(Image.open(tmp_path / "depths" / "frame_00000.png")).astype(np.float64)
    v, u = 2, 30  # off-centre pixel: z-depth = ray distance * cos(angle to the optical axis)
    x, y = (u + 0.5 - intr.cx) / intr.fx, (v + 0.5 - intr.cy) / intr.fy
    cos = 1 / math.sqrt(1 + x * x + y * y)
    assert raw[v, u] == pytest.approx(float(depths[0, v, u]) * cos * 1000, abs=0.6)


def test_downscale(tmp_path):
    intr = Intrinsics(30.0, 30.0, 16.0, 12.0, 32, 24)
    images, _, _ = _capture(tmp_path, intr, n=2)
    cap = load_capture(tmp_path, downscale=2)
    assert cap.images.shape == (2, 12, 16, 3) and cap.depths.shape == (2, 12, 16)
    assert cap.intrinsics.fx == 15.0 and cap.intrinsics.cx == 8.0
    assert int(cap.images[0, 0, 0, 0]) == round(images[0, :2, :2, 0].float().mean().item())


def test_known_camera_rays_hit_known_points():
    # principal point on a pixel centre: that pixel looks straight along the camera's -z
    intr = Intrinsics(10.0, 10.0, 2.5, 1.5, 5, 3)
    c2w = torch.eye(4)[None].clone()
    c2w[0, :3, 3] = torch.tensor([1.0, 2.0, 3.0])
    o, d = camera_rays(c2w, intr)
    assert o.shape == d.shape == (1, 3, 5, 3)
    assert torch.allclose(d[0, 1, 2], torch.tensor([0.0, 0.0, -1.0]))
    # one pixel right and one up: +x and +y in the OpenGL camera (row 0 is the top)
    assert torch.allclose(d[0, 0, 3], torch.nn.functional.normalize(torch.tensor([0.1, 0.1, -1.0]), dim=0))
    assert torch.allclose(d.norm(dim=-1), torch.ones(1, 3, 5))
    # a camera 2 m above the floor looking straight down sees the point under its centre pixel at 2 m
    down = look_c2w(torch.tensor([[0.5, -0.5, 2.0]]), torch.zeros(1), torch.full((1,), -math.pi / 2))
    o, d = camera_rays(down, intr)
    hit = o[0, 1, 2] + d[0, 1, 2] * 2.0
    assert torch.allclose(hit, torch.tensor([0.5, -0.5, 0.0]), atol=1e-5)


def test_rays_project_back_to_their_pixels():
    intr = Intrinsics(40.0, 38.0, 17.0, 11.0, 32, 24)
    c2w = _poses(3)
    o, d = camera_rays(c2w, intr)
    pts = o + 3.0 * d  # world points on the rays
    w2c = torch.linalg.inv(c2w)
    cam = torch.einsum("bij,bhwj->bhwi", w2c[:, :3, :3], pts) + w2c[:, None, None, :3, 3]
    u = intr.fx * cam[..., 0] / -cam[..., 2] + intr.cx
    v = -intr.fy * cam[..., 1] / -cam[..., 2] + intr.cy
    vv, uu = torch.meshgrid(torch.arange(24) + 0.5, torch.arange(32) + 0.5, indexing="ij")
    assert torch.allclose(u, uu.expand_as(u), atol=1e-3) and torch.allclose(v, vv.expand_as(v), atol=1e-3)


def test_opencv_distortion_round_trip_and_undistorted_rays(tmp_path):
    intr = Intrinsics(30.0, 30.0, 16.0, 12.0, 32, 24, "OPENCV", (-0.2, 0.05, 0.01, 0.0, 0.001, -0.002))
    _capture(tmp_path, intr, n=2)
    meta = json.loads((tmp_path / "transforms.json").read_text())
    assert meta["camera_model"] == "OPENCV" and meta["k1"] == -0.2 and meta["p2"] == -0.002
    cap = load_capture(tmp_path)
    assert cap.intrinsics == intr
    # each ray, pushed through OpenCV's forward distortion model, lands on its pixel centre
    dc = camera_dirs(intr)
    x, y = dc[..., 0] / -dc[..., 2], -dc[..., 1] / -dc[..., 2]
    xd, yd = distort_points(x, y, intr.distortion)
    vv, uu = torch.meshgrid(torch.arange(24) + 0.5, torch.arange(32) + 0.5, indexing="ij")
    assert torch.allclose(xd * intr.fx + intr.cx, uu, atol=1e-3)
    assert torch.allclose(yd * intr.fy + intr.cy, vv, atol=1e-3)
    # and the distortion matters: the corner ray differs from the pinhole one
    pinhole = camera_dirs(dataclasses.replace(intr, camera_model="PINHOLE", distortion=(0.0,) * 6))
    assert (dc[0, 0] - pinhole[0, 0]).abs().max() > 0.01


def _edit(tmp_path, fn) -> None:
    p = tmp_path / "transforms.json"
    meta = json.loads(p.read_text())
    fn(meta)
    p.write_text(json.dumps(meta))


def _one_line_error(path, match: str) -> None:
    with pytest.raises(CaptureError, match=match) as err:
        load_capture(path)
    assert "\n" not in str(err.value)


def test_bad_captures_fail_with_one_line_naming_the_file(tmp_path):
    intr = Intrinsics(30.0, 30.0, 16.0, 12.0, 32, 24)
    _capture(tmp_path, intr, n=3)
    _one_line_error(tmp_path / "nowhere", "nowhere/transforms.json: no such file")

    (tmp_path / "images" / "frame_00001.png").rename(tmp_path / "gone.png")
    _one_line_error(tmp_path, "frame_00001.png: image file not found")
    (tmp_path / "gone.png").rename(tmp_path / "images" / "frame_00001.png")

    Image.fromarray(np.zeros((20, 32, 3), np.uint8)).save(tmp_path / "images" / "frame_00002.png")
    _one_line_error(tmp_path, "frame_00002.png: image is 32x20, capture says 32x24")
    Image.fromarray(np.zeros((24, 32, 3), np.uint8)).save(tmp_path / "images" / "frame_00002.png")

    _edit(tmp_path, lambda m: m["frames"][1].update(transform_matrix=[[1, 0, 0, 0]] * 3))
    _one_line_error(tmp_path, r"transforms.json: frame 1 \(images/frame_00001.png\) transform_matrix must be 4x4")
    _edit(tmp_path, lambda m: m["frames"][1].update(transform_matrix=np.eye(4).tolist()))

    _edit(tmp_path, lambda m: m.update(camera_model="OPENCV_FISHEYE"))
    _one_line_error(tmp_path, "camera_model 'OPENCV_FISHEYE' is not supported")
    _edit(tmp_path, lambda m: m.update(camera_model="PINHOLE"))

    _edit(tmp_path, lambda m: m["frames"][0].pop("depth_file_path"))
    _one_line_error(tmp_path, "depth_file_path is given for 2 of 3 frames")
    _edit(tmp_path, lambda m: [f.pop("depth_file_path", None) for f in m["frames"]])
    assert load_capture(tmp_path / "transforms.json").depths is None  # no depth files at all is fine


def test_per_frame_intrinsics(tmp_path):
    intr = Intrinsics(30.0, 30.0, 16.0, 12.0, 32, 24)
    _capture(tmp_path, intr, n=2)

    def per_frame(m: dict, fx: list[float]) -> None:
        for k in ("fl_x", "fl_y", "cx", "cy", "w", "h"):
            v = m.pop(k, None)
            for f in m["frames"]:
                f.setdefault(k, v)
        for f, x in zip(m["frames"], fx, strict=True):
            f["fl_x"] = x

    _edit(tmp_path, lambda m: per_frame(m, [30.0, 30.0]))
    assert load_capture(tmp_path).intrinsics == intr  # all frames agree: one camera
    _edit(tmp_path, lambda m: per_frame(m, [30.0, 31.0]))
    _one_line_error(tmp_path, "frames differ in 'fl_x'")


def test_shipped_arena_capture():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "assets" / "captures" / "soccer_arena"
    cap = load_capture(root)
    assert cap.images.shape == (128, 120, 160, 3) and cap.depths is not None
    assert cap.eval_indices == list(range(0, 128, 8))
    heights = cap.c2w[:, 2, 3]
    assert ((heights > 0.3) & (heights < 0.6)).sum() >= 64 and (heights > 1.0).sum() >= 16  # robot-eye + high views
    assert (cap.depths > 0).float().mean() > 0.6  # most pixels hit the arena (the rest: sky, depth edges)
    assert cap.depths.max() < 13  # all inside the hall
