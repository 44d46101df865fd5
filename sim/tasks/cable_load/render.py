"""cable_load drawn with MuJoCo: the MAVs, the load, the cables and the goal box (``sim.render``).

renderer = sim.render.make_renderer(env)   # this class, from CableLoadEnv.renderer
"""

from __future__ import annotations

import numpy as np
import torch

from sim.mujoco.mjcf import cable_load_model, camera_xml
from sim.render.mujoco_renderer import MujocoRenderer


class CableLoadRenderer(MujocoRenderer):
    """The cable_load team: MAVs ``mav{i}``, the load, cables, and a translucent goal box (mocap).

    The camera tracks the load. Drawn per env: MAV and load poses, goal pose. Cable rest lengths
    and masses do not affect the picture (the cables are drawn between their attachment sites).
    """

    goal_rgba = "0.1 0.9 0.3 0.35"

    def _build_xml(self) -> str:
        env, cfg = self.env, self.env.cfg
        n = env.n
        sx, sy, sz = (s / 2 for s in cfg.load_size)
        goal = (
            '<body name="goal" mocap="true" pos="0 0 1">'
            f'<geom name="goal_box" type="box" size="{sx:.6g} {sy:.6g} {sz:.6g}" rgba="{self.goal_rgba}"'
            ' contype="0" conaffinity="0" group="1"/>'
            f'<geom name="goal_x" type="capsule" fromto="0 0 0 {1.6 * sx:.6g} 0 0" size="0.008"'
            ' rgba="0.1 0.9 0.3 0.6" contype="0" conaffinity="0" group="1"/>'
            "</body>"
        )
        lookat = (0.0, 0.0, cfg.start_height + 0.5)
        cam = camera_xml(self.fixed_camera, (3.5, -3.5, cfg.start_height + 2.5), lookat)
        xml = cable_load_model(
            env.params,
            n,
            cfg.load_mass,
            cfg.load_size,
            env.attach.detach().cpu().tolist(),
            [cfg.cable_length] * n,
            cfg.cable_stiffness,
            cfg.cable_damping,
            env.phys_dt,
            extra_world_xml=f"{goal}\n{cam}",
        )
        return xml

    def _fetch(self, env_ids: torch.Tensor) -> dict[str, np.ndarray]:
        env = self.env
        with torch.no_grad():
            parts = {
                "drone_pos": env.drones.pos[env_ids],
                "drone_quat": env.drones.quat[env_ids],
                "load_pos": env.load.pos[env_ids],
                "load_quat": env.load.quat[env_ids],
                "goal_pos": env.goal_pos[env_ids],
                "goal_quat": env.goal_quat[env_ids],
            }
            return self._to_numpy(parts)

    def _set_data(self, state: dict[str, np.ndarray], b: int) -> np.ndarray:
        n = self.env.n
        qpos = self.data.qpos.reshape(n + 1, 7)
        qpos[:n, :3] = state["drone_pos"][b]
        qpos[:n, 3:] = state["drone_quat"][b]
        qpos[n, :3] = state["load_pos"][b]
        qpos[n, 3:] = state["load_quat"][b]
        self.data.mocap_pos[0] = state["goal_pos"][b]
        self.data.mocap_quat[0] = state["goal_quat"][b]
        return state["load_pos"][b]
