"""Offscreen rendering of cable_load states, video files and the ``python -m sim.render`` CLI.

Tests that draw skip (with the reason) when no offscreen GL backend works; the backend choice,
the video writer and the argument checks run everywhere.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import imageio.v3 as iio
import numpy as np
import pytest
import torch
from PIL import Image

import sim
import sim.render.mujoco_renderer as mr
from sim.render import RenderUnavailableError, make_renderer, write_video
from sim.tasks.cable_load import evaluation_overrides

LOAD_RGB = np.array([0.85, 0.55, 0.2])  # box_load_body's colour in sim.mujoco.mjcf


def _backend_or_skip() -> str:
    try:
        return mr.gl_backend()
    except RenderUnavailableError as err:
        pytest.skip(f"no offscreen GL backend: {err}")


def _env(num_envs: int = 2):
    return sim.make("cable_load", num_envs=num_envs, seed=0, **evaluation_overrides())


@pytest.fixture(scope="module")
def env_and_renderer():
    _backend_or_skip()
    env = _env(2)
    renderer = make_renderer(env, width=160, height=120)
    yield env, renderer
    renderer.close()


def _same_picture(a: np.ndarray, b: np.ndarray) -> bool:
    # Software GL may round a few pixels of a context's first frame differently (1 level).
    return a.shape == b.shape and int(np.abs(a.astype(int) - b.astype(int)).max()) <= 2


def _centre_rgb(frame: np.ndarray, half: int = 3) -> np.ndarray:
    h, w = frame.shape[:2]
    return frame[h // 2 - half : h // 2 + half + 1, w // 2 - half : w // 2 + half + 1].reshape(-1, 3).mean(0) / 255


def _is_load_colour(rgb: np.ndarray) -> bool:
    """Orange like the load under any shading: hue close to the load's, clearly saturated."""
    r, g, b = rgb
    if r < 0.2 or r - b < 0.25 * r:
        return False
    ratio = np.array([g / r, b / r])
    return bool(np.all(np.abs(ratio - LOAD_RGB[1:] / LOAD_RGB[0]) < 0.2))


def test_render_batch_is_uint8_and_not_blank(env_and_renderer):
    env, renderer = env_and_renderer
    frames = renderer.render([0, 1])
    assert frames.shape == (2, 120, 160, 3) and frames.dtype == np.uint8
    assert all(f.astype(float).var() > 0 for f in frames)
    assert _same_picture(renderer.render([1, 0])[1], frames[0])  # order follows env_ids
    assert renderer.render().shape == (2, 120, 160, 3)  # default: every env


def test_render_is_a_function_of_the_state_and_shows_motion():
    _backend_or_skip()
    env = _env(1)
    with make_renderer(env, width=160, height=120, camera="fixed") as renderer:
        before = renderer.render([0])
        assert _same_picture(renderer.render([0]), before)
        act = env.zero_actions()
        act["mavs"][..., 0] = 1.0  # the whole team accelerates along +x
        with torch.no_grad():
            for _ in range(50):
                env.step(act)
        assert float(env.drones.pos[0, :, 0].mean()) > 0.2
        after = renderer.render([0])
    changed = np.abs(after.astype(int) - before.astype(int)).max(-1) > 30
    assert changed.mean() > 0.002, "moving the team should change the picture"


def test_tracking_camera_keeps_the_load_in_the_centre():
    _backend_or_skip()
    env = _env(1)
    with make_renderer(env, width=240, height=180) as renderer:
        assert _is_load_colour(_centre_rgb(renderer.render([0])[0]))
        shift = torch.tensor([1.5, -1.0, 0.8])
        env.load.pos += shift
        env.drones.pos += shift
        frame = renderer.render([0])[0]
    assert _is_load_colour(_centre_rgb(frame)), _centre_rgb(frame)
    # ... and the load is not all there is: the frame corners show the scene around it.
    assert not _is_load_colour(_centre_rgb(frame[:20, :20], 1))


def test_backend_choice_respects_mujoco_gl_and_falls_back(monkeypatch):
    def probe(results):
        return lambda name, timeout=60.0: results[name]

    monkeypatch.setattr(mr, "_backend", None)
    monkeypatch.setattr(mr, "_backend_error", None)
    monkeypatch.setenv("MUJOCO_GL", "osmesa")
    monkeypatch.setattr(mr, "_probe_backend", lambda *a, **k: pytest.fail("must not probe when MUJOCO_GL is set"))
    assert mr.gl_backend() == "osmesa"

    monkeypatch.setattr(mr, "_backend", None)
    monkeypatch.delenv("MUJOCO_GL")
    monkeypatch.setattr(mr, "_probe_backend", probe({"egl": "no EGL device", "osmesa": None}))
    assert mr.gl_backend() == "osmesa"
    assert os.environ["MUJOCO_GL"] == "osmesa"  # exported for child processes

    monkeypatch.setattr(mr, "_backend", None)
    monkeypatch.delenv("MUJOCO_GL")
    monkeypatch.setattr(mr, "_probe_backend", probe({"egl": "libEGL missing", "osmesa": "libOSMesa missing"}))
    with pytest.raises(RenderUnavailableError, match="libosmesa6") as info:
        mr.gl_backend()
    assert "libEGL missing" in str(info.value)
    monkeypatch.setattr(mr, "_probe_backend", lambda *a, **k: pytest.fail("a failed choice is remembered"))
    with pytest.raises(RenderUnavailableError):
        mr.gl_backend()


def test_write_video_gif_roundtrip_and_errors(tmp_path: Path, monkeypatch):
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (3, 24, 32, 3), dtype=np.uint8)
    path = write_video(frames, tmp_path / "sub" / "clip.gif", fps=20)
    back = iio.imread(path)
    assert back.shape[:3] == (3, 24, 32)
    assert iio.immeta(path)["duration"] == 50
    with pytest.raises(ValueError, match="suffix"):
        write_video(frames, tmp_path / "clip.avi")
    with pytest.raises(ValueError, match="T, H, W, 3"):
        write_video(frames[0], tmp_path / "clip.gif")
    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)  # as if the 'video' extra were missing
    with pytest.raises(ImportError, match="video"):
        write_video(frames, tmp_path / "clip.mp4")


def test_make_renderer_rejects_a_task_without_renderer():
    class Fake:
        task_name = "no_such_task"
        renderer = None

    with pytest.raises(ValueError, match="no renderer"):
        make_renderer(Fake())


def test_cli_writes_gif_with_expected_frame_count(tmp_path: Path):
    _backend_or_skip()  # also exports MUJOCO_GL, so the child skips the probe
    out = tmp_path / "clip.gif"
    cmd = [sys.executable, "-m", "sim.render", "--task", "cable_load", "--steps", "20", "--fps", "25"]
    cmd += ["--width", "96", "--height", "72"]
    proc = subprocess.run(
        [*cmd, "--out", str(out)], capture_output=True, text=True, timeout=120, env=os.environ.copy(), check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert str(out) in proc.stdout
    frames = iio.imread(out)
    # 100 Hz control, 25 fps -> every 4th step: the reset state plus steps 4, 8, ..., 20. Pillow merges
    # identical consecutive frames (a hovering team can look still at 96 x 72) into one shown longer, so
    # the file holds at most 6 frames lasting 6 x 40 ms in all.
    assert frames.shape[0] <= 6 and frames.shape[1:3] == (72, 96)
    with Image.open(out) as gif:
        durations = []
        for index in range(gif.n_frames):
            gif.seek(index)
            durations.append(gif.info["duration"])
    assert sum(durations) == pytest.approx(6 * 40.0)
    assert "6 frames" in proc.stdout


def test_cli_rejects_bad_output_before_rolling_out(tmp_path: Path, capsys):
    from sim.render.__main__ import main

    assert main(["--task", "cable_load", "--steps", "1", "--out", str(tmp_path / "clip.avi")]) == 2
    assert "unsupported video suffix" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--task", "cable_load", "--env-id", "3", "--num-envs", "2"])


def _team_pixels(frame: np.ndarray) -> tuple[int, int]:
    """Counts of strongly blue and strongly red pixels (team A and team B drones)."""
    f = frame.astype(int)
    r, g, b = f[..., 0], f[..., 1], f[..., 2]
    return int(((b > 120) & (b > r + 60) & (b > g + 40)).sum()), int(((r > 120) & (r > g + 60) & (r > b + 60)).sum())


def test_volleyball_renderer_draws_both_teams_and_follows_the_state():
    _backend_or_skip()
    env = sim.make("drone_volleyball", num_envs=1, mode="3v3", seed=0)
    env.reset(seed=0)
    with make_renderer(env, width=320, height=240) as renderer:
        frame = renderer.render([0])[0]
        blue, red = _team_pixels(frame)
        assert blue > 20 and red > 20, (blue, red)
        # Move team A's drones out of the picture (far below the floor): its blue disappears, red stays.
        env.drones.pos[0, :3, 2] -= 50.0
        blue2, red2 = _team_pixels(renderer.render([0])[0])
        assert blue2 < blue // 4 and red2 > red // 2, (blue2, red2)


def test_hcsp_levels_draw_the_match_they_own():
    """The strategy and coplay levels name the volleyball renderer; it draws their ``env.match``."""
    _backend_or_skip()
    for task in ("drone_volleyball_strategy", "drone_volleyball_coplay"):
        env = sim.make(task, num_envs=1, seed=0)
        env.reset(seed=0)
        with make_renderer(env, width=320, height=240) as renderer:
            blue, red = _team_pixels(renderer.render([0])[0])
            assert blue > 20 and red > 20, (task, blue, red)


@pytest.mark.parametrize("task", ["hepi_rope_closing", "hepi_cloth_hanging"])
def test_hepi_world_renderer_draws_the_simulated_model_in_each_envs_state(task: str) -> None:
    """The rope/cloth renderer draws the env's own MuJoCo model: two envs in different states give
    different pictures, and a state change of one env changes only its picture."""
    _backend_or_skip()
    env = sim.make(task, num_envs=2, seed=0)
    env.reset()
    with make_renderer(env, width=96, height=72) as renderer:
        first = renderer.render()
        assert first.dtype == np.uint8 and first.shape == (2, 72, 96, 3)
        assert (first.reshape(2, -1, 3).max(1) > 60).all()  # something lit in each picture
        assert not _same_picture(first[0], first[1])  # the envs were reset to different poses
        actions = env.zero_actions()
        actions["grippers"][1] = 1.0  # only env 1 moves
        for _ in range(10):
            env.step(actions)
        after = renderer.render()
    assert _same_picture(after[0], first[0]) or np.abs(after[0].astype(int) - first[0]).mean() < 1.0
    assert not _same_picture(after[1], first[1])
