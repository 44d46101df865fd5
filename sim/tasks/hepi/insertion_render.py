"""hepi_insertion drawn with MuJoCo (``sim.render``): the env's peg, its hole and the grippers.

renderer = sim.render.make_renderer(env)   # this class, from InsertionEnv.renderer

Envs hold different peg variants, and a renderer draws one model: this model holds every variant's
peg and hole as mocap bodies, and each frame moves the drawn env's pair into place and parks the
others far below the camera.
"""

from __future__ import annotations

import numpy as np
import torch

from sim.mujoco.mjcf import camera_xml
from sim.render.mujoco_renderer import MujocoRenderer
from sim.tasks.hepi.insertion_model import defaults_xml, gripper_body, variant_parts

PARKED = np.array([0.0, 0.0, -10.0])  # m: where the variants not drawn wait


def _pos(p: np.ndarray) -> str:
    return " ".join(f"{float(x):.6g}" for x in p)


class InsertionRenderer(MujocoRenderer):
    """Mocap bodies: ``gripper{k}``, then ``v{j}_hole``, ``v{j}_peg`` for every variant ``j``.
    The tracking camera looks at the hole."""

    def __init__(self, env, *args, distance: float = 0.25, elevation: float = -30.0, **kwargs) -> None:
        super().__init__(env, *args, distance=distance, elevation=elevation, **kwargs)

    def _build_xml(self) -> str:
        env, cfg = self.env, self.env.cfg
        assets, bodies = [], [gripper_body(f"gripper{k}") for k in range(env.n_actuator)]
        for j, v in enumerate(env.variants):
            parts = variant_parts(cfg, v.shape, v.size, prefix=f"v{j}_")
            assets += parts["meshes"]
            hole, peg = "\n".join(parts["hole_geoms"]), "\n".join(parts["peg_geoms"])
            bodies.append(f'<body name="v{j}_hole" mocap="true" pos="{_pos(PARKED)}">{hole}</body>')
            bodies.append(f'<body name="v{j}_peg" mocap="true" pos="{_pos(PARKED)}">{peg}</body>')
        centre = 0.5 * (np.array(cfg.hole_pos_low) + np.array(cfg.hole_pos_high))
        cam = camera_xml(self.fixed_camera, tuple(centre + np.array([0.45, -0.45, 0.35])), tuple(centre))
        newline = "\n"
        return f"""<mujoco model="hepi_insertion_render">
  {defaults_xml(cfg)}
  <asset>{newline.join(assets)}</asset>
  <visual><headlight ambient="0.4 0.4 0.4" diffuse="0.6 0.6 0.6"/></visual>
  <worldbody>
    <light pos="0 0 1.5" dir="0 0 -1"/>
    <geom type="plane" size="1 1 0.01" pos="0 0 {cfg.hole_pos_low[2] - 0.08:.4g}" rgba="0.85 0.85 0.8 1"
      class="visual"/>
    {cam}
    {newline.join(bodies)}
  </worldbody>
</mujoco>"""

    def _fetch(self, env_ids: torch.Tensor) -> dict[str, np.ndarray]:
        env = self.env
        with torch.no_grad():
            peg_pos, peg_quat = env.peg_pose()
            parts = {
                "variant": env.variant[env_ids].float(),
                "peg_pos": peg_pos[env_ids],
                "peg_quat": peg_quat[env_ids],
                "hole_pos": env.hole_pos[env_ids],
                "hole_quat": env.hole_quat[env_ids],
                "gripper_pos": env.world.mocap_pos[env_ids.cpu(), : env.n_actuator],
                "gripper_quat": env.world.mocap_quat[env_ids.cpu(), : env.n_actuator],
            }
            return self._to_numpy(parts)

    def _set_data(self, state: dict[str, np.ndarray], b: int) -> np.ndarray:
        na = self.env.n_actuator
        pos, quat = self.data.mocap_pos, self.data.mocap_quat
        pos[na:] = PARKED
        quat[na:] = (1.0, 0.0, 0.0, 0.0)
        pos[:na], quat[:na] = state["gripper_pos"][b], state["gripper_quat"][b]
        j = int(state["variant"][b])
        hole, peg = na + 2 * j, na + 2 * j + 1
        pos[hole], quat[hole] = state["hole_pos"][b], state["hole_quat"][b]
        pos[peg], quat[peg] = state["peg_pos"][b], state["peg_quat"][b]
        return state["hole_pos"][b]
