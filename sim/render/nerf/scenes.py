"""Simulated captures: render a MuJoCo scene from many poses into a nerfstudio capture.

The default scene is ``assets/scenes/soccer_arena.xml`` (static, diffuse, textured). Views: robot-eye
heights (0.3-0.6 m) on the pitch looking around, plus higher views around the pitch looking in.
Images are rendered at twice the resolution and area-averaged (anti-aliased, as a real camera
integrates over a pixel); depth is MuJoCo's z-depth, averaged where the four sub-samples agree and
unknown (0) at depth edges and in the sky.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from sim.render.nerf.capture import Intrinsics, write_capture, z_to_ray_depth

ARENA_XML = Path(__file__).resolve().parents[3] / "assets" / "scenes" / "soccer_arena.xml"
ARENA_AABB = ((-4.5, -4.0, -0.05), (4.5, 4.0, 2.6))  # everything visible in soccer_arena.xml (see its comment)
SKY_DEPTH = 40.0  # z-depth beyond this is the skybox: no depth
SUPERSAMPLE = 2


def look_c2w(pos: Tensor, yaw: Tensor, pitch: Tensor) -> Tensor:
    """OpenGL camera-to-world [N, 4, 4] at ``pos`` [N, 3] looking along heading ``yaw`` [N] (rad, from +x
    towards +y) tilted up by ``pitch`` [N] (rad), no roll (world z up)."""
    f = torch.stack([torch.cos(pitch) * torch.cos(yaw), torch.cos(pitch) * torch.sin(yaw), torch.sin(pitch)], -1)
    right = torch.nn.functional.normalize(torch.cross(f, torch.tensor([0.0, 0.0, 1.0]).expand_as(f), dim=-1), dim=-1)
    up = torch.cross(right, f, dim=-1)
    c2w = torch.eye(4).repeat(len(pos), 1, 1)
    c2w[:, :3, 0], c2w[:, :3, 1], c2w[:, :3, 2], c2w[:, :3, 3] = right, up, -f, pos
    return c2w


def arena_poses(n: int, seed: int = 0) -> Tensor:
    """``n`` capture poses [n, 4, 4] for the arena: 3/4 at robot-eye height on the pitch, 1/4 higher up.

    Ordered so that every 8th (held out) falls among both kinds.
    """
    g = torch.Generator().manual_seed(seed)

    def u(lo: float, hi: float, k: int) -> Tensor:
        return lo + (hi - lo) * torch.rand(k, generator=g)

    n_high = n // 4
    n_low = n - n_high
    # robot-eye views: anywhere on the pitch surface, any heading, slightly down to slightly up
    low_pos = torch.stack([u(-2.3, 2.3, n_low), u(-1.8, 1.8, n_low), u(0.3, 0.6, n_low)], -1)
    low = look_c2w(low_pos, u(-math.pi, math.pi, n_low), torch.deg2rad(u(-20, 12, n_low)))
    # high views: a ring between the boards and the walls, looking at a point on the pitch
    ang = u(-math.pi, math.pi, n_high)
    rad = u(0.75, 1.0, n_high)
    high_pos = torch.stack([3.9 * rad * torch.cos(ang), 3.4 * rad * torch.sin(ang), u(1.0, 2.2, n_high)], -1)
    target = torch.stack([u(-1.5, 1.5, n_high), u(-1.0, 1.0, n_high), torch.zeros(n_high)], -1)
    delta = target - high_pos
    yaw = torch.atan2(delta[:, 1], delta[:, 0])
    pitch = torch.atan2(delta[:, 2], delta[:, :2].norm(dim=-1))
    high = look_c2w(high_pos, yaw, pitch)
    poses = torch.cat([low, high])
    return poses[torch.randperm(n, generator=g)]


def render_mujoco_views(xml: str | Path, c2w: Tensor, intr: Intrinsics) -> tuple[Tensor, Tensor]:
    """Render a MuJoCo scene from OpenGL cameras (the scene needs a camera named ``capture``).

    Returns:
        uint8 rgb [N, H, W, 3], float32 ray-distance depth [N, H, W] (0 = unknown: sky, depth edges).
    """
    import mujoco

    from sim.render.mujoco_renderer import create_renderer

    if intr.camera_model != "PINHOLE" or abs(intr.fx - intr.fy) > 1e-6 * intr.fx:
        raise ValueError("MuJoCo renders square-pixel pinhole cameras only")
    model = mujoco.MjModel.from_xml_path(str(xml))
    data = mujoco.MjData(model)
    cam = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, "capture")
    if cam < 0:
        raise ValueError(f"{xml}: needs a camera named 'capture'")
    k = SUPERSAMPLE
    w, h = intr.width * k, intr.height * k
    model.cam_fovy[cam] = math.degrees(2 * math.atan(0.5 * intr.height / intr.fy))
    renderer = create_renderer(model, w, h, msaa=0)
    images, depths = [], []
    try:
        for pose in c2w.double().numpy():
            quat = np.zeros(4)
            mujoco.mju_mat2Quat(quat, pose[:3, :3].reshape(-1).copy())  # MuJoCo cameras: -z forward, +y up (OpenGL)
            model.cam_pos[cam], model.cam_quat[cam] = pose[:3, 3], quat
            mujoco.mj_kinematics(model, data)
            mujoco.mj_camlight(model, data)
            renderer.update_scene(data, camera=cam)
            rgb = renderer.render().astype(np.float32)
            renderer.enable_depth_rendering()
            z = renderer.render().astype(np.float32)
            renderer.disable_depth_rendering()
            images.append(rgb.reshape(intr.height, k, intr.width, k, 3).mean(axis=(1, 3)))
            zs = z.reshape(intr.height, k, intr.width, k)
            z_mean = zs.mean(axis=(1, 3))
            edge = zs.max(axis=(1, 3)) - zs.min(axis=(1, 3)) > 0.05 * z_mean  # depth discontinuity in the pixel
            depths.append(np.where(edge | (z_mean > SKY_DEPTH), 0.0, z_mean))
    finally:
        renderer.close()
    img = torch.from_numpy(np.stack(images)).round().clamp(0, 255).to(torch.uint8)
    return img, z_to_ray_depth(torch.from_numpy(np.stack(depths)).float(), intr)


def make_capture(
    xml: str | Path,
    out: str | Path,
    width: int = 160,
    height: int = 120,
    fov_y: float = 60.0,
    frames: int = 96,
    seed: int = 0,
) -> None:
    """Render ``frames`` views of the scene and write them as a nerfstudio capture with depth to ``out``."""
    intr = Intrinsics.from_fov(width, height, fov_y)
    c2w = arena_poses(frames, seed)
    images, depths = render_mujoco_views(xml, c2w, intr)
    write_capture(out, images, c2w, intr, depths)
    size = sum(p.stat().st_size for p in Path(out).rglob("*") if p.is_file())
    print(f"wrote {frames} views {width}x{height} (+ depth) to {out} ({size / 1e6:.1f} MB); every 8th is held out")
