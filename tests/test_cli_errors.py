"""Every entry point a user runs turns a missing input into one line on stderr and a non-zero exit code:
no traceback, whichever tool (train, evaluate, export, the render and radiance-field tools, the reward
trainer, the plots, the ROS nodes, the bridge, the launcher, the robot selftest). Ctrl-C is one line too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MISSING = "/nonexistent/covey-missing"
ROS = ("--ros-args", "-p", f"model:={MISSING}.onnx", "-p", "agent_index:=0")

# (the command after `python`, what the one line must mention)
CASES = {
    "train": (["train.py", "task=cable_load", f"resume={MISSING}"], MISSING),
    "train-task": (["train.py", "task=nope"], "nope"),
    "evaluate": (["evaluate.py", f"checkpoint={MISSING}.pt"], MISSING),
    "evaluate-onnx": (["evaluate.py", f"onnx={MISSING}.onnx"], MISSING),
    "export": (["export.py", f"checkpoint={MISSING}.pt"], MISSING),
    "render": (["-m", "sim.render", "--task", "nope"], "nope"),
    "nerf-bake": (["-m", "sim.render.nerf.bake", f"field={MISSING}.pt", "out=/tmp/covey-bake.pt"], MISSING),
    "nerf-compare": (["-m", "sim.render.nerf.compare", f"field={MISSING}.pt"], MISSING),
    "nerf-train": (["-m", "sim.render.nerf.train", f"capture={MISSING}"], MISSING),
    "nerf-capture": (["-m", "sim.render.nerf.capture", "make", "out=/tmp/covey-capture", f"scene={MISSING}.xml"], ""),
    "composite": (["-m", "sim.render.composite", f"baked={MISSING}.pt"], MISSING),
    "image-tower": (["-m", "sim.rewards.train_image_tower", "--frames", f"{MISSING}.npz"], MISSING),
    "plot": (["-m", "training.plot", MISSING], MISSING),
    "sweep": (["-m", "training.sweep", MISSING], MISSING),
    "policy-node": (["-m", "deploy_ros.policy_node", *ROS], MISSING),
    "sim-bridge": (["-m", "sim.ros.bridge", *ROS[:3]], MISSING),
    "launch": (["-m", "deploy_ros.launch", "nope"], "nope"),
    "selftest": (["-m", "deploy_ros.selftest", f"{MISSING}.onnx"], MISSING),
}


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST", "COVEY_DEBUG": ""}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_missing_input_is_one_line(name):
    args, mentions = CASES[name]
    done = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=180, env=_env())
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode != 0, f"{name}: exit code 0 for a missing input"
    assert "Traceback" not in done.stderr, f"{name}: a traceback:\n{done.stderr[-3000:]}"
    # ROS nodes may log their own [INFO] lines before the error; the error itself is one line.
    errors = [line for line in lines if not line.startswith("[INFO]")]
    assert len(errors) == 1, f"{name}: {len(errors)} lines:\n{done.stderr[-3000:]}"
    assert mentions in errors[0], f"{name}: the line does not name {mentions!r}: {errors[0]}"


def test_ctrl_c_in_evaluate_is_one_line():
    policy = ROOT / "assets" / "policies" / "cable_load" / "policy.pt"
    proc = subprocess.Popen(
        [sys.executable, "evaluate.py", f"checkpoint={policy}", "episodes=100000", "num_envs=4"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        # pytest-xdist's workers ignore SIGINT, and a child inherits that (Python then installs no Ctrl-C
        # handler): give the child the default a user's shell gives it.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    time.sleep(15.0)  # past the imports, the env and the first steps, even on a loaded machine
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    lines = [line for line in err.splitlines() if line.strip()]
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err and lines == ["evaluate.py: interrupted"], err[-3000:]
