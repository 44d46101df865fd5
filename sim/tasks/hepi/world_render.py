"""Draw a hepi task whose whole scene is its simulation model (rope, cloth): the renderer draws a
copy of the env's own ``MjModel`` with env ``b``'s ``qpos`` and mocap poses (grippers, pole, bar).

renderer = sim.render.make_renderer(env)   # this class, from the env class's ``renderer``

Tasks with per-env model variants (insertion) need their own renderer (``insertion_render``).
"""

from __future__ import annotations

import copy

import mujoco
import numpy as np
import torch

from sim.render.mujoco_renderer import MujocoRenderer


class WorldRenderer(MujocoRenderer):
    """The tracking camera looks at the centroid of the object nodes (rope vertices, cloth particles)."""

    def __init__(self, env, *args, distance: float = 1.2, elevation: float = -25.0, **kwargs) -> None:
        super().__init__(env, *args, distance=distance, elevation=elevation, **kwargs)

    def _build_model(self) -> mujoco.MjModel:
        if len(self.env.world.models) != 1:
            raise ValueError("WorldRenderer draws single-model worlds; a task with variants needs its own renderer")
        model = copy.copy(self.env.world.model)  # deep copy: rendering never touches the simulation's model
        model.vis.global_.offwidth = max(model.vis.global_.offwidth, self.width)
        model.vis.global_.offheight = max(model.vis.global_.offheight, self.height)
        model.vis.headlight.ambient[:] = 0.45  # the simulation models carry no scenery lights
        model.vis.headlight.diffuse[:] = 0.6
        return model

    def _fetch(self, env_ids: torch.Tensor) -> dict[str, np.ndarray]:
        world, ids = self.env.world, env_ids.cpu()
        with torch.no_grad():
            nodes = self.env._node_vectors()[0][..., 0, :]  # [E, No, 3] object node positions
            parts = {
                "qpos": world.qpos[ids],
                "mocap_pos": world.mocap_pos[ids],
                "mocap_quat": world.mocap_quat[ids],
                "target": nodes[env_ids].mean(1),
            }
        return self._to_numpy(parts)

    def _set_data(self, state: dict[str, np.ndarray], b: int) -> np.ndarray:
        self.data.qpos[:] = state["qpos"][b]
        self.data.mocap_pos[:] = state["mocap_pos"][b]
        self.data.mocap_quat[:] = state["mocap_quat"][b]
        return state["target"][b]
