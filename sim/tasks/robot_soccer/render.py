"""Video of a robot_soccer game: the pitch from above (MuJoCo, the env's own model with env ``b``'s state) with the
head-camera view of team_a's first robot (the 40x30 composited frame its policy sees, enlarged) in the top-left
corner, the paper's "egocentric view beside a top view".

    renderer = sim.render.make_renderer(env)   # this class, from RobotSoccerEnv.renderer
"""

from __future__ import annotations

import copy

import mujoco
import numpy as np
import torch

from sim.render.mujoco_renderer import MujocoRenderer


class SoccerRenderer(MujocoRenderer):
    """A fixed high view of the whole pitch, plus the egocentric inset (see the module docstring)."""

    def __init__(self, env, *args, distance: float = 6.5, elevation: float = -62.0, azimuth: float = 90.0, **kwargs):
        super().__init__(env, *args, distance=distance, elevation=elevation, azimuth=azimuth, **kwargs)
        self._cameras = getattr(env, "cameras", None)
        if self._cameras is None:  # a state env: render the head camera here (the policy does not see it)
            from sim.tasks.robot_soccer.vision import SoccerCameras

            self._cameras = SoccerCameras(env.cfg, env.device)

    def _build_model(self) -> mujoco.MjModel:
        model = copy.copy(self.env.world.model)  # deep copy: rendering never touches the simulation's model
        model.vis.global_.offwidth = max(model.vis.global_.offwidth, self.width)
        model.vis.global_.offheight = max(model.vis.global_.offheight, self.height)
        return model

    def _fetch(self, env_ids: torch.Tensor) -> dict[str, np.ndarray]:
        env, ids = self.env, env_ids.cpu()
        first = torch.zeros(1, dtype=torch.long)
        with torch.no_grad():
            ball = env.ball_position()[env_ids]
            if env.humanoid:
                s = env._read()
                body = (s["torso_pos"][env_ids], s["quat"][env_ids], s["joints"][env_ids])
                inset = self._cameras.render_humanoids(*body, ball, first)[:, 0]
            else:
                pos, yaw = env.robot_poses()
                inset = self._cameras.render(pos[env_ids], yaw[env_ids], ball, first)[:, 0]
        return {"qpos": env.world.qpos[ids].numpy(), "inset": inset.cpu().numpy()}

    def _set_data(self, state: dict[str, np.ndarray], b: int) -> np.ndarray:
        self.data.qpos[:] = state["qpos"][b]
        return np.zeros(3)

    def render(self, env_ids=None) -> np.ndarray:
        ids = torch.arange(self.env.num_envs) if env_ids is None else torch.as_tensor(env_ids).reshape(-1)
        frames = super().render(ids)
        inset = self._fetch(ids)["inset"]  # [B, h, w, 3]
        h, w = inset.shape[1:3]
        k = max(1, (self.width // 3) // w)  # about a third of the video width, whole pixels
        big = inset.repeat(k, axis=1).repeat(k, axis=2)
        frames[:, 4 : 4 + h * k, 4 : 4 + w * k] = big
        return frames
