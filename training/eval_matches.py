"""Two-team evaluations of ``evaluate.py``: a match (``match=A,B``: ``games`` games, win rate with its interval,
points, hits and outcomes per game) and a round-robin league (``league=A,B,C,...``: every pair, Elo ratings fitted
to all results; ``league_reuse=<report>`` takes the pairs an earlier league report played under the same task
config, games and seed). Teams come from the task (its env class's ``match_teams()``); games are played by
:mod:`training.matches`. The functions take the parsed ``evaluate.py`` arguments (its ``EvalArgs``) as ``args``
and return the JSON report.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from training.eval_sources import EvalError, load_trained_policy, log, make_eval_env, resolve_task_cfg
from training.eval_video import video_hook


def match_env_and_teams(names: list[str], args: Any, task_overrides: Mapping[str, Any]) -> tuple:
    """``(env, teams, task_cfg)``: the match env and one team policy per name, both from the task
    (its class's ``match_teams()``, :mod:`training.matches`). The env's task is ``task=``, else the
    one the first checkpoint team plays on (``MatchTeams.match_task`` of the task it was trained on)."""
    import sim
    from sim.core.teams import TeamSpec
    from training.matches import build_team

    cache: dict[str, Any] = {}

    def load(path: str) -> Any:  # each checkpoint is read once per evaluation
        if path not in cache:
            cache[path] = load_trained_policy(path, args.device)
        return cache[path]

    try:
        specs = [TeamSpec.parse(n) for n in names]
        checkpoints = [s.checkpoint for s in specs if s.checkpoint is not None]
        source_cfg = None
        if checkpoints:
            trained = dict(load(checkpoints[0]).task_cfg)
            teams_api = sim.task_class(str(trained.get("name"))).match_teams()
            if teams_api is None:
                raise EvalError(f"{checkpoints[0]}: task {trained.get('name')!r} is not a two-team task")
            source_cfg = teams_api.match_task(trained)
        elif args.task is None:
            raise EvalError("which task? give task=<name> (or a checkpoint team) with match= or league=")
        else:  # the task's defaults, as its matches are played (e.g. both teams as agent groups)
            teams_api = sim.task_class(args.task).match_teams()
            if teams_api is None:
                raise EvalError(f"task {args.task!r} is not a two-team task")
            source_cfg = teams_api.match_task({"name": args.task})
        task_cfg = resolve_task_cfg(source_cfg, args, task_overrides)
        env = make_eval_env(task_cfg, args, args.games)
        teams = [build_team(env, n, load) for n in names]
    except ValueError as err:
        raise EvalError(str(err)) from err
    return env, teams, task_cfg


def evaluate_league(args: Any, task_overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Round-robin: every pair of ``league`` plays ``games`` games; prints the pairwise table and the
    Elo ratings fitted to all results (``training.selfplay.fit_elo``, mean 1000)."""
    import numpy as np

    from training.matches import play_matches, summarize_matches
    from training.selfplay import fit_elo

    names = [t.strip() for t in args.league.split(",")]
    if len(names) < 2 or not all(names) or len(set(names)) != len(names):
        raise EvalError(f"league must name two or more distinct teams 'A,B,...', got {args.league!r}")
    env, teams, task_cfg = match_env_and_teams(names, args, task_overrides)
    reuse = reusable_pairs(args, env.task_name, task_cfg) if args.league_reuse else {}
    P = len(names)
    scores, games = np.full((P, P), np.nan), np.zeros((P, P), dtype=int)
    pairs = []
    start = time.perf_counter()
    for i in range(P):
        for j in range(i + 1, P):
            summary = reuse.get((names[i], names[j]))
            if summary is None:
                try:
                    summary = summarize_matches(play_matches(env, teams[i], teams[j], args.games, args.seed))
                except ValueError as err:
                    raise EvalError(str(err)) from err
            scores[i, j], scores[j, i] = summary["win_rate_a"], 1.0 - summary["win_rate_a"]
            games[i, j] = games[j, i] = summary["games"]
            pairs.append({"team_a": names[i], "team_b": names[j], **summary})
            how = "reused" if (names[i], names[j]) in reuse else "played"
            log(f"{names[i]} vs {names[j]}: {summary['win_rate_a']:.3f} ({summary['games']} games, {how})")
    played = sum((p["team_a"], p["team_b"]) not in reuse for p in pairs)
    log(f"{played} matches played ({len(pairs) - played} reused) in {time.perf_counter() - start:.1f} s")
    elo = fit_elo(scores, games)
    order = np.argsort(-elo)
    print(f"task {env.task_name} ({task_cfg.get('mode')}), {args.games} games per pair, seed {args.seed}")
    print("  Elo    team")
    for k in order:
        print(f"  {elo[k]:6.0f} {names[k]}")
    print("  score of row vs column: " + " | ".join(f"{n}" for n in names))
    for i in range(P):
        print(f"  {names[i]}: " + " ".join("  -  " if i == j else f"{scores[i, j]:.3f}" for j in range(P)))
    return {
        "teams": names,
        "elo": {names[k]: float(elo[k]) for k in range(P)},
        "games": args.games,
        "pairs": pairs,
        "seed": args.seed,
        "engine": args.engine,
        "task": env.task_name,
        "task_cfg": task_cfg,
    }


def reusable_pairs(args: Any, task: str, task_cfg: Mapping[str, Any]) -> dict[tuple[str, str], dict]:
    """``{(team_a, team_b): summary}`` of the earlier league report ``args.league_reuse``; it must have been
    played under this league's task, task config, games per pair, seed and engine, or its results would not be
    comparable (the games of a pair are reproducible: same seed, same env)."""
    path = Path(str(args.league_reuse))
    try:
        old = json.loads(path.read_text())
        old_pairs = old["pairs"]
        engine = old.get("engine", "covey")  # reports from before engine= in matches were covey's
        setting = {"task": old["task"], "games": old["games"], "seed": old["seed"], "engine": engine}
        old_cfg = old["task_cfg"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise EvalError(f"league_reuse={path}: not a league report ({err})") from err
    want = {"task": task, "games": args.games, "seed": args.seed, "engine": args.engine}
    for key, val in want.items():
        if setting[key] != val:
            raise EvalError(f"league_reuse={path}: played with {key}={setting[key]!r}, this league {key}={val!r}")
    now = json.loads(json.dumps(task_cfg, default=str))  # as the report stores it
    differ = sorted(k for k in set(now) | set(old_cfg) if now.get(k) != old_cfg.get(k))
    if differ:
        raise EvalError(f"league_reuse={path}: its task config differs from this league's in {', '.join(differ)}")
    return {(p["team_a"], p["team_b"]): p for p in old_pairs}


def evaluate_match(args: Any, task_overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Play ``games`` games between the two teams of ``match``; print the table; returns the report."""
    from training.matches import play_matches, summarize_matches

    names = [t.strip() for t in args.match.split(",")]
    if len(names) != 2 or not all(names):
        raise EvalError(f"match must name two teams 'A,B', got {args.match!r}")
    env, teams, task_cfg = match_env_and_teams(names, args, task_overrides)
    on_step, finish = video_hook(env, args) if args.video else (None, None)
    start = time.perf_counter()
    try:
        summary = summarize_matches(play_matches(env, teams[0], teams[1], args.games, args.seed, on_step))
    except ValueError as err:
        raise EvalError(str(err)) from err
    if finish is not None:
        log(finish())  # the first game of env 0, until it ended
    log(f"{args.games} games in {time.perf_counter() - start:.1f} s")
    lo, hi = summary["win_rate_ci95"]
    mode = f" ({task_cfg['mode']})" if task_cfg.get("mode") is not None else ""  # a task with several modes
    engine = f", engine {args.engine}" if args.engine != "covey" else ""
    print(f"task {env.task_name}{mode}, {names[0]} (team A) vs {names[1]} (team B), seed {args.seed}{engine}")
    record = f"{summary['wins_a']} W / {summary['draws']} D / {summary['losses_a']} L"
    print(f"  win rate A   {summary['win_rate_a']:.3f}  [{lo:.3f}, {hi:.3f}]  ({record})")
    rallies_counted = math.isfinite(summary["hits_per_rally"])  # only a task that counts rallies has the ratio
    hits = f"   hits/rally {summary['hits_per_rally']:.2f}" if rallies_counted else ""
    print(f"  points/game  {summary['points_per_game']:.2f}{hits}")
    if "rally_win_rate_a" in summary:
        rallies = summary["rallies_per_game"] * summary["games"]
        line = f"  rallies A    {summary['rally_win_rate_a']:.3f} of {rallies:.0f}"
        if "serve_win_rate_a" in summary:
            line += (
                f"   on its serve {summary['serve_win_rate_a']:.3f} ({summary['serve_rallies_a']:.0f})"
                f"   receiving {summary['receive_win_rate_a']:.3f} ({summary['receive_rallies_a']:.0f})"
            )
        print(line)
    ci = summary.get("outcomes_ci95", {})
    print(
        "  outcomes/game "
        + ", ".join(
            f"{k} {v:.2f}" + (f" [{ci[k][0]:.2f}, {ci[k][1]:.2f}]" if k in ci else "")
            for k, v in summary["outcomes_per_game"].items()
            if v > 0
        )
    )
    return {
        **summary,
        "team_a": names[0],
        "team_b": names[1],
        "seed": args.seed,
        "engine": args.engine,
        "task": env.task_name,
        "task_cfg": task_cfg,
    }
