"""Two-team matches (drone_volleyball now, robot soccer later): play games, report win rates.

    results = play_matches(env, flat_team(actor), scripted_team(env), games=200, seed=0)
    summary = summarize_matches(results)     # {"win_rate_a": ..., "win_rate_ci95": [lo, hi], ...}

A *team policy* is ``team(env, obs, team_index) -> actions [E, n, act_dim]`` for its group
(``team_a`` = 0, ``team_b`` = 1). It may set its own drones' skill commands first (hierarchical
teams) and read the refreshed observation with ``env.observe()``. Observations are in each team's
own frame, so any team policy plays either side.

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
from torch import Tensor, nn

from training.evaluation import round_seed, wilson_ci95

GROUPS = ("team_a", "team_b")
TeamPolicy = Callable[[object, dict, int], Tensor]


@dataclass
class MatchResults:
    """Per-game values over ``games`` games: ``result [G]`` (team A's score) and ``counters`` name -> ``[G]``."""

    result: Tensor
    counters: dict[str, Tensor]

    @property
    def games(self) -> int:
        return int(self.result.numel())


def hover_team(env, obs: dict, team: int) -> Tensor:
    """Every drone hovers in place (the trivial baseline)."""
    return env.hover_actions()[GROUPS[team]]


def flat_team(actor: nn.Module, entry: str = "policy") -> TeamPolicy:
    """A flat policy (e.g. MAPPO self-play): ``actor(obs[group][entry]) -> [E, n, act_dim]``."""

    def team_policy(env, obs: dict, team: int) -> Tensor:
        return actor(obs[GROUPS[team]][entry])

    return team_policy


SkillActors = dict[str, nn.Module] | nn.Module | None


def skill_layer(env, skill_actors: SkillActors = None) -> Callable[[dict, int], Tensor]:
    """The skills of a hierarchical team: ``act(obs, team) -> [E, n, 4]`` for the team's drones, from
    the skill commands already set on ``env``. ``skill_actors`` is one skill-conditioned actor for
    every skill (HCSP stage 3, ``drone_volleyball_coplay``), or skill name -> actor on the ``skill``
    observation (e.g. trained in the solo skill modes): a drone whose commanded skill has one flies
    it (``policies.SkillDispatcher``), the others fly the scripted skill."""
    from policies import SkillDispatcher
    from sim.tasks.drone_volleyball import SKILLS
    from sim.tasks.drone_volleyball.scripted import ScriptedSkills

    if isinstance(skill_actors, nn.Module):
        actor = skill_actors
        return lambda obs, team: actor(env.skill_observation()[:, team * env.n : (team + 1) * env.n])
    skill_actors = dict(skill_actors or {})
    scripted = ScriptedSkills(env)
    if not skill_actors:
        return lambda obs, team: scripted(obs)[GROUPS[team]]
    entry = env.spec.groups["team_a"].observations["skill"]
    sl = entry.slices()["skill"]
    low = SkillDispatcher(skill_actors, SKILLS, sl, env.spec.groups["team_a"].action_dim)
    learned = torch.tensor([name in skill_actors for name in SKILLS], dtype=torch.float32, device=env.device)

    def act(obs: dict, team: int) -> Tensor:
        group = GROUPS[team]
        skill_obs = env.observe()[group]["skill"]
        use = (skill_obs[..., sl] * learned).sum(-1, keepdim=True)  # 1 where the drone's skill is learned
        return use * low(skill_obs) + (1.0 - use) * scripted(obs)[group]

    return act


def rule_based_team(env, skill_actors: SkillActors = None) -> TeamPolicy:
    """The rule-based hierarchical team: the scripted strategy (``RuleBasedStrategy``) commands each
    drone's skill and target; :func:`skill_layer` flies them (learned skills where given)."""
    from sim.tasks.drone_volleyball.scripted import RuleBasedStrategy

    strategy, skills = RuleBasedStrategy(env), skill_layer(env, skill_actors)

    def team_policy(env_, obs: dict, team: int) -> Tensor:
        n = env.n
        skill_id, target = strategy(obs)
        drones = slice(team * n, (team + 1) * n)
        env.set_skill_commands(skill_id[:, drones], target[:, drones], team_frame=False, team=team)
        return skills(obs, team)

    return team_policy


def strategy_team(env, actor: nn.Module, decision_steps: int, skill_actors: SkillActors = None) -> TeamPolicy:
    """HCSP's hierarchical team on a match env: a strategy ``actor`` trained on
    ``drone_volleyball_strategy`` (its team observation -> discrete choices) decides every
    ``decision_steps`` control steps of each game (on the match's episode clock), the rule layer turns
    the choices into skill commands, and :func:`skill_layer` flies them: the scripted skills it was
    trained over, or learned ones (``skill_actors``)."""
    from sim.core.spec import choices_from_actions
    from sim.tasks.drone_volleyball.scripted import RuleBasedStrategy
    from sim.tasks.drone_volleyball.strategy import (
        choice_sizes,
        default_choices,
        plan_from_choices,
        strategy_observation,
    )

    layer, skills = RuleBasedStrategy(env), skill_layer(env, skill_actors)
    nvec = choice_sizes(env.n)
    choices = default_choices(env)  # [E, 2, 4]; only this team's row is used for its drones

    def team_policy(env_, obs: dict, team: int) -> Tensor:
        nonlocal choices
        due = env.episode_step % decision_steps == 0  # [E]
        if bool(due.any()):
            action = actor(strategy_observation(env, layer.interception_point())[:, team : team + 1])[:, 0]
            new = choices_from_actions(action, nvec)
            choices = choices.clone()
            choices[:, team] = torch.where(due.unsqueeze(-1), new, choices[:, team])
        skill_id, target = layer(plan=plan_from_choices(env, choices))
        drones = slice(team * env.n, (team + 1) * env.n)
        env.set_skill_commands(skill_id[:, drones], target[:, drones], team_frame=False, team=team)
        return skills(obs, team)

    return team_policy


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
        obs = env.reset(seed=round_seed(seed, r))
        finished = torch.zeros(E, dtype=torch.bool, device=env.device)
        res = torch.full((E,), 0.5, device=env.device)
        cnt = {k: torch.zeros(E, device=env.device) for k in env.final_counters}
        for t in range(env.max_episode_steps):
            if on_step is not None and r == 0:
                on_step(t, ~finished)
            actions = {"team_a": team_a(env, obs, 0), "team_b": team_b(env, obs, 1)}
            obs, _, terminated, truncated, _ = env.step(actions)
            new = (terminated | truncated) & ~finished
            res = torch.where(new, env.game_result, res)
            for k in cnt:
                cnt[k] = torch.where(new, env.final_counters[k], cnt[k])
            finished |= new
            if bool(finished.all()):
                break
        take = min(E, games - r * E)
        results.append(res[:take].cpu())
        for k, v in cnt.items():
            counters.setdefault(k, []).append(v[:take].cpu())
    return MatchResults(torch.cat(results), {k: torch.cat(v) for k, v in counters.items()})


def summarize_matches(res: MatchResults) -> dict:
    """Win rate of team A (a draw counts half) with a 95% Wilson interval, points per game, hits per
    rally, and faults per game by kind."""
    g = res.games
    wins, draws = int((res.result == 1.0).sum()), int((res.result == 0.5).sum())
    score = wins + 0.5 * draws
    # Wilson on the score rounded to whole games (a draw is half a win): off by at most half a game.
    _, lo, hi = wilson_ci95(int(round(score)), g)
    c = res.counters
    rallies = float(c["rallies"].sum()) if "rallies" in c else float("nan")
    hits = float((c["hits_a"] + c["hits_b"]).sum())
    faults = {
        k: float(v.sum()) / g for k, v in c.items() if k not in ("hits_a", "hits_b", "points_a", "points_b", "rallies")
    }
    return {
        "win_rate_a": score / g,
        "win_rate_ci95": [lo, hi],
        "games": g,
        "wins_a": wins,
        "draws": draws,
        "losses_a": g - wins - draws,
        "points_per_game": float((c["points_a"] + c["points_b"]).sum()) / g,
        "points_a_per_game": float(c["points_a"].sum()) / g,
        "hits_per_rally": hits / rallies if rallies > 0 else float("nan"),
        "outcomes_per_game": faults,
    }
