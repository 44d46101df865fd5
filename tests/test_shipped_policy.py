"""The shipped cable_load policy: evaluate.py reproduces its committed report, and it beats the baselines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_evaluate import run_cli  # tests/ is on sys.path (pytest rootdir-relative imports)

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "assets" / "policies" / "cable_load"


@pytest.fixture(scope="module")
def report() -> dict:
    return json.loads((SHIPPED / "report.json").read_text())


def test_evaluate_reproduces_the_committed_report(capsys, report) -> None:
    """Same command, same numbers: every headline metric lands inside the report's 95% interval."""
    args = [
        f"checkpoint={SHIPPED / 'policy.pt'}",
        f"episodes={report['episodes']}",
        f"seed={report['seed']}",
        f"window_s={report['window_s']}",
        "baseline=false",
    ]
    if report.get("scenario"):  # a policy trained on harder cases reports on the named one (e.g. nominal)
        args.append(f"scenario={report['scenario']}")
    code, now, err = run_cli(capsys, *args)
    assert code == 0, err
    for key in ("pos_err_m", "ori_err_deg", "success_rate", "terminated_rate"):
        low, high = report[f"{key}_ci95"]
        assert low - 1e-9 <= now[key] <= high + 1e-9, (key, now[key], report[f"{key}_ci95"])


def test_shipped_policy_beats_the_zero_action_baseline(report) -> None:
    assert report["pos_err_m_ci95"][1] < report["baseline"]["pos_err_m_ci95"][0]
    assert report["ori_err_deg_ci95"][1] < report["baseline"]["ori_err_deg_ci95"][0]
    assert report["terminated_rate"] <= report["baseline"]["terminated_rate"] + 0.05
