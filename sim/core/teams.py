"""Two-team tasks: how generic code gets the teams of a match without knowing the task.

A two-team env class returns a :class:`MatchTeams` from ``match_teams()``; ``evaluate.py
match=A,B`` / ``league=...`` and :mod:`training.matches` build every team through it:

    teams = type(env).match_teams()
    team = teams.build(env, TeamSpec.parse("scripted"), load)   # load: checkpoint path -> TrainedPolicy
    actions = team(env, obs, 0)                                  # [E, n, act_dim] for group team_a

A team is named on the command line as ``name`` or ``name:arg`` (a team the task builds by name,
e.g. a scripted baseline) or ``<checkpoint.pt>`` / ``<checkpoint.pt>@<arg>`` (a trained policy,
optionally with a task-defined argument). The env of a match keeps ``game_result [E]`` (1 team A
won, 0 lost, 0.5 neither; NaN before the first game) and ``final_counters`` name -> ``[E]`` (the
last finished game's event counts) across its auto-resets; :func:`training.matches.play_matches`
reads both.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from torch import Tensor

# team(env, obs, team_index) -> actions [E, n, act_dim] of its group (team_index 0: team_a, 1: team_b).
TeamPolicy = Callable[[Any, dict, int], Tensor]
GROUPS = ("team_a", "team_b")
_NAMED = re.compile(r"^([A-Za-z_][\w-]*)(?::(.*))?$")


class TrainedPolicy(Protocol):
    """What a loaded checkpoint offers (``training.checkpoint.LoadedPolicy``)."""

    actors: Mapping[str, Callable[[Tensor], Tensor]]  # group -> deterministic actor (obs entry -> action)
    task_cfg: Mapping[str, Any]  # the task config it was trained on (with "name")


PolicyLoader = Callable[[str], TrainedPolicy]


@dataclass(frozen=True)
class TeamSpec:
    """One team as written on the command line (see the module docstring)."""

    text: str
    name: str | None = None  # a named team ("hover", "scripted", "rulebased")
    checkpoint: str | None = None  # a checkpoint path
    arg: str | None = None  # after ":" (named) or "@" (checkpoint)

    @classmethod
    def parse(cls, text: str) -> TeamSpec:
        """``name[:arg]`` where the name is a word, else ``<path>[@arg]``.

        Raises:
            ValueError: empty text.
        """
        text = text.strip()
        if not text:
            raise ValueError("a team spec must not be empty")
        m = _NAMED.match(text)
        if m is not None:
            return cls(text, name=m.group(1), arg=m.group(2))
        path, sep, arg = text.partition("@")
        return cls(text, checkpoint=path, arg=arg if sep else None)


def flat_team(actor: Callable[[Tensor], Tensor], entry: str = "policy") -> TeamPolicy:
    """A flat policy (e.g. MAPPO self-play): ``actor(obs[group][entry]) -> [E, n, act_dim]``."""

    def team_policy(env: Any, obs: dict, team: int) -> Tensor:
        return actor(obs[GROUPS[team]][entry])

    return team_policy


class MatchTeams:
    """A two-team task's team builders; a task family subclasses it (named teams, checkpoint kinds).

    The base builds a checkpoint with one group's actor as a flat team and knows no named team.
    """

    def names(self) -> dict[str, str]:
        """Named teams this task builds, ``name`` (or ``name:<arg>``) -> what it is (for help and errors)."""
        return {}

    def match_task(self, task_cfg: Mapping[str, Any]) -> dict[str, Any]:
        """The task config of the match env on which a checkpoint trained on ``task_cfg`` plays
        (a higher level's checkpoint plays on the match it controls); default the same task."""
        return dict(task_cfg)

    def build(self, env: Any, spec: TeamSpec, load: PolicyLoader) -> TeamPolicy:
        """The team policy of ``spec`` on the match ``env``; ``load(path)`` reads a checkpoint.

        Raises:
            ValueError: a team this task cannot build (the message lists the ones it can).
        """
        if spec.checkpoint is not None and spec.arg is None:
            return flat_team(single_actor(load(spec.checkpoint), spec))
        raise ValueError(self.unknown(spec))

    def unknown(self, spec: TeamSpec) -> str:
        """The error message for a team this task does not know."""
        named = ", ".join(self.names()) or "none"
        return f"unknown team {spec.text!r}: named teams {named}, or a checkpoint path (.pt)"


def single_actor(loaded: TrainedPolicy, spec: TeamSpec) -> Callable[[Tensor], Tensor]:
    """The one group's actor of a team checkpoint.

    Raises:
        ValueError: the checkpoint holds actors of several groups (or none).
    """
    if len(loaded.actors) != 1:
        raise ValueError(f"{spec.text}: a team checkpoint has one group's actor, found {sorted(loaded.actors)}")
    return next(iter(loaded.actors.values()))
