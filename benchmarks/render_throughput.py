"""Frames per second of 40 x 30 egocentric views: MuJoCo raster, the unbaked radiance field, baked, composited.

    OMP_NUM_THREADS=1 python benchmarks/render_throughput.py --field assets/fields/soccer_arena.pt \
        --baked assets/fields/soccer_arena_baked.pt

Four renderers of the same camera poses (robot eye height 0.3-0.6 m on the pitch, any yaw, pitch within +-10 deg,
roll within +-5 deg; ``--batch`` cameras):

- ``mujoco raster``: ``mujoco.Renderer`` at 40 x 30 drawing the arena scene (assets/scenes/soccer_arena.xml), one
  camera after another (the reference: what a MuJoCo task with a camera does today);
- ``field (unbaked)``: volume rendering of the trained field (``sim.render.nerf.volume.render_views``), a few
  cameras only (it is slow);
- ``baked``: ``BakedScene.render`` of the whole batch at once (plus its PSNR against the unbaked render);
- ``composited``: ``Compositor.render`` (baked background + per env a ball and ``--robots`` robot boxes), the
  image observation a task gets, ``[E, A, 30, 40, 3]`` with ``A = 2`` cameras per env.

Each line gives frames/s by wall clock and by this process's CPU time (the machine may be shared: the CPU-time figure
is what the renderer costs), and the ratio to the MuJoCo raster measured in the same run. The last lines are
``ratio_composited_vs_mujoco=<x>`` (unless ``--no-mujoco``) and ``composited_fps=<x>``. Without ``--field`` (or
when the file is missing) the analytic stand-in arena
(``sim.render.nerf.testing.BoxArena``) is used and the MuJoCo line still draws the real arena scene.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sim.render.camera import CameraModel, look_c2w, yaw_pitch_roll_quat  # noqa: E402
from sim.render.composite import Boxes, Compositor, Primitives, Spheres  # noqa: E402
from sim.render.nerf.bake import ARENA_REGION, BakedScene  # noqa: E402

ARENA_XML = ROOT / "assets" / "scenes" / "soccer_arena.xml"
REGION = ARENA_REGION  # where robots walk (m): the pitch less a margin


def robot_poses(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Camera positions ``[n, 3]`` and quaternions ``[n, 4]`` of the kind a robot on the pitch has."""
    g = torch.Generator().manual_seed(seed)

    def u(lo: float, hi: float, k: int = 3) -> torch.Tensor:
        return lo + (hi - lo) * torch.rand(n, generator=g)

    (x0, y0), (x1, y1) = REGION
    pos = torch.stack([u(x0, x1), u(y0, y1), u(0.3, 0.6)], -1)
    quat = yaw_pitch_roll_quat(u(-math.pi, math.pi), u(-0.17, 0.17), u(-0.09, 0.09))
    return pos, quat


def timed(fn, repeats: int) -> tuple[float, float]:
    """Wall and process-CPU seconds per call of ``fn`` (after one warm-up call)."""
    fn()
    w0, c0 = time.perf_counter(), time.process_time()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - w0) / repeats, (time.process_time() - c0) / repeats


def mujoco_raster(c2w: torch.Tensor, cam: CameraModel) -> tuple[float, float]:
    """Seconds (wall, CPU) per frame of ``mujoco.Renderer`` drawing the arena at each pose in turn."""
    import mujoco
    import numpy as np

    from sim.render.mujoco_renderer import create_renderer

    model = mujoco.MjModel.from_xml_path(str(ARENA_XML))
    data = mujoco.MjData(model)
    cid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, "capture")
    model.cam_fovy[cid] = cam.fov_y_deg
    renderer = create_renderer(model, cam.width, cam.height, msaa=0)
    poses = c2w.double().numpy()
    quat = np.zeros(4)

    def run() -> None:
        for pose in poses:
            mujoco.mju_mat2Quat(quat, pose[:3, :3].reshape(-1).copy())
            model.cam_pos[cid], model.cam_quat[cid] = pose[:3, 3], quat
            mujoco.mj_kinematics(model, data)
            mujoco.mj_camlight(model, data)
            renderer.update_scene(data, camera=cid)
            renderer.render()

    try:
        wall, cpu = timed(run, 1)
    finally:
        renderer.close()
    return wall / len(poses), cpu / len(poses)


def main(argv: list[str] | None = None) -> float:
    """Run the comparison and print the table; returns the composited frames/s (wall)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--field", default=str(ROOT / "assets" / "fields" / "soccer_arena.pt"), help="trained field")
    p.add_argument("--baked", default=None, help="baked scene (default: bake the field now, a minute or more)")
    p.add_argument("--batch", type=int, default=256, help="cameras per render call")
    p.add_argument("--repeats", type=int, default=5, help="timed calls of the batched renderers")
    p.add_argument("--unbaked-frames", type=int, default=8, help="cameras volume-rendered (slow)")
    p.add_argument("--robots", type=int, default=4, help="robot boxes per env in the composite (plus one ball)")
    p.add_argument("--no-mujoco", action="store_true", help="skip the MuJoCo raster (no GL here)")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--bake-width", type=int, default=384, help="panorama width when baking here")
    p.add_argument("--bake-spacing", type=float, default=0.5, help="panorama spacing (m) when baking here")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    cam = CameraModel()
    pos, quat = robot_poses(args.batch)
    c2w = look_c2w(pos, quat)

    if Path(args.field).exists():
        from sim.render.nerf.field import load_field
        from sim.render.nerf.volume import render_views

        field = load_field(args.field)
        field_name = args.field

        def unbaked(c: torch.Tensor) -> torch.Tensor:
            return render_views(field, c, cam.intrinsics())[0]
    else:
        from sim.render.nerf.testing import BoxArena, render_rays_simple, trace_rays

        field = BoxArena()
        field_name = "analytic stand-in (BoxArena; no trained field at --field)"

        def unbaked(c: torch.Tensor) -> torch.Tensor:
            from sim.render.camera import camera_rays

            o, d = camera_rays(c, cam)
            rgb = render_rays_simple(field, o.reshape(-1, 3), d.reshape(-1, 3))["rgb"]
            return (rgb.clamp(0, 1) * 255).round().to(torch.uint8).reshape(*o.shape)

    load = os.getloadavg()
    print(f"field: {field_name}")
    print(
        f"batch {args.batch} cameras of {cam.width}x{cam.height}, torch threads {args.threads}, "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores"
    )

    rows: list[tuple[str, float, float]] = []
    if not args.no_mujoco:
        wall, cpu = mujoco_raster(c2w, cam)
        rows.append(("mujoco raster (one camera after another)", 1 / wall, 1 / cpu))

    n = min(args.unbaked_frames, args.batch)
    wall, cpu = timed(lambda: unbaked(c2w[:n]), 1)
    rows.append((f"field, unbaked volume rendering ({n} cameras)", n / wall, n / cpu))
    reference = unbaked(c2w[:n])

    if args.baked and Path(args.baked).exists():
        baked = BakedScene.load(args.baked)
        bake_note = f"loaded {args.baked}"
    else:
        t0 = time.perf_counter()
        kwargs = {} if Path(args.field).exists() else {"render_rays": trace_rays}  # the stand-in's exact cast
        baked = BakedScene.bake(field, region=REGION, spacing=args.bake_spacing, pano_width=args.bake_width, **kwargs)
        bake_note = f"baked now in {time.perf_counter() - t0:.0f} s"
        if args.baked:
            baked.save(args.baked)
    print(f"baked scene: {baked.num} panoramas of {baked.pano_w}x{baked.pano_h} ({bake_note})")

    wall, cpu = timed(lambda: baked.render(c2w, cam), args.repeats)
    rows.append((f"baked ({args.batch} cameras per call)", args.batch / wall, args.batch / cpu))
    rgb, _ = baked.render(c2w[:n], cam)
    quality = psnr(rgb, reference)

    e = max(1, args.batch // 2)
    g = torch.Generator().manual_seed(1)
    body_pos = torch.cat([pos[: 2 * e].reshape(e, 2, 3), pos.new_zeros(e, max(0, args.robots - 2), 3)], 1)
    body_pos[:, 2:, :2] = torch.rand(e, max(0, args.robots - 2), 2, generator=g) * 4 - 2
    body_pos[:, :, 2] = 0.25
    prims = Primitives(
        spheres=Spheres(
            pos=torch.rand(e, 1, 3, generator=g) * torch.tensor([4.0, 3.0, 0.0]) + torch.tensor([-2.0, -1.5, 0.07]),
            radius=torch.tensor([0.07]),
            rgb=torch.tensor([[1.0, 0.5, 0.1]]),
        ),
        boxes=Boxes(
            pos=body_pos,
            half=torch.tensor([[0.08, 0.12, 0.25]]).expand(args.robots, 3),
            rgb=torch.tensor([[0.2, 0.3, 0.9], [0.9, 0.2, 0.2]]).repeat(args.robots, 1)[: args.robots],
        ),
    )
    comp = Compositor(baked, cam)
    c2w_ea = c2w[: 2 * e].reshape(e, 2, 4, 4)
    wall, cpu = timed(lambda: comp.render(c2w_ea, prims), args.repeats)
    rows.append((f"composited ({e} envs x 2 cameras, 1 ball + {args.robots} robots each)", 2 * e / wall, 2 * e / cpu))

    ref = rows[0][1] if not args.no_mujoco else float("nan")
    print(f"{'renderer':<62} {'frames/s (wall)':>16} {'frames/s (CPU)':>15} {'vs mujoco':>10}")
    for name, fps_wall, fps_cpu in rows:
        print(f"{name:<62} {fps_wall:>16.0f} {fps_cpu:>15.0f} {fps_wall / ref:>9.1f}x")
    print(f"baked vs unbaked PSNR on {n} held-out poses: {quality:.2f} dB")
    if not args.no_mujoco:
        print(f"ratio_composited_vs_mujoco={rows[-1][1] / ref:.3f}")
    print(f"composited_fps={rows[-1][1]:.1f}")
    return rows[-1][1]


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    """PSNR (dB) of float [0, 1] or uint8 images."""
    a = a.float() / 255 if a.dtype == torch.uint8 else a.float()
    b = b.float() / 255 if b.dtype == torch.uint8 else b.float()
    return float(-10 * torch.log10(((a - b) ** 2).mean()))


if __name__ == "__main__":
    main()
