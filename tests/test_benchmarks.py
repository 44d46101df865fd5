"""Smoke tests of the benchmark scripts: tiny runs in subprocesses, each checking what its script prints."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "sim_throughput.py"


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.mark.timeout(180)
@pytest.mark.parametrize("task", ["cable_load", "drone_volleyball"])
def test_sim_throughput_smoke(task: str):
    proc = _run(
        "--task",
        task,
        "--device",
        "cpu",
        "--num-envs",
        "64",
        "--steps",
        "5",
        "--warmup",
        "1",
        "--mujoco-steps",
        "10",
        "--mujoco-threads",
        "2",
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    key, _, value = lines[-1].partition("=")
    assert key == "ratio_vs_mujoco_4096"
    ratio = float(value)
    assert math.isfinite(ratio) and ratio > 0
    assert "mujoco rollout" in proc.stdout and "torch (cpu)" in proc.stdout


@pytest.mark.timeout(120)
def test_sim_throughput_unknown_task_lists_tasks():
    proc = _run("--task", "no_such_task")
    assert proc.returncode == 2
    assert "unknown task 'no_such_task'" in proc.stderr and "cable_load" in proc.stderr


@pytest.mark.timeout(180)
def test_onnx_latency_smoke():
    pytest.importorskip("onnxruntime")
    script = SCRIPT.with_name("onnx_latency.py")
    args = ["--samples", "30", "--batch", "64", "--batches", "3"]
    proc = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert any("onnx " in line for line in lines[1:-1]) and any("torch " in line for line in lines[1:-1])
    ratio = float(lines[-1].split("=")[1])
    assert math.isfinite(ratio) and ratio > 0


def test_image_ppo_smoke():
    """The image benchmark runs end to end and reports uint8 storage 4x smaller than float32 frames."""
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "image_ppo.py"
    args = ["--num-envs", "8", "--rollout-steps", "4", "--repeats", "1", "--image-size", "48"]
    proc = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[-1].startswith("image_train_ratio=") and float(lines[-1].split("=")[1]) > 0
    image_row = next(line for line in lines if line.startswith("image "))
    mib, f32 = (float(v) for v in image_row.split()[1:3])
    assert f32 > 3.0 * mib


@pytest.mark.timeout(120)
def test_render_throughput_smoke():
    """The rendering benchmark runs end to end on the analytic stand-in field (tiny bake, 8 cameras, no GL needed)."""
    script = SCRIPT.with_name("render_throughput.py")
    args = ["--field", "none", "--no-mujoco", "--batch", "8", "--repeats", "1", "--unbaked-frames", "1"]
    args += ["--bake-width", "64", "--bake-spacing", "2.3", "--robots", "2"]
    proc = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=110)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.strip().splitlines()
    assert any(line.startswith("baked (8 cameras") for line in lines)
    assert any(line.startswith("composited (4 envs x 2 cameras") for line in lines)
    key, _, value = lines[-1].partition("=")
    assert key == "composited_fps" and float(value) > 0


def test_component_major_multirotor_step_matches_the_row_major_one():
    """benchmarks/multirotor_step.py's layout study (issue 14): the drone-substep on one tensor per component must
    be the same physics as the ``[drones, 3]`` step the tasks use (itself checked against MuJoCo)."""
    sys.path.insert(0, str(SCRIPT.parent))
    from multirotor_step import ComponentMajorDrones, Drones, max_state_difference

    assert max_state_difference(n=256, steps=50) < 1e-5
    ref = Drones(4)
    soa = ComponentMajorDrones(ref)
    start = soa.state().ang_vel.clone()
    for _ in range(20):
        soa.step()
    assert (soa.state().ang_vel - start).abs().max() > 1e-3  # the rate commands turn the drones: not a still state


def test_step_phases_times_disjoint_parts_of_the_step_and_leaves_the_env_as_it_was():
    """benchmarks/step_phases.py: the phases it wraps are disjoint parts of ``env.step`` (their sum stays below the
    steps' time), the reset phases are timed exactly on the steps where episodes end, and the env is left with its
    own methods and compiled functions (no wrapper stays behind)."""
    sys.path.insert(0, str(SCRIPT.parent))
    from step_phases import PHASES, format_phases, measure

    import sim

    env = sim.make("cable_load", num_envs=16, seed=0, episode_length_s=0.05)  # 5 steps: episodes end every 5th step
    env.reset()
    before = {name: env.__dict__.get(name) for _, name in PHASES}
    gen = torch.Generator().manual_seed(0)
    actions = [{"mavs": torch.rand(16, env.n, 5, generator=gen) * 2 - 1} for _ in range(12)]
    steps, spent, resets = measure(env, actions)
    assert len(steps) == 12 and resets >= 16 * 2
    assert sum(sum(calls) for calls in spent.values()) < sum(steps)
    assert len(spent["control loop"]) == len(spent["post-physics pass"]) == 12
    ended_steps = len(spent["reset of the ended envs"])
    assert 2 <= ended_steps < 12 and len(spent["episode statistics"]) == ended_steps
    assert {name: env.__dict__.get(name) for _, name in PHASES} == before
    table = format_phases(steps, spent, resets)
    assert "reset of the ended envs" in table and "step (median)" in table


def test_gpu_suite_smoke(tmp_path):
    """benchmarks/gpu_suite.py (run on a lent GPU in one call) fills every cell of a task on the CPU: eager and
    compiled steps/s, training samples/s, and the CUDA-graph cell says why it cannot run here."""
    import json

    out = tmp_path / "suite.json"
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_suite.py"
    args = ["--smoke", "--tasks", "point_reach", "--budget-s", "60", "--json", str(out)]
    proc = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stderr[-2000:]
    cells = json.loads(out.read_text())["tasks"]["point_reach"]
    for name in ("eager 8", "eager 32", "compiled 8", "train 8"):
        assert cells[name]["value"] is not None and cells[name]["value"] > 0, (name, cells[name])
    assert cells["graph 8"]["value"] is None and "no CUDA" in cells["graph 8"]["note"]
