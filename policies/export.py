"""ONNX export of one agent group's deterministic actor, checked against torch before it is kept.

The exported graph is the whole observation -> command map a robot needs:

    obs     [B, obs_dim]  float32   raw policy observation, exactly as the simulator builds it
            ([B, A, obs_dim] for ``per_agent`` weights: agent a reads row a)
    action  same leading axes, [.., act_dim]  in [-1, 1] (what ``env.step`` takes)
    command same leading axes, [.., act_dim]  ``action * action_scale``, physical units

with observation normalisation, the action prior, the actor MLP, the clamp and the scaling inside.
``B`` (the batch) is a dynamic axis. The model's ``metadata_props`` hold one JSON object under the
key ``covey`` (``ONNX_METADATA_KEY``) describing the task, observation layout, action meaning,
rates and provenance; see :func:`export_onnx`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from policies.actor_critic import ActorCritic

ONNX_METADATA_KEY = "covey"
ONNX_FORMAT = "covey-onnx-v1"
PARITY_ATOL = 1e-5  # max |onnxruntime - torch| on the normalised action
OPSET = 18  # the lowest the torch 2.13 dynamo exporter implements (asking 17 converts down, with a warning)


class ExportError(RuntimeError):
    """The exported model failed its parity check (nothing was written) or could not be built."""


class OnnxActor(nn.Module):
    """``obs -> (action in [-1, 1], command = action * scale)``: the graph that gets exported."""

    def __init__(self, actor_critic: ActorCritic, action_scale: Tensor) -> None:
        super().__init__()
        self.actor = actor_critic.deterministic_actor()
        self.register_buffer("action_scale", action_scale.detach().float().clone())

    def forward(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        action = self.actor(obs)
        return action, action * self.action_scale


@dataclass(frozen=True)
class ParityReport:
    """Max abs differences between onnxruntime and torch (normalised action and physical command)."""

    random_action: float
    recorded_action: float | None
    command: float
    samples: int

    @property
    def max_action(self) -> float:
        return max(self.random_action, self.recorded_action or 0.0)


def onnx_runtime_session(path: str | Path) -> Any:
    """A deterministic single-thread CPU onnxruntime session."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])


def read_metadata(path: str | Path) -> dict:
    """The ``covey`` JSON metadata of an exported model (needs the ``onnx`` package)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    props = {p.key: p.value for p in model.metadata_props}
    if ONNX_METADATA_KEY not in props:
        raise ValueError(f"{path} has no '{ONNX_METADATA_KEY}' metadata: not a covey export")
    return json.loads(props[ONNX_METADATA_KEY])


def export_onnx(
    actor_critic: ActorCritic,
    path: str | Path,
    metadata: Mapping[str, Any],
    action_scale: Tensor,
    recorded_obs: Tensor | None = None,
    random_samples: int = 4096,
    atol: float = PARITY_ATOL,
    seed: int = 0,
) -> ParityReport:
    """Export ``actor_critic``'s deterministic actor to ``path`` after a parity check.

    Args:
        actor_critic: the group's networks (CPU or any device; exported from a CPU copy).
        path: output ``.onnx`` file; written only when the check passes (temp file, then rename).
        metadata: JSON-serialisable description stored under ``covey`` (``format`` is added).
        action_scale: ``[act_dim]`` physical units per unit of normalised action.
        recorded_obs: ``[S, obs_dim]`` (shared) or ``[S, A, obs_dim]`` (per-agent) observations
            recorded from the env; checked in addition to random ones.
        random_samples: random observations checked, drawn around the normaliser's statistics.
        atol: the largest allowed ``|onnx - torch|`` on the normalised action.

    Returns:
        The parity differences.

    Raises:
        ExportError: parity above ``atol`` (the file is not written) or export failure.
    """
    import onnx

    path = Path(path)
    dims = actor_critic.dims
    per_agent = actor_critic.cfg.sharing == "per_agent"
    module = OnnxActor(_cpu_copy(actor_critic), action_scale.cpu()).eval()
    lead = (2, dims.n_agents) if per_agent else (2,)  # batch 2: torch.export specialises size-1 axes
    example = torch.zeros(*lead, dims.obs_dim)
    names = ["batch", "agent"] if per_agent else ["batch"]
    tmp = path.with_name(path.name + ".tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with torch.no_grad():
            torch.onnx.export(
                module,
                (example,),
                str(tmp),
                input_names=["obs"],
                output_names=["action", "command"],
                dynamic_shapes={"obs": {0: torch.export.Dim("batch")}},
                opset_version=OPSET,
                external_data=False,
                verbose=False,
            )
        model = onnx.load(str(tmp))
        meta = {"format": ONNX_FORMAT, **dict(metadata), "input_axes": names}
        onnx.helper.set_model_props(model, {ONNX_METADATA_KEY: json.dumps(meta)})
        onnx.checker.check_model(model)
        onnx.save(model, str(tmp))
        report = _parity(module, tmp, dims.n_agents if per_agent else None, recorded_obs, random_samples, seed)
    except ExportError:
        tmp.unlink(missing_ok=True)
        raise
    except Exception as exc:
        tmp.unlink(missing_ok=True)
        raise ExportError(f"ONNX export failed: {exc}") from exc
    rel_cmd = report.command / float(action_scale.abs().max().clamp(min=1e-12))
    if report.max_action > atol or rel_cmd > atol:
        tmp.unlink(missing_ok=True)
        raise ExportError(
            f"ONNX parity check failed: max |onnx - torch| = {report.max_action:.3g} on actions "
            f"(random {report.random_action:.3g}, recorded {report.recorded_action}), {report.command:.3g} on "
            f"commands; allowed {atol:g}. Nothing written to {path}."
        )
    os.replace(tmp, path)
    return report


def _cpu_copy(actor_critic: ActorCritic) -> ActorCritic:
    copy = ActorCritic(actor_critic.dims, actor_critic.cfg)
    copy.load_state_dict({k: v.detach().cpu() for k, v in actor_critic.state_dict().items()})
    return copy.eval().requires_grad_(False)


def _parity(
    module: OnnxActor,
    path: Path,
    n_agents: int | None,
    recorded_obs: Tensor | None,
    random_samples: int,
    seed: int,
) -> ParityReport:
    """Run torch and onnxruntime on the same observations; max abs differences."""
    session = onnx_runtime_session(path)
    norm = module.actor.ac.obs_norm
    mean, std = norm.mean.detach().cpu().float(), norm.var.detach().cpu().float().sqrt()
    gen = torch.Generator().manual_seed(seed)
    lead = (random_samples, n_agents) if n_agents else (random_samples,)
    # Around the training distribution (1x-3x its spread), so clipping and saturation are exercised too.
    spread = torch.rand(*lead, 1, generator=gen) * 2 + 1
    random_obs = mean + std * spread * torch.randn(*lead, mean.numel(), generator=gen)

    def diff(obs: Tensor) -> tuple[float, float]:
        with torch.no_grad():
            act_t, cmd_t = module(obs)
        act_o, cmd_o = session.run(["action", "command"], {"obs": np.ascontiguousarray(obs.numpy(), np.float32)})
        return float(np.abs(act_o - act_t.numpy()).max()), float(np.abs(cmd_o - cmd_t.numpy()).max())

    rand_act, rand_cmd = diff(random_obs)
    rec_act, rec_cmd = None, 0.0
    samples = random_samples
    if recorded_obs is not None and recorded_obs.numel():
        rec_act, rec_cmd = diff(recorded_obs.detach().cpu().float())
        samples += recorded_obs.shape[0]
    return ParityReport(rand_act, rec_act, max(rand_cmd, rec_cmd), samples)
