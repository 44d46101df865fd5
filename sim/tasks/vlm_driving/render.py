"""Video of vlm_driving: the reward camera's top-down RGB frame beside the BEV mask stack in colour.

    renderer = sim.render.make_renderer(env)   # this class, from VLMDrivingEnv.renderer
    frames = renderer.render([0])              # uint8 [1, H, W, 3]

Pure torch (no MuJoCo, no GL): the same rasterisers the env uses, at the video's resolution.
BEV colours: road grey, markings white, route blue, cars now red, their past positions darker.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from sim.tasks.vlm_driving import raster
from sim.tasks.vlm_driving.env import BEV_EGO_ROW


class DrivingRenderer:
    """Camera (left) and BEV (right), each ``height x height``, letterboxed into ``width x height``."""

    def __init__(self, env, width: int = 640, height: int = 320, **_: object) -> None:
        self.env, self.width, self.height = env, width, height
        cfg = env.cfg
        half = max(16, min(height, width // 2))
        self._half = half
        self._camera = raster.ego_frame_pixels(half, half / cfg.camera_view_m, 0.5, env.device)
        self._bev_ppm = half / (cfg.bev_size / cfg.bev_px_per_m)
        self._bev = raster.ego_frame_pixels(half, self._bev_ppm, BEV_EGO_ROW, env.device)

    def render(self, env_ids: Sequence[int]) -> np.ndarray:
        env = self.env
        ids = torch.as_tensor(list(env_ids), dtype=torch.long, device=env.device)
        with torch.no_grad():
            cam = env.camera_frames(ids, pixels=self._camera)
            bev = env.bev(ids, pixels=self._bev, px_per_m=self._bev_ppm)
        out = torch.zeros(len(ids), self.height, self.width, 3, dtype=torch.uint8)
        h = self._half
        out[:, :h, :h] = cam.cpu()
        out[:, :h, h : 2 * h] = colour_bev(bev).cpu()
        return out.numpy()

    def close(self) -> None:
        pass


def colour_bev(bev: torch.Tensor) -> torch.Tensor:
    """BEV masks ``uint8 [N, H, W, C]`` (0 or 255) -> RGB ``uint8 [N, H, W, 3]`` (module docstring).

    Each pixel takes the colour of its topmost layer (the current cars, then older cars, markings, route, road),
    looked up in a palette: one small integer image and one gather instead of a float pass per layer."""
    dev = bev.device
    n_hist = bev.shape[-1] - 3
    palette = [[0.0, 0.0, 0.0], [70.0, 70.0, 70.0], [40.0, 70.0, 170.0], [230.0, 230.0, 230.0]]  # none, road, ...
    palette += [[230.0 * (1.0 - 0.6 * k / max(n_hist, 1)), 40.0, 40.0] for k in reversed(range(n_hist))]
    colours = torch.tensor(palette, device=dev).clamp(0, 255).to(torch.uint8)
    on = bev > 0
    layer = on[..., 0].to(torch.uint8)  # road: 1
    layer = torch.where(on[..., 2], 2, layer)  # route
    layer = torch.where(on[..., 1], 3, layer)  # markings
    for k in reversed(range(n_hist)):  # oldest first, the current cars on top
        layer = torch.where(on[..., 3 + k], 4 + (n_hist - 1 - k), layer)
    return colours[layer.long()]
