"""Export a trained policy to ONNX: ``python export.py checkpoint=<path> [out=<file.onnx>]``.

    python export.py checkpoint=assets/policies/cable_load/policy.pt
    python export.py checkpoint=runs/cable_load/<time>/checkpoints/best.pt out=runs/cable_load.onnx

Writes one model per agent group: ``out`` itself for a single group, else ``<stem>_<group>.onnx``
(default ``out``: the checkpoint path with ``.onnx``). Each graph holds observation normalisation,
the deterministic actor (with the task's action prior) and action scaling: input ``obs``, outputs
``action`` (in [-1, 1]) and ``command`` (physical units); see :mod:`policies.export`. Its metadata
(``metadata_props["covey"]``, JSON) gives the task and config, the group, the observation layout
(terms with slices, units, frames, history), the action names, units, scale and bounds, the control
rate, the task's deployment constants, the training run id, step and covey version.

Before a file is written, onnxruntime and torch must agree within 1e-5 on random observations and on
observations recorded from the env driven by the policy; otherwise nothing is written and the
exit code is 1. The last printed line is one JSON object: ``{"files": {...}, "parity": {...}}``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch

ARGS = {"checkpoint": None, "out": None, "record_steps": 200, "record_envs": 8, "seed": 0, "atol": 1e-5}


def parse_args(argv: list[str]) -> dict[str, Any]:
    import yaml

    args = dict(ARGS)
    for item in argv:
        key, sep, value = item.partition("=")
        if not sep or key not in ARGS:
            raise SystemExit(f"export.py: bad argument {item!r}; use key=value with keys {sorted(ARGS)}")
        args[key] = yaml.safe_load(value)
    if not args["checkpoint"]:
        raise SystemExit("export.py: give checkpoint=<path>")
    return args


def output_paths(out: str | Path, groups: list[str]) -> dict[str, Path]:
    """One file per group: ``out`` for a single group, else ``<stem>_<group><suffix>``."""
    out = Path(out)
    if len(groups) == 1:
        return {groups[0]: out}
    return {g: out.with_name(f"{out.stem}_{g}{out.suffix or '.onnx'}") for g in groups}


def group_metadata(env, group: str, task_cfg: dict, ckpt_meta: dict) -> dict[str, Any]:
    """The JSON metadata of one group's model (see the module docstring)."""
    from training.runner import covey_version

    spec = env.spec
    g = spec.groups[group]
    return {
        "task": env.task_name,
        "group": group,
        "n_agents": g.n_agents,
        "task_cfg": task_cfg,
        "observation": g.observations["policy"].to_dict(),
        "action": {
            "names": list(g.action_names),
            "units": list(g.action_units),
            "scale": list(g.action_scale),
            "low": g.action_low,
            "high": g.action_high,
            "outputs": {"action": "normalised, in [low, high]", "command": "action * scale, in units"},
        },
        # Discrete choices (e.g. a team strategy): option i of n is sent as -1 + 2 i / (n - 1).
        **({"choices": list(g.action_nvec)} if g.action_nvec else {}),
        "control_hz": spec.control_hz,
        "env_metadata": dict(spec.metadata),
        "deployment": env.deployment_constants(group),
        "ros": env.deployment_profile(group),
        "run_id": ckpt_meta.get("run_id"),
        "global_step": ckpt_meta.get("global_step"),
        "covey_version": covey_version(),
    }


def record_observations(env, actors: dict, steps: int) -> dict[str, torch.Tensor]:
    """Policy observations ``{group: [steps * E, A, obs_dim]}`` of the actors' groups, from the env
    driven by the actors. A group without an actor (a self-play checkpoint's opponent side) is played
    by the first actor when its observations and actions have the same shapes, else by zero actions."""
    groups = env.spec.groups
    first = next(iter(actors))
    drive = {}
    for g, spec in groups.items():
        if g in actors:
            drive[g] = actors[g]
        elif (spec.observations["policy"].shape, spec.action_dim) == (
            groups[first].observations["policy"].shape,
            groups[first].action_dim,
        ):
            drive[g] = actors[first]
    zeros = env.zero_actions()
    obs = env.reset()
    seen: dict[str, list[torch.Tensor]] = {g: [] for g in actors}
    with torch.inference_mode():
        for _ in range(steps):
            for g in seen:
                seen[g].append(obs[g]["policy"].clone())
            obs, *_ = env.step({g: drive[g](obs[g]["policy"]) if g in drive else zeros[g] for g in groups})
    return {g: torch.cat(v) for g, v in seen.items()}


def export_checkpoint(
    checkpoint: str | Path,
    out: str | Path | None = None,
    record_steps: int = 200,
    record_envs: int = 8,
    seed: int = 0,
    atol: float = 1e-5,
) -> dict[str, Any]:
    """Export every group of ``checkpoint``; returns ``{"files": {group: path}, "parity": {...}}``."""
    import sim
    from policies.export import export_onnx
    from training.checkpoint import build_models_from_checkpoint, load_checkpoint

    payload = load_checkpoint(checkpoint)
    models = build_models_from_checkpoint(payload).eval().requires_grad_(False)
    task_cfg = dict(payload["task_cfg"])
    env = sim.make(task_cfg, num_envs=record_envs, device="cpu", seed=seed)
    actors = {g: ac.deterministic_actor() for g, ac in models.items()}
    recorded = record_observations(env, actors, record_steps)
    meta = {**payload["meta"], "global_step": payload["global_step"]}
    paths = output_paths(out or Path(checkpoint).with_suffix(".onnx"), sorted(models))
    report: dict[str, Any] = {"files": {}, "parity": {}}
    for group, path in paths.items():
        ac = models[group]
        rec = recorded[group] if ac.cfg.sharing == "per_agent" else recorded[group].flatten(0, 1)
        parity = export_onnx(
            ac,
            path,
            group_metadata(env, group, task_cfg, meta),
            torch.tensor(env.spec.groups[group].action_scale),
            recorded_obs=rec,
            atol=atol,
            seed=seed,
        )
        report["files"][group] = str(path)
        report["parity"][group] = {
            "max_abs_diff_random": parity.random_action,
            "max_abs_diff_recorded": parity.recorded_action,
            "max_abs_diff_command": parity.command,
            "samples": parity.samples,
        }
    return report


def main(argv: list[str]) -> int:
    from policies.export import ExportError

    args = parse_args(argv)
    try:
        report = export_checkpoint(**args)
    except (ExportError, ValueError, FileNotFoundError) as err:
        print(f"export.py: {err}", file=sys.stderr)
        return 1
    for group, path in report["files"].items():
        p = report["parity"][group]
        print(
            f"{group}: {path} ({Path(path).stat().st_size / 1024:.0f} KiB), parity max |onnx - torch| "
            f"{p['max_abs_diff_random']:.2e} random / {p['max_abs_diff_recorded']:.2e} recorded ({p['samples']} obs)"
        )
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
