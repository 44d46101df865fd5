"""Two-team matches (any task whose env class has ``match_teams()``): play games, report win rates.

    team_a = build_team(env, "runs/x/best.pt", load)    # or a team the task names, e.g. "scripted"
    results = play_matches(env, team_a, build_team(env, "scripted", load), games=200, seed=0)
    summary = summarize_matches(results)     # {"win_rate_a": ..., "win_rate_ci95": [lo, hi], ...}

A *team policy* is ``team(env, obs, team_index) -> actions [E, n, act_dim]`` for its group
(``team_a`` = 0, ``team_b`` = 1). It may set its own agents' commands first (hierarchical
teams) and read the refreshed observation with ``env.observe()``. Observations are in each team's
own frame, so any team policy plays either side. The task builds its teams
(:class:`sim.core.teams.MatchTeams`); this module only plays them.

Games: all ``num_envs`` envs reset together with one seed per round (``training.evaluation.round_seed``)
and step until every env finished its first game; later games in the same round are ignored, so
every game starts from the same distribution. A game's result comes from ``env.game_result``
(1 team A won, 0 lost, 0.5 neither: a timeout or a game cut by the time limit) and its event counts
from ``env.final_counters``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from sim.core.teams import GROUPS, MatchTeams, PolicyLoader, TeamPolicy, TeamSpec, flat_team
from training.evaluation import mean_ci95, round_seed, wilson_ci95
from training.rollout import rollout

__all__ = [
    "GROUPS",
    "MatchResults",
    "TeamPolicy",
    "build_team",
    "flat_team",
    "match_teams",
    "play_matches",
    "summarize_matches",
]


@dataclass
class MatchResults:
    """Per-game values over ``games`` games: ``result [G]`` (team A's score) and ``counters`` name -> ``[G]``."""

    result: Tensor
    counters: dict[str, Tensor]

    @property
    def games(self) -> int:
        return int(self.result.numel())


def match_teams(env) -> MatchTeams:
    """The team builders of ``env``'s task (its class's ``match_teams()``).

    Raises:
        ValueError: the task is not a two-team task.
    """
    teams = type(env).match_teams()
    if teams is None:
        raise ValueError(f"task {env.task_name!r} is not a two-team task (its env class has no match_teams())")
    return teams


def build_team(env, spec: str, load: PolicyLoader) -> TeamPolicy:
    """The team policy named by ``spec`` (``sim.core.teams.TeamSpec``: a task-named team such as a
    scripted baseline, or ``<checkpoint.pt>[@<arg>]``) on the match ``env``; ``load(path)`` reads a
    checkpoint (``training.checkpoint.load_policy``).

    Raises:
        ValueError: a team the task does not know, or a checkpoint that cannot play it.
    """
    return match_teams(env).build(env, TeamSpec.parse(spec), load)


@torch.inference_mode()
def play_matches(
    env,
    team_a: TeamPolicy,
    team_b: TeamPolicy,
    games: int,
    seed: int = 0,
    on_step: Callable[[int, Tensor], None] | None = None,
) -> MatchResults:
    """Play ``games`` games of ``team_a`` (group team_a) against ``team_b`` on ``env`` (a match mode).

    ``on_step(t, unfinished [E] bool)`` runs before every step of the first round (e.g. to draw a video)."""
    if tuple(env.spec.groups) != GROUPS:
        raise ValueError(f"matches need groups {GROUPS}, the env has {tuple(env.spec.groups)}")
    if games < 1:
        raise ValueError("games must be >= 1")
    E = env.num_envs
    results, counters = [], {}
    for r in range(math.ceil(games / E)):
        res, cnt = _play_round(env, team_a, team_b, round_seed(seed, r), on_step if r == 0 else None)
        take = min(E, games - r * E)
        results.append(res[:take].cpu())
        for k, v in cnt.items():
            counters.setdefault(k, []).append(v[:take].cpu())
    return MatchResults(torch.cat(results), {k: torch.cat(v) for k, v in counters.items()})


def _play_round(
    env, team_a: TeamPolicy, team_b: TeamPolicy, seed: int, on_step: Callable[[int, Tensor], None] | None
) -> tuple[Tensor, dict[str, Tensor]]:
    """Every env from reset until each finished its first game: its result ``[E]`` and counters name -> ``[E]``."""
    E = env.num_envs

    def act(obs: dict) -> dict[str, Tensor]:
        return {"team_a": team_a(env, obs, 0), "team_b": team_b(env, obs, 1)}

    def before_step(t: int, obs: dict) -> None:
        if on_step is not None:
            on_step(t, ~finished)

    steps = rollout(env, act, env.max_episode_steps, seed=seed, before_step=before_step)
    finished = torch.zeros(E, dtype=torch.bool, device=env.device)
    res = torch.full((E,), 0.5, device=env.device)
    cnt = {k: torch.zeros(E, device=env.device) for k in env.final_counters}
    for s in steps:
        new = (s.terminated | s.truncated) & ~finished
        res = torch.where(new, env.game_result, res)
        for k in cnt:
            cnt[k] = torch.where(new, env.final_counters[k], cnt[k])
        finished |= new
        if bool(finished.all()):
            break
    return res, cnt


# Counters that are neither outcomes nor faults: the summary turns them into rates.
_TALLIES = (
    "hits_a",
    "hits_b",
    "points_a",
    "points_b",
    "rallies",
    "serves_a",
    "serves_b",
    "serve_points_a",
    "serve_points_b",
)


def summarize_matches(res: MatchResults) -> dict:
    """Win rate of team A (a draw counts half) with a 95% Wilson interval, points per game, hits per
    rally, and faults per game by kind. Where the env counts rallies, also team A's share of the
    rallies (a rally without a point counts half) beside its game win rate; where it counts serves
    (``serves_a``, ``serve_points_a``, ...), team A's rally win rate on its own serve and receiving."""
    g = res.games
    wins, draws = int((res.result == 1.0).sum()), int((res.result == 0.5).sum())
    score = wins + 0.5 * draws
    # Wilson on the score rounded to whole games (a draw is half a win): off by at most half a game.
    _, lo, hi = wilson_ci95(int(round(score)), g)
    c = res.counters
    total = {k: float(v.sum()) for k, v in c.items()}  # over all games
    rallies = total.get("rallies", float("nan"))
    hits = total["hits_a"] + total["hits_b"]
    faults = {k: v / g for k, v in total.items() if k not in _TALLIES}
    rates = {}
    if rallies > 0:
        pa, pb = total["points_a"], total["points_b"]
        rates["rally_win_rate_a"] = (pa + 0.5 * (rallies - pa - pb)) / rallies
        rates["rallies_per_game"] = rallies / g
    if "serves_a" in total:
        for side, server, other in (("serve", "a", "b"), ("receive", "b", "a")):
            served = total[f"serves_{server}"]
            # Points in the rallies `server` served: its own on serve, the other team's by side-out.
            won_by_server = total[f"serve_points_{server}"]
            won_by_other = total[f"points_{other}"] - total[f"serve_points_{other}"]
            won_a = won_by_server if server == "a" else won_by_other
            no_point = served - won_by_server - won_by_other
            rates[f"{side}_rallies_a"] = served
            rates[f"{side}_win_rate_a"] = (won_a + 0.5 * no_point) / served if served > 0 else float("nan")
    return {
        "win_rate_a": score / g,
        "win_rate_ci95": [lo, hi],
        "games": g,
        "wins_a": wins,
        "draws": draws,
        "losses_a": g - wins - draws,
        "points_per_game": (total["points_a"] + total["points_b"]) / g,
        "points_a_per_game": total["points_a"] / g,
        "hits_per_rally": hits / rallies if rallies > 0 else float("nan"),
        **rates,
        "outcomes_per_game": faults,
        "outcomes_ci95": {k: _mean_ci95(v) for k, v in c.items() if k in faults},
    }


def _mean_ci95(x: Tensor) -> list[float]:
    """95% interval of the mean of per-game values ``x [G]`` (counts or shares, never negative): Wilson's when
    every game has 0 or 1 (a rate), else the normal approximation kept inside what the values can average
    to: at least 0, and at most 1 when every value is a share in [0, 1]."""
    x = x.double()
    if bool(((x == 0) | (x == 1)).all()):
        _, lo, hi = wilson_ci95(int(x.sum()), x.numel())
        return [lo, hi]
    _, lo, hi = mean_ci95(x)
    if lo is None:
        return [float("nan"), float("nan")]
    top = 1.0 if bool((x <= 1).all()) else float("inf")
    return [max(0.0, lo), min(top, hi)]
