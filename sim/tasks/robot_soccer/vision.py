"""robot_soccer's head cameras: the baked radiance field of the arena with robots and ball composited on top.

As in Tirumala et al.: the static scene comes from a radiance field (here baked into panoramas,
:mod:`sim.render.nerf.bake`; covey's arena capture ``assets/fields/soccer_arena_baked.pt``) and the dynamic objects are
drawn over it with a depth test (:mod:`sim.render.composite`), for every env and camera at once:

    cams = SoccerCameras(cfg, device)
    frames = cams.render(pos [E, A, 3], yaw [E, A], robots, ball, pitch_jitter [E, A], height_jitter [E, A])
    # uint8 [E, A, 30, 40, 3]

Robots are drawn as their body box in team colour with a white head sphere; the ball as an orange sphere. Humanoids
(``robot_kind=humanoid``, :meth:`SoccerCameras.render_humanoids`) as their torso box, head sphere, capsule limbs
placed by :func:`.humanoid.forward_kinematics` and dark foot boxes; their cameras turn with the whole torso.
Per-episode camera randomisation (pitch and height jitter) is passed per camera; frame latency is handled by the env
(:class:`FrameDelay`).
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import Tensor

from sim.physics.quaternion import quat_from_axis_angle, quat_mul, quat_rotate
from sim.render.camera import CameraModel, CameraMount, look_c2w
from sim.render.composite import Boxes, Capsules, Compositor, Primitives, Spheres
from sim.tasks.robot_soccer.config import CameraCfg, RobotSoccerCfg
from sim.tasks.robot_soccer.humanoid import CAMERA_OFFSET as HUMANOID_CAMERA_OFFSET
from sim.tasks.robot_soccer.humanoid import FOOT_HALF, HEAD_R, NECK, TORSO_HALF, forward_kinematics
from sim.tasks.robot_soccer.model import BALL_RGB, HEAD_RADIUS, TEAM_RGB

REPO = Path(__file__).resolve().parents[3]


def _axis_angle(axis: tuple[float, float, float], angle: Tensor) -> Tensor:
    a = torch.tensor(axis, device=angle.device, dtype=angle.dtype).expand(*angle.shape, 3)
    return quat_from_axis_angle(a, angle)


def horizontal_fov_deg(cam: CameraCfg) -> float:
    """The camera's horizontal field of view (square pixels)."""
    fy = 0.5 * cam.height / math.tan(math.radians(cam.fov_y_deg) / 2)
    return math.degrees(2 * math.atan(0.5 * cam.width / fy))


class SoccerCameras:
    """Head cameras of the soccer robots (see the module docstring)."""

    def __init__(self, cfg: RobotSoccerCfg, device: torch.device) -> None:
        c = cfg.camera
        background = None
        if c.background:
            from sim.render.nerf.bake import BakedScene

            path = Path(c.background)
            path = path if path.is_absolute() else REPO / path
            if not path.exists():
                raise FileNotFoundError(
                    f"robot_soccer camera.background {path} not found (a baked scene: python -m sim.render.nerf.bake; "
                    "camera.background='' renders a flat grey background)"
                )
            background = BakedScene.load(path, device=device)
        rc = cfg.robot
        self.cfg = cfg
        self.device = device
        self.compositor = Compositor(
            background,
            CameraModel(width=c.width, height=c.height, fov_y_deg=c.fov_y_deg),
            CameraMount(offset=(HEAD_RADIUS, 0.0, rc.head_height - rc.half_size[2]), pitch_deg=c.pitch_deg)
            if cfg.robot_kind != "humanoid"
            else CameraMount(offset=HUMANOID_CAMERA_OFFSET, pitch_deg=c.pitch_deg),
        )
        self._half = torch.tensor(rc.half_size, device=device)
        self._team_rgb = torch.tensor(TEAM_RGB, device=device)
        self._ball_rgb = torch.tensor(BALL_RGB, device=device)

    def primitives(self, robot_pos: Tensor, robot_yaw: Tensor, ball: Tensor) -> Primitives:
        """Robots ``pos [E, R, 3]`` (body centres), ``yaw [E, R]``, ball ``[E, 3]`` -> the dynamic primitives."""
        E, R = robot_yaw.shape
        P = R // 2
        cfg = self.cfg
        rgb = self._team_rgb.repeat_interleave(P, 0)  # [R, 3]: team_a first
        quat = _axis_angle((0.0, 0.0, 1.0), robot_yaw)
        boxes = Boxes(pos=robot_pos, half=self._half.expand(R, 3), rgb=rgb, quat=quat)
        head_z = cfg.robot.head_height - robot_pos[..., 2:]
        heads = torch.cat((robot_pos[..., :2], robot_pos[..., 2:] + head_z), -1)
        sphere_pos = torch.cat((heads, ball.unsqueeze(1)), 1)  # [E, R + 1, 3]
        radius = torch.tensor([HEAD_RADIUS] * R + [cfg.ball.radius], device=self.device)
        sphere_rgb = torch.cat((torch.full((R, 3), 0.92, device=self.device), self._ball_rgb[None]), 0)
        return Primitives(spheres=Spheres(pos=sphere_pos, radius=radius, rgb=sphere_rgb), boxes=boxes)

    def render(
        self,
        robot_pos: Tensor,
        robot_yaw: Tensor,
        ball: Tensor,
        cameras: Tensor,
        pitch_jitter: Tensor | None = None,
        height_jitter: Tensor | None = None,
    ) -> Tensor:
        """Images of the robots ``cameras`` (a 1-D index into R) -> ``uint8 [E, A, H, W, 3]``.

        ``pitch_jitter`` (rad, positive looks down) and ``height_jitter`` (m) are ``[E, A]`` per-camera offsets."""
        prims = self.primitives(robot_pos, robot_yaw, ball)
        quat = _axis_angle((0.0, 0.0, 1.0), robot_yaw[:, cameras])
        return self._render(robot_pos[:, cameras], quat, prims, pitch_jitter, height_jitter)

    def humanoid_primitives(self, torso_pos: Tensor, torso_quat: Tensor, joints: Tensor, ball: Tensor) -> Primitives:
        """Humanoids: torsos ``pos [E, R, 3]``, ``quat [E, R, 4]``, joint angles ``[E, R, J]`` (absolute), ball
        ``[E, 3]`` -> torso and foot boxes, head and ball spheres, limb capsules."""
        E, R = torso_pos.shape[:2]
        P, dev = R // 2, self.device
        rgb = self._team_rgb.repeat_interleave(P, 0)  # [R, 3]: team_a first
        fk = forward_kinematics(torso_pos, torso_quat, joints)
        n_seg = fk["a"].shape[-2]
        dark = torch.full((R, 2, 3), 0.2, device=dev)
        boxes = Boxes(
            pos=torch.cat((torso_pos, fk["foot_pos"].flatten(1, 2)), 1),
            half=torch.cat(
                (torch.tensor([TORSO_HALF], device=dev).expand(R, 3), torch.tensor([FOOT_HALF] * 2 * R, device=dev))
            ),
            rgb=torch.cat((rgb, dark.flatten(0, 1))),
            quat=torch.cat((torso_quat, fk["foot_quat"].flatten(1, 2)), 1),
        )
        head = torso_pos + quat_rotate(
            torso_quat, torso_pos.new_tensor((0.0, 0.0, TORSO_HALF[2] + NECK)).expand_as(torso_pos)
        )
        spheres = Spheres(
            pos=torch.cat((head, ball.unsqueeze(1)), 1),
            radius=torch.tensor([HEAD_R] * R + [self.cfg.ball.radius], device=dev),
            rgb=torch.cat((torch.full((R, 3), 0.92, device=dev), self._ball_rgb[None]), 0),
        )
        capsules = Capsules(
            a=fk["a"].flatten(1, 2), b=fk["b"].flatten(1, 2), radius=fk["radius"].repeat(R),
            rgb=rgb.repeat_interleave(n_seg, 0),
        )  # fmt: skip
        return Primitives(spheres=spheres, boxes=boxes, capsules=capsules)

    def render_humanoids(
        self,
        torso_pos: Tensor,
        torso_quat: Tensor,
        joints: Tensor,
        ball: Tensor,
        cameras: Tensor,
        pitch_jitter: Tensor | None = None,
        height_jitter: Tensor | None = None,
    ) -> Tensor:
        """:meth:`render` for humanoids (:meth:`humanoid_primitives`): each camera on its robot's head, turning
        with the torso's full orientation -> ``uint8 [E, A, H, W, 3]``."""
        prims = self.humanoid_primitives(torso_pos, torso_quat, joints, ball)
        return self._render(torso_pos[:, cameras], torso_quat[:, cameras], prims, pitch_jitter, height_jitter)

    def _render(
        self, pos: Tensor, quat: Tensor, prims: Primitives, pitch_jitter: Tensor | None, height_jitter: Tensor | None
    ) -> Tensor:
        """Frames of the cameras on bodies at ``pos [E, A, 3]``, ``quat [E, A, 4]`` with their jitters."""
        if pitch_jitter is not None:  # about the body's y axis: positive tilts the view down
            quat = quat_mul(quat, _axis_angle((0.0, 1.0, 0.0), pitch_jitter))
        if height_jitter is not None:
            pos = pos + torch.nn.functional.pad(height_jitter.unsqueeze(-1), (2, 0))
        return self.compositor.render(look_c2w(pos, quat, self.compositor.mount), prims)


class FrameDelay:
    """Per-env frame latency: the observation of env ``e`` is the frame rendered ``delay[e]`` control steps ago.

    ``push(frames [E, A, H, W, C])`` stores the newest frame and returns the delayed ones; ``reset(env_ids, frames)``
    fills the history of restarting envs with their first frame (no frames from the previous episode)."""

    def __init__(self, max_delay: int, num_envs: int, device: torch.device) -> None:
        self.max_delay = max_delay
        self.delay = torch.zeros(num_envs, dtype=torch.long, device=device)
        self.buffer: Tensor | None = None  # [D + 1, E, A, H, W, C], index 0 the newest

    def push(self, frames: Tensor) -> Tensor:
        if self.max_delay == 0:
            return frames
        if self.buffer is None:
            self.buffer = frames.unsqueeze(0).repeat(self.max_delay + 1, *([1] * frames.dim()))
        else:
            self.buffer = torch.cat((frames.unsqueeze(0), self.buffer[:-1]), 0)
        return self.read()

    def read(self) -> Tensor:
        if self.buffer is None:
            raise RuntimeError("FrameDelay.read before any push")
        e = torch.arange(self.buffer.shape[1], device=self.buffer.device)
        return self.buffer[self.delay, e]

    def reset(self, env_ids: Tensor, frames: Tensor, delay: Tensor) -> None:
        """Restart ``env_ids`` with ``frames [k, A, H, W, C]`` as their whole history and latency ``delay [k]``."""
        self.delay[env_ids] = delay
        if self.max_delay == 0 or self.buffer is None:
            return
        self.buffer[:, env_ids] = frames.unsqueeze(0)
