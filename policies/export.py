"""ONNX export of one agent group's deterministic actor, checked against torch before it is kept.

The exported graph is the whole observation -> command map a robot needs, format ``covey-onnx-v2``:

    inputs  one per actor observation entry, named by the entry (``policy``, ``image``, graph
            parts...), ``[B, *shape]`` in the entry's dtype (uint8 images raw; the graph scales them)
            (``[B, A, *shape]`` for ``per_agent`` weights: agent a reads row a)
            recurrent policies also take ``h_in`` (an LSTM: ``h_in``, ``c_in``) ``[B, L, H]``
    action  same leading axes, [.., act_dim]  in [-1, 1] (what ``env.step`` takes)
    command same leading axes, [.., act_dim]  ``action * action_scale``, physical units
            recurrent policies also return ``h_out`` (``c_out``): the next step's state; feed
            zeros at the start of an episode

with observation normalisation, the encoders (CNN, graph), the memory, the action prior, the actor
MLP, the clamp and the scaling inside. ``B`` (the batch) is a dynamic axis. The model's
``metadata_props`` hold one JSON object under the key ``covey`` (``ONNX_METADATA_KEY``) describing
the task, each input (``inputs``), the memory (``memory``), the action meaning, rates and
provenance; see :func:`export_onnx`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from covey_common.files import atomic_path
from covey_common.onnx import ONNX_FORMAT, ONNX_METADATA_KEY
from covey_common.onnx import runtime_session as onnx_runtime_session
from policies.actor_critic import ActorCritic, DeterministicActor

PARITY_ATOL = 1e-5  # max |onnxruntime - torch| on the normalised action
OPSET = 18  # the lowest the torch 2.13 dynamo exporter implements (asking 17 converts down, with a warning)


class ExportError(RuntimeError):
    """The exported model failed its parity check (nothing was written) or could not be built."""


def memory_names(actor_critic: ActorCritic) -> tuple[list[str], list[str]]:
    """ONNX names of the recurrent state ``(inputs, outputs)``; empty for feed-forward policies."""
    if not actor_critic.recurrent:
        return [], []
    if actor_critic.actor_memory.kind == "lstm":
        return ["h_in", "c_in"], ["h_out", "c_out"]
    return ["h_in"], ["h_out"]


class OnnxActor(nn.Module):
    """``(*entries, *memory) -> (action in [-1, 1], command = action * scale, *memory)``: the exported graph."""

    def __init__(self, actor_critic: ActorCritic, action_scale: Tensor) -> None:
        super().__init__()
        self.actor = DeterministicActor(actor_critic)
        self.n_inputs = len(actor_critic.dims.actor_inputs)
        self.recurrent = actor_critic.recurrent
        self.lstm = self.recurrent and actor_critic.actor_memory.kind == "lstm"
        self.register_buffer("action_scale", action_scale.detach().float().clone())

    def forward(self, *args: Tensor) -> tuple[Tensor, ...]:
        xs = list(args[: self.n_inputs])
        if not self.recurrent:
            action = self.actor(xs)
            return action, action * self.action_scale
        state = torch.cat(args[self.n_inputs :], -1) if self.lstm else args[self.n_inputs]
        action, state = self.actor(xs, state)
        if self.lstm:
            h, c = state.chunk(2, -1)
            return action, action * self.action_scale, h, c
        return action, action * self.action_scale, state


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
    recorded_obs: Tensor | Mapping[str, Tensor] | None = None,
    random_samples: int = 4096,
    atol: float = PARITY_ATOL,
    seed: int = 0,
) -> ParityReport:
    """Export ``actor_critic``'s deterministic actor to ``path`` after a parity check.

    Args:
        actor_critic: the group's networks (CPU or any device; exported from a CPU copy).
        path: output ``.onnx`` file; written only when the check passes (temp file, then rename).
        metadata: JSON-serialisable description stored under ``covey`` (``format``, ``inputs``,
            ``memory`` and ``input_axes`` are added).
        action_scale: ``[act_dim]`` physical units per unit of normalised action.
        recorded_obs: observations recorded from the env, checked in addition to random ones:
            ONNX input name -> ``[S, *shape]`` (shared) or ``[S, A, *shape]`` (per-agent), the
            memory inputs included for a recurrent policy; a bare tensor for a single input.
        random_samples: random inputs checked (vectors around the normaliser's statistics, random
            pixels, random graphs, random memory states).
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
    mem_in, mem_out = memory_names(module.actor.ac)
    input_names = [i.name for i in dims.actor_inputs] + mem_in
    output_names = ["action", "command", *mem_out]
    lead = (2, dims.n_agents) if per_agent else (2,)  # batch 2: torch.export specialises size-1 axes
    example = _random_inputs(module.actor.ac, lead, torch.Generator().manual_seed(seed))
    axes = ["batch", "agent"] if per_agent else ["batch"]
    batch = torch.export.Dim("batch")
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:  # removed on any failure: nothing is written to path
        try:
            with torch.no_grad(), _quiet_exporter():
                torch.onnx.export(
                    module,
                    tuple(example[n] for n in input_names),
                    str(tmp),
                    input_names=input_names,
                    output_names=output_names,
                    dynamic_shapes=(tuple({0: batch} for _ in input_names),),  # one entry: the *args tuple
                    opset_version=OPSET,
                    external_data=False,
                    verbose=False,
                )
            model = onnx.load(str(tmp))
            meta = {
                "format": ONNX_FORMAT,
                **dict(metadata),
                "inputs": [{**i.to_dict(), **_entry_meta(metadata, i.name)} for i in dims.actor_inputs],
                "memory": _memory_meta(module.actor.ac, mem_in, mem_out),
                "input_axes": axes,
            }
            onnx.helper.set_model_props(model, {ONNX_METADATA_KEY: json.dumps(meta)})
            onnx.checker.check_model(model)
            onnx.save(model, str(tmp))
            report = _parity(module, tmp, input_names, output_names, lead[1:], recorded_obs, random_samples, seed)
        except ExportError:
            raise
        except Exception as exc:
            raise ExportError(f"ONNX export failed: {exc}") from exc
        rel_cmd = report.command / float(action_scale.abs().max().clamp(min=1e-12))
        if not (report.max_action <= atol and rel_cmd <= atol):  # a NaN difference fails too
            raise ExportError(
                f"ONNX parity check failed: max |onnx - torch| = {report.max_action:.3g} on actions "
                f"(random {report.random_action:.3g}, recorded {report.recorded_action}), {report.command:.3g} on "
                f"commands; allowed {atol:g}. Nothing written to {path}."
            )
    return report


@contextlib.contextmanager
def _quiet_exporter() -> Iterator[None]:
    """torch's exporter logs a line per torchvision op it skips (torchvision is never installed here) and
    warns about its own deprecated internals and the constants it lifts (a recurrent policy's weights): ~20
    lines before every export's result that say nothing about the model. Errors still raise."""
    logger = logging.getLogger("torch.onnx._internal.exporter._registration")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            # Raised from torch.export's generated code (module "<eval_with_key>"), so matched by category
            # and message, inside the export call only.
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.filterwarnings("ignore", message="The tensor attributes", category=UserWarning)
            warnings.filterwarnings("ignore", message="# The axis name", category=UserWarning)
            yield
    finally:
        logger.setLevel(level)


def _entry_meta(metadata: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The env's description of entry ``name`` (``metadata["observations"][name]``: terms, units,
    history), if the caller gave one."""
    return dict((metadata.get("observations") or {}).get(name, {}))


def _memory_meta(ac: ActorCritic, mem_in: list[str], mem_out: list[str]) -> dict[str, Any]:
    if not mem_in:
        return {}
    layers, hidden = ac.actor_memory.layers, ac.actor_memory.hidden
    return {
        "kind": ac.actor_memory.kind,
        "inputs": mem_in,
        "outputs": mem_out,
        "shapes": [[layers, hidden] for _ in mem_in],
        "reset": "zeros at the start of every episode (and after any safe/invalid tick)",
    }


def _cpu_copy(actor_critic: ActorCritic) -> ActorCritic:
    copy = ActorCritic(actor_critic.dims, actor_critic.cfg)
    copy.load_state_dict({k: v.detach().cpu() for k, v in actor_critic.state_dict().items()})
    return copy.eval().requires_grad_(False)


def _random_inputs(ac: ActorCritic, lead: tuple[int, ...], gen: torch.Generator) -> dict[str, Tensor]:
    """Random ONNX inputs by name, ``[*lead, *shape]``, exercising the ranges the graph sees:
    vectors at 1x-3x the training spread (clipping and saturation included), any pixel value,
    random graphs with random masks, random memory states."""
    out: dict[str, Tensor] = {}
    for spec in ac.dims.actor_inputs:
        shape = (*lead, *spec.shape)
        if spec.kind == "vector":
            norm = ac.actor_encoder.norms[spec.name]
            mean, std = norm.mean.detach().cpu().float(), norm.var.detach().cpu().float().sqrt()
            spread = torch.rand(*lead, 1, generator=gen) * 2 + 1
            out[spec.name] = mean + std * spread * torch.randn(*shape, generator=gen)
        elif spec.kind == "image":
            out[spec.name] = torch.randint(0, 256, shape, generator=gen, dtype=torch.uint8)
        elif spec.dtype == "bool":
            out[spec.name] = torch.rand(shape, generator=gen) < 0.8
        elif spec.dtype == "int64":
            high = 8 if spec.role != "edge_index" else max(1, _graph_nodes(ac, spec.graph))
            out[spec.name] = torch.randint(0, high, shape, generator=gen)
        else:
            out[spec.name] = torch.randn(*shape, generator=gen)
    names, _ = memory_names(ac)
    for name in names:
        out[name] = 0.5 * torch.randn(*lead, ac.actor_memory.layers, ac.actor_memory.hidden, generator=gen)
    return out


def _graph_nodes(ac: ActorCritic, graph: str) -> int:
    for spec in ac.dims.actor_inputs:
        if spec.graph == graph and spec.role in ("node_features", "node_vectors", "node_types", "node_mask"):
            return spec.shape[0]
    return 1


def _parity(
    module: OnnxActor,
    path: Path,
    input_names: list[str],
    output_names: list[str],
    agent_axis: tuple[int, ...],
    recorded: Tensor | Mapping[str, Tensor] | None,
    random_samples: int,
    seed: int,
) -> ParityReport:
    """Run torch and onnxruntime on the same inputs; max abs differences (memory outputs count as actions)."""
    session = onnx_runtime_session(path)
    gen = torch.Generator().manual_seed(seed)

    def diff(inputs: Mapping[str, Tensor]) -> tuple[float, float]:
        args = [inputs[n].detach().cpu() for n in input_names]
        with torch.no_grad():
            outs_t = module(*args)
        feed = {n: np.ascontiguousarray(a.numpy()) for n, a in zip(input_names, args, strict=True)}
        outs_o = session.run(output_names, feed)
        errs = [float(np.abs(o - t.numpy()).max()) for o, t in zip(outs_o, outs_t, strict=True)]
        return max(errs[:1] + errs[2:]), errs[1]

    rand_act, rand_cmd = diff(_random_inputs(module.actor.ac, (random_samples, *agent_axis), gen))
    rec_act, rec_cmd = None, 0.0
    samples = random_samples
    if recorded is not None:
        if isinstance(recorded, Tensor):
            recorded = {input_names[0]: recorded}
        if len(recorded) and next(iter(recorded.values())).numel():
            rec_act, rec_cmd = diff(recorded)
            samples += next(iter(recorded.values())).shape[0]
    return ParityReport(rand_act, rec_act, max(rand_cmd, rec_cmd), samples)
