"""Match teams through the task (sim.core.teams): the team-spec grammar, the generic builder, and
drone_volleyball's teams built from specs with an in-memory checkpoint loader."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

import sim
from sim.core.teams import MatchTeams, TeamSpec
from training.matches import build_team, match_teams, play_matches


@pytest.mark.parametrize(
    ("text", "name", "checkpoint", "arg"),
    [
        ("hover", "hover", None, None),
        ("rulebased:runs/x/skills.pt", "rulebased", None, "runs/x/skills.pt"),
        ("strategy.pt", None, "strategy.pt", None),
        ("runs/a/strategy.pt@runs/b", None, "runs/a/strategy.pt", "runs/b"),
        ("strategy.pt@.", None, "strategy.pt", "."),
    ],
)
def test_team_specs_are_names_or_checkpoints(text: str, name: str | None, checkpoint: str | None, arg: str | None):
    spec = TeamSpec.parse(text)
    assert (spec.name, spec.checkpoint, spec.arg) == (name, checkpoint, arg)
    with pytest.raises(ValueError):
        TeamSpec.parse("  ")


@dataclass
class Loaded:
    """What a checkpoint loader returns (training.checkpoint.LoadedPolicy's fields the teams read)."""

    actors: dict[str, Any]
    task_cfg: dict[str, Any] = field(default_factory=dict)


def test_the_generic_builder_plays_a_one_actor_checkpoint_as_a_flat_team():
    env = sim.make("drone_volleyball", num_envs=2, mode="1v1", seed=0)
    obs = env.reset(seed=0)
    seen = []

    def actor(x):
        seen.append(tuple(x.shape))
        return torch.zeros(*x.shape[:-1], 4)

    team = MatchTeams().build(env, TeamSpec.parse("a.pt"), lambda path: Loaded({"team_a": actor}))
    assert team(env, obs, 1).shape == (2, 1, 4) and seen == [tuple(obs["team_b"]["policy"].shape)]
    with pytest.raises(ValueError, match="one group's actor"):
        MatchTeams().build(env, TeamSpec.parse("a.pt"), lambda path: Loaded({"a": actor, "b": actor}))
    with pytest.raises(ValueError, match="unknown team 'scripted'"):
        MatchTeams().build(env, TeamSpec.parse("scripted"), lambda path: Loaded({}))


def test_volleyball_builds_its_named_teams_and_strategy_checkpoints():
    env = sim.make("drone_volleyball", num_envs=2, mode="1v1", seed=0, episode_length_s=0.5)
    assert type(match_teams(env)).__name__ == "VolleyballTeams"
    strategy_cfg = {"name": "drone_volleyball_strategy", "strategy": {"decision_steps": 5}}
    calls = []

    def strategy_actor(obs):  # the team's strategy observation [E, 1, o] -> the rule-based choice
        calls.append(tuple(obs.shape))
        return torch.tensor([[[-1.0, -1.0, 0.0, -1.0]]]).expand(obs.shape[0], 1, 4)

    def load(path: str) -> Loaded:
        return Loaded({"team_a": strategy_actor}, strategy_cfg)

    teams = [build_team(env, "scripted", load), build_team(env, "hover", load)]
    res = play_matches(env, teams[0], teams[1], games=2, seed=0)
    assert res.games == 2
    strategy = build_team(env, "strategy.pt", load)
    play_matches(env, strategy, teams[1], games=2, seed=0)
    assert calls and calls[0][1] == 1  # decided on its team's strategy observation
    # A strategy checkpoint plays on the match it controls; other checkpoints on their own task.
    assert match_teams(env).match_task(strategy_cfg)["name"] == "drone_volleyball"
    assert match_teams(env).match_task({"name": "drone_volleyball", "mode": "1v1"})["mode"] == "1v1"
    with pytest.raises(ValueError, match="goes with a strategy checkpoint"):
        build_team(env, "flat.pt@skills", lambda path: Loaded({"team_a": strategy_actor}, {"name": "drone_volleyball"}))
    with pytest.raises(ValueError, match="no skill checkpoints"):
        build_team(env, "rulebased:/nonexistent_folder", load)


def test_a_one_team_task_has_no_match_teams():
    env = sim.make("point_reach", num_envs=1)
    with pytest.raises(ValueError, match="not a two-team task"):
        match_teams(env)


def test_a_game_summary_splits_the_rallies_by_who_served() -> None:
    """Issue 21: games to N points are reported by rallies as well as by games, split by serve and receive (a
    rally without a point counts half). One game, by hand: team A served 3 rallies and won 2; team B served 2,
    A won 1 of them by side-out and one timed out."""
    from training.matches import MatchResults, summarize_matches

    counts = dict(points_a=3, points_b=1, rallies=5, timeout=1, hits_a=4, hits_b=2)
    counts.update(serves_a=3, serves_b=2, serve_points_a=2, serve_points_b=0)
    s = summarize_matches(MatchResults(torch.tensor([1.0]), {k: torch.tensor([float(v)]) for k, v in counts.items()}))
    assert s["rally_win_rate_a"] == pytest.approx((3 + 0.5) / 5)
    assert (s["serve_rallies_a"], s["serve_win_rate_a"]) == (3, pytest.approx(2 / 3))
    assert (s["receive_rallies_a"], s["receive_win_rate_a"]) == (2, pytest.approx((1 + 0.5) / 2))
    assert s["outcomes_per_game"] == {"timeout": 1.0}  # the tallies are not faults
    assert (s["wins_a"], s["draws"], s["losses_a"]) == (1, 0, 0)  # the rally split leaves the game record alone


def test_games_to_points_against_hovering_drones_lose_every_rally() -> None:
    """Hovering drones never serve (the dropped ball is their fault) nor return a serve: in games to 2 points
    they lose every rally on either side of the serve, and the split covers every rally."""
    from training.matches import summarize_matches

    env = sim.make("drone_volleyball", num_envs=8, seed=0, episode_length_s=40.0, rules={"points_to_win": 2})

    def load(path):
        raise AssertionError(f"no checkpoint is read here ({path})")

    s = summarize_matches(play_matches(env, build_team(env, "hover", load), build_team(env, "scripted", load), 8))
    assert s["win_rate_a"] == 0.0 and s["points_per_game"] == 2.0 and s["rally_win_rate_a"] == 0.0
    assert s["serve_rallies_a"] >= 1 and s["receive_rallies_a"] >= 8  # B serves at least its two points a game
    assert s["serve_rallies_a"] + s["receive_rallies_a"] == s["rallies_per_game"] * s["games"] == 16
    assert s["serve_win_rate_a"] == 0.0 and s["receive_win_rate_a"] == 0.0
