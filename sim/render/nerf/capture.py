"""Scene captures in nerfstudio's data format: read, write, and camera rays.

A capture is a folder with ``transforms.json`` and images (nerfstudio's ``nerfstudio-data`` format)::

    {"camera_model": "PINHOLE" | "OPENCV", "fl_x", "fl_y", "cx", "cy", "w", "h",
     "k1", "k2", "k3", "k4", "p1", "p2",            # OPENCV only (missing = 0)
     "frames": [{"file_path": "images/frame_00000.png",
                 "transform_matrix": 4x4 camera-to-world, OpenGL camera (looks along -z, +y up),
                 "depth_file_path": "depths/frame_00000.png"}, ...],   # optional, all frames or none
     "train_filenames": [...], "val_filenames": [...], "test_filenames": [...]}   # optional split

Depth files follow nerfstudio (``get_depth_image_from_path`` + ``depth-nerfacto``'s default
``is_euclidean_depth=False``): 16-bit PNG of **z-depth** in millimetres (``depth_unit_scale_factor``
1e-3; 0 = no depth) or ``.npy`` in metres. :func:`load_capture` turns them into **ray distance**
(covey's convention). Held-out views: the ``val_filenames`` of the file when given, else every 8th
frame (``i % 8 == 0``, nerfstudio's ``eval_mode=interval`` convention); :func:`write_capture` writes
the split so nerfstudio uses the same one.

CLI (renders the default MuJoCo arena into a capture; see :mod:`sim.render.nerf.scenes`)::

    python -m sim.render.nerf.capture make out=assets/captures/soccer_arena
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

CAMERA_MODELS = ("PINHOLE", "OPENCV")
DISTORTION_KEYS = ("k1", "k2", "k3", "k4", "p1", "p2")
INTRINSIC_KEYS = ("fl_x", "fl_y", "cx", "cy", "w", "h")
DEPTH_UNIT_SCALE = 1e-3  # nerfstudio's depth_unit_scale_factor: 16-bit PNG depth in mm
EVAL_INTERVAL = 8  # every 8th frame (i % 8 == 0) is held out unless the file names a split


class CaptureError(ValueError):
    """A capture that cannot be read (the message is one line and names the file)."""


@dataclass(frozen=True)
class Intrinsics:
    """Pinhole intrinsics in pixels (+ OpenCV radial/tangential distortion, nerfstudio's order)."""

    fx: float
    fy: float
    cx: float
    cy: float
    width: int
    height: int
    camera_model: str = "PINHOLE"
    distortion: tuple[float, float, float, float, float, float] = (0.0,) * 6  # k1, k2, k3, k4, p1, p2

    def scaled(self, factor: float) -> Intrinsics:
        """The same camera at ``factor`` times the resolution (``0.5`` = half)."""
        return dataclasses.replace(
            self,
            fx=self.fx * factor,
            fy=self.fy * factor,
            cx=self.cx * factor,
            cy=self.cy * factor,
            width=round(self.width * factor),
            height=round(self.height * factor),
        )

    def to_json(self) -> dict:
        out = {
            "camera_model": self.camera_model,
            "fl_x": self.fx,
            "fl_y": self.fy,
            "cx": self.cx,
            "cy": self.cy,
            "w": self.width,
            "h": self.height,
        }
        if self.camera_model == "OPENCV":
            out.update(dict(zip(DISTORTION_KEYS, self.distortion, strict=True)))
        return out

    @classmethod
    def from_fov(cls, width: int, height: int, fov_y_deg: float) -> Intrinsics:
        """A centred pinhole camera with square pixels and vertical field of view ``fov_y_deg``."""
        f = 0.5 * height / float(np.tan(np.radians(fov_y_deg) / 2))
        return cls(f, f, width / 2, height / 2, width, height)


@dataclass
class Capture:
    """A nerfstudio-format scene capture, loaded."""

    images: Tensor  # uint8 [N, H, W, 3]
    c2w: Tensor  # float32 [N, 4, 4], OpenGL camera convention, world frame
    intrinsics: Intrinsics
    depths: Tensor | None  # float32 [N, H, W] ray distance (m), 0 = unknown; None without depth files
    root: Path
    eval_indices: list[int] = field(default_factory=list)  # held-out frames

    @property
    def train_indices(self) -> list[int]:
        held = set(self.eval_indices)
        return [i for i in range(len(self.images)) if i not in held]


# ----------------------------------------------------------------------------- rays
def _undistort(xd: Tensor, yd: Tensor, dist: Sequence[float], iters: int = 10) -> tuple[Tensor, Tensor]:
    """Invert OpenCV's radial + tangential model (Newton, as nerfstudio/MultiNeRF) in y-down normalised coords."""
    k1, k2, k3, k4, p1, p2 = dist
    x, y = xd.clone(), yd.clone()
    for _ in range(iters):
        r = x * x + y * y
        d = 1.0 + r * (k1 + r * (k2 + r * (k3 + r * k4)))
        fx = d * x + 2 * p1 * x * y + p2 * (r + 2 * x * x) - xd
        fy = d * y + 2 * p2 * x * y + p1 * (r + 2 * y * y) - yd
        d_r = k1 + r * (2.0 * k2 + r * (3.0 * k3 + r * 4.0 * k4))
        d_x, d_y = 2.0 * x * d_r, 2.0 * y * d_r
        fx_x = d + d_x * x + 2.0 * p1 * y + 6.0 * p2 * x
        fx_y = d_y * x + 2.0 * p1 * x + 2.0 * p2 * y
        fy_x = d_x * y + 2.0 * p2 * y + 2.0 * p1 * x
        fy_y = d + d_y * y + 2.0 * p2 * x + 6.0 * p1 * y
        det = fx_x * fy_y - fx_y * fy_x
        det = torch.where(det.abs() < 1e-9, torch.full_like(det, 1e-9), det)
        x = x - (fx * fy_y - fy * fx_y) / det
        y = y - (fy * fx_x - fx * fy_x) / det
    return x, y


def distort_points(x: Tensor, y: Tensor, dist: Sequence[float]) -> tuple[Tensor, Tensor]:
    """OpenCV's forward model: undistorted -> distorted y-down normalised coords (for tests and projection)."""
    k1, k2, k3, k4, p1, p2 = dist
    r = x * x + y * y
    d = 1.0 + r * (k1 + r * (k2 + r * (k3 + r * k4)))
    return d * x + 2 * p1 * x * y + p2 * (r + 2 * x * x), d * y + 2 * p2 * x * y + p1 * (r + 2 * y * y)


def camera_dirs(intr: Intrinsics, device: torch.device | str = "cpu") -> Tensor:
    """Ray directions in the camera frame (OpenGL: -z forward, +y up), pixel centres, **not** normalised:
    ``z = -1`` so that z-depth times this vector is the hit point.

    Returns:
        float32 [H, W, 3].
    """
    v, u = torch.meshgrid(
        torch.arange(intr.height, device=device, dtype=torch.float32) + 0.5,
        torch.arange(intr.width, device=device, dtype=torch.float32) + 0.5,
        indexing="ij",
    )
    x = (u - intr.cx) / intr.fx
    y = (v - intr.cy) / intr.fy  # y down (OpenCV) until the flip below
    if intr.camera_model == "OPENCV" and any(intr.distortion):
        x, y = _undistort(x, y, intr.distortion)
    return torch.stack([x, -y, -torch.ones_like(x)], dim=-1)


def camera_rays(c2w: Tensor, intr: Intrinsics) -> tuple[Tensor, Tensor]:
    """World-frame rays through every pixel centre of ``B`` cameras.

    Args:
        c2w: float [B, 4, 4] camera-to-world (OpenGL camera convention).
        intr: the cameras' shared intrinsics.

    Returns:
        origins float32 [B, H, W, 3], unit directions float32 [B, H, W, 3].
    """
    c2w = c2w.float()
    d_cam = camera_dirs(intr, c2w.device)
    d = torch.einsum("bij,hwj->bhwi", c2w[:, :3, :3], d_cam)
    d = d / d.norm(dim=-1, keepdim=True)
    o = c2w[:, None, None, :3, 3].expand_as(d)
    return o, d


def z_to_ray_depth(z_depth: Tensor, intr: Intrinsics) -> Tensor:
    """z-depth [..., H, W] -> distance along the unit ray [..., H, W] (0 stays 0)."""
    return z_depth * camera_dirs(intr, z_depth.device).norm(dim=-1)


def ray_to_z_depth(depth: Tensor, intr: Intrinsics) -> Tensor:
    """Distance along the unit ray [..., H, W] -> z-depth [..., H, W]."""
    return depth / camera_dirs(intr, depth.device).norm(dim=-1)


# ----------------------------------------------------------------------------- read
def _read_json(path: Path) -> dict:
    if not path.is_file():
        raise CaptureError(f"{path}: no such file (a capture folder holds transforms.json)")
    try:
        meta = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise CaptureError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("frames"), list) or not meta["frames"]:
        raise CaptureError(f"{path}: needs a non-empty 'frames' list")
    return meta


def _intrinsics(meta: dict, frames: list[dict], where: Path) -> Intrinsics:
    """Top-level intrinsics; per-frame ones (nerfstudio allows them) only when all frames agree."""
    keys = INTRINSIC_KEYS + DISTORTION_KEYS + ("camera_model",)
    per_frame = {k for f in frames for k in keys if k in f}
    values: dict = {}
    for k in keys:
        if k in meta:
            values[k] = meta[k]
        elif k in per_frame:
            seen = {json.dumps(f.get(k)) for f in frames}
            if len(seen) > 1:
                raise CaptureError(
                    f"{where}: frames differ in '{k}' ({len(seen)} values); covey needs one camera for all frames"
                )
            values[k] = frames[0].get(k)
    if "distortion_params" in meta or any("distortion_params" in f for f in frames):
        raise CaptureError(f"{where}: 'distortion_params' lists are not supported; give k1..k4, p1, p2")
    missing = [k for k in INTRINSIC_KEYS if values.get(k) is None]
    if missing:
        raise CaptureError(f"{where}: missing intrinsics {', '.join(missing)}")
    model = values.get("camera_model") or "OPENCV"  # nerfstudio's default when none is given
    if model not in CAMERA_MODELS:
        raise CaptureError(f"{where}: camera_model {model!r} is not supported (only {', '.join(CAMERA_MODELS)})")
    dist = tuple(float(values.get(k) or 0.0) for k in DISTORTION_KEYS)
    if model == "PINHOLE" and any(dist):
        raise CaptureError(f"{where}: camera_model PINHOLE with distortion parameters; use OPENCV")
    return Intrinsics(
        float(values["fl_x"]),
        float(values["fl_y"]),
        float(values["cx"]),
        float(values["cy"]),
        int(values["w"]),
        int(values["h"]),
        model,
        dist,  # type: ignore[arg-type]
    )


def _resolve(root: Path, rel: str) -> Path:
    p = Path(rel)
    return p if p.is_absolute() else root / p


def _read_image(path: Path) -> np.ndarray:
    from PIL import Image

    if not path.is_file():
        raise CaptureError(f"{path}: image file not found")
    try:
        with Image.open(path) as im:
            return np.asarray(im.convert("RGB"))
    except OSError as err:
        raise CaptureError(f"{path}: cannot read image ({err})") from None


def _read_depth(path: Path) -> np.ndarray:
    """z-depth in metres, float32 [H, W]. nerfstudio scales both 16-bit PNG and ``.npy`` depth by
    ``depth_unit_scale_factor`` (1e-3), so both hold millimetres."""
    from PIL import Image

    if not path.is_file():
        raise CaptureError(f"{path}: depth file not found")
    try:
        if path.suffix == ".npy":
            return np.load(path).astype(np.float32) * DEPTH_UNIT_SCALE
        with Image.open(path) as im:
            arr = np.asarray(im).astype(np.float32)
    except (OSError, ValueError) as err:
        raise CaptureError(f"{path}: cannot read depth ({err})") from None
    if arr.ndim != 2:
        raise CaptureError(f"{path}: depth must be a single-channel 16-bit image, got shape {arr.shape}")
    return arr * DEPTH_UNIT_SCALE


def _downscale(x: Tensor, k: int, mode: str) -> Tensor:
    """[N, H, W, C] -> [N, H//k, W//k, C]: area mean for colour, nearest-valid minimum for depth."""
    n, h, w, c = x.shape
    x = x[:, : h // k * k, : w // k * k].reshape(n, h // k, k, w // k, k, c)
    if mode == "mean":
        return x.float().mean(dim=(2, 4))
    # depth: the centre sample (nerfstudio resizes depth with nearest interpolation)
    return x[:, :, k // 2, :, k // 2]


def load_capture(path: str | Path, downscale: int = 1) -> Capture:
    """Read a nerfstudio capture folder (or its ``transforms.json``).

    Args:
        path: the folder holding ``transforms.json``, or that file.
        downscale: integer factor to shrink images (area mean) and depths (nearest) by.

    Raises:
        CaptureError: a missing file, a bad matrix, mixed image sizes, an unsupported camera model
            (one line, naming the file).
    """
    path = Path(path)
    json_path = path if path.suffix == ".json" else path / "transforms.json"
    root = json_path.parent
    meta = _read_json(json_path)
    frames = meta["frames"]
    intr = _intrinsics(meta, frames, json_path)
    n_depth = sum("depth_file_path" in f for f in frames)
    if n_depth not in (0, len(frames)):
        raise CaptureError(f"{json_path}: depth_file_path is given for {n_depth} of {len(frames)} frames (all or none)")
    images, poses, depths, names = [], [], [], []
    for i, fr in enumerate(frames):
        if "file_path" not in fr or "transform_matrix" not in fr:
            raise CaptureError(f"{json_path}: frame {i} needs file_path and transform_matrix")
        img_path = _resolve(root, fr["file_path"])
        try:
            m = np.asarray(fr["transform_matrix"], dtype=np.float64)
        except (TypeError, ValueError):
            m = np.zeros(0)
        if m.shape != (4, 4) or not np.isfinite(m).all():
            raise CaptureError(
                f"{json_path}: frame {i} ({fr['file_path']}) transform_matrix must be 4x4, got {m.shape}"
            )
        img = _read_image(img_path)
        if img.shape[:2] != (intr.height, intr.width):
            raise CaptureError(
                f"{img_path}: image is {img.shape[1]}x{img.shape[0]}, capture says {intr.width}x{intr.height} "
                "(mixed image sizes are not supported)"
            )
        images.append(img)
        poses.append(m)
        names.append(str(Path(fr["file_path"])))
        if n_depth:
            dpath = _resolve(root, fr["depth_file_path"])
            dep = _read_depth(dpath)
            if dep.shape != (intr.height, intr.width):
                raise CaptureError(
                    f"{dpath}: depth is {dep.shape[1]}x{dep.shape[0]}, images are {intr.width}x{intr.height}"
                )
            depths.append(dep)
    img_t = torch.from_numpy(np.stack(images))
    c2w = torch.from_numpy(np.stack(poses)).float()
    dep_t = torch.from_numpy(np.stack(depths)).float() if depths else None
    if downscale > 1:
        img_t = _downscale(img_t, downscale, "mean").round().clamp(0, 255).to(torch.uint8)
        if dep_t is not None:
            dep_t = _downscale(dep_t[..., None], downscale, "nearest")[..., 0]
        intr = intr.scaled(1.0 / downscale)
        intr = dataclasses.replace(intr, width=img_t.shape[2], height=img_t.shape[1])
    if dep_t is not None:
        dep_t = z_to_ray_depth(dep_t, intr)
    if "val_filenames" in meta or "test_filenames" in meta:
        held = {str(Path(p)) for p in meta.get("val_filenames", meta.get("test_filenames", []))}
        eval_idx = [i for i, name in enumerate(names) if name in held]
    else:
        eval_idx = list(range(0, len(frames), EVAL_INTERVAL))
    return Capture(img_t, c2w, intr, dep_t, root, eval_idx)


# ----------------------------------------------------------------------------- write
def write_capture(
    path: str | Path,
    images: Tensor | np.ndarray,
    c2w: Tensor | np.ndarray,
    intrinsics: Intrinsics,
    depths: Tensor | np.ndarray | None = None,
    eval_interval: int = EVAL_INTERVAL,
) -> None:
    """Write a nerfstudio capture: ``images/frame_XXXXX.png``, ``depths/frame_XXXXX.png`` and ``transforms.json``.

    Args:
        path: output folder (created).
        images: uint8 [N, H, W, 3].
        c2w: float [N, 4, 4] camera-to-world, OpenGL camera convention.
        intrinsics: the shared camera.
        depths: optional float [N, H, W] **ray distance** in metres (0 = none); stored as nerfstudio's 16-bit
            z-depth PNG in mm (so up to 65.5 m at 1 mm resolution).
        eval_interval: every ``eval_interval``-th frame goes to ``val_filenames``/``test_filenames``.
    """
    from PIL import Image

    root = Path(path)
    images = torch.as_tensor(images)
    c2w = torch.as_tensor(c2w, dtype=torch.float64)
    n, h, w, _ = images.shape
    if images.dtype != torch.uint8:
        raise ValueError(f"images must be uint8 [N, H, W, 3], got {images.dtype}")
    if (h, w) != (intrinsics.height, intrinsics.width) or c2w.shape != (n, 4, 4):
        raise ValueError(f"images {tuple(images.shape)} / c2w {tuple(c2w.shape)} do not match {intrinsics}")
    (root / "images").mkdir(parents=True, exist_ok=True)
    frames = []
    if depths is not None:
        (root / "depths").mkdir(exist_ok=True)
        z = ray_to_z_depth(torch.as_tensor(depths, dtype=torch.float32), intrinsics)
        z_mm = (z / DEPTH_UNIT_SCALE).round().clamp(0, 65535).numpy().astype(np.uint16)
    for i in range(n):
        name = f"frame_{i:05d}.png"
        Image.fromarray(images[i].numpy()).save(root / "images" / name, optimize=True)
        fr: dict = {"file_path": f"images/{name}", "transform_matrix": c2w[i].tolist()}
        if depths is not None:
            Image.fromarray(z_mm[i]).save(root / "depths" / name)
            fr["depth_file_path"] = f"depths/{name}"
        frames.append(fr)
    held = [fr["file_path"] for i, fr in enumerate(frames) if i % eval_interval == 0]
    meta = intrinsics.to_json() | {
        "frames": frames,
        "train_filenames": [fr["file_path"] for i, fr in enumerate(frames) if i % eval_interval != 0],
        "val_filenames": held,
        "test_filenames": held,
    }
    (root / "transforms.json").write_text(json.dumps(meta, indent=1) + "\n")


# ----------------------------------------------------------------------------- CLI
@dataclass
class MakeArgs:
    """``python -m sim.render.nerf.capture make key=value ...``"""

    out: str = field(default="assets/captures/soccer_arena", metadata={"help": "output folder"})
    scene: str = field(default="assets/scenes/soccer_arena.xml", metadata={"help": "MuJoCo scene (MJCF)"})
    width: int = field(default=160, metadata={"help": "image width (px)"})
    height: int = field(default=120, metadata={"help": "image height (px)"})
    fov_y: float = field(default=60.0, metadata={"help": "vertical field of view (deg)"})
    frames: int = field(default=128, metadata={"help": "number of views"})
    seed: int = field(default=0, metadata={"help": "pose sampling seed"})


def main(argv: Sequence[str] | None = None) -> None:
    from sim.core.cli import exit_on_user_error, parse_args

    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] != "make":
        raise SystemExit(
            "usage: python -m sim.render.nerf.capture make out=<dir> [scene=.. width=.. height=.. frames=..]"
        )

    def run() -> None:
        from sim.render.nerf.scenes import make_capture

        args, _ = parse_args(MakeArgs, argv[1:])
        make_capture(args.scene, args.out, args.width, args.height, args.fov_y, args.frames, args.seed)

    exit_on_user_error("sim.render.nerf.capture", run, (CaptureError,))


if __name__ == "__main__":
    from covey_common.cli import run_main

    run_main("python -m sim.render.nerf.capture", main)
