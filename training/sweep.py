"""Summarise a sweep: each configuration's final evaluation metrics, mean and 95% interval over seeds.

    python train.py -m task=point_reach algo.lr=1e-4,3e-4 seed=0,1,2 runs_dir=runs/sweeps/lr   # hydra multirun
    python -m training.sweep runs/sweeps/lr                      # table on stdout, sweep_summary.{csv,md} there
    python -m training.sweep runs/a runs/b --metrics eval/return eval/metrics/final_dist_m --out lr_table

A run is a directory holding ``metrics.csv`` and ``config.yaml`` (what ``train.py`` writes); each path
given is such a run or a folder searched for them. Runs whose resolved configs differ only in
``seed`` (and bookkeeping such as ``runs_dir`` or ``wandb``) form one configuration, labelled by the
keys that vary across all the runs given (``algo.lr=0.0003``). A run's value of a metric is the last
logged one (the final evaluation for ``eval/*`` columns); the interval is Student's t over seeds
(``mean +- t_{0.975, n-1} sd / sqrt(n)``: with 3 seeds the normal 1.96 would be far too narrow).
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

# Config keys that never tell configurations apart (prefix match on dotted keys).
IGNORED_KEYS = ("seed", "runs_dir", "resume", "device", "torch_threads", "wandb", "train.progress")
SUMMARY_NAME = "sweep_summary"
# Student's t quantile 0.975 for 1..30 degrees of freedom; beyond, the normal 1.96 is within 4%.
T975 = np.array([
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
    2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
])  # fmt: skip


def t_ci95(values: Sequence[float] | np.ndarray, axis: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(mean, low, high)`` along ``axis``: Student's t 95% interval over the finite values.

    ``low``/``high`` are NaN where fewer than two finite values exist, ``mean`` where none does. The
    other axes are kept (``values [seeds, steps]`` -> three ``[steps]`` arrays: a band per step).
    """
    x = np.asarray(values, dtype=np.float64)
    x = np.where(np.isfinite(x), x, np.nan)
    n = np.isfinite(x).sum(axis)
    with warnings.catch_warnings():  # all-NaN slices: NaN results are the answer, not a problem
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(x, axis)
        sd = np.nanstd(x, axis, ddof=1)
    t = np.where(n - 1 > len(T975), 1.96, T975[np.clip(n - 1, 1, len(T975)) - 1])
    half = np.where(n >= 2, t * sd / np.sqrt(np.maximum(n, 1)), np.nan)
    return mean, mean - half, mean + half


# ----------------------------------------------------------------------------- runs
def find_runs(paths: Iterable[str | Path]) -> list[Path]:
    """Run directories (``metrics.csv`` beside ``config.yaml``) at or below each path, sorted, no duplicates.

    Raises:
        FileNotFoundError: a path that does not exist or holds no run.
    """
    runs: list[Path] = []
    for p in map(Path, paths):
        if not p.exists():
            raise FileNotFoundError(f"{p}: no such file or directory")
        found = sorted(m.parent for m in p.rglob("metrics.csv") if (m.parent / "config.yaml").is_file())
        if (p / "metrics.csv").is_file() and (p / "config.yaml").is_file():
            found = [p]
        if not found:
            raise FileNotFoundError(f"{p}: no run directory (metrics.csv with config.yaml) here or below")
        runs.extend(r for r in found if r not in runs)
    return runs


def flat_config(run: Path) -> dict[str, Any]:
    """The run's ``config.yaml`` as ``{"algo.lr": 0.0003, ...}`` (lists kept as tuples)."""
    out: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, Mapping):
            for key, value in node.items():
                walk(value, f"{prefix}{key}.")
        else:
            out[prefix[:-1]] = tuple(node) if isinstance(node, list) else node

    walk(yaml.safe_load((run / "config.yaml").read_text()) or {}, "")
    return out


def _ignored(key: str) -> bool:
    return any(key == k or key.startswith(k + ".") for k in IGNORED_KEYS)


def group_runs(runs: Sequence[Path]) -> dict[str, list[Path]]:
    """Configuration label -> its runs (seeds). The label lists the keys whose values differ across
    ``runs`` (``"algo.lr=0.0001, task.name=point_reach"``), or the task name when none do."""
    configs = {run: flat_config(run) for run in runs}
    keys = sorted({k for c in configs.values() for k in c if not _ignored(k)})
    varying = [k for k in keys if len({repr(c.get(k)) for c in configs.values()}) > 1]
    groups: dict[str, list[Path]] = {}
    for run, cfg in configs.items():
        label = ", ".join(f"{k}={cfg.get(k)}" for k in varying) or str(cfg.get("task.name", run.parent.name))
        groups.setdefault(label, []).append(run)
    return groups


def read_metrics(run: Path) -> dict[str, np.ndarray]:
    """``metrics.csv`` as column -> float64 array over rows (NaN where a row has no value, e.g.
    ``eval/*`` between evaluations)."""
    with open(run / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    columns = list(rows[0]) if rows else []

    def num(text: str | None) -> float:
        try:
            return float(text) if text not in (None, "") else math.nan
        except ValueError:
            return math.nan

    return {c: np.array([num(r.get(c)) for r in rows], dtype=np.float64) for c in columns}


def last_value(column: np.ndarray) -> float:
    """The last finite value of a column (NaN when none)."""
    finite = column[np.isfinite(column)]
    return float(finite[-1]) if finite.size else math.nan


# ----------------------------------------------------------------------------- summary
def summarize(paths: Iterable[str | Path], metrics: Sequence[str] | None = None) -> tuple[list[dict], list[str]]:
    """One row per configuration: ``{"config", "seeds", "runs", metric: mean, metric_low, metric_high}``.

    ``metrics``: columns to report; default every ``eval/*`` column of the runs (``episode/*`` when
    no run evaluated). Returns ``(rows, metrics)``.
    """
    groups = group_runs(find_runs(paths))
    values = {label: [read_metrics(r) for r in runs] for label, runs in groups.items()}
    if not metrics:
        columns = sorted({c for tables in values.values() for t in tables for c in t})
        metrics = [c for c in columns if c.startswith("eval/")] or [c for c in columns if c.startswith("episode/")]
    rows = []
    for label, runs in groups.items():
        row: dict[str, Any] = {"config": label, "seeds": len(runs), "runs": " ".join(str(r) for r in runs)}
        for m in metrics:
            finals = [last_value(t[m]) if m in t else math.nan for t in values[label]]
            mean, low, high = (float(v) for v in t_ci95(finals))
            row.update({m: mean, f"{m}_low": low, f"{m}_high": high})
        rows.append(row)
    return rows, list(metrics)


def _cell(row: Mapping[str, Any], metric: str) -> str:
    mean, low, high = row[metric], row[f"{metric}_low"], row[f"{metric}_high"]
    if not math.isfinite(mean):
        return "-"
    return f"{mean:.4g}" if not math.isfinite(low) else f"{mean:.4g} [{low:.4g}, {high:.4g}]"


def markdown_table(rows: Sequence[Mapping[str, Any]], metrics: Sequence[str]) -> str:
    """A markdown table: configuration, seeds, then ``mean [low, high]`` per metric."""
    head = ["config", "seeds", *metrics]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        lines.append("| " + " | ".join([row["config"], str(row["seeds"]), *(_cell(row, m) for m in metrics)]) + " |")
    return "\n".join(lines) + "\n"


def write_summary(rows: Sequence[Mapping[str, Any]], metrics: Sequence[str], prefix: Path) -> tuple[Path, Path]:
    """``prefix.csv`` (every number) and ``prefix.md`` (the table); returns both paths."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    csv_path, md_path = prefix.with_suffix(".csv"), prefix.with_suffix(".md")
    fields = ["config", "seeds", *(f"{m}{s}" for m in metrics for s in ("", "_low", "_high")), "runs"]
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fields)
        writer.writeheader()
        writer.writerows(rows)
    md_path.write_text(markdown_table(rows, metrics))
    return csv_path, md_path


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.sweep", description=__doc__.split("\n\n")[0])
    p.add_argument("paths", nargs="+", help="run directories or folders holding them (a multirun's runs_dir)")
    p.add_argument("--metrics", nargs="+", help="metrics.csv columns (default: every eval/ column)")
    p.add_argument("--out", help=f"output prefix for .csv/.md (default: <first path>/{SUMMARY_NAME})")
    args = p.parse_args(argv)
    try:
        rows, metrics = summarize(args.paths, args.metrics)
    except FileNotFoundError as exc:
        print(f"python -m training.sweep: {exc}", file=sys.stderr)
        return 2
    first = Path(args.paths[0])
    out = Path(args.out) if args.out else (first if first.is_dir() else first.parent) / SUMMARY_NAME
    print(markdown_table(rows, metrics), end="")
    csv_path, md_path = write_summary(rows, metrics, out)
    print(f"wrote {csv_path} and {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
