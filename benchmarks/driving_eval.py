"""vlm_driving evaluation throughput with the reward camera and the VLM reward on: env steps/s of evaluate.py's
episode loop (``training.evaluation.run_episodes``) with the shipped BEV policy through onnxruntime, the task config
from its metadata (``reward=vlm``: a 64x64 camera frame per env rendered and scored by the dual encoder every step,
the 48x48 BEV observation), with this checkout's rasterisers and, in the same run, with those of an earlier
revision (``--before``, read with ``git show``), alternating, medians.

    OMP_NUM_THREADS=1 python benchmarks/driving_eval.py --envs 100 --steps 100 --repeats 3
    OMP_NUM_THREADS=1 python benchmarks/driving_eval.py --envs 4 --video 60      # + the video renderer (640x480)

``--steps`` is the episode length (one round of ``--envs`` episodes per timing). The "before" side swaps the
camera and BEV rasterisers (and the video's BEV colouring) for the revision's; the rest of the step is this
checkout's. Both sides render the same frames: the script checks the camera frames and BEV of one state are equal
and prints ``frames_equal``. Times are wall clock and this process's CPU time (the CPU figure is what the
evaluation costs on a shared machine). The last line is ``speedup_cpu=<after / before>``.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import subprocess
import sys
import time
import types
from contextlib import contextmanager
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import sim  # noqa: E402
from sim.tasks.vlm_driving import raster, render  # noqa: E402
from training.eval_sources import load_onnx_source  # noqa: E402
from training.evaluation import run_episodes  # noqa: E402

BEFORE = "4ae9d37"  # the last revision with the all-pixels-against-all-cars camera rasteriser


def load_revision(rev: str) -> dict[str, types.ModuleType]:
    """``roads``, ``raster`` and ``render`` of vlm_driving at git revision ``rev`` as private modules."""
    mods: dict[str, types.ModuleType] = {}
    for name in ("roads", "raster", "render"):
        src = subprocess.run(
            ["git", "show", f"{rev}:sim/tasks/vlm_driving/{name}.py"], cwd=ROOT, capture_output=True, text=True
        )
        if src.returncode:
            raise SystemExit(f"git show {rev}:sim/tasks/vlm_driving/{name}.py failed: {src.stderr.strip()}")
        code = src.stdout.replace("from sim.tasks.vlm_driving.roads import", "from _before_roads import")
        mod = types.ModuleType(f"_before_{name}")
        sys.modules[mod.__name__] = mod
        exec(compile(code, f"{rev}:{name}.py", "exec"), mod.__dict__)  # noqa: S102 - this repository's own source
        mods[name] = mod
    return mods


@contextmanager
def rasterisers(old: dict[str, types.ModuleType] | None, maps):
    """The env's camera and BEV rasterisers (and the video's BEV colouring) replaced by ``old``'s (None: as is)."""
    if old is None:
        yield
        return
    fields = {f.name: getattr(maps, f.name) for f in dataclasses.fields(old["roads"].RoadMaps)}
    old_maps = old["roads"].RoadMaps(**fields)
    saved = raster.render_camera, raster.render_bev, render.colour_bev
    raster.render_camera = lambda _maps, *a: old["raster"].render_camera(old_maps, *a)
    raster.render_bev = lambda _maps, *a: old["raster"].render_bev(old_maps, *a)
    render.colour_bev = old["render"].colour_bev
    try:
        yield
    finally:
        raster.render_camera, raster.render_bev, render.colour_bev = saved


def eval_rate(env, policy, steps: int) -> tuple[float, float]:
    """``(env steps/s wall, CPU)`` of one evaluation round: ``num_envs`` episodes of ``steps`` steps."""
    w0, c0 = time.perf_counter(), time.process_time()
    run_episodes(env, policy, env.num_envs, seed=0, window_s=0.1)
    n = env.num_envs * steps
    return n / (time.perf_counter() - w0), n / (time.process_time() - c0)


def video_rate(renderer, frames: int) -> tuple[float, float]:
    """``(frames/s wall, CPU)`` of the video renderer on env 0."""
    w0, c0 = time.perf_counter(), time.process_time()
    for _ in range(frames):
        renderer.render([0])
    return frames / (time.perf_counter() - w0), frames / (time.process_time() - c0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--envs", type=int, default=100)
    p.add_argument("--steps", type=int, default=100, help="episode length in control steps (0.1 s each)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--onnx", default="assets/policies/vlm_driving/policy.onnx")
    p.add_argument("--before", default=BEFORE, help="git revision of the reference rasterisers; '' for none")
    p.add_argument("--video", type=int, default=0, help="also time this many 640x480 video frames of env 0")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    source = load_onnx_source(str(ROOT / args.onnx))
    cfg = {**source.task_cfg, "episode_length_s": args.steps * source.task_cfg.get("control_dt", 0.1)}
    env = sim.make(cfg, num_envs=args.envs, seed=0)
    policy = source.make_policy(env)
    old = load_revision(args.before) if args.before else None
    sides = {"after": None} | ({f"before ({args.before})": old} if old else {})
    with torch.inference_mode():
        env.step(policy(env.observe()))  # warm-up
        if old is not None:  # the same frames from both sides
            frames = {}
            for name, mods in sides.items():
                with rasterisers(mods, env.maps):
                    frames[name] = (env.camera_frames(), env.bev())
            a, b = frames.values()
            print(f"frames_equal={torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])}")
    runs: dict[str, list[tuple[float, float]]] = {k: [] for k in sides}
    for _ in range(args.repeats):  # alternate so both sides see the same machine load
        for name, mods in sides.items():
            with rasterisers(mods, env.maps):
                runs[name].append(eval_rate(env, policy, args.steps))
    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in runs.items()}
    print(
        f"vlm_driving evaluation, {args.envs} envs x {args.steps} steps, reward={cfg['reward']} "
        f"(camera {cfg['camera_size']} px, BEV {cfg['bev_size']} px), {args.threads} thread(s), x{args.repeats}"
    )
    for name, (w, c) in med.items():
        print(f"  {name:22s} {w:9,.0f} env-steps/s wall   {c:9,.0f} env-steps/s CPU")
    if args.video:
        from sim.tasks.vlm_driving.render import DrivingRenderer

        renderer = DrivingRenderer(env, width=640, height=480)
        vids = {}
        for name, mods in sides.items():
            with rasterisers(mods, env.maps), torch.inference_mode():
                renderer.render([0])
                vids[name] = video_rate(renderer, args.video)
        for name, (w, c) in vids.items():
            print(f"  video {name:16s} {w:9,.1f} frames/s wall      {c:9,.1f} frames/s CPU")
    if old is not None:
        before = next(v for k, v in med.items() if k != "after")
        print(f"speedup_cpu={med['after'][1] / before[1]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
