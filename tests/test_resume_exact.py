"""Exact resume under the default thread settings: a run SIGKILLed mid-way and resumed writes the same
metrics.csv as a run that never stopped (every column but the wall-clock ones), bit for bit.

The defaults are what matters here (no torch_threads / update_threads on the command line): the update
keeps the run's torch_threads (``update_threads=0``), and a resume reuses the thread count its checkpoint
records (``torch_threads=0`` follows the machine's load at start, which a resume may not see again).
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from training.checkpoint import load_checkpoint
from training.threads import TUNED_UPDATE_MIN_ITERATIONS

ROOT = Path(__file__).resolve().parents[1]
# Long enough for the update's timed thread choice, which was the default before (TUNED_UPDATE_MIN_ITERATIONS):
# a run this long now keeps its threads unless asked (update_threads=-1).
ITERATIONS = TUNED_UPDATE_MIN_ITERATIONS
# point_reach, 32 envs x 8 steps, a checkpoint every iteration; no thread setting: the defaults.
ARGS = [
    "task=point_reach",
    "num_envs=32",
    "train.rollout_steps=8",
    f"train.total_steps={ITERATIONS * 32 * 8}",
    "train.eval_every=8",
    "train.eval_envs=16",
    "train.checkpoint_every=1",
    "train.progress=false",
    "wandb.mode=disabled",
    "device=cpu",
    "seed=5",
]
# Wall-clock columns (and the samples/s derived from them) differ between any two runs.
TIMING = {"wall_time", "samples_per_s", "charts/collect_samples_per_s", "charts/collect_time", "charts/update_time"}


def _train(runs: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-u", str(ROOT / "train.py"), *ARGS, f"runs_dir={runs}", *extra]
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env["HYDRA_FULL_ERROR"] = "0"
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def _finish(proc: subprocess.Popen) -> str:
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out[-3000:]
    return out


def _run_dir(runs: Path) -> Path:
    (run,) = (runs / "point_reach").iterdir()
    return run


def _rows(run: Path) -> list[dict[str, str]]:
    with open(run / "metrics.csv", newline="") as f:
        return [{k: v for k, v in row.items() if k not in TIMING} for row in csv.DictReader(f)]


def test_a_run_killed_and_resumed_under_default_threads_repeats_the_uninterrupted_run(tmp_path: Path) -> None:
    killed_runs = tmp_path / "killed"
    proc = _train(killed_runs)
    # SIGKILL once a checkpoint of iteration 3 or later exists (wherever the run then is: mid-rollout,
    # mid-update, mid-write). Meanwhile the uninterrupted reference would compete for the cores: it runs after.
    deadline = time.monotonic() + 90.0
    latest = None
    while proc.poll() is None and time.monotonic() < deadline:
        runs = list((killed_runs / "point_reach").glob("*/checkpoints/latest.pt"))
        if runs:
            latest = runs[0]
            try:
                if load_checkpoint(latest)["iteration"] >= 3:
                    break
            except (ValueError, FileNotFoundError):  # replaced while read
                pass
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be killed: make it longer"
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    run = _run_dir(killed_runs)
    payload = load_checkpoint(run / "checkpoints" / "latest.pt")
    killed_at = payload["iteration"]
    assert 3 <= killed_at < ITERATIONS
    threads = payload["meta"]["threads"]
    assert threads["torch"] >= 1 and threads["update"] == threads["torch"], threads  # the update keeps torch's

    out = _finish(_train(killed_runs, f"resume={run}"))
    assert "update fixed (update_threads)" in out, out
    assert f"torch_threads=0: {threads['torch']}, the count of the run resumed" in out, out
    assert "exact (weights, optimiser, RNG, env state and threads)" in out, out

    ref_runs = tmp_path / "ref"
    _finish(_train(ref_runs))
    expected, got = _rows(_run_dir(ref_runs)), _rows(run)
    assert len(expected) == ITERATIONS
    assert [r["global_step"] for r in got] == [r["global_step"] for r in expected], f"killed at {killed_at}"
    for g, e in zip(got, expected, strict=True):
        diff = {k: (g.get(k), v) for k, v in e.items() if g.get(k) != v}
        assert not diff, f"killed after iteration {killed_at}: row {e['global_step']} differs: {diff}"
