"""Roll out an env and write a video of one of its envs.

    python -m sim.render --task cable_load --steps 300 --env-id 0 --out runs/cable_load.gif
    python -m sim.render --task cable_load --policy random --fps 50 --width 320 --height 240 --out runs/random.mp4

Actions come from ``--policy`` (``zero``: the low-level controller holds hover; ``random``:
uniform in [-1, 1]). Every k-th control step is drawn, k = round(control rate / fps); the file
plays in real time at control rate / k. Finished episodes reset inside ``env.step`` as in training.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

import sim
from covey_common.cli import OneLineArgumentParser, run_main
from sim.core.env import MultiAgentEnv, Obs
from sim.core.registry import evaluation_overrides
from sim.render.mujoco_renderer import RenderUnavailableError, check_video_path, make_renderer, write_video

Policy = Callable[[Obs], dict[str, Tensor]]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = OneLineArgumentParser(prog="python -m sim.render", description=__doc__.split("\n\n")[0])
    p.add_argument("--task", required=True, help="registered task name (sim.registered_tasks())")
    p.add_argument("--steps", type=int, default=300, help="control steps to roll out")
    p.add_argument("--env-id", type=int, default=0, help="which env of the batch to film")
    p.add_argument("--num-envs", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--policy", choices=("zero", "random"), default="zero", help="action source")
    # TODO(checkpoint): add `--checkpoint PATH` here; make_policy() builds the trained policy from it.
    p.add_argument(
        "--eval-mode",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="switch off domain randomisation and observation noise (the task's evaluation_overrides())",
    )
    p.add_argument("--out", default=None, help="output .gif or .mp4 (default runs/<task>.gif)")
    p.add_argument("--fps", type=float, default=25.0, help="target frame rate (rounded to divide the control rate)")
    p.add_argument("--width", type=int, default=640)
    p.add_argument("--height", type=int, default=480)
    p.add_argument("--camera", choices=("track", "fixed"), default="track")
    p.add_argument("--msaa", type=int, default=0, help="anti-aliasing samples (0 is fastest on CPU, 4 on a GPU)")
    args = p.parse_args(argv)
    if args.steps < 0:
        p.error("--steps must be >= 0")
    if args.fps <= 0:
        p.error("--fps must be > 0")
    if not 0 <= args.env_id < args.num_envs:
        p.error(f"--env-id must be in [0, --num-envs={args.num_envs})")
    if args.out is None:
        args.out = f"runs/{args.task}.gif"
    return args


def make_policy(args: argparse.Namespace, env: MultiAgentEnv) -> Policy:
    """The action source: ``obs -> actions`` for every group of ``env``."""
    # A trained policy (`--checkpoint`) plugs in here: load it and return `lambda obs: policy(obs)`.
    if args.policy == "zero":
        zeros = env.zero_actions()
        return lambda obs: zeros
    gen = torch.Generator(device=env.device)
    gen.manual_seed(args.seed + 1)
    return lambda obs: env.sample_actions(gen)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        check_video_path(args.out)
    except (ValueError, ImportError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    overrides = evaluation_overrides(args.task) if args.eval_mode else {}
    env = sim.make(args.task, num_envs=args.num_envs, device=args.device, seed=args.seed, **overrides)
    policy = make_policy(args, env)
    try:
        renderer = make_renderer(env, width=args.width, height=args.height, camera=args.camera, msaa=args.msaa)
    except RenderUnavailableError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2

    control_hz = 1.0 / env.spec.control_dt
    every = max(1, round(control_hz / args.fps))
    video_fps = control_hz / every
    ids = [args.env_id]
    episodes_ended = 0
    with torch.no_grad(), renderer:
        obs = env.reset()
        frames = [renderer.render(ids)[0]]
        for t in range(1, args.steps + 1):
            obs, _, terminated, truncated, _ = env.step(policy(obs))
            episodes_ended += int(terminated[args.env_id] or truncated[args.env_id])
            if t % every == 0:
                frames.append(renderer.render(ids)[0])
    path = write_video(frames, args.out, fps=video_fps)
    duration = args.steps / control_hz
    note = f", {episodes_ended} episode(s) of env {args.env_id} ended and reset" if episodes_ended else ""
    print(
        f"wrote {path} ({len(frames)} frames at {video_fps:g} fps, every {every} control steps, "
        f"{duration:.2f} s simulated{note})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main("python -m sim.render", main))
