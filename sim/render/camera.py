"""The egocentric camera model: intrinsics, a body-mounted pose -> camera-to-world, and batched rays.

    cam = CameraModel()                                   # 40 x 30 RGB, 52 deg vertical field of view
    c2w = look_c2w(body_pos, body_quat_wxyz, CameraMount(offset=(0.05, 0.0, 0.0), pitch_deg=10.0))
    origins, dirs = camera_rays(c2w, cam)                 # [..., H, W, 3] each, dirs unit length

Conventions (shared with ``sim.render.nerf``): world z up; camera-to-world ``c2w`` in the OpenGL / nerfstudio
convention (the camera looks along -z_cam, +y_cam is up in the image, +x_cam right); pixel row 0 at the top; rays
through pixel centres; depth means distance along the (unit) ray.

Body frame (MuJoCo convention for a robot): +x forward, +y left, +z up. A mount is a fixed offset in the body frame
and a downward pitch; a camera with a zero mount at the identity body pose looks along world +x.

Why 52 deg: the soccer paper's robot (ROBOTIS OP3) carries a Logitech C920 head camera, 78 deg diagonal field of view;
at 4:3 that is 52 deg vertical x 66 deg horizontal, and its frames were downsampled to 40 x 30.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class CameraModel:
    """A pinhole camera: image size (pixels), vertical field of view, clipping range (m along the ray)."""

    width: int = 40
    """Image width (pixels)."""
    height: int = 30
    """Image height (pixels)."""
    fov_y_deg: float = 52.0
    """Vertical field of view (degrees); square pixels, so the horizontal one follows from the aspect ratio."""
    near: float = 0.05
    """Nearest depth drawn (m): a primitive closer than this (e.g. the robot's own head) is not drawn."""
    far: float = 30.0
    """Depth reported for pixels that see nothing (m); farther geometry is clipped to it."""

    @property
    def fy(self) -> float:
        """Focal length in pixels (vertical)."""
        return 0.5 * self.height / math.tan(math.radians(self.fov_y_deg) / 2)

    @property
    def fx(self) -> float:
        """Focal length in pixels (horizontal; square pixels)."""
        return self.fy

    @property
    def cx(self) -> float:
        """Principal point column (pixels, image centre)."""
        return self.width / 2

    @property
    def cy(self) -> float:
        """Principal point row (pixels, image centre)."""
        return self.height / 2

    def intrinsics(self):  # -> sim.render.nerf.capture.Intrinsics
        """The same camera as ``sim.render.nerf.capture.Intrinsics`` (pinhole), for the field's renderers."""
        from sim.render.nerf.capture import Intrinsics

        return Intrinsics(fx=self.fx, fy=self.fy, cx=self.cx, cy=self.cy, width=self.width, height=self.height)

    def local_dirs(self, device: torch.device | str = "cpu") -> Tensor:
        """Unit ray directions in the camera frame through each pixel centre, ``[H, W, 3]``."""
        j = torch.arange(self.width, device=device, dtype=torch.float32) + 0.5
        i = torch.arange(self.height, device=device, dtype=torch.float32) + 0.5
        x = ((j - self.cx) / self.fx).expand(self.height, self.width)
        y = (-(i - self.cy) / self.fy)[:, None].expand(self.height, self.width)  # row 0 at the top: +y_cam
        d = torch.stack([x, y, -torch.ones_like(x)], -1)
        return d / torch.linalg.vector_norm(d, dim=-1, keepdim=True)


@dataclass(frozen=True)
class CameraMount:
    """Where the camera sits on its body: an offset in the body frame (m) and a downward tilt (degrees)."""

    offset: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """Camera centre in the body frame (m): +x forward, +y left, +z up."""
    pitch_deg: float = 0.0
    """Downward tilt of the optical axis (degrees, positive looks down)."""


def quat_to_matrix(quat_wxyz: Tensor) -> Tensor:
    """Rotation matrices ``[..., 3, 3]`` from unit quaternions ``[..., 4]`` (w, x, y, z; MuJoCo order)."""
    q = quat_wxyz / torch.linalg.vector_norm(quat_wxyz, dim=-1, keepdim=True)
    w, x, y, z = q.unbind(-1)
    rows = [
        1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
        2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
        2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
    ]  # fmt: skip
    return torch.stack(rows, -1).reshape(*q.shape[:-1], 3, 3)


def _mount_rotation(pitch_deg: float, device: torch.device | str, dtype: torch.dtype) -> Tensor:
    """Camera axes in the body frame ``[3, 3]`` (columns x_cam, y_cam, z_cam) for a camera tilted down by pitch."""
    p = math.radians(pitch_deg)
    c, s = math.cos(p), math.sin(p)
    forward = torch.tensor([c, 0.0, -s])  # the optical axis, -z_cam
    up = torch.tensor([s, 0.0, c])  # +y_cam
    right = torch.tensor([0.0, -1.0, 0.0])  # +x_cam: the body's right
    return torch.stack([right, up, -forward], -1).to(device=device, dtype=dtype)


def look_c2w(pos: Tensor, quat_wxyz: Tensor, mount: CameraMount | None = None) -> Tensor:
    """Camera-to-world ``[..., 4, 4]`` (OpenGL camera) of a camera on a body at ``pos [..., 3]``, ``quat [..., 4]``.

    ``c2w = T_world_body @ T_body_camera``; the body pose is in the world frame (m, wxyz).
    """
    mount = mount or CameraMount()
    r_wb = quat_to_matrix(quat_wxyz.to(pos.dtype))
    r_bc = _mount_rotation(mount.pitch_deg, pos.device, pos.dtype)
    t_bc = torch.tensor(mount.offset, device=pos.device, dtype=pos.dtype)
    c2w = torch.zeros(*pos.shape[:-1], 4, 4, device=pos.device, dtype=pos.dtype)
    c2w[..., :3, :3] = r_wb @ r_bc
    c2w[..., :3, 3] = pos + (r_wb @ t_bc.unsqueeze(-1)).squeeze(-1)
    c2w[..., 3, 3] = 1.0
    return c2w


def yaw_pitch_roll_quat(yaw: Tensor, pitch: Tensor, roll: Tensor) -> Tensor:
    """Body quaternions ``[..., 4]`` (wxyz) from z-y-x Euler angles (rad): yaw about z, then pitch, then roll.

    Positive pitch tilts the body's +x axis down (a right-handed turn about +y), as a camera looking down.
    """
    cy, sy = torch.cos(yaw / 2), torch.sin(yaw / 2)
    cp, sp = torch.cos(pitch / 2), torch.sin(pitch / 2)  # a positive turn about +y tips +x towards -z
    cr, sr = torch.cos(roll / 2), torch.sin(roll / 2)
    w = cr * cp * cy + sr * sp * sy
    x = sr * cp * cy - cr * sp * sy
    y = cr * sp * cy + sr * cp * sy
    z = cr * cp * sy - sr * sp * cy
    return torch.stack([w, x, y, z], -1)


def camera_rays(c2w: Tensor, cam: CameraModel) -> tuple[Tensor, Tensor]:
    """World-frame ray origins and unit directions, each ``[..., H, W, 3]``, for cameras ``c2w [..., 4, 4]``."""
    local = cam.local_dirs(c2w.device).to(c2w.dtype)  # [H, W, 3]
    dirs = torch.einsum("...ij,hwj->...hwi", c2w[..., :3, :3], local)  # one matmul for the whole batch
    origins = c2w[..., None, None, :3, 3].expand(dirs.shape)
    return origins, dirs
