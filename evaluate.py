"""Evaluate a policy: task metrics over N episodes with 95% CIs, beside a zero-action baseline.

    python evaluate.py checkpoint=runs/cable_load/<time>/checkpoints/best.pt episodes=100
    python evaluate.py onnx=policy.onnx episodes=100 video=runs/eval.gif
    python evaluate.py policy=zero task=cable_load episodes=20 task.num_mavs=4
    python evaluate.py checkpoint=<path> eval_mode=true task.fault.enabled=true report=report.json
    python evaluate.py checkpoint=assets/policies/cable_load/policy.pt scenario=mav_loss task.num_mavs=4
    python evaluate.py task=drone_volleyball match=scripted,hover games=200       # two-team matches
    python evaluate.py task=drone_volleyball league=hover,scripted,<a.pt> games=200   # round-robin + Elo
    python evaluate.py checkpoint=<skills.pt> commander=<strategy.pt> expert=true eval_mode=true   # HCSP skills

Arguments are ``key=value`` pairs parsed as train.py's (hydra's override grammar: ``true``,
``1e-3``, ``[1, 2]``, ``null``; a text argument such as a path is taken verbatim);
``task.<field>=<value>`` overrides a field of the task config and ``success.<metric>=<bound>`` a
success threshold. An unknown key, a value of the wrong type or out of range is an error naming it.

The task config is the one the policy was trained with (checkpoint, else the ONNX metadata
``covey`` -> ``task_cfg``, else the task config's defaults), noise and randomisation as trained;
``eval_mode=true`` applies the task's ``evaluation_overrides()`` (both off). ``scenario=<name>`` then
applies one of the task's named evaluation cases (its env class's ``scenarios()``: config overrides and
success thresholds). Then ``task.*``. ``commander=<strategy.pt>`` commands both teams of a hierarchy's skills level
(e.g. drone_volleyball_coplay) by a strategy checkpoint, for the policy and the expert alike; outcomes the task
counts per attempt (a skill's touches) come pooled over attempts (``<x>_success_pooled``, Wilson interval).

Output: a table (policy and baseline side by side), and as the last line one JSON object: every
metric with ``<name>_ci95`` (cable_load: ``pos_err_m``, ``ori_err_deg``, ``mean_tension_n``,
``success_rate``, ``crash_rate``), ``termination`` rates by reason, ``episodes``, ``seed``,
``eval_mode``, ``baseline`` (the same keys for zero actions, or null), ``prior_baseline`` (the same
keys for the task's linear action prior alone, when the task defines one, else null), ``checkpoint``, ``onnx``,
``source`` (torch | onnx | zero) and the task config. Same arguments -> same JSON (one device).
How episodes are measured: :mod:`training.evaluation`.

Matches (``match=<team A>,<team B>``, two-team tasks): a team is a name the task knows
(``name`` or ``name:<arg>``, e.g. a scripted baseline) or a checkpoint ``<path.pt>`` (a flat
policy, e.g. from ``algo=selfplay``), optionally ``<path.pt>@<arg>``; the task builds each team
(its env class's ``match_teams()``: drone_volleyball's ``hover``, ``scripted``,
``rulebased:<skills>`` and ``<strategy.pt>@<skills>`` are in ``sim/tasks/drone_volleyball/teams.py``).
The match env is ``task=``'s, else the one the first checkpoint team plays on (a higher level's
checkpoint, e.g. an HCSP strategy, plays on the match it controls).
``games`` games; the table and the last JSON line give ``win_rate_a`` (a draw counts half),
``win_rate_ci95``, ``games``, points per game, hits per rally and outcomes (faults by kind) per
game, and where the task counts rallies (games to N points) team A's share of the rallies beside its
game win rate, split by who served; ``video=<file.gif|mp4>`` draws the first game of env 0. How games are played:
:mod:`training.matches`. ``league=A,B,C,...`` plays every pair and fits Elo ratings to all results
(its JSON has ``elo`` and ``pairs``); ``league_reuse=<earlier league report>`` takes the pairs that report
played under the same task config, games and seed instead of replaying them (a pair's games are
reproducible), so a team joins a league for the cost of its own pairs.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_MAX_ENVS = 1024


class EvalError(Exception):
    """A problem with the user's input (arguments, files); printed as ``evaluate.py: error: ...``, exit code 2."""


@dataclass(frozen=True)
class EvalArgs:
    """Every ``key=value`` argument of ``evaluate.py`` (besides ``task.*`` and ``success.*``)."""

    checkpoint: str | None = field(default=None, metadata={"help": "covey checkpoint (.pt) to evaluate"})
    onnx: str | None = field(default=None, metadata={"help": "exported ONNX actor, run with onnxruntime"})
    policy: str = field(default="auto", metadata={"help": "auto (checkpoint or onnx) | zero (the baseline alone)"})
    expert: bool = field(
        default=False, metadata={"help": "also run the task's scripted expert (env.expert_policy()) as a baseline"}
    )
    commander: str | None = field(
        default=None,
        metadata={
            "help": "a hierarchy's skills level (an env with set_strategy, e.g. HCSP's skills in matches): both teams "
            "commanded by this strategy checkpoint instead of the task's rule-based commands (policy and expert alike)"
        },
    )
    task: str | None = field(
        default=None, metadata={"help": "task name when neither checkpoint nor ONNX metadata gives one"}
    )
    episodes: int = field(default=100, metadata={"help": "episodes per policy"})
    seed: int = field(default=0, metadata={"help": "env seed (round r of num_envs episodes uses a derived seed)"})
    device: str = field(default="cpu", metadata={"help": "torch device of the envs and the actor (cpu, cuda, auto)"})
    num_envs: int | None = field(
        default=None, metadata={"help": f"parallel envs (default min(episodes, {DEFAULT_MAX_ENVS}))"}
    )
    eval_mode: bool = field(default=False, metadata={"help": "apply the task's evaluation_overrides()"})
    scenario: str | None = field(
        default=None, metadata={"help": "a named evaluation case of the task (its env class's scenarios())"}
    )
    window_s: float = field(
        default=0.0,
        metadata={"help": "metrics average over the last window_s of an episode; 0 = the task's evaluation_window_s"},
    )
    baseline: bool = field(default=True, metadata={"help": "also evaluate zero actions with the same seed"})
    video: str | None = field(default=None, metadata={"help": "write env 0 of the policy run (.gif or .mp4)"})
    video_fps: float = field(default=25.0, metadata={"help": "video frame rate (every k-th control step)"})
    video_width: int = field(default=640, metadata={"help": "video width (px)"})
    video_height: int = field(default=480, metadata={"help": "video height (px)"})
    report: str | None = field(default=None, metadata={"help": "also write the JSON report to this file"})
    compile: bool = field(default=False, metadata={"help": "torch.compile the env's physics loop"})
    match: str | None = field(
        default=None,
        metadata={
            "help": "two-team match 'A,B': hover | scripted | rulebased:<skills> | <checkpoint.pt>[@<skills>] "
            "(skills: a folder of solo skill checkpoints or a stage-3 skills.pt)"
        },
    )
    games: int = field(default=200, metadata={"help": "games of a match (league: of every pair)"})
    league: str | None = field(
        default=None, metadata={"help": "round-robin 'A,B,C,...' (teams as in match): pairwise win rates and Elo"}
    )
    league_reuse: str | None = field(
        default=None,
        metadata={
            "help": "a league report (report=) played with the same task, games and seed: its pairs are taken "
            "as they are instead of replayed (a league grows by its new teams' pairs)"
        },
    )

    def __post_init__(self) -> None:
        if self.policy not in ("auto", "zero"):
            raise ValueError(f"policy must be auto or zero, got {self.policy!r}")
        for key in ("episodes", "games", "num_envs", "video_width", "video_height", "video_fps"):
            val = getattr(self, key)
            if val is not None and val <= 0:
                raise ValueError(f"{key} must be > 0, got {val!r}")
        if self.window_s < 0:
            raise ValueError(f"window_s must be >= 0 (0 = the task's default), got {self.window_s!r}")


# --------------------------------------------------------------------------- arguments
def parse_args(argv: Sequence[str]) -> tuple[EvalArgs, dict[str, Any], dict[str, float]]:
    """``key=value`` strings -> ``(args, task overrides (nested), success thresholds)``, parsed as
    train.py's arguments are (:func:`training.config.parse_args`: hydra's override grammar).

    Raises:
        ConfigError: a malformed pair, an unknown or repeated key, a value of the wrong type or out
            of range; the message names the key.
    """
    from sim.core.config import ConfigError
    from training.config import parse_args as parse_typed

    args, nested = parse_typed(EvalArgs, argv, prefixes=("task", "success"))
    success = nested["success"]
    for metric, bound in success.items():
        if isinstance(bound, bool) or not isinstance(bound, int | float):
            raise ConfigError(f"success.{metric}", f"expects a float bound, got {bound!r}")
    return args, nested["task"], {k: float(v) for k, v in success.items()}


def usage() -> str:
    from training.config import usage as field_lines

    lines = [__doc__.strip(), "", "keys:", *field_lines(EvalArgs)]
    lines.append(f"  {'task.<field>=...':<24} {'':<12} override a field of the task config")
    lines.append(f"  {'success.<metric>=...':<24} {'float':<12} success when every listed window mean is below")
    return "\n".join(lines)


# --------------------------------------------------------------------------- policy sources
@dataclass
class Source:
    """Where the actions come from: ``kind`` torch | onnx | zero, the task config it was trained on."""

    kind: str
    task_cfg: dict[str, Any] | None
    make_policy: Callable[[Any], Callable] | None  # env -> policy; None for zero
    meta: dict[str, Any] = field(default_factory=dict)


def load_trained_policy(path: str | Path, device: str) -> Any:
    """``training.checkpoint.load_policy`` of a checkpoint, failures as :class:`EvalError`."""
    file = Path(path)
    if not file.is_file():
        raise EvalError(f"checkpoint not found: {file}")
    try:
        from training.checkpoint import load_policy
    except ImportError as err:
        raise EvalError(f"cannot load checkpoints: training.checkpoint is unavailable ({err})") from err
    try:
        return load_policy(file, device=device)
    except Exception as err:  # the CLI boundary: any failure to read the file is reported, not a traceback
        raise EvalError(f"cannot load checkpoint {file}: {type(err).__name__}: {err}") from err


def load_checkpoint_source(path: str, device: str) -> Source:
    """The trained actors of a covey checkpoint (``training.checkpoint.load_policy``)."""
    from training.evaluation import actor_policy

    loaded = load_trained_policy(path, device)
    meta = {k: v for k, v in (loaded.meta or {}).items() if k in ("run_id", "global_step", "algo", "covey_version")}
    return Source("torch", dict(loaded.task_cfg), lambda env: actor_policy(loaded.actors, env), meta)


def load_onnx_source(path: str) -> Source:
    """An ONNX actor; its task config from the ``covey`` metadata entry when present."""
    from policies.export import ONNX_METADATA_KEY
    from training.evaluation import onnx_policy, onnx_session

    file = Path(path)
    if not file.is_file():
        raise EvalError(f"ONNX file not found: {file}")
    try:
        session = onnx_session(file)
    except ImportError as err:
        raise EvalError(str(err)) from err
    except Exception as err:  # onnxruntime raises its own exception types for unreadable models
        raise EvalError(f"cannot load ONNX model {file}: {type(err).__name__}: {err}") from err
    raw = session.get_modelmeta().custom_metadata_map.get(ONNX_METADATA_KEY)
    meta: dict[str, Any] = {}
    if raw is not None:
        try:
            meta = json.loads(raw)
        except json.JSONDecodeError as err:
            raise EvalError(f"ONNX metadata {ONNX_METADATA_KEY!r} of {file} is not JSON: {err}") from err
        if not isinstance(meta, dict):
            raise EvalError(f"ONNX metadata {ONNX_METADATA_KEY!r} of {file} must be a JSON object")
    task_cfg = meta.get("task_cfg")
    group = meta.get("group")
    info = {k: v for k, v in meta.items() if k in ("run_id", "global_step", "covey_version")}
    return Source("onnx", task_cfg, lambda env: onnx_policy(session, env, group=group), info)


def resolve_scenario(task: str, name: str | None) -> Any:
    """The task's :class:`~sim.core.env.Scenario` called ``name`` (None: none asked for)."""
    from sim.core.registry import scenario

    if name is None:
        return None
    try:
        return scenario(task, name)
    except ValueError as err:
        raise EvalError(str(err)) from err


def resolve_task_cfg(source_cfg: Mapping[str, Any] | None, args: EvalArgs, overrides: Mapping[str, Any]) -> dict:
    """The evaluation task config: trained config (or the task's defaults), eval overrides, the
    scenario's overrides, ``task.*``."""
    from sim.core.config import deep_merge
    from sim.core.registry import evaluation_overrides

    if source_cfg is not None:
        cfg = dict(source_cfg)
        if "name" not in cfg:
            raise EvalError("the policy's task config has no 'name'")
        if args.task is not None and args.task != cfg["name"]:
            raise EvalError(f"task={args.task} but the policy was trained on {cfg['name']!r}")
    elif args.task is not None:
        cfg = {"name": args.task}  # the task's config dataclass defaults: what train.py task=<name> trains with
    else:
        raise EvalError("no task: give checkpoint=<path>, onnx=<file> with covey metadata, or task=<name>")
    for key in ("num_envs", "device", "seed", "compile"):
        cfg.pop(key, None)
    if args.eval_mode:
        eval_overrides = evaluation_overrides(cfg["name"])
        if not eval_overrides:
            _log(f"note: task {cfg['name']!r} has no evaluation_overrides(); eval_mode changes nothing")
        cfg = deep_merge(cfg, eval_overrides)
    if args.scenario is not None:
        from sim.core.registry import apply_scenario

        try:
            cfg = apply_scenario(cfg, args.scenario)
        except ValueError as err:
            raise EvalError(str(err)) from err
    return deep_merge(cfg, overrides)


# --------------------------------------------------------------------------- main
def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _video_hook(env: Any, args: EvalArgs) -> tuple[Callable[[int, Any], None], Callable[[], str]]:
    """``(on_step, finish)``: draw env 0 every k-th control step while its first episode runs."""
    from sim.render import RenderUnavailableError, check_video_path, make_renderer, write_video

    try:
        check_video_path(args.video)
        renderer = make_renderer(env, width=args.video_width, height=args.video_height)
    except (ValueError, ImportError, RenderUnavailableError) as err:
        raise EvalError(f"cannot write video {args.video}: {err}") from err
    control_hz = 1.0 / env.spec.control_dt
    every = max(1, round(control_hz / args.video_fps))
    frames: list = []

    def on_step(t: int, alive: Any) -> None:
        if t % every == 0 and bool(alive[0]):
            frames.append(renderer.render([0])[0])

    def finish() -> str:
        renderer.close()
        path = write_video(frames, args.video, fps=control_hz / every)
        return f"wrote {path} ({len(frames)} frames at {control_hz / every:g} fps)"

    return on_step, finish


def resolve_source(args: EvalArgs) -> Source:
    """The policy to evaluate: ONNX (task config from its metadata, else the checkpoint), checkpoint, or zero."""
    if args.onnx is not None:
        source = load_onnx_source(args.onnx)
        if source.task_cfg is None and args.checkpoint is not None:
            source.task_cfg = load_checkpoint_source(args.checkpoint, args.device).task_cfg
    elif args.checkpoint is not None:
        source = load_checkpoint_source(args.checkpoint, args.device)
    elif args.policy == "zero":
        source = Source("zero", None, None)
    else:
        raise EvalError("nothing to evaluate: give checkpoint=<path>, onnx=<file> or policy=zero task=<name>")
    return Source("zero", source.task_cfg, None) if args.policy == "zero" else source


def evaluate(args: EvalArgs, task_overrides: Mapping[str, Any], success: Mapping[str, float]) -> dict[str, Any]:
    """Run the evaluation described by the arguments, print the table; returns the report."""
    import torch

    import sim
    from training.evaluation import (
        format_table,
        prior_policy,
        run_episodes,
        success_criteria,
        summarize,
        zero_policy,
    )

    if args.match is not None and args.league is not None:
        raise EvalError("give match=A,B or league=A,B,C,..., not both")
    if args.league_reuse is not None and args.league is None:
        raise EvalError("league_reuse= takes the pairs of an earlier league=: give league=A,B,C,...")
    if args.scenario is not None and (args.match is not None or args.league is not None):
        raise EvalError("scenario= applies to episode evaluations, not to match= or league=")
    if args.match is not None:
        return evaluate_match(args, task_overrides)
    if args.league is not None:
        return evaluate_league(args, task_overrides)
    source = resolve_source(args)
    task_cfg = resolve_task_cfg(source.task_cfg, args, task_overrides)
    num_envs = min(args.episodes, args.num_envs or DEFAULT_MAX_ENVS)
    try:
        env = sim.make(task_cfg, num_envs=num_envs, device=args.device, seed=args.seed, compile=args.compile)
        scenario = resolve_scenario(env.task_name, args.scenario)
        criteria = {**success_criteria(env.task_name), **(scenario.success if scenario else {}), **success}
        policy = source.make_policy(env) if source.make_policy is not None else zero_policy(env)
        if args.commander is not None:
            _command_both_teams(env, args.commander, args.device)
    except ValueError as err:
        raise EvalError(str(err)) from err
    on_step, finish = _video_hook(env, args) if args.video else (None, None)

    runs = [(source.kind, policy, on_step)]
    if args.baseline and source.kind != "zero":
        runs.append(("baseline", zero_policy(env), None))
        prior = prior_policy(env)
        if prior is not None:  # a residual policy: also the prior it was trained around
            runs.append(("prior_baseline", prior, None))
    if args.expert:
        try:
            runs.append(("expert_baseline", env.expert_policy(), None))
        except ValueError as err:
            raise EvalError(f"expert=true: {err}") from err
    summaries: dict[str, dict[str, Any]] = {}
    window = args.window_s or type(env).evaluation_window_s
    for name, pol, hook in runs:
        start = time.perf_counter()
        try:  # the env rejects NaN/inf or misshaped actions, summarize unknown success metrics
            results = run_episodes(env, pol, args.episodes, args.seed, window, on_step=hook)
            summaries[name] = summarize(results, criteria)
        except ValueError as err:
            raise EvalError(f"{name} evaluation failed: {err}") from err
        steps = results.episode_steps * num_envs * math.ceil(args.episodes / num_envs)
        secs = time.perf_counter() - start
        _log(f"{name}: {args.episodes} episodes in {secs:.1f} s ({steps / secs:,.0f} env steps/s)")
    if finish is not None:
        _log(finish())

    baseline = summaries.get("baseline")
    columns = {"policy" if source.kind != "zero" else "zero actions": summaries[source.kind]}
    if baseline is not None:
        columns["zero-action baseline"] = baseline
    if "prior_baseline" in summaries:
        columns["action-prior baseline"] = summaries["prior_baseline"]
    if "expert_baseline" in summaries:
        columns["scripted expert"] = summaries["expert_baseline"]
    episode_s = env.spec.control_dt * env.max_episode_steps
    window_s = results.window_steps * env.spec.control_dt
    print(
        f"task {env.task_name}, source {source.kind}, {args.episodes} episodes of {episode_s:g} s"
        f" (window {window_s:g} s), seed {args.seed}, eval_mode {args.eval_mode}, {num_envs} envs on {env.device}"
        + (f", scenario {args.scenario}" if args.scenario else "")
    )
    print(format_table(columns))
    return {
        **summaries[source.kind],
        "baseline": baseline,
        "prior_baseline": summaries.get("prior_baseline"),
        "expert_baseline": summaries.get("expert_baseline"),
        "seed": args.seed,
        "eval_mode": args.eval_mode,
        "scenario": args.scenario,
        "window_s": window_s,
        "num_envs": num_envs,
        "device": str(env.device),
        "torch": torch.__version__,
        "task": env.task_name,
        "success_criteria": criteria,
        "source": source.kind,
        "checkpoint": args.checkpoint,
        "commander": args.commander,
        "onnx": args.onnx,
        "policy_meta": source.meta,
        "task_cfg": task_cfg,
    }


def _command_both_teams(env: Any, path: str, device: str) -> None:
    """Both teams of a skills level (HCSP: the strategy task's ``skills_task``) commanded by the strategy checkpoint
    ``path``, as in co-self-play's skills phase (:mod:`training.coselfplay`)."""
    from training.coselfplay import hcsp_levels, strategy_policy

    if not callable(getattr(env, "set_strategy", None)):
        raise EvalError(f"commander= commands a skills level (an env with set_strategy); {env.task_name!r} is not one")
    name = str(load_trained_policy(path, device).task_cfg.get("name"))
    try:
        levels = hcsp_levels(name)
    except ValueError as err:
        raise EvalError(f"commander={path}: {err}") from err
    if levels[1] != env.task_name:
        raise EvalError(f"commander={path}: a strategy over {levels[1]!r}, this env is {env.task_name!r}")
    strategy = strategy_policy(path, device, name)
    for team in (0, 1):
        env.set_strategy(team, strategy)


def _match_env_and_teams(names: list[str], args: EvalArgs, task_overrides: Mapping[str, Any]) -> tuple:
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
        num_envs = min(args.games, args.num_envs or DEFAULT_MAX_ENVS)
        env = sim.make(task_cfg, num_envs=num_envs, device=args.device, seed=args.seed, compile=args.compile)
        teams = [build_team(env, n, load) for n in names]
    except ValueError as err:
        raise EvalError(str(err)) from err
    return env, teams, task_cfg


def evaluate_league(args: EvalArgs, task_overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Round-robin: every pair of ``league`` plays ``games`` games; prints the pairwise table and the
    Elo ratings fitted to all results (``training.selfplay.fit_elo``, mean 1000)."""
    import numpy as np

    from training.matches import play_matches, summarize_matches
    from training.selfplay import fit_elo

    names = [t.strip() for t in args.league.split(",")]
    if len(names) < 2 or not all(names) or len(set(names)) != len(names):
        raise EvalError(f"league must name two or more distinct teams 'A,B,...', got {args.league!r}")
    env, teams, task_cfg = _match_env_and_teams(names, args, task_overrides)
    reuse = _reusable_pairs(args, env.task_name, task_cfg) if args.league_reuse else {}
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
            _log(f"{names[i]} vs {names[j]}: {summary['win_rate_a']:.3f} ({summary['games']} games, {how})")
    played = sum((p["team_a"], p["team_b"]) not in reuse for p in pairs)
    _log(f"{played} matches played ({len(pairs) - played} reused) in {time.perf_counter() - start:.1f} s")
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
        "task": env.task_name,
        "task_cfg": task_cfg,
    }


def _reusable_pairs(args: EvalArgs, task: str, task_cfg: Mapping[str, Any]) -> dict[tuple[str, str], dict]:
    """``{(team_a, team_b): summary}`` of the earlier league report ``args.league_reuse``; it must have been
    played under this league's task, task config, games per pair and seed, or its results would not be
    comparable (the games of a pair are reproducible: same seed, same env)."""
    path = Path(str(args.league_reuse))
    try:
        old = json.loads(path.read_text())
        old_pairs = old["pairs"]
        setting = {"task": old["task"], "games": old["games"], "seed": old["seed"]}
        old_cfg = old["task_cfg"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise EvalError(f"league_reuse={path}: not a league report ({err})") from err
    want = {"task": task, "games": args.games, "seed": args.seed}
    for key, val in want.items():
        if setting[key] != val:
            raise EvalError(f"league_reuse={path}: played with {key}={setting[key]!r}, this league {key}={val!r}")
    now = json.loads(json.dumps(task_cfg, default=str))  # as the report stores it
    differ = sorted(k for k in set(now) | set(old_cfg) if now.get(k) != old_cfg.get(k))
    if differ:
        raise EvalError(f"league_reuse={path}: its task config differs from this league's in {', '.join(differ)}")
    return {(p["team_a"], p["team_b"]): p for p in old_pairs}


def evaluate_match(args: EvalArgs, task_overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Play ``games`` games between the two teams of ``match``; print the table; returns the report."""
    from training.matches import play_matches, summarize_matches

    names = [t.strip() for t in args.match.split(",")]
    if len(names) != 2 or not all(names):
        raise EvalError(f"match must name two teams 'A,B', got {args.match!r}")
    env, teams, task_cfg = _match_env_and_teams(names, args, task_overrides)
    on_step, finish = _video_hook(env, args) if args.video else (None, None)
    start = time.perf_counter()
    try:
        summary = summarize_matches(play_matches(env, teams[0], teams[1], args.games, args.seed, on_step))
    except ValueError as err:
        raise EvalError(str(err)) from err
    if finish is not None:
        _log(finish())  # the first game of env 0, until it ended
    _log(f"{args.games} games in {time.perf_counter() - start:.1f} s")
    lo, hi = summary["win_rate_ci95"]
    print(
        f"task {env.task_name} ({task_cfg.get('mode')}), {names[0]} (team A) vs {names[1]} (team B), seed {args.seed}"
    )
    record = f"{summary['wins_a']} W / {summary['draws']} D / {summary['losses_a']} L"
    print(f"  win rate A   {summary['win_rate_a']:.3f}  [{lo:.3f}, {hi:.3f}]  ({record})")
    print(f"  points/game  {summary['points_per_game']:.2f}   hits/rally {summary['hits_per_rally']:.2f}")
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
        "task": env.task_name,
        "task_cfg": task_cfg,
    }


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in argv):
        print(usage())
        return 0
    from sim.core.config import ConfigError

    try:
        args, task_overrides, success = parse_args(argv)
        report = evaluate(args, task_overrides, success)
    except (EvalError, ConfigError) as err:
        print(f"evaluate.py: error: {err}", file=sys.stderr)  # one line, as train.py and export.py
        return 2
    line = json.dumps(report, default=str)
    if args.report:
        path = Path(args.report)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2, default=str) + "\n")
        _log(f"wrote {path}")
    print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
