"""Learning curves from runs' ``metrics.csv`` to a PNG (matplotlib, no display needed).

    python -m training.plot runs/point_reach/2026-11-23_10-00-00 runs/point_reach/2026-11-23_11-00-00
    python -m training.plot runs/sweeps/lr --metric eval/metrics/final_dist_m --out lr_curves.png
    python -m training.plot runs/a runs/b --metric episode/return --x wall_time --title "cable_load"

Each path is a run or a folder of runs (``training.sweep.find_runs``). Runs are grouped as
``python -m training.sweep`` groups them: runs whose configs differ only in the seed share a label (the
keys that vary, e.g. ``algo.lr=0.0003``), and such a group is drawn as its mean with a shaded
Student's t 95% band over seeds; a group of one run is its line. Each run's curve is the metric's
logged values (rows without one, e.g. between evaluations, are skipped); a group's runs are
interpolated onto the first run's x values, within the range every run covers.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from training.sweep import find_runs, group_runs, read_metrics, t_ci95


def curve(run: Path, metric: str, x: str = "global_step") -> tuple[np.ndarray, np.ndarray]:
    """``(x values, metric values)`` of one run, rows where both are logged.

    Raises:
        KeyError: the run has no such column (the message lists the columns it has).
    """
    table = read_metrics(run)
    for col in (metric, x):
        if col not in table:
            cols = ", ".join(c for c in table if "/" in c)
            raise KeyError(f"{run}: no column {col!r} in metrics.csv (it has: {cols})")
    keep = np.isfinite(table[metric]) & np.isfinite(table[x])
    return table[x][keep], table[metric][keep]


def group_curve(runs: Sequence[Path], metric: str, x: str = "global_step") -> dict[str, np.ndarray]:
    """The runs' curves on common x values: ``{"x", "mean", "low", "high", "seeds" [S, T]}``.

    x values are the first run's within the range every run covers; the others are interpolated
    linearly (np.interp) onto them. ``low``/``high`` are NaN for a single run.
    """
    curves = [curve(r, metric, x) for r in runs]
    curves = [(cx, cy) for cx, cy in curves if cx.size]
    if not curves:
        return {"x": np.zeros(0), "mean": np.zeros(0), "low": np.zeros(0), "high": np.zeros(0)}
    lo = max(float(cx[0]) for cx, _ in curves)
    hi = min(float(cx[-1]) for cx, _ in curves)
    xs = curves[0][0]
    xs = xs[(xs >= lo) & (xs <= hi)]
    seeds = np.stack([np.interp(xs, cx, cy) for cx, cy in curves])  # [S, T]
    mean, low, high = t_ci95(seeds, axis=0)
    return {"x": xs, "mean": mean, "low": low, "high": high, "seeds": seeds}


def plot(
    paths: Sequence[str | Path],
    metric: str = "eval/return",
    out: str | Path = "curves.png",
    x: str = "global_step",
    title: str | None = None,
) -> Path:
    """Draw every configuration's curve of ``metric`` against ``x`` into ``out`` (PNG); returns its path."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on training machines
    import matplotlib.pyplot as plt

    groups = group_runs(find_runs(paths))
    fig, ax = plt.subplots(figsize=(7.0, 4.2), dpi=120)
    for label, runs in groups.items():
        c = group_curve(runs, metric, x)
        if not c["x"].size:
            continue
        name = f"{label} ({len(runs)} seeds)" if len(runs) > 1 else label
        (line,) = ax.plot(c["x"], c["mean"], label=name, linewidth=1.6)
        if len(runs) > 1:
            ax.fill_between(c["x"], c["low"], c["high"], color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set_xlabel(x)
    ax.set_ylabel(metric)
    ax.set_title(title or metric)
    ax.grid(alpha=0.3)
    if groups:
        ax.legend(fontsize=8)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.plot", description=__doc__.split("\n\n")[0])
    p.add_argument("paths", nargs="+", help="run directories or folders holding them")
    p.add_argument("--metric", default="eval/return", help="metrics.csv column (default eval/return)")
    p.add_argument("--x", default="global_step", help="x column: global_step | iteration | wall_time")
    p.add_argument("--out", default="curves.png", help="PNG path (default curves.png)")
    p.add_argument("--title", help="plot title (default: the metric)")
    args = p.parse_args(argv)
    try:
        path = plot(args.paths, args.metric, args.out, args.x, args.title)
    except (FileNotFoundError, KeyError) as exc:
        print(f"python -m training.plot: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
