"""Visualisation: offscreen MuJoCo rendering of batched env states and video writing.

    renderer = make_renderer(env, width=640, height=480)   # CableLoadRenderer for cable_load
    frames = renderer.render([0, 1])                        # uint8 [2, 480, 640, 3]
    write_video(frames_over_time, "runs/clip.gif", fps=25)

CLI: ``python -m sim.render --task cable_load --steps 300 --out runs/cable_load.gif``.
"""

from sim.render.mujoco_renderer import (
    CableLoadRenderer,
    MujocoRenderer,
    RenderUnavailableError,
    check_video_path,
    create_renderer,
    gl_backend,
    make_renderer,
    register_renderer,
    write_video,
)
from sim.render.volleyball_renderer import VolleyballRenderer

__all__ = [
    "CableLoadRenderer",
    "MujocoRenderer",
    "RenderUnavailableError",
    "VolleyballRenderer",
    "check_video_path",
    "create_renderer",
    "gl_backend",
    "make_renderer",
    "register_renderer",
    "write_video",
]
