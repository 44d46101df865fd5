"""The teams of robot_soccer matches (``evaluate.py task=robot_soccer match=A,B``, :mod:`training.matches`).

Named teams: ``chaser``, ``attacker``, ``idle`` (:mod:`.scripted`, acting on the ``state`` entry; with the humanoid
only ``idle``, its standing pose held), ``random``; or a
checkpoint ``<path.pt>`` trained on robot_soccer (a state expert or a vision agent: its actor reads the entries it
was trained on; a recurrent actor's memory restarts with each game).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from sim.core.teams import GROUPS, MatchTeams, PolicyLoader, TeamPolicy, TeamSpec, single_actor
from sim.tasks.robot_soccer.scripted import SCRIPTED


def scripted_team(name: str) -> TeamPolicy:
    """A :mod:`.scripted` player for every agent of the team."""
    player = SCRIPTED[name]
    return lambda env, obs, team: player(obs[GROUPS[team]]["state"])


def idle_humanoid_team(env: Any, obs: dict, team: int) -> torch.Tensor:
    """Humanoids holding their standing pose (zero joint offsets)."""
    g = env.spec.groups[GROUPS[team]]
    return torch.zeros(env.num_envs, g.n_agents, g.action_dim, device=env.device)


def random_team(env: Any, obs: dict, team: int) -> torch.Tensor:
    g = env.spec.groups[GROUPS[team]]
    return torch.rand(env.num_envs, g.n_agents, g.action_dim, generator=env.rng, device=env.device) * 2 - 1


def checkpoint_team(actor: Any) -> TeamPolicy:
    """A trained actor (feed-forward or recurrent) reading its group's observation dict."""
    reset = getattr(actor, "reset", None)

    def team_policy(env: Any, obs: dict, team: int) -> torch.Tensor:
        if reset is not None:  # a new game (auto-reset or first step) starts the memory from zeros
            reset(env.episode_step == 0)
        return actor(obs[GROUPS[team]])

    return team_policy


class SoccerTeams(MatchTeams):
    """See the module docstring."""

    def names(self) -> dict[str, str]:
        return {
            "chaser": "scripted: turn to the ball and run into it",
            "attacker": "scripted: get behind the ball, push it at the goal",
            "idle": "robots stand still",
            "random": "uniform random actions",
        }

    def match_task(self, task_cfg: Mapping[str, Any]) -> dict[str, Any]:
        """Matches put both teams in as agent groups (no scripted opponent inside the env)."""
        return {**dict(task_cfg), "opponent": "none"}

    def build(self, env: Any, spec: TeamSpec, load: PolicyLoader) -> TeamPolicy:
        if spec.name in SCRIPTED and spec.arg is None and getattr(env, "humanoid", False):
            if spec.name != "idle":  # the scripted players drive the wheeled robot's velocity servos
                raise ValueError(f"team {spec.name!r} drives the wheeled robot; humanoid matches take idle, random "
                                 "or a checkpoint")  # fmt: skip
            return idle_humanoid_team
        if spec.name in SCRIPTED and spec.arg is None:
            return scripted_team(spec.name)
        if spec.name == "random" and spec.arg is None:
            return random_team
        if spec.checkpoint is None or spec.arg is not None:
            raise ValueError(self.unknown(spec))
        return checkpoint_team(single_actor(load(spec.checkpoint), spec))
