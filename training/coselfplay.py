"""HCSP stage 3, co-self-play: the skills and the strategy fine-tuned together, in matches.

    python train.py task=drone_volleyball algo=hcsp stage=coselfplay \\
        coselfplay.strategy=assets/policies/drone_volleyball/strategy.pt

Each cycle (``coselfplay.cycles``) runs two phases, each a normal run directory inside this run's:

1. ``cycle<k>_skills``: one skill-conditioned low-level policy flies every drone of both teams in
   3v3 matches (the strategy task's ``skills_task``, e.g. ``drone_volleyball_coplay``: self-play
   by shared weights), commanded by the
   current strategy on both sides, ``coselfplay.random_choice_prob`` of its decisions replaced by
   random ones (so every command is trained). The first cycle starts with DAgger from the scripted
   skills on the match's own commands (``imitation.expert=task``; from ``coselfplay.skills`` if
   given, else from a fresh network): skills trained on solo tasks meet situations in a match they
   never saw (HCSP's reason for stage 3). PPO then fine-tunes on the match reward plus each
   touch's delivery (:class:`training.runner.Runner`).
2. ``cycle<k>_strategy``: the strategy continues its stage-2 self-play (league with the
   rule-based team, meta-solver) over the new skills (task ``drone_volleyball_strategy`` with the
   learned skills flying, :class:`training.selfplay_runner.SelfPlayRunner`), starting from the
   current strategy's weights.

The run directory ends with ``skills.pt`` and ``strategy.pt`` (the last cycle's best checkpoints),
the HCSP team: ``python evaluate.py match=<run>/strategy.pt@<run>/skills.pt,scripted``.

HCSP-specific, task-generic: the strategy level is the task of ``coselfplay.strategy``'s checkpoint
and names its skills level (its env class's ``skills_task``); the skills level's env offers
``set_strategy(team, strategy)`` and the strategy level's ``set_skills(skills)``.
"""

from __future__ import annotations

import copy
import json
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from sim.core.config import build_config, deep_merge, resolve_device
from sim.core.registry import task_class
from training.checkpoint import load_checkpoint, load_policy
from training.runner import Runner, new_run_dir
from training.selfplay_runner import SelfPlayRunner
from training.settings import CoSelfPlayCfg  # the settings dataclasses live there (a leaf module)


def hcsp_levels(strategy_task: str) -> tuple[str, str]:
    """``(strategy task, skills task)``: a strategy task names the task of its learned skills
    (its env class's ``skills_task``, e.g. the volleyball strategy's skills-in-matches task).

    Raises:
        ValueError: the task is not a strategy level over learned skills.
    """
    skills_task = getattr(task_class(strategy_task), "skills_task", None)
    if not skills_task:
        raise ValueError(f"task {strategy_task!r} is not a strategy over learned skills (its class has no skills_task)")
    return strategy_task, skills_task


def strategy_policy(path: str | Path, device: str | torch.device, task: str) -> Callable[[Tensor], Tensor]:
    """A stage-2 strategy checkpoint of ``task`` as ``team obs [E, o] -> action [E, 4]`` (deterministic)."""
    loaded = load_policy(path, device)
    if loaded.task_cfg.get("name") != task:
        raise ValueError(f"{path}: not a strategy checkpoint (task {loaded.task_cfg.get('name')!r}, want {task})")
    actor = next(iter(loaded.actors.values()))
    return lambda obs: actor(obs.unsqueeze(1))[:, 0]


def skills_policy(path: str | Path, device: str | torch.device, task: str) -> Callable[[Tensor], Tensor]:
    """A skills checkpoint of ``task`` (the strategy task's ``skills_task``) as
    ``skill obs [E, D, s] -> action [E, D, 4]``."""
    loaded = load_policy(path, device)
    if loaded.task_cfg.get("name") != task:
        raise ValueError(f"{path}: not a skills checkpoint (task {loaded.task_cfg.get('name')!r}, want {task})")
    return next(iter(loaded.actors.values()))


class SkillsInMatchRunner(Runner):
    """Phase 1: PPO (after DAgger) on the skills task (e.g. ``drone_volleyball_coplay``), both teams
    commanded by one strategy."""

    def __init__(self, cfg: Mapping[str, Any], strategy: Callable[[Tensor], Tensor] | None) -> None:
        self._strategy = strategy
        super().__init__(cfg)
        self._command_by(self.env)

    def _command_by(self, env) -> None:
        for team in (0, 1):
            env.set_strategy(team, self._strategy)

    def _get_eval_env(self):
        fresh = self._eval_env is None
        env = super()._get_eval_env()
        if fresh:
            self._command_by(env)
        return env


class StrategyOverSkillsRunner(SelfPlayRunner):
    """Phase 2: the strategy's self-play with the learned skills flying (train and eval envs),
    from the weights of strategy checkpoint ``init`` (so the league's protected "initial" snapshot
    is that strategy)."""

    def __init__(self, cfg: Mapping[str, Any], skills: Callable[[Tensor], Tensor], init: str | Path) -> None:
        self._skills = skills
        self._init = init
        super().__init__(cfg)
        self.env.set_skills(skills)

    def _initial_weights(self) -> None:
        load_strategy_weights(self.models, self._init)

    def _get_eval_env(self):
        fresh = self._eval_env is None
        env = super()._get_eval_env()
        if fresh:
            env.set_skills(self._skills)
        return env


def load_strategy_weights(models: torch.nn.ModuleDict, path: str | Path) -> None:
    """Copy a strategy checkpoint's weights (group ``team_a``) into every group of ``models``."""
    payload = load_checkpoint(path)
    src = {k.split(".", 1)[1]: v for k, v in payload["model"].items() if k.startswith("team_a.")}
    for ac in models.values():
        ac.load_state_dict(src)


def run(cfg: Mapping[str, Any]) -> Path:
    """All cycles; returns the run directory (with ``skills.pt``, ``strategy.pt``, ``coselfplay.json``)."""
    cs = build_config(CoSelfPlayCfg, cfg.get("coselfplay", {}), where="coselfplay")
    if not cs.strategy or not Path(cs.strategy).is_file():
        raise ValueError(f"coselfplay.strategy={cs.strategy!r}: name a stage-2 strategy checkpoint")
    if cs.skills_steps == 0 and not (cs.skills and Path(cs.skills).is_file()):
        raise ValueError(f"coselfplay.skills_steps=0 flies coselfplay.skills as they are: name one, got {cs.skills!r}")
    device = str(resolve_device(cfg.get("device", "auto")))
    strategy_ckpt, skills_ckpt = Path(cs.strategy), Path(cs.skills) if cs.skills else None
    stage2 = load_checkpoint(strategy_ckpt)
    try:  # the levels' task names come from the checkpoint's task class
        strategy_task, skills_task_name = hcsp_levels(str(stage2["task_cfg"].get("name")))
    except ValueError as err:
        raise ValueError(f"coselfplay.strategy={strategy_ckpt}: {err}") from err
    # Phase 2 continues stage 2 with its own settings (networks, PPO, league); both phases play
    # the strategy's match (mode, rules, decision rate) with this run's task keys on top.
    stage2_cfg = dict(stage2["meta"]["config"])
    own = {k: v for k, v in dict(cfg["task"]).items() if k not in ("name", "strategy")}
    task = deep_merge(dict(stage2["task_cfg"]), own)
    run_dir = new_run_dir(cfg.get("runs_dir", "runs"), f"{cfg['task']['name']}_coselfplay")
    log: list[dict[str, Any]] = []
    for cycle in range(cs.cycles):
        if cs.skills_steps > 0:
            t0 = time.perf_counter()
            skills_task = deep_merge(
                task, {"name": skills_task_name, "strategy": {"random_choice_prob": cs.random_choice_prob}}
            )
            skills_cfg = _phase_cfg(cfg, run_dir / f"cycle{cycle}_skills", skills_task, "ppo")
            skills_cfg["num_envs"] = cs.skills_num_envs
            skills_cfg["train"] = {
                **skills_cfg["train"],
                "total_steps": cs.skills_steps,
                "max_minutes": cs.skills_minutes,
            }
            if cycle > 0:  # DAgger (imitation.expert=task) only starts the first cycle
                skills_cfg["imitation"] = {**skills_cfg.get("imitation", {}), "expert": "none"}
            runner = SkillsInMatchRunner(skills_cfg, strategy_policy(strategy_ckpt, device, strategy_task))
            if skills_ckpt is not None:
                runner.models.load_state_dict(load_checkpoint(skills_ckpt, map_location=device)["model"])
            runner.learn()
            skills_ckpt = runner.ckpt_dir / "best.pt"
            log.append(_phase_row(cycle, "skills", runner, t0))
        t0 = time.perf_counter()
        strat_cfg = _phase_cfg(
            stage2_cfg,
            run_dir / f"cycle{cycle}_strategy",
            deep_merge(task, {"name": strategy_task, "strategy": {"team_b_skills": cs.opponent_skills}}),
            "selfplay",
        )
        for key in ("seed", "device", "torch_threads", "wandb"):
            if key in cfg:
                strat_cfg[key] = copy.deepcopy(cfg[key])
        strat_cfg["num_envs"] = cs.strategy_num_envs
        strat_cfg["train"] = {
            **strat_cfg["train"],
            "total_steps": cs.strategy_steps,
            "max_minutes": cs.strategy_minutes,
            "eval_envs": int(cfg.get("train", {}).get("eval_envs", strat_cfg["train"].get("eval_envs", 64))),
            # Games to N points make each evaluation long: let the run space them out.
            "eval_every": int(cfg.get("train", {}).get("eval_every", strat_cfg["train"].get("eval_every", 5))),
            "progress": bool(cfg.get("train", {}).get("progress", True)),
        }
        skills = skills_policy(skills_ckpt, device, skills_task_name)
        runner = StrategyOverSkillsRunner(strat_cfg, skills, strategy_ckpt)
        runner.learn()
        strategy_ckpt = runner.ckpt_dir / "best.pt"
        log.append(_phase_row(cycle, "strategy", runner, t0))
        (run_dir / "coselfplay.json").write_text(json.dumps(log, indent=2))
    shutil.copy(skills_ckpt, run_dir / "skills.pt")
    shutil.copy(strategy_ckpt, run_dir / "strategy.pt")
    return run_dir


def _phase_row(cycle: int, phase: str, runner: Runner, t0: float) -> dict[str, Any]:
    return {
        "cycle": cycle,
        "phase": phase,
        "run_dir": str(runner.run_dir),
        "minutes": round((time.perf_counter() - t0) / 60, 2),
        "global_step": runner.state.global_step,
        "best_metric": runner.best_metric,
        "best": runner.state.best_value,
        "last_eval": runner.state.last_eval,
    }


def _phase_cfg(cfg: Mapping[str, Any], runs_dir: Path, task: dict, runner: str) -> dict[str, Any]:
    """A phase's run config: ``cfg`` without the ``coselfplay`` node, its own task and run folder."""
    out = copy.deepcopy({k: v for k, v in cfg.items() if k != "coselfplay"})
    out.update({"task": task, "runs_dir": str(runs_dir), "runner": runner, "resume": None})
    return out
