"""An exported covey model (format ``covey-onnx-v2``) run for one agent with onnxruntime (numpy only, no torch).

The graph has one input per observation entry (``metadata["inputs"]``: name, shape without the
batch axis, dtype, kind), outputs ``action`` (normalised) and ``command`` (physical units), and, for
a recurrent policy, memory inputs/outputs (``metadata["memory"]``: ``inputs``, ``outputs``,
``shapes`` ``[[L, H], ...]``). Per-agent weights (``metadata["input_axes"] == ["batch", "agent"]``)
take ``[B, n_agents, ...]`` and agent ``a`` reads row ``a``. :class:`OnnxPolicy` feeds batch 1,
carries the hidden state from tick to tick and zeroes it on :meth:`OnnxPolicy.reset`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

ONNX_METADATA_KEY = "covey"  # = policies.export.ONNX_METADATA_KEY (not imported: policies needs torch)
DTYPES = {"float32": np.float32, "uint8": np.uint8, "int64": np.int64, "bool": np.bool_}


def load_policy(path: str | Path) -> tuple[Any, dict]:
    """A single-thread onnxruntime session of ``path`` and its ``covey`` metadata (no ``onnx`` package needed)."""
    import onnxruntime as ort

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"model file {path} does not exist")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1  # one robot, batch 1: threads only add latency jitter
    opts.inter_op_num_threads = 1
    try:
        session = ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own types (InvalidProtobuf, Fail, ...) for a bad file
        reason = " ".join(str(exc).split())
        raise ValueError(f"{path} is not a loadable ONNX model (corrupt or truncated? re-export it): {reason}") from exc
    props = session.get_modelmeta().custom_metadata_map
    if ONNX_METADATA_KEY not in props:
        raise ValueError(f"{path} has no '{ONNX_METADATA_KEY}' metadata: not a covey export")
    try:
        metadata = json.loads(props[ONNX_METADATA_KEY])
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: its '{ONNX_METADATA_KEY}' metadata is not valid JSON ({exc})") from exc
    if not isinstance(metadata, dict):
        raise ValueError(f"{path}: its '{ONNX_METADATA_KEY}' metadata is not a JSON object")
    return session, metadata


class OnnxPolicy:
    """One agent's view of an exported model: observations in, ``(action, command)`` out, memory carried.

    Args:
        path: the ``.onnx`` file.
        agent_index: the row this agent reads in a per-agent model (and its deployment constants).

    Raises:
        FileNotFoundError: no such file.
        ValueError: not a covey-onnx-v2 export, or its graph and metadata disagree.
    """

    def __init__(self, path: str | Path, agent_index: int) -> None:
        self.session, self.metadata = load_policy(path)
        meta = self.metadata
        if not meta.get("inputs"):
            raise ValueError(
                f"{path} is a {meta.get('format', 'covey-onnx-v1')} export (one 'obs' input, no per-entry 'inputs'): "
                "re-export it with export.py (covey-onnx-v2)"
            )
        self.agent_index = agent_index
        self.entries: list[dict] = [dict(e) for e in meta["inputs"]]
        self.per_agent = list(meta.get("input_axes", ["batch"])) == ["batch", "agent"]
        self.n_agents = int(meta.get("n_agents", 1))
        memory = meta.get("memory") or {}
        self.memory_inputs: list[str] = list(memory.get("inputs", []))
        self.memory_outputs: list[str] = list(memory.get("outputs", []))
        self.memory_shapes = [tuple(int(s) for s in shape) for shape in memory.get("shapes", [])]
        if not len(self.memory_inputs) == len(self.memory_outputs) == len(self.memory_shapes):
            raise ValueError(f"{path}: metadata 'memory' lists {memory} (inputs, outputs and shapes must pair up)")
        graph_inputs = {i.name for i in self.session.get_inputs()}
        graph_outputs = {o.name for o in self.session.get_outputs()}
        wanted_in = [e["name"] for e in self.entries] + self.memory_inputs
        wanted_out = ["action", "command", *self.memory_outputs]
        if set(wanted_in) != graph_inputs or not set(wanted_out) <= graph_outputs:
            raise ValueError(
                f"{path}: graph inputs {sorted(graph_inputs)} / outputs {sorted(graph_outputs)} do not match the "
                f"metadata's {wanted_in} / {wanted_out}"
            )
        for e in self.entries:
            if str(e.get("dtype")) not in DTYPES:
                raise ValueError(
                    f"{path}: input {e['name']!r} has dtype {e.get('dtype')!r}, not one of {sorted(DTYPES)}"
                )
        self._outputs = wanted_out
        self.memory: list[np.ndarray] = []
        self.reset()

    def reset(self) -> None:
        """Zero the recurrent state (start of an episode, and after every safe tick)."""
        self.memory = [np.zeros(shape, dtype=np.float32) for shape in self.memory_shapes]

    def _batch(self, value: np.ndarray) -> np.ndarray:
        # A per-agent model gives each row its own agent's weights; every row gets our value, we read ours.
        if self.per_agent:
            return np.repeat(value[None, None], self.n_agents, axis=1)
        return value[None]

    def run(self, obs: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """``(action [act_dim] normalised, command [act_dim] physical)`` for ``obs`` (entry name -> array
        ``[*shape]``); the recurrent state moves on to this tick's outputs."""
        feed = {}
        for e in self.entries:
            value = np.asarray(obs[e["name"]])
            if value.shape != tuple(e["shape"]):
                raise ValueError(
                    f"observation {e['name']!r} has shape {value.shape}, the model takes {tuple(e['shape'])}"
                )
            feed[e["name"]] = self._batch(value.astype(DTYPES[e["dtype"]], copy=False))
        for name, h in zip(self.memory_inputs, self.memory, strict=True):
            feed[name] = self._batch(h)
        out = self.session.run(self._outputs, feed)
        row = (0, self.agent_index) if self.per_agent else (0,)
        self.memory = [np.asarray(h[row], dtype=np.float32) for h in out[2:]]
        return np.asarray(out[0][row]), np.asarray(out[1][row])
