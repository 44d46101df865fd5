"""Where an evaluation's policy and task config come from (``evaluate.py``): a covey checkpoint, an ONNX actor
(its task config from the ``covey`` metadata), or zero actions; the task config the evaluation runs (trained
config, evaluation overrides, a named scenario, ``task.*``); the skills level's commander.

Failures of the user's input are :class:`EvalError` (``evaluate.py`` prints them as one line, exit code 2). The
functions take the parsed ``evaluate.py`` arguments (its ``EvalArgs``) as ``args``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_MAX_ENVS = 1024


class EvalError(Exception):
    """A problem with the user's input (arguments, files); printed as ``evaluate.py: error: ...``, exit code 2."""


def log(msg: str) -> None:
    """A progress line on stderr (stdout's last line is the JSON report)."""
    print(msg, file=sys.stderr, flush=True)


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


def resolve_source(args: Any) -> Source:
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


def resolve_scenario(task: str, name: str | None) -> Any:
    """The task's :class:`~sim.core.env.Scenario` called ``name`` (None: none asked for)."""
    from sim.core.registry import scenario

    if name is None:
        return None
    try:
        return scenario(task, name)
    except ValueError as err:
        raise EvalError(str(err)) from err


def make_eval_env(task_cfg: Mapping[str, Any], args: Any, runs: int):
    """The evaluation env of ``task_cfg`` with the command line's execution settings (device, seed, compile,
    kernels, engine): ``min(runs, num_envs or DEFAULT_MAX_ENVS)`` envs for ``runs`` episodes or games. ValueError
    from ``sim.make`` for a bad setting (callers turn it into an :class:`EvalError`)."""
    import sim

    num_envs = min(runs, args.num_envs or DEFAULT_MAX_ENVS)
    return sim.make(
        task_cfg,
        num_envs=num_envs,
        device=args.device,
        seed=args.seed,
        compile=args.compile,
        kernels=args.kernels,
        engine=args.engine,
    )


def resolve_task_cfg(source_cfg: Mapping[str, Any] | None, args: Any, overrides: Mapping[str, Any]) -> dict:
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
            log(f"note: task {cfg['name']!r} has no evaluation_overrides(); eval_mode changes nothing")
        cfg = deep_merge(cfg, eval_overrides)
    if args.scenario is not None:
        from sim.core.registry import apply_scenario

        try:
            cfg = apply_scenario(cfg, args.scenario)
        except ValueError as err:
            raise EvalError(str(err)) from err
    return deep_merge(cfg, overrides)


def command_both_teams(env: Any, path: str, device: str) -> None:
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
