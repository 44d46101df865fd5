"""The video of an evaluation (``evaluate.py video=<file.gif|mp4>``): env 0 drawn every k-th control step while its
first episode (or game) runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from training.eval_sources import EvalError


def video_hook(env: Any, args: Any) -> tuple[Callable[[int, Any], None], Callable[[], str]]:
    """``(on_step, finish)``: draw env 0 every k-th control step while its first episode runs; ``finish()`` writes
    ``args.video`` (``video_width`` x ``video_height`` at about ``video_fps``) and returns a line saying so."""
    from sim.render import RenderUnavailableError, check_video_path, make_renderer, write_video

    try:
        check_video_path(args.video)
        renderer = make_renderer(env, width=args.video_width, height=args.video_height)
    except (ValueError, ImportError, RenderUnavailableError) as err:
        raise EvalError(f"cannot write video {args.video}: {err}") from err
    control_hz = 1.0 / env.spec.control_dt
    every = max(1, round(control_hz / args.video_fps))
    frames: list = []

    def on_step(t: int, alive: Any) -> None:
        if t % every == 0 and bool(alive[0]):
            frames.append(renderer.render([0])[0])

    def finish() -> str:
        renderer.close()
        path = write_video(frames, args.video, fps=control_hz / every)
        return f"wrote {path} ({len(frames)} frames at {control_hz / every:g} fps)"

    return on_step, finish
