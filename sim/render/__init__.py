"""Visualisation: offscreen MuJoCo rendering of batched env states and video writing.

    renderer = make_renderer(env, width=640, height=480)   # the class named by type(env).renderer
    frames = renderer.render([0, 1])                        # uint8 [2, 480, 640, 3]
    write_video(frames_over_time, "runs/clip.gif", fps=25)

Each task's renderer lives with the task (e.g. ``sim/tasks/cable_load/render.py``).
CLI: ``python -m sim.render --task cable_load --steps 300 --out runs/cable_load.gif``.
"""

from sim.render.mujoco_renderer import (
    MujocoRenderer,
    RenderUnavailableError,
    check_video_path,
    create_renderer,
    gl_backend,
    make_renderer,
    write_video,
)

__all__ = [
    "MujocoRenderer",
    "RenderUnavailableError",
    "check_video_path",
    "create_renderer",
    "gl_backend",
    "make_renderer",
    "write_video",
]
