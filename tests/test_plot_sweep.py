"""training.sweep and training.plot on tiny fake run directories (no training)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from training import plot, sweep


def _fake_run(root: Path, name: str, lr: float, seed: int, evals: dict[int, float], task: str = "point_reach") -> Path:
    """A run directory as train.py writes it: config.yaml and metrics.csv (eval/return only at some rows)."""
    run = root / task / name
    run.mkdir(parents=True)
    cfg = {"seed": seed, "runs_dir": str(root), "task": {"name": task}, "algo": {"lr": lr, "epochs": 3}}
    cfg["wandb"] = {"mode": "disabled", "group": name}  # bookkeeping that differs per run: not a configuration
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    with open(run / "metrics.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, ["global_step", "iteration", "episode/return", "eval/return"])
        writer.writeheader()
        for it in range(1, 5):
            step = it * 100
            writer.writerow(
                {"global_step": step, "iteration": it, "episode/return": it + seed, "eval/return": evals.get(step, "")}
            )
    return run


@pytest.fixture
def sweep_dir(tmp_path: Path) -> Path:
    for seed, final in enumerate([1.0, 2.0, 3.0]):
        _fake_run(tmp_path, f"lr1_s{seed}", 1e-4, seed, {200: 0.0, 400: final})
    for seed, final in enumerate([10.0, 12.0]):
        _fake_run(tmp_path, f"lr3_s{seed}", 3e-4, seed, {200: 5.0, 400: final})
    return tmp_path


def test_t_interval_matches_students_t():
    mean, low, high = sweep.t_ci95([1.0, 2.0, 3.0])
    # sd = 1, n = 3, t_{0.975, 2} = 4.303
    assert mean == pytest.approx(2.0) and high - mean == pytest.approx(4.303 / math.sqrt(3), rel=1e-4)
    mean, low, high = sweep.t_ci95([5.0])
    assert mean == 5.0 and math.isnan(low) and math.isnan(high)
    # Per column, NaNs ignored.
    mean, low, _ = sweep.t_ci95(np.array([[1.0, 4.0], [3.0, np.nan]]), axis=0)
    assert mean.tolist() == [2.0, 4.0] and np.isfinite(low[0]) and np.isnan(low[1])


def test_sweep_groups_seeds_by_config_and_reports_final_eval(sweep_dir: Path):
    rows, metrics = sweep.summarize([sweep_dir])
    assert metrics == ["eval/return"]  # eval/ columns by default
    by_label = {r["config"]: r for r in rows}
    assert set(by_label) == {"algo.lr=0.0001", "algo.lr=0.0003"}  # seed, runs_dir, wandb do not split configs
    low_lr, high_lr = by_label["algo.lr=0.0001"], by_label["algo.lr=0.0003"]
    assert low_lr["seeds"] == 3 and high_lr["seeds"] == 2
    assert low_lr["eval/return"] == pytest.approx(2.0)  # the last evaluation of each seed: 1, 2, 3
    assert low_lr["eval/return_low"] == pytest.approx(2.0 - 4.303 / math.sqrt(3), rel=1e-4)
    assert high_lr["eval/return"] == pytest.approx(11.0)


def test_sweep_cli_writes_csv_and_markdown(sweep_dir: Path, tmp_path: Path, capsys):
    out = tmp_path / "tables" / "lr"
    assert sweep.main([str(sweep_dir), "--metrics", "eval/return", "episode/return", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| algo.lr=0.0001 | 3 | 2 [" in printed
    with open(out.with_suffix(".csv"), newline="") as f:
        table = list(csv.DictReader(f))
    assert {r["config"] for r in table} == {"algo.lr=0.0001", "algo.lr=0.0003"}
    assert float(next(r for r in table if r["seeds"] == "2")["episode/return"]) == pytest.approx(4.5)  # 4 + (0, 1)
    assert out.with_suffix(".md").read_text().startswith("| config | seeds |")


def test_sweep_reports_a_missing_path(tmp_path: Path, capsys):
    assert sweep.main([str(tmp_path / "nothing")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_group_curve_mean_band_and_interpolation(sweep_dir: Path):
    runs = sweep.group_runs(sweep.find_runs([sweep_dir]))["algo.lr=0.0001"]
    c = plot.group_curve(runs, "eval/return")
    assert c["x"].tolist() == [200.0, 400.0]  # rows without an evaluation are skipped
    assert c["mean"].tolist() == pytest.approx([0.0, 2.0])
    assert c["low"][1] < 2.0 < c["high"][1]
    x, y = plot.curve(runs[0], "episode/return", x="iteration")
    assert x.tolist() == [1, 2, 3, 4] and y.tolist() == [1, 2, 3, 4]
    with pytest.raises(KeyError, match="nope"):
        plot.curve(runs[0], "nope")


def test_plot_writes_a_png(sweep_dir: Path, tmp_path: Path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "fig" / "curves.png"
    assert plot.main([str(sweep_dir), "--metric", "eval/return", "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000
    single = next(sweep_dir.rglob("metrics.csv")).parent  # one run: a line, no band
    assert plot.main([str(single), "--metric", "episode/return", "--out", str(tmp_path / "one.png")]) == 0
    assert plot.main([str(single), "--metric", "nope", "--out", str(tmp_path / "x.png")]) == 2
