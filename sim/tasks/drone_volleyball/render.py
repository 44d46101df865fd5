"""Drone volleyball drawn with MuJoCo: the court (lines, net, antennas), both teams' drones with
their hitting discs (team A blue, team B red), and the ball. A fixed side camera sees the whole court.

    renderer = sim.render.make_renderer(env)   # env: sim.make("drone_volleyball", mode="3v3", ...)
    frame = renderer.render([0])[0]            # uint8 [H, W, 3]

The strategy and coplay levels draw the match they own (:class:`MatchLevelRenderer`).
"""

from __future__ import annotations

import numpy as np
import torch

from sim.mujoco.mjcf import camera_xml, volleyball_model
from sim.render.mujoco_renderer import MujocoRenderer

TEAM_RGBA = ("0.15 0.35 0.9 1", "0.9 0.2 0.15 1")


def court_xml(length: float, width: float, net_height: float) -> str:
    """Court lines (5 cm, on the floor) and the two antennas at the net's ends (visual only)."""
    hl, hw, t = length / 2, width / 2, 0.04
    lines = [
        (0.0, hw, hl, t),  # side lines: centre x, y, half-sizes
        (0.0, -hw, hl, t),
    ]
    boxes = [  # the playing area, then the lines on it
        f'<geom type="box" pos="0 0 0.001" size="{hl:.4g} {hw:.4g} 0.001" rgba="0.78 0.55 0.32 1"'
        ' contype="0" conaffinity="0"/>'
    ]
    boxes += [
        f'<geom type="box" pos="{x:.4g} {y:.4g} 0.003" size="{sx:.4g} {sy:.4g} 0.002" rgba="1 1 1 1"'
        ' contype="0" conaffinity="0"/>'
        for x, y, sx, sy in lines
    ]
    for x in (-hl, 0.0, hl):  # end lines and the centre line
        boxes.append(
            f'<geom type="box" pos="{x:.4g} 0 0.003" size="{t} {hw:.4g} 0.002" rgba="1 1 1 1"'
            ' contype="0" conaffinity="0"/>'
        )
    for y in (-hw, hw):
        boxes.append(
            f'<geom type="cylinder" fromto="0 {y:.4g} 0 0 {y:.4g} {net_height + 0.8:.4g}" size="0.02"'
            ' rgba="0.9 0.1 0.5 1" contype="0" conaffinity="0"/>'
        )
    return "\n".join(boxes)


class VolleyballRenderer(MujocoRenderer):
    """The match (or skill task) of each env; defaults to the fixed side camera ``overview``.

    Draws ``self.world``: the volleyball env itself here, the match it owns for the HCSP levels
    (:class:`MatchLevelRenderer`)."""

    def __init__(self, env, width: int = 640, height: int = 480, camera: str = "fixed", **kwargs) -> None:
        self.world = self.world_of(env)
        super().__init__(env, width=width, height=height, camera=camera, **kwargs)

    @staticmethod
    def world_of(env):
        """The volleyball env (bodies, court) whose state is drawn for ``env``."""
        return env

    def _build_xml(self) -> str:
        env, cfg = self.world, self.world.cfg
        court, D = cfg.court, env.num_drones
        team = env.team_of.detach().cpu().tolist()
        cam = camera_xml(self.fixed_camera, (-5.0, -10.5, 6.5), (0.0, 0.0, 1.8))  # oblique: the net shows
        return volleyball_model(
            env.params,
            [(0.0, 0.0, 2.0)] * D,
            (0.0, 0.0, 3.0),
            cfg.ball.radius,
            cfg.ball.mass,
            court.net_height,
            court.width,
            env.phys_dt,
            drone_rgba=[TEAM_RGBA[t] for t in team],
            paddle=(cfg.paddle_radius, cfg.paddle_offset),
            extra_world_xml=court_xml(court.length, court.width, court.net_height) + "\n" + cam,
        )

    def _fetch(self, env_ids: torch.Tensor) -> dict[str, np.ndarray]:
        env = self.world
        with torch.no_grad():
            parts = {
                "drone_pos": env.drones.pos[env_ids],
                "drone_quat": env.drones.quat[env_ids],
                "ball_pos": env.ball_pos[env_ids],
            }
            return self._to_numpy(parts)

    def _set_data(self, state: dict[str, np.ndarray], b: int) -> np.ndarray:
        D = self.world.num_drones
        qpos = self.data.qpos.reshape(D + 1, 7)
        qpos[:D, :3] = state["drone_pos"][b]
        qpos[:D, 3:] = state["drone_quat"][b]
        qpos[D, :3] = state["ball_pos"][b]
        qpos[D, 3:] = (1.0, 0.0, 0.0, 0.0)
        return state["ball_pos"][b]


class MatchLevelRenderer(VolleyballRenderer):
    """An HCSP level that owns a match (strategy, coplay: ``env.match``) draws that match."""

    @staticmethod
    def world_of(env):
        return env.match
