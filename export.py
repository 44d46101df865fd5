"""Export a trained policy to ONNX: ``python export.py checkpoint=<path> [out=<file.onnx>]``.

    python export.py checkpoint=runs/cable_load/<time>/checkpoints/best.pt        # -> .../best.onnx
    python export.py checkpoint=assets/policies/cable_load/policy.pt scenario=nominal out=runs/cable_load.onnx

Writes one model per agent group: ``out`` itself for a single group, else ``<stem>_<group>.onnx``
(default ``out``: the checkpoint path with ``.onnx``). An existing file is never replaced unless
``overwrite=true`` (a shipped policy's ``.onnx`` sits beside its ``.pt``). Each graph holds observation
normalisation, the encoders, a recurrent policy's memory, the deterministic actor (with the task's action prior) and
action scaling: one input per actor observation entry (``policy``, ``image``...; recurrent policies
add ``h_in``), outputs ``action`` (in [-1, 1]), ``command`` (physical units) and ``h_out``; see
:mod:`policies.export`. Its metadata (``metadata_props["covey"]``, JSON) gives the task and config,
the group, each input's layout (terms with slices, units, frames, history; shape and dtype), the
memory, the action names, units, scale and bounds, the control rate, the task's deployment constants
and ROS profile, the training run id, step and covey version.

Before a file is written, onnxruntime and torch must agree within 1e-5 on random observations and on
observations recorded from the env driven by the policy; otherwise nothing is written and the
exit code is 1. The last printed line is one JSON object: ``{"files": {...}, "parity": {...}}``.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch


@dataclass(frozen=True)
class ExportArgs:
    """Every ``key=value`` argument of ``export.py`` (parsed as train.py's: hydra's override grammar)."""

    checkpoint: str = field(default="", metadata={"help": "covey checkpoint (.pt) to export (required)"})
    out: str | None = field(default=None, metadata={"help": "output .onnx (default: the checkpoint path, .onnx)"})
    record_steps: int | None = field(
        default=None,
        metadata={"help": "env steps recorded for the parity check (default: the task's export_record_steps, 200)"},
    )
    record_envs: int = field(default=8, metadata={"help": "envs recorded for the parity check"})
    seed: int = field(default=0, metadata={"help": "seed of the recording env and the random observations"})
    scenario: str | None = field(
        default=None,
        metadata={
            "help": "a named case of the task (its env class's scenarios()) to deploy on: its overrides are merged "
            "over the trained config before the task_cfg, deployment constants and ROS profile are recorded"
        },
    )
    atol: float = field(default=1e-5, metadata={"help": "max |onnx - torch| allowed"})
    overwrite: bool = field(default=False, metadata={"help": "replace existing output files (refused otherwise)"})

    def __post_init__(self) -> None:
        for key in ("record_steps", "record_envs", "atol"):
            if getattr(self, key) is not None and getattr(self, key) <= 0:
                raise ValueError(f"{key} must be > 0, got {getattr(self, key)!r}")


def parse_args(argv: list[str]) -> dict[str, Any]:
    """``key=value`` strings -> the keyword arguments of :func:`export_checkpoint`.

    Raises:
        ConfigError: a malformed argument, an unknown key, a value of the wrong type or out of range.
    """
    from sim.core.config import ConfigError
    from training.config import parse_args as parse_typed

    args, _ = parse_typed(ExportArgs, argv)
    if not args.checkpoint:
        raise ConfigError("checkpoint", "required: give checkpoint=<path>")
    return asdict(args)


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
        # Every actor input's layout (terms, units, history); "observation" keeps the "policy" vector's
        # for readers of the v1 format.
        "observations": {name: entry.to_dict() for name, entry in g.inputs("actor").items()},
        **({"observation": g.observations["policy"].to_dict()} if "policy" in g.actor_obs else {}),
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


def record_observations(env, actors: dict, steps: int) -> dict[str, dict[str, torch.Tensor]]:
    """ONNX inputs ``{group: {input: [steps * E, A, ...]}}`` of the actors' groups (every actor
    entry, and a recurrent actor's state before each step, ``h_in``/``c_in``), from the env driven by
    the actors. A group without an actor (a self-play checkpoint's opponent side) is played by the
    first feed-forward actor when its observations and actions have the same shapes, else by zeros."""
    from policies import StatefulActor
    from policies.export import memory_names
    from training.rollout import rollout

    groups = env.spec.groups
    first = next(iter(actors))

    def layout(g: str) -> tuple:
        return tuple((k, e.shape) for k, e in groups[g].inputs("actor").items()), groups[g].action_dim

    drive = {g: actors[g] for g in groups if g in actors}
    if not isinstance(actors[first], StatefulActor):
        drive.update({g: actors[first] for g in groups if g not in actors and layout(g) == layout(first)})
    zeros = env.zero_actions()
    seen: dict[str, dict[str, list[torch.Tensor]]] = {g: {} for g in actors}

    def record(t: int, obs: dict) -> None:  # the inputs each actor reads at this step, its state before acting
        for g, actor in actors.items():
            for k in groups[g].actor_obs:
                seen[g].setdefault(k, []).append(obs[g][k].clone())
            if isinstance(actor, StatefulActor):
                x = obs[g][groups[g].actor_obs[0]]
                state = actor.memory if actor.memory is not None else actor.ac.initial_memory(*x.shape[:2])["actor"]
                names, _ = memory_names(actor.ac)
                for name, part in zip(names, state.chunk(len(names), -1), strict=True):
                    seen[g].setdefault(name, []).append(part.clone())

    def act(obs: dict) -> dict[str, torch.Tensor]:
        return {g: drive[g](obs[g]) if g in drive else zeros[g] for g in groups}

    run = rollout(env, act, steps, memory=actors, before_step=record)  # the reset outside inference mode
    with torch.inference_mode():
        for _ in run:
            pass
    return {g: {k: torch.cat(v) for k, v in entries.items()} for g, entries in seen.items()}


def export_checkpoint(
    checkpoint: str | Path,
    out: str | Path | None = None,
    record_steps: int | None = None,
    record_envs: int = 8,
    seed: int = 0,
    atol: float = 1e-5,
    scenario: str | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Export every group of ``checkpoint``; returns ``{"files": {group: path}, "parity": {...}}``.

    ``scenario`` names the task's case the model deploys on (e.g. the nominal team of a policy trained with
    faults): its config, not the training one, is recorded and drives the parity recording.

    Raises:
        FileExistsError: an output file exists and ``overwrite`` is false (checked before any work).
    """
    import sim
    from policies.export import export_onnx
    from sim.core.registry import apply_scenario
    from training.checkpoint import build_models_from_checkpoint, load_checkpoint

    payload = load_checkpoint(checkpoint)
    models = build_models_from_checkpoint(payload).eval().requires_grad_(False)
    paths = output_paths(out or Path(checkpoint).with_suffix(".onnx"), sorted(models))
    existing = [str(p) for p in paths.values() if p.exists()]
    if existing and not overwrite:
        raise FileExistsError(
            f"{', '.join(existing)} exists; give out=<new file.onnx>, or overwrite=true to replace it"
        )
    task_cfg = dict(payload["task_cfg"])
    if scenario is not None:
        task_cfg = apply_scenario(task_cfg, scenario)
    env = sim.make(task_cfg, num_envs=record_envs, device="cpu", seed=seed)
    trained_agents = {g: d["n_agents"] for g, d in payload["meta"]["groups"].items()}
    for group, ac in models.items():
        if ac.cfg.sharing == "per_agent" and env.spec.groups[group].n_agents != trained_agents[group]:
            raise ValueError(
                f"scenario {scenario!r} gives group {group!r} {env.spec.groups[group].n_agents} agents, but its "
                f"per-agent policy has {trained_agents[group]}"
            )
    actors = {g: ac.deterministic_actor() for g, ac in models.items()}
    recorded = record_observations(env, actors, record_steps or type(env).export_record_steps)
    meta = {**payload["meta"], "global_step": payload["global_step"]}
    report: dict[str, Any] = {"files": {}, "parity": {}}
    for group, path in paths.items():
        ac = models[group]
        rec = {k: v if ac.cfg.sharing == "per_agent" else v.flatten(0, 1) for k, v in recorded[group].items()}
        parity = export_onnx(
            ac,
            path,
            {**group_metadata(env, group, task_cfg, meta), "scenario": scenario},
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
    from training.config import exit_on_user_error

    if any(a in ("-h", "--help") for a in argv):
        from training.config import usage

        print("\n".join([__doc__.strip(), "", "keys:", *usage(ExportArgs)]))
        return 0
    args = exit_on_user_error("export.py", lambda: parse_args(argv))  # one line, exit code 2
    try:
        report = export_checkpoint(**args)
    except (ExportError, ValueError, FileNotFoundError, FileExistsError) as err:
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
    from covey_common.cli import run_main

    sys.exit(run_main("export.py", lambda: main(sys.argv[1:])))  # Ctrl-C: one line, exit code 130
