"""A match report's intervals: rates get Wilson's, per-game counts never a negative bound."""

from __future__ import annotations

import torch

from training.matches import MatchResults, summarize_matches


def _results(land_out: list[float]) -> MatchResults:
    g = len(land_out)
    zeros = torch.zeros(g)
    counters = {k: zeros for k in ("hits_a", "hits_b", "points_a", "points_b")}
    return MatchResults(result=torch.ones(g), counters={**counters, "land_out": torch.tensor(land_out)})


def test_a_rare_fault_per_game_has_a_wilson_interval_inside_0_1():
    summary = summarize_matches(_results([1.0] + [0.0] * 49))  # once in 50 games
    low, high = summary["outcomes_ci95"]["land_out"]
    assert summary["outcomes_per_game"]["land_out"] == 0.02
    assert 0.0 < low < 0.02 < high < 0.2  # Wilson: (0.0035, 0.105); the normal one would start below 0


def test_counts_above_one_keep_the_normal_interval_clipped_at_zero():
    summary = summarize_matches(_results([3.0] + [0.0] * 9))
    low, high = summary["outcomes_ci95"]["land_out"]
    assert low == 0.0 and high > 0.3


def test_shares_per_game_stay_inside_0_1():
    summary = summarize_matches(_results([0.9, 1.0, 0.95, 0.7]))
    low, high = summary["outcomes_ci95"]["land_out"]
    assert 0.0 < low < 0.8875 < high == 1.0
