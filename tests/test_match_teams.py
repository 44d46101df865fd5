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
