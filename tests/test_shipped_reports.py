"""Each shipped evaluation report and its policy README agree: the README states the report's success rate
(as a percentage, to 0 or 1 decimals) and, where the report has them, its headline errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

POLICIES = Path(__file__).resolve().parents[1] / "assets" / "policies"
REPORTS = sorted(p for p in POLICIES.glob("*/*report*.json") if "success_rate" in json.loads(p.read_text()))
# A headline error a README gives beside the rate, and how it is written there.
ERRORS = {"pos_err_m": lambda v: [f"{v:.4f}"], "route_completion": lambda v: [f"{v:.3f}"]}


def _percent(rate: float) -> list[str]:
    return [f"{100 * rate:.1f}%", f"{100 * rate:.0f}%"]


@pytest.mark.parametrize("report", REPORTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_readme_states_the_reports_figures(report):
    data = json.loads(report.read_text())
    readme = (report.parent / "README.md").read_text()
    rate = data["success_rate"]
    assert any(s in readme for s in _percent(rate)), f"{report.parent.name}/README.md never states {_percent(rate)}"
    for key, written in ERRORS.items():
        if data.get(key) is not None:
            forms = written(data[key])
            assert any(s in readme for s in forms), f"{report.parent.name}/README.md never states {key} {forms}"


def test_every_policy_folder_with_a_report_is_checked():
    assert len(REPORTS) >= 10, [p.name for p in REPORTS]
