"""A recipe's stages run in turn in one run directory (``runner=pipeline``, the node ``pipeline``).

    python train.py task=<task>                          # a recipe that declares pipeline.stages runs them all
    python train.py task=<task> budget=smoke             # each stage with its budgets.smoke (configs/budget/)
    python train.py task=<task> resume=<runs_dir>/<task>/<time>   # the stages not finished yet

Each stage (:class:`~training.settings.PipelineStageCfg`) is one ``train.py`` run of an existing runner: the
config of ``train.py task=<task> stage=<stage> <overrides> <budget's overrides> <the command line's seed, device,
threads, sim.* and wandb.*>``, with ``runs_dir=<run>/<name>`` (:func:`stage_config`, :func:`train_stage`). In
the overrides ``{run}`` is the pipeline's run directory, so a stage names what an earlier one made. After a stage
its products are copied where later stages find them (:func:`collect_products`): its best checkpoint to
``<run>/<name>.pt``, or, for a runner that writes several products at its run's top level (co-self-play:
``skills.pt``, ``strategy.pt``), those to ``<run>/<name>/``. ``pipeline.team`` finally copies chosen products to
``<run>/team/``: the team is those files joined by ``@`` (``evaluate.py match=<team>,<opponent>``).

``<run>/pipeline.json`` records every stage's state (pending, running, done, failed, interrupted), its config's
overrides, run directory, minutes, steps and best metric; ``resume=<run>`` skips the stages done (their products
on disk) and starts the others afresh.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from sim.core.config import ConfigError, build_config
from training.settings import PipelineCfg, PipelineStageCfg

STATE_FILE = "pipeline.json"
# Command-line keys that reach every stage (how and where to run, not what to learn); the pipeline's own keys
# stay with it; any other key is ambiguous across stages and refused.
SHARED_KEYS = ("seed", "device", "torch_threads", "update_threads", "sim", "wandb", "train.progress")
OWN_KEYS = ("task", "budget", "resume", "runs_dir", "pipeline", "runner", "stage", "algo")


def runner_kind(cfg: Mapping[str, Any]) -> str:
    """The runner a resolved config trains with: ``algo=selfplay``/``algo=sac`` pick theirs, else ``runner``."""
    name = cfg["algo"]["name"]
    return name if name in ("selfplay", "sac") else cfg["runner"]


def runner_class(kind: str) -> type:
    """The runner class of a one-run ``kind`` (ppo, selfplay, sac)."""
    from training.runner import Runner
    from training.sac_runner import SACRunner
    from training.selfplay_runner import SelfPlayRunner

    return {"selfplay": SelfPlayRunner, "sac": SACRunner}.get(kind, Runner)


def _key(override: str) -> str:
    return override.lstrip("+~").split("=", 1)[0]


def shared_overrides(argv: Sequence[str]) -> list[str]:
    """The command line's overrides that every stage gets (:data:`SHARED_KEYS`).

    Raises:
        ConfigError: a key that would mean something else in each stage (``train.max_minutes``), named.
    """
    out = []
    for item in argv:
        key = _key(item)
        top = key.split(".", 1)[0]
        if key in SHARED_KEYS or top in SHARED_KEYS:
            out.append(item)
        elif top not in OWN_KEYS:
            raise ConfigError(
                key,
                "a pipeline gives its stages only seed, device, threads, sim.* and wandb.* from the command line: "
                "set it in a stage's overrides (pipeline.stages) or run that stage alone with stage=",
            )
    return out


def stage_overrides(task: str, stage: PipelineStageCfg, budget: str, run_dir: Path, shared: Sequence[str]) -> list:
    """``train.py`` overrides of one stage: task, stage, its own, its budget's, then the shared ones."""
    args = [f"task={task}", f"stage={stage.stage}", *stage.overrides, *stage.budgets.get(budget, ()), *shared]
    return [a.replace("{run}", str(run_dir)) for a in args]


def stage_config(overrides: Sequence[str], runs_dir: Path) -> dict[str, Any]:
    """The resolved, checked config of one stage's run, writing under ``runs_dir``.

    Raises:
        ConfigError: the stage's overrides do not compose or check.
    """
    from hydra.core.global_hydra import GlobalHydra
    from hydra.initialize import get_gh_backup, restore_gh_from_backup

    from training.config import check_config, compose

    backup = get_gh_backup()  # inside train.py's hydra.main: compose beside it, then put its state back
    GlobalHydra.instance().clear()
    try:
        cfg = OmegaConf.to_container(compose(list(overrides)), resolve=True)
    finally:
        restore_gh_from_backup(backup)
    cfg.update(runs_dir=str(runs_dir), resume=None)
    check_config(cfg)
    return cfg


def train_stage(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Train one stage's run with the runner its config names; returns its summary (run_dir, steps, best)."""
    kind = runner_kind(cfg)
    if kind == "pipeline":
        raise ConfigError("runner", "a pipeline stage cannot itself be a pipeline: give its stage= a runner")
    if kind == "coselfplay":  # HCSP stage 3: phases of the runners below (training/coselfplay.py)
        from training.coselfplay import run as run_coselfplay

        run_dir = run_coselfplay(cfg)
        phases = json.loads((run_dir / "coselfplay.json").read_text())
        keep = ("phase", "minutes", "global_step", "best_metric", "best")
        return {"run_dir": str(run_dir), "phases": [{k: p.get(k) for k in keep} for p in phases]}
    runner = runner_class(kind)(cfg)
    state = runner.learn()
    return {
        "run_dir": str(runner.run_dir),
        "global_step": state.global_step,
        "best_metric": getattr(runner, "best_metric", ""),
        "best": state.best_value,
    }


def collect_products(run_dir: Path, pipeline_dir: Path, name: str) -> list[str]:
    """Copy a stage run's products where later stages find them; returns their paths.

    A run with checkpoints at its top level (co-self-play) gives those, into ``<pipeline>/<name>/``; any other
    its ``checkpoints/best.pt`` (``latest.pt`` when no evaluation chose one), as ``<pipeline>/<name>.pt``.
    """
    top = sorted(run_dir.glob("*.pt"))
    if top:
        (pipeline_dir / name).mkdir(parents=True, exist_ok=True)
        return [shutil.copy(p, pipeline_dir / name / p.name) for p in top]
    ckpt = run_dir / "checkpoints" / "best.pt"
    if not ckpt.is_file():
        ckpt = run_dir / "checkpoints" / "latest.pt"
    target = pipeline_dir / f"{name}.pt"
    target.parent.mkdir(parents=True, exist_ok=True)
    return [shutil.copy(ckpt, target)]


def pipeline_stages(pc: PipelineCfg) -> list[PipelineStageCfg]:
    """The checked stages of ``pc`` (each a :class:`PipelineStageCfg`, names unique).

    Raises:
        ConfigError: no stage, a stage without a name or stage, a name given twice.
    """
    stages = [
        s if isinstance(s, PipelineStageCfg) else build_config(PipelineStageCfg, s, where=f"pipeline.stages[{i}]")
        for i, s in enumerate(pc.stages)
    ]
    if not stages:
        raise ConfigError("pipeline.stages", "runner=pipeline needs stages (a task's recipe declares them)")
    names = [s.name for s in stages]
    for i, s in enumerate(stages):
        if not s.name or not s.stage:
            raise ConfigError(f"pipeline.stages[{i}]", "each stage needs a name and a stage")
        if names.count(s.name) > 1:
            raise ConfigError(f"pipeline.stages[{i}].name", f"{s.name!r} names two stages")
    return stages


def _save(path: Path, record: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2))
    tmp.replace(path)  # whole or not at all: a resume reads it


def _bar(done: int, total: int, width: int = 20) -> str:
    fill = round(width * done / total)
    return f"[{'#' * fill}{'.' * (width - fill)}] {done}/{total}"


def _describe(row: dict[str, Any]) -> str:
    """One summary line of a finished stage."""
    parts = [f"{row.get('minutes', 0):.1f} min"]
    summary = row.get("summary") or {}
    for p in summary.get("phases", [summary]):
        if p.get("global_step") is not None:
            what = f"{p['phase']} " if "phase" in p else ""
            best = "" if p.get("best") is None else f", best {p.get('best_metric')} {p['best']:.3f}"
            parts.append(f"{what}{p['global_step']:,} steps{best}")
    return "; ".join(parts) + f" -> {', '.join(row.get('products', []))}"


def run(cfg: Mapping[str, Any], argv: Sequence[str] = ()) -> Path:
    """Every stage of ``cfg['pipeline']`` not done yet, in order; returns the pipeline's run directory.

    ``argv``: the command line's overrides (the shared ones reach every stage, :func:`shared_overrides`).
    """
    from training.setup import new_run_dir

    pc = build_config(PipelineCfg, cfg.get("pipeline", {}), where="pipeline")
    stages = pipeline_stages(pc)
    if len({Path(src).name for src in pc.team}) < len(pc.team):
        raise ConfigError("pipeline.team", f"its files go to <run>/team/: their names must differ, {pc.team}")
    shared = shared_overrides(argv)
    task = cfg["task"]["name"]
    if cfg.get("resume"):
        run_dir = Path(cfg["resume"])
        if not (run_dir / STATE_FILE).is_file():
            raise ConfigError("resume", f"{run_dir} holds no {STATE_FILE}: not a pipeline's run directory")
        record = json.loads((run_dir / STATE_FILE).read_text())
    else:
        run_dir = new_run_dir(cfg.get("runs_dir", "runs"), task)
        record = {"task": task, "stages": []}
    old = {row["name"]: row for row in record.get("stages", [])}
    if record.get("budget", pc.budget) != pc.budget:
        print(f"pipeline: budget {pc.budget} for the stages left (the finished ones ran with {record['budget']})")
    record.update(budget=pc.budget, shared=shared)
    record["stages"] = [old.get(s.name, {"name": s.name, "stage": s.stage, "state": "pending"}) for s in stages]
    state_file = run_dir / STATE_FILE
    _save(state_file, record)
    print(f"pipeline: {len(stages)} stages of {task}, budget {pc.budget}, in {run_dir}", flush=True)
    t_all = time.perf_counter()
    for i, (stage, row) in enumerate(zip(stages, record["stages"], strict=True)):
        if row["state"] == "done" and all(Path(p).is_file() for p in row.get("products", [])):
            print(f"pipeline {_bar(i + 1, len(stages))} {stage.name}: done before, skipped", flush=True)
            continue
        overrides = stage_overrides(task, stage, pc.budget, run_dir, shared)
        stage_cfg = stage_config(overrides, run_dir / stage.name)
        print(f"pipeline {_bar(i, len(stages))} {stage.name}: train.py {' '.join(overrides)}", flush=True)
        row.clear()
        row.update(name=stage.name, stage=stage.stage, state="running", overrides=overrides, started=time.time())
        _save(state_file, record)
        t0 = time.perf_counter()
        try:
            summary = train_stage(stage_cfg)
        except BaseException as err:
            row.update(state="interrupted" if isinstance(err, KeyboardInterrupt) else "failed", error=repr(err))
            row["minutes"] = round((time.perf_counter() - t0) / 60, 2)
            _save(state_file, record)
            raise
        row.update(summary=summary, run_dir=summary["run_dir"], minutes=round((time.perf_counter() - t0) / 60, 2))
        row["products"] = [str(p) for p in collect_products(Path(summary["run_dir"]), run_dir, stage.name)]
        row["state"] = "done"
        _save(state_file, record)
        print(f"pipeline {_bar(i + 1, len(stages))} {stage.name}: {_describe(row)}", flush=True)
    if pc.team:
        (run_dir / "team").mkdir(exist_ok=True)
        files = [shutil.copy(run_dir / src, run_dir / "team" / Path(src).name) for src in pc.team]
        record["team"] = "@".join(str(f) for f in files)
    record["minutes_this_session"] = round((time.perf_counter() - t_all) / 60, 2)
    _save(state_file, record)
    print(summary_table(record), flush=True)
    return run_dir


def summary_table(record: Mapping[str, Any]) -> str:
    """The per-stage summary of a pipeline record (``pipeline.json``), one line a stage, and its team."""
    lines = [f"pipeline summary ({record.get('task')}, budget {record.get('budget')}):"]
    for row in record["stages"]:
        lines.append(f"  {row['name']:<16} {row['state']:<11} " + (_describe(row) if row["state"] == "done" else ""))
    if record.get("team"):
        lines.append(f"  team: {record['team']}  (evaluate.py match=<team>,<opponent>)")
    return "\n".join(lines)
