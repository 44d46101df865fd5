"""An exported covey model (format ``covey-onnx-v2``) run with onnxruntime on numpy arrays (no torch).

The graph has one input per observation entry (``metadata["inputs"]``: name, shape without the
batch axis, dtype, kind), outputs ``action`` (normalised) and ``command`` (physical units), and, for
a recurrent policy, memory inputs/outputs (``metadata["memory"]``: ``inputs``, ``outputs``,
``shapes`` ``[[L, H], ...]``). Per-agent weights (``metadata["input_axes"] == ["batch", "agent"]``)
take ``[B, n_agents, ...]`` and agent ``a`` reads row ``a``.

:class:`OnnxRunner` is the one runner: a batch of inputs by entry name in, the requested outputs
out, the recurrent state carried from call to call (zeros after :meth:`OnnxRunner.reset`). The
evaluation (``training/evaluation.py``, a batch of envs) and the robot (:class:`OnnxPolicy`, one
agent at batch 1) both run models through it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ONNX_METADATA_KEY = "covey"  # metadata_props key of the JSON metadata
ONNX_FORMAT = "covey-onnx-v2"
DTYPES = {"float32": np.float32, "uint8": np.uint8, "int64": np.int64, "bool": np.bool_}


def runtime_session(path: str | Path) -> Any:
    """A deterministic single-thread CPU onnxruntime session of ``path`` (one robot or one evaluation:
    threads only add latency jitter and run-to-run differences)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])


def session_metadata(session: Any, path: str | Path | None = None, strict: bool = True) -> dict:
    """The ``covey`` JSON metadata of an onnxruntime ``session``.

    Args:
        strict: raise ValueError (naming ``path``) when it is absent or not a JSON object; otherwise
            an absent entry is ``{}``.
    """
    props = session.get_modelmeta().custom_metadata_map
    if not strict:
        return json.loads(props.get(ONNX_METADATA_KEY, "{}"))
    if ONNX_METADATA_KEY not in props:
        raise ValueError(f"{path} has no '{ONNX_METADATA_KEY}' metadata: not a covey export")
    try:
        metadata = json.loads(props[ONNX_METADATA_KEY])
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: its '{ONNX_METADATA_KEY}' metadata is not valid JSON ({exc})") from exc
    if not isinstance(metadata, dict):
        raise ValueError(f"{path}: its '{ONNX_METADATA_KEY}' metadata is not a JSON object")
    return metadata


def load_policy(path: str | Path) -> tuple[Any, dict]:
    """A single-thread onnxruntime session of ``path`` and its ``covey`` metadata (no ``onnx`` package needed).

    Raises:
        FileNotFoundError: no such file.
        ValueError: not loadable by onnxruntime, or no valid ``covey`` metadata.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"model file {path} does not exist")
    try:
        session = runtime_session(path)
    except Exception as exc:  # onnxruntime raises its own types (InvalidProtobuf, Fail, ...) for a bad file
        reason = " ".join(str(exc).split())
        raise ValueError(f"{path} is not a loadable ONNX model (corrupt or truncated? re-export it): {reason}") from exc
    return session, session_metadata(session, path)


class OnnxRunner:
    """An exported model on numpy arrays: entries in (by name), outputs out, the recurrent state carried.

    Args:
        session: an onnxruntime session of the model (:func:`runtime_session`).
        metadata: its ``covey`` metadata (``memory`` is read from it; ``{}`` for none).

    Attributes:
        entries: the graph's observation inputs (every input that is not a memory input), graph order.
        memory_inputs, memory_outputs, memory_shapes: the recurrent state's names and ``[L, H]`` shapes.
        memory: the state fed at the next :meth:`run` (``[*lead, L, H]`` each), None after :meth:`reset`.
    """

    def __init__(self, session: Any, metadata: Mapping[str, Any]) -> None:
        self.session, self.metadata = session, metadata
        memory = metadata.get("memory") or {}
        self.memory_inputs: list[str] = list(memory.get("inputs", []))
        self.memory_outputs: list[str] = list(memory.get("outputs", []))
        self.memory_shapes: list[tuple[int, ...]] = [tuple(int(s) for s in shape) for shape in memory.get("shapes", [])]
        self.input_names: list[str] = [i.name for i in session.get_inputs()]
        self.output_names: list[str] = [o.name for o in session.get_outputs()]
        self.entries: list[str] = [n for n in self.input_names if n not in self.memory_inputs]
        self.memory: list[np.ndarray] | None = None

    def reset(self) -> None:
        """Forget the recurrent state: the next :meth:`run` starts from zeros."""
        self.memory = None

    def zero_memory(self, lead: Sequence[int]) -> list[np.ndarray]:
        """Zero recurrent state ``[*lead, *shape]`` float32 per memory input."""
        return [np.zeros((*lead, *shape), np.float32) for shape in self.memory_shapes]

    def run(self, feed: Mapping[str, np.ndarray], lead: Sequence[int], outputs: Sequence[str] = ("action",)) -> list:
        """The ``outputs`` for ``feed`` (entry -> ``[*lead, *shape]``); a recurrent model reads :attr:`memory`
        (zeros of ``lead`` after a reset) and keeps its new state there."""
        feed = dict(feed)
        if self.memory_inputs:
            if self.memory is None:
                self.memory = self.zero_memory(lead)
            feed.update(zip(self.memory_inputs, self.memory, strict=True))
        out = self.session.run([*outputs, *self.memory_outputs], feed)
        if self.memory_inputs:
            self.memory = list(out[len(outputs) :])
        return out[: len(outputs)]


class OnnxPolicy:
    """One agent's view of an exported model: observations in, ``(action, command)`` out, memory carried
    (batch 1 through :class:`OnnxRunner`). The robot's policy node runs models through it.

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
        self.runner = runner = OnnxRunner(self.session, meta)
        self.memory_inputs, self.memory_outputs = runner.memory_inputs, runner.memory_outputs
        self.memory_shapes = runner.memory_shapes
        if not len(self.memory_inputs) == len(self.memory_outputs) == len(self.memory_shapes):
            memory = meta.get("memory") or {}
            raise ValueError(f"{path}: metadata 'memory' lists {memory} (inputs, outputs and shapes must pair up)")
        graph_inputs, graph_outputs = set(runner.input_names), set(runner.output_names)
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
        # Every row gets this agent's state; only its own row is read back.
        self.runner.memory = [self._batch(h) for h in self.memory]
        lead = (1, self.n_agents) if self.per_agent else (1,)
        action, command = self.runner.run(feed, lead, ("action", "command"))
        row = (0, self.agent_index) if self.per_agent else (0,)
        self.memory = [np.asarray(h[row], dtype=np.float32) for h in self.runner.memory or []]
        return np.asarray(action[row]), np.asarray(command[row])
