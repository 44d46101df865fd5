"""Training logs: a metrics CSV (always), wandb (offline by default, imported lazily) and a progress bar.

Metric names are namespaced and stable: ``charts/*`` (throughput, learning rate), ``losses/*``
(PPO statistics), ``episode/*`` (means over training episodes that ended in an iteration:
``episode/return``, ``episode/reward/<term>``, ``episode/termination/<reason>``,
``episode/metrics/<name>``) and ``eval/*`` (the deterministic evaluation). Every CSV row also has
``global_step`` (env steps), ``iteration``, ``wall_time`` (s, continued across resumes) and
``samples_per_s`` (env steps per second over the iteration).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from covey_common.files import atomic_write

FIRST_COLUMNS = ("global_step", "iteration", "wall_time", "samples_per_s")
WANDB_MODES = ("offline", "online", "disabled")


class CsvLogger:
    """One row per iteration; the header grows when a new metric appears (the file is rewritten).

    With ``resume_step`` the existing file is kept and rows past that step (written after the
    checkpoint being resumed) are dropped, so ``global_step`` stays strictly increasing.
    """

    def __init__(self, path: str | Path, resume_step: int | None = None) -> None:
        self.path = Path(path)
        self.columns: list[str] = list(FIRST_COLUMNS)
        rows: list[dict[str, str]] = []
        if resume_step is not None and self.path.is_file():
            text = self.path.read_text()
            if text and not text.endswith("\n"):
                text = text[: text.rfind("\n") + 1]  # a row cut off by a kill mid-write: drop it
            reader = csv.DictReader(text.splitlines())
            self.columns = list(reader.fieldnames or FIRST_COLUMNS)
            rows = [
                r
                for r in reader
                if None not in r.values() and r.get("global_step") and int(float(r["global_step"])) <= resume_step
            ]
        self._rewrite(rows)

    def log(self, row: Mapping[str, Any]) -> None:
        new = [k for k in row if k not in self.columns]
        if new:
            with open(self.path, newline="") as f:
                old_rows = list(csv.DictReader(f))
            self.columns.extend(new)
            self._rewrite(old_rows)
        with open(self.path, "a", newline="") as f:
            csv.DictWriter(f, self.columns).writerow({k: _fmt(v) for k, v in row.items()})

    def _rewrite(self, rows: list[dict[str, str]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(self.path, "w", fsync=False, newline="") as f:
            writer = csv.DictWriter(f, self.columns)
            writer.writeheader()
            writer.writerows(rows)


def _fmt(value: Any) -> Any:
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.6g}"
    return value


class WandbLogger:
    """Thin wrapper over a wandb run. ``mode="disabled"`` never imports wandb."""

    def __init__(
        self,
        mode: str,
        run_dir: Path,
        run_id: str,
        config: dict,
        project: str = "covey",
        entity: str | None = None,
        group: str | None = None,
        tags: tuple[str, ...] = (),
    ) -> None:
        if mode not in WANDB_MODES:
            raise ValueError(f"wandb.mode must be one of {WANDB_MODES}, got {mode!r}")
        self.run = None
        if mode == "disabled":
            return
        import wandb  # lazy: a disabled run must not pay for (or depend on) wandb

        self._wandb = wandb
        self.run = wandb.init(
            project=project,
            entity=entity or None,
            group=group or None,
            tags=list(tags) or None,
            name=run_id,
            id=run_id,
            resume="allow",
            mode=mode,
            dir=str(run_dir),
            config=config,
            settings=wandb.Settings(console="off", silent=True),
        )

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        if self.run is not None:
            self.run.log({k: v for k, v in metrics.items() if not _is_nan(v)}, step=step)

    def log_video(self, key: str, path: Path, step: int) -> None:
        """Log a video file (its own frame rate is kept)."""
        if self.run is not None:
            self.run.log({key: self._wandb.Video(str(path))}, step=step)

    def close(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None


def _is_nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


class ProgressBar:
    """tqdm bar over env steps showing steps/s, mean episode return and the task metrics."""

    def __init__(self, total: int, initial: int, enabled: bool = True) -> None:
        from tqdm import tqdm

        self.bar = tqdm(
            total=total,
            initial=initial,
            unit="step",
            unit_scale=True,
            dynamic_ncols=True,
            disable=not enabled,
            mininterval=1.0,
            smoothing=0.1,
        )
        self.postfix: dict[str, str] = {}

    def update(self, steps: int, metrics: Mapping[str, float]) -> None:
        """Advance by ``steps``; ``metrics`` (short name -> value) replace the shown ones."""
        for key, val in metrics.items():
            if not _is_nan(val):
                self.postfix[key] = f"{val:.4g}"
        self.bar.set_postfix(self.postfix, refresh=False)
        self.bar.update(steps)

    def write(self, line: str) -> None:
        self.bar.write(line)

    def close(self) -> None:
        self.bar.close()
