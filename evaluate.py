"""Evaluate a policy: task metrics over N episodes with 95% CIs, beside a zero-action baseline.

    python evaluate.py checkpoint=runs/cable_load/<time>/checkpoints/best.pt episodes=100
    python evaluate.py onnx=policy.onnx episodes=100 video=runs/eval.gif
    python evaluate.py policy=zero task=cable_load episodes=20 task.num_mavs=4
    python evaluate.py checkpoint=<path> eval_mode=true task.fault.enabled=true report=report.json
    python evaluate.py checkpoint=assets/policies/cable_load/policy.pt scenario=mav_loss task.num_mavs=4
    python evaluate.py checkpoint=assets/policies/cable_load/policy.pt scenario=nominal engine=mujoco   # sim-to-sim
    python evaluate.py checkpoint=assets/policies/cable_load/policy.pt scenario=nominal engine=mujoco:rk4  # its RK4
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
``success_rate``, ``terminated_rate``), ``termination`` rates by reason, ``episodes``, ``seed``,
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# This file is the CLI; policy sources, matches and leagues, and the video are modules of training/.
from training.eval_matches import evaluate_league, evaluate_match
from training.eval_sources import (
    DEFAULT_MAX_ENVS,
    EvalError,
    Source,
    command_both_teams,
    load_checkpoint_source,
    load_onnx_source,
    load_trained_policy,
    log,
    make_eval_env,
    resolve_scenario,
    resolve_source,
    resolve_task_cfg,
)
from training.eval_video import video_hook

__all__ = [
    "DEFAULT_MAX_ENVS",
    "EvalArgs",
    "EvalError",
    "Source",
    "evaluate",
    "evaluate_league",
    "evaluate_match",
    "load_checkpoint_source",
    "load_onnx_source",
    "load_trained_policy",
    "main",
    "parse_args",
    "resolve_scenario",
    "resolve_source",
    "resolve_task_cfg",
    "usage",
]


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
    kernels: str = field(
        default="auto",
        metadata={"help": "a CPU steps a task with C kernels through them: auto (where they run) | native | torch"},
    )
    engine: str = field(
        default="covey",
        metadata={
            "help": "what steps the bodies: covey (its own physics) | <name>[:<option>] of an engine the task declares "
            "(e.g. mujoco, mujoco:rk4; docs/sim_to_sim.md)"
        },
    )
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
        from sim.core.native import check_kernels

        check_kernels(self.kernels)


# --------------------------------------------------------------------------- arguments
def parse_args(argv: Sequence[str]) -> tuple[EvalArgs, dict[str, Any], dict[str, float]]:
    """``key=value`` strings -> ``(args, task overrides (nested), success thresholds)``, parsed as
    train.py's arguments are (:func:`training.config.parse_args`: hydra's override grammar).

    Raises:
        ConfigError: a malformed pair, an unknown or repeated key, a value of the wrong type or out
            of range; the message names the key.
    """
    from sim.core.config import ConfigError
    from sim.core.registry import RETIRED_TASK_KEYS
    from training.config import parse_args as parse_typed

    args, nested = parse_typed(EvalArgs, argv, prefixes=("task", "success"))
    retired = sorted(RETIRED_TASK_KEYS.keys() & nested["task"].keys())
    if retired:
        raise ConfigError(f"task.{retired[0]}", f"is no setting any more: {RETIRED_TASK_KEYS[retired[0]]}")
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


# --------------------------------------------------------------------------- main
def evaluate(args: EvalArgs, task_overrides: Mapping[str, Any], success: Mapping[str, float]) -> dict[str, Any]:
    """Run the evaluation described by the arguments, print the table; returns the report."""
    import torch

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
    try:
        env = make_eval_env(task_cfg, args, args.episodes)
        num_envs = env.num_envs
        scenario = resolve_scenario(env.task_name, args.scenario)
        criteria = {**success_criteria(env.task_name), **(scenario.success if scenario else {}), **success}
        policy = source.make_policy(env) if source.make_policy is not None else zero_policy(env)
        if args.commander is not None:
            command_both_teams(env, args.commander, args.device)
    except ValueError as err:
        raise EvalError(str(err)) from err
    on_step, finish = video_hook(env, args) if args.video else (None, None)

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
        log(f"{name}: {args.episodes} episodes in {secs:.1f} s ({steps / secs:,.0f} env steps/s)")
    if finish is not None:
        log(finish())

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
        + (f", engine {args.engine}" if args.engine != "covey" else "")
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
        "engine": args.engine,
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
        log(f"wrote {path}")
    print(line, flush=True)
    return 0


if __name__ == "__main__":
    from covey_common.cli import run_main

    raise SystemExit(run_main("evaluate.py", main))  # Ctrl-C: one line, exit code 130
