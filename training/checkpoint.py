"""Checkpoints: atomic writes, validated reads, and loading a trained policy for evaluation/export.

A checkpoint is ``torch.save`` of a plain dict (loaded with ``weights_only=True``):

    format       "covey-ckpt-v1"
    task_cfg     the task config node used for training, {"name": "cable_load", ...overrides}
    algo_cfg     the resolved ``algo`` node (PPO settings + ``policy`` network settings)
    model        state_dict of the per-group actor-critics (a ModuleDict keyed by group name;
                 it includes the normaliser buffers)
    optimizer    optimizer state_dict (its param groups carry the current learning rate)
    normalizers  {group: {"obs": ..., "critic": ..., "value": ...}} running-statistics buffers
                 (a copy of what ``model`` holds, readable without building the networks)
    global_step  env steps taken so far (num_envs x rollout steps per iteration)
    iteration    PPO iterations done
    rng          {"torch": CPU RNG state, "cuda": [states] | None, "env": env generator state,
                  "policy": action-sampling generator state}
    meta         run_id, global_step, algo, covey_version, config (resolved hydra config),
                 groups ({group: GroupDims as dict}), wall_time, best, num_evals, saved_at, threads
                 ({"torch": n, "update": n}: the counts the run computed with; a resume with
                 torch_threads=0 takes them again, training/resume.py)
    metrics      the last evaluation metrics, e.g. {"metrics/final_pos_err_m": 0.31}
    env_state    latest.pt only (optional): the env's state, ``MultiAgentEnv.state_snapshot()``
                 ({attribute path: tensor or scalar}), or a one-line reason it could not be copied
    rollout_memory  latest.pt only (optional): PPO's recurrent rollout state {group: {side: tensor}}
    rank_states  latest.pt of a torchrun run only: [per rank {num_envs, env_state, rng, rollout_memory}]
                 (training/distributed.py), so every rank resumes its own envs and streams
    schema       the payload layout version, :data:`SCHEMA` (absent in files written before it: 1)
    content_hash "sha256:<hex>" of every other key's content (:func:`content_hash`), checked on load

A file is complete or absent: ``save_checkpoint`` writes ``<path>.tmp``, fsyncs it, renames it over
``path`` and fsyncs the directory, so a process killed at any moment (SIGKILL mid-write included)
leaves the previous checkpoint intact plus at worst a stray ``.tmp``. Every problem reading one
(:func:`load_checkpoint`) is a one-line ``ValueError``/``FileNotFoundError``:
:class:`NoCheckpointError` when a run has not completed its first checkpoint yet.

``load_policy(path)`` rebuilds the deterministic actors from ``meta.groups`` and ``algo_cfg``
without constructing an environment.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from covey_common.files import atomic_write, tmp_path
from policies import GroupDims, PolicyCfg, build_actor_critics

FORMAT = "covey-ckpt-v1"
SCHEMA = 2  # 2: adds "schema" and "content_hash"; files without them (schema 1) still load
REQUIRED_KEYS = (
    "format",
    "task_cfg",
    "algo_cfg",
    "model",
    "optimizer",
    "normalizers",
    "global_step",
    "iteration",
    "rng",
    "meta",
    "metrics",
)


@dataclass
class LoadedPolicy:
    """A trained policy ready to act.

    Attributes:
        task_cfg: the task config node used for training -> ``sim.make(task_cfg, ...)``.
        actors: per agent group, a module mapping raw policy obs ``[E, A, obs_dim]`` to a
            deterministic action ``[E, A, act_dim]`` in [-1, 1] (normalisation inside; traceable).
        meta: run_id, global_step, algo, covey_version, config, groups.
    """

    task_cfg: dict
    actors: dict[str, nn.Module]
    meta: dict = field(default_factory=dict)


class NoCheckpointError(FileNotFoundError):
    """The path (a run's ``latest.pt``) holds no complete checkpoint: the run never finished its first one."""


def content_hash(payload: dict) -> str:
    """``"sha256:<hex>"`` over every key of ``payload`` but ``content_hash``: key names, tensor dtypes,
    shapes and bytes, and the repr of other values, in a fixed order (independent of pickling)."""
    h = hashlib.sha256()

    def feed(value: Any) -> None:
        if isinstance(value, torch.Tensor):
            t = value.detach().cpu().contiguous()
            h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
        elif isinstance(value, dict):
            h.update(f"D{len(value)}".encode())
            for key in sorted(value, key=repr):
                h.update(repr(key).encode())
                feed(value[key])
        elif isinstance(value, (list, tuple)):
            h.update(f"L{len(value)}".encode())
            for item in value:
                feed(item)
        else:
            h.update(f"V{value!r}".encode())

    feed({k: v for k, v in payload.items() if k != "content_hash"})
    return "sha256:" + h.hexdigest()


def save_checkpoint(path: str | Path, payload: dict) -> None:
    """Write ``payload`` to ``path`` atomically, stamped with :data:`SCHEMA` and its :func:`content_hash`.

    ``<path>.tmp``, fsync, ``os.replace``, fsync of the directory: a crash or SIGKILL at any moment
    leaves the previous file intact (at worst a stray ``.tmp``, overwritten by the next save).
    """
    path = Path(path)
    if payload.get("format") != FORMAT:
        raise ValueError(f"checkpoint payload must have format={FORMAT!r}, got {payload.get('format')!r}")
    payload = {**payload, "schema": SCHEMA}
    payload["content_hash"] = content_hash(payload)
    path.parent.mkdir(parents=True, exist_ok=True)
    # sync_dir: the rename itself must reach the disk, or a power cut could bring back the old name.
    with atomic_write(path, "wb", sync_dir=True) as f:
        torch.save(payload, f)


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict:
    """Read and validate a covey checkpoint.

    Raises:
        NoCheckpointError: ``path`` does not exist (a FileNotFoundError; the message says whether an
            interrupted first write left a ``.tmp``).
        ValueError: the file is truncated/corrupt, not a covey checkpoint, lacks keys, was written by
            a newer schema, or its content does not match its hash. Every message is one line.
    """
    path = Path(path)
    if not path.is_file():
        tmp = tmp_path(path)
        why = f" (only {tmp.name}: its first write was interrupted)" if tmp.exists() else ""
        raise NoCheckpointError(f"no complete checkpoint at {path}{why}")
    with open(path, "rb") as f:
        head = f.read(64)
    if path.suffix == ".onnx" or (head[:1] == b"\x08" and b"pytorch" in head):  # an ONNX ModelProto's first field
        raise ValueError(f"{path} is an ONNX model, not a covey checkpoint (.pt): give it as onnx={path}")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # torch raises several types for truncated / foreign files
        reason = " ".join(str(exc).split())[:200]
        raise ValueError(f"{path} is not a readable covey checkpoint (truncated or corrupt?): {reason}") from exc
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        got = payload.get("format") if isinstance(payload, dict) else type(payload).__name__
        raise ValueError(f"{path} is not a covey checkpoint: expected format {FORMAT!r}, got {got!r}")
    schema = payload.get("schema", 1)
    if not isinstance(schema, int) or schema > SCHEMA:
        raise ValueError(
            f"{path} has checkpoint schema {schema!r}; this covey reads schema <= {SCHEMA}: update covey to load it"
        )
    missing = [k for k in REQUIRED_KEYS if k not in payload]
    if missing:
        raise ValueError(f"{path} is an incomplete covey checkpoint: missing keys {missing}")
    if schema >= 2:
        stored = payload.get("content_hash")
        if stored != content_hash(payload):
            raise ValueError(
                f"{path} is corrupt: its content does not match its hash {str(stored)[:20]}... "
                "(modified or damaged after it was written)"
            )
    return payload


def group_dims_from_meta(payload: dict) -> dict[str, GroupDims]:
    """``{group: GroupDims}`` recorded in a checkpoint's ``meta.groups``."""
    try:
        return {name: GroupDims(**dims) for name, dims in payload["meta"]["groups"].items()}
    except (KeyError, TypeError) as exc:
        raise ValueError(f"checkpoint meta has no valid 'groups' record: {exc}") from exc


def load_initial_weights(models: nn.ModuleDict, path: str | Path, task_cfg: dict, group_dims: dict) -> list[str]:
    """Copy the weights (networks and normalisers) of every group ``path`` has into ``models`` (``init_from=``:
    fine-tuning a run from another, e.g. RL from a DAgger student; the optimizer starts fresh). Returns the groups.

    Raises:
        ValueError: another task, no shared group, or a group whose dimensions or networks differ.
    """
    payload = load_checkpoint(path, map_location=next(models.parameters()).device)
    old_task, new_task = payload["task_cfg"].get("name"), task_cfg.get("name")
    if old_task != new_task:
        raise ValueError(f"init_from={path}: trained on task {old_task!r}, this run is {new_task!r}")
    old = group_dims_from_meta(payload)
    shared = [g for g in models if g in old]
    if not shared:
        raise ValueError(f"init_from={path}: no group in common ({sorted(old)} vs {sorted(models)})")
    for g in shared:
        if old[g].to_dict() != group_dims[g].to_dict():
            raise ValueError(
                f"init_from={path}: group {g!r} has {old[g].to_dict()}, this run {group_dims[g].to_dict()}"
            )
        state = {k[len(g) + 1 :]: v for k, v in payload["model"].items() if k.startswith(g + ".")}
        try:
            models[g].load_state_dict(state)
        except RuntimeError as exc:
            raise ValueError(f"init_from={path}: group {g!r} does not fit this run's networks: {exc}") from exc
    return shared


def build_models_from_checkpoint(payload: dict) -> nn.ModuleDict:
    """Rebuild the per-group actor-critics of ``payload`` and load their weights."""
    models = build_actor_critics(group_dims_from_meta(payload), PolicyCfg.from_dict(payload["algo_cfg"].get("policy")))
    try:
        models.load_state_dict(payload["model"])
    except RuntimeError as exc:
        raise ValueError(f"checkpoint weights do not match the recorded network settings: {exc}") from exc
    return models


def load_policy(path: str | Path, device: str | torch.device = "cpu") -> LoadedPolicy:
    """Load the deterministic per-group actors of a checkpoint (eval mode, no gradients)."""
    payload = load_checkpoint(path)
    models = build_models_from_checkpoint(payload).to(device).eval()
    models.requires_grad_(False)
    actors = {name: ac.deterministic_actor().eval() for name, ac in models.items()}
    meta = dict(payload["meta"])
    meta["global_step"] = payload["global_step"]
    meta["metrics"] = dict(payload.get("metrics") or {})
    return LoadedPolicy(task_cfg=dict(payload["task_cfg"]), actors=actors, meta=meta)


def check_compatible(payload: dict, task_cfg: dict, groups: dict[str, GroupDims], where: str | Path) -> None:
    """Fail with a message naming the mismatch when ``payload`` was trained on another task/spec.

    Raises:
        ValueError: different task name, agent groups, or any group dimension.
    """
    problems: list[str] = []
    old_task, new_task = payload["task_cfg"].get("name"), task_cfg.get("name")
    if old_task != new_task:
        problems.append(f"task {old_task!r} in the checkpoint vs {new_task!r} in the config")
    old_groups = group_dims_from_meta(payload)
    if set(old_groups) != set(groups):
        problems.append(f"agent groups {sorted(old_groups)} in the checkpoint vs {sorted(groups)} in the env")
    for name in sorted(set(old_groups) & set(groups)):
        old, new = old_groups[name].to_dict(), groups[name].to_dict()
        for key in old:
            if old[key] != new[key]:
                problems.append(f"group {name!r}: {key} {old[key]} in the checkpoint vs {new[key]} in the env")
    if problems:
        raise ValueError(f"checkpoint {where} does not match this run: " + "; ".join(problems))


def rng_state(env_generator: torch.Generator, policy_generator: torch.Generator) -> dict[str, Any]:
    """Every random-number state a resumed run needs."""
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "env": env_generator.get_state(),
        "policy": policy_generator.get_state(),
    }


def restore_rng_state(state: dict[str, Any], env_generator: torch.Generator, policy_generator: torch.Generator) -> None:
    """Inverse of :func:`rng_state`."""
    torch.set_rng_state(state["torch"].cpu())
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])
    env_generator.set_state(state["env"].cpu())
    policy_generator.set_state(state["policy"].cpu())
