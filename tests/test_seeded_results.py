"""Each seeded comparison a task ships (``sim/tasks/<task>/results/*.json``, written by a benchmark such as
``benchmarks/hepi_architectures.py``) and its task README agree: the README states every row's mean success with its
95% interval over seeds, for every evaluation set, and the per-seed success on the training set. A README table
edited by hand, or left behind when a sweep gains seeds, fails here."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

TASKS = Path(__file__).resolve().parents[1] / "sim" / "tasks"
RESULTS = sorted(p for p in TASKS.glob("*/results/*.json") if "table" in json.loads(p.read_text()))
NOT_SUCCESS = ("error_m", "return")  # entries with per-seed values that are not a success rate


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _success_entries(row: dict) -> dict[str, dict]:
    return {k: v for k, v in row.items() if isinstance(v, dict) and "per_seed" in v and k not in NOT_SUCCESS}


@pytest.mark.parametrize("results", RESULTS, ids=lambda p: f"{p.parts[-3]}/{p.name}")
def test_the_task_readme_states_every_row(results):
    table = json.loads(results.read_text())["table"]
    readme = (results.parents[1] / "README.md").read_text()
    for name, row in table.items():
        entries = _success_entries(row)
        assert "train" in entries, f"{results.name}: {name} has no training-set success"
        for label, entry in entries.items():
            low, high = (min(max(x, 0.0), 1.0) for x in entry["ci95"])
            # The mean may be bold in the table (**67.7%** [63.5, 71.9]).
            written = rf"{re.escape(_pct(entry['mean']))}%(\*\*)? \[{re.escape(_pct(low))}, {re.escape(_pct(high))}\]"
            assert re.search(written, readme), f"{results.name}: the README never states {name} {label} {written}"
        per_seed = " / ".join(_pct(v) for v in entries["train"]["per_seed"])
        assert per_seed in readme, f"{results.name}: the README never states {name}'s seeds {per_seed}"


def test_the_seeded_comparisons_are_found():
    assert len(RESULTS) >= 3, [p.name for p in RESULTS]
