"""Resuming a run: finding its checkpoint, writing and restoring everything a run continues from.

    point = find_resume_point(Path("runs/cable_load/2026-11-21_10-00-00"), "cable_load", device)
    state = restore(runner, point)      # weights, optimiser, RNG, env and rollout state -> RunState

``resume=`` names a run directory (its ``checkpoints/latest.pt``; where no complete one exists but
``best.pt`` does, that one, said in one line) or a checkpoint file inside one. Every problem is one
line (``NoCheckpointError``, ``ValueError``, ``FileNotFoundError``). ``latest.pt`` holds the env's state,
the recurrent rollout state and the thread counts the run had (reused where ``torch_threads=0``), so a
run killed at any moment (SIGKILL included) resumes exactly: the same steps and the same metric curve
as if it had never stopped; where the env state cannot be restored the resume says why in one line and
the envs restart their episodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from training.checkpoint import (
    FORMAT,
    NoCheckpointError,
    check_compatible,
    load_checkpoint,
    restore_rng_state,
    rng_state,
)


@dataclass
class RunState:
    """What a checkpoint restores besides weights and RNG."""

    global_step: int = 0
    iteration: int = 0
    wall_time: float = 0.0  # s of training before this process
    best_value: float | None = None
    last_eval: dict[str, float] = field(default_factory=dict)


@dataclass
class ResumePoint:
    """The checkpoint a ``resume=`` continues from, read and validated (not yet put into a run)."""

    run_dir: Path
    path: Path
    payload: dict[str, Any]

    @property
    def run_id(self) -> str:
        return str(self.payload["meta"].get("run_id", self.run_dir.name))

    @property
    def threads(self) -> dict[str, int]:
        """The thread counts the run had (``{"torch": n, "update": n}``; empty in older checkpoints)."""
        return dict(self.payload["meta"].get("threads") or {})


def find_resume_point(path: Path, task: str, device: torch.device | str = "cpu") -> ResumePoint:
    """Read the checkpoint ``resume=path`` names (a run directory or a checkpoint file inside one).

    A directory without a complete ``latest.pt`` (its first write was interrupted) resumes from its
    ``best.pt`` where there is one (said in one line); with neither, the one-line advice to start over.
    """
    if path.is_dir():
        run_dir, ckpt = path, path / "checkpoints" / "latest.pt"
        best = ckpt.with_name("best.pt")
        if not ckpt.is_file() and best.is_file():
            print(f"resume={path}: no complete checkpoints/latest.pt; resuming from checkpoints/best.pt")
            ckpt = best
    elif path.is_file():
        run_dir, ckpt = path.parent.parent, path
    else:
        raise FileNotFoundError(f"resume={path}: no such run directory or checkpoint")
    try:
        payload = load_checkpoint(ckpt, map_location=device)
    except NoCheckpointError as exc:
        raise NoCheckpointError(
            f"resume={path}: the run has no complete checkpoint yet ({exc}); "
            f"start over without resume= (python train.py task={task} ...), or delete {run_dir}"
        ) from None
    return ResumePoint(run_dir, ckpt, payload)


def restore(runner: Any, point: ResumePoint) -> RunState:
    """Put ``point`` into ``runner`` (a :class:`training.runner.Runner`): weights, optimiser, RNG, env and
    rollout state (:func:`restore_env`); returns the run's state. Raises a one-line ``ValueError`` when
    the checkpoint does not fit the run (task, groups, networks)."""
    payload, ckpt = point.payload, point.path
    check_compatible(payload, runner.task_cfg, runner.group_dims, ckpt)
    old_policy, algo = payload["algo_cfg"].get("policy", {}), runner.cfg.get("algo", {})
    if old_policy != algo.get("policy", {}):
        raise ValueError(
            f"checkpoint {ckpt} was trained with algo.policy={old_policy}; "
            f"this run has algo.policy={algo.get('policy')}"
        )
    try:
        runner.models.load_state_dict(payload["model"])
        runner.alg.optimizer.load_state_dict(payload["optimizer"])
    except (RuntimeError, ValueError, KeyError) as exc:
        raise ValueError(f"checkpoint {ckpt} does not fit this run's networks: {exc}") from exc
    restore_rng_state(payload["rng"], runner.env.rng, runner.generator)
    runner._env_restored = restore_env(runner, payload, ckpt)
    meta = payload["meta"]
    best = meta.get("best") or {}
    runner._num_evals = int(meta.get("num_evals", 0))
    return RunState(
        global_step=int(payload["global_step"]),
        iteration=int(payload["iteration"]),
        wall_time=float(meta.get("wall_time", 0.0)),
        best_value=best.get("value") if best.get("metric") == runner.best_metric else None,
        last_eval=dict(payload.get("metrics") or {}),
    )


def restore_env(runner: Any, payload: dict, ckpt: Path) -> bool:
    """Put the checkpoint's env and rollout state back (exact resume: True), or say in one line why not.

    Under torchrun each rank takes its own envs, random streams and rollout state from
    ``rank_states`` (gathered by rank 0 into ``latest.pt``); without them (a single-process
    checkpoint, or another number of ranks) every rank re-seeds its streams and restarts its envs.
    """
    env, dist = runner.env, runner.dist
    env_state = payload.get("env_state")
    saved_envs = payload["meta"]["config"].get("num_envs", -1)
    memory = payload.get("rollout_memory") or {}
    why = None
    if dist is not None:
        states, world = payload.get("rank_states"), dist.world_size
        if states is not None and len(states) == world:
            mine = states[dist.rank]
            restore_rng_state(mine["rng"], env.rng, runner.generator)
            env_state, saved_envs, memory = mine["env_state"], mine["num_envs"], mine["rollout_memory"] or {}
        else:
            # Fresh streams per rank (not rank 0's saved ones on every rank, which would repeat its noise).
            stream = (runner.seed * 1_000_003 + int(payload["iteration"])) % (2**63)
            env.rng.manual_seed(stream)
            runner.generator.manual_seed(stream + 1)
            why = "written by one process" if states is None else f"written by {len(states)} ranks, not {world}"
    if why is not None:
        pass
    elif env_state is None:
        why = "it holds no env state (not a latest.pt, or written before covey saved it)"
    elif isinstance(env_state, str):
        why = f"the task's env state could not be saved: {env_state}"
    elif env.num_envs != int(saved_envs):
        why = f"num_envs differs ({saved_envs} in the checkpoint)"
    else:
        try:
            why = env.load_state_snapshot(env_state)
        except Exception as exc:  # noqa: BLE001 - failed (half-way): learn() resets the env instead
            why = f"{type(exc).__name__}: {exc}"
    if why is None and memory:
        try:
            for name, sides in memory.items():
                for side, value in sides.items():
                    runner.alg.memory[name][side].copy_(value)
        except (KeyError, RuntimeError) as exc:
            why = f"the recurrent rollout state does not fit ({exc})"
    who = f"resume (rank {dist.rank})" if dist is not None else "resume"
    step = payload["global_step"]
    if why is None and runner.is_main:
        note = _threads_note(runner, payload)
        print(f"{who}: {ckpt} at step {step:,}: exact (weights, optimiser, RNG, env state{note})")
    elif why is not None:
        # After a partial env restore the env must start over anyway: reset in learn().
        print(
            f"{who}: {ckpt} at step {step:,}: the envs restart their episodes, so the "
            f"metric curve goes on statistically, not step for step: {why}"
        )
    return why is None


def _threads_note(runner: Any, payload: dict) -> str:
    """`` and threads`` where the run computes with the thread counts the checkpoint records (bit for bit),
    else which differ (1 and 2 threads round a few reductions differently: the curve may differ in the last bits)."""
    had = payload["meta"].get("threads") or {}
    now = {"torch": runner.run.torch_threads, "update": runner.update_threads.current}
    if len(runner.update_threads.candidates) > 1:
        now["update"] = "timed"  # update_threads=-1: the choice follows the machine's load
    changed = [f"{k} {had[k]} -> {now[k]}" for k in ("torch", "update") if k in had and had[k] != now[k]]
    if not had:
        return "; threads not recorded"
    return " and threads" if not changed else f"; threads changed ({', '.join(changed)}): the last bits may differ"


# ----------------------------------------------------------------------------- writing


def checkpoint_payload(runner: Any, resumable: bool, meta: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint of ``runner`` as it is now (training/checkpoint.py's layout), ``meta`` holding the
    run's record. ``resumable`` (``latest.pt``, written at an iteration boundary) adds the env's state
    (``env_state``: :meth:`sim.core.env.MultiAgentEnv.state_snapshot`, or why it cannot be copied) and the
    recurrent rollout state (``rollout_memory``)."""
    st = runner.state
    payload = {
        "format": FORMAT,
        "task_cfg": runner.task_cfg,
        "algo_cfg": dict(runner.cfg.get("algo", {})),
        "model": runner.models.state_dict(),
        "optimizer": runner.alg.optimizer.state_dict(),
        "normalizers": {
            name: {
                "obs": ac.actor_encoder.norms.state_dict(),
                "critic": ac.critic_encoder.norms.state_dict(),
                "value": ac.value_norm.state_dict(),
            }
            for name, ac in runner.models.items()
        },
        "global_step": st.global_step,
        "iteration": st.iteration,
        "rng": rng_state(runner.env.rng, runner.generator),
        "meta": {**meta, "saved_at": datetime.now().isoformat(timespec="seconds")},
        "metrics": dict(st.last_eval),
    }
    if resumable:
        payload["env_state"] = _env_snapshot(runner.env)
        payload["rollout_memory"] = runner.alg.memory
    return payload


def gather_rank_states(runner: Any) -> list[dict[str, Any]] | None:
    """Every rank's env snapshot, random streams and recurrent rollout state (on the CPU), on rank 0
    (``rank_states`` of a torchrun run's ``latest.pt``; every rank must call it)."""
    mine = {
        "num_envs": runner.env.num_envs,
        "env_state": _env_snapshot(runner.env),
        "rng": rng_state(runner.env.rng, runner.generator),
        "rollout_memory": runner.alg.memory,
    }
    return runner.dist.gather_object(_to_cpu(mine))


def _env_snapshot(env: Any) -> dict[str, Any] | str:
    try:
        return env.state_snapshot()
    except Exception as exc:  # noqa: BLE001 - never lose a checkpoint to the optional env copy
        return f"the env state snapshot failed ({type(exc).__name__}: {exc})"


def _to_cpu(value: Any) -> Any:
    """Tensors in nested dicts / lists / tuples moved to the CPU (what one rank sends another)."""
    if isinstance(value, Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_to_cpu(v) for v in value)
    return value
