"""The robot's observation-entry builders of a deployment profile: the generic ``vector`` and ``image`` ones, and
:func:`make_builder`, which picks one by name or imports a task's ``"module:Class"`` (data in the model's metadata,
not a code dependency). The profile's format and parser are :mod:`covey_common.profile` (re-exported here).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from covey_common.observation import check_agent_index
from covey_common.profile import (
    QOS_KINDS,
    CommandSpec,
    DeploymentProfile,
    InputSpec,
    ObservationSpec,
    import_object,
)
from deploy_ros.messages import ImageFrame, InvalidInput

__all__ = [
    "GENERIC_BUILDERS",
    "QOS_KINDS",
    "CommandSpec",
    "DeploymentProfile",
    "EntryBuilder",
    "ImageFromMessage",
    "InputSpec",
    "ObservationSpec",
    "VectorFromArray",
    "import_object",
    "make_builder",
]


class EntryBuilder(Protocol):
    """Builds one observation entry from parsed messages (``inputs``: source name -> parsed value)."""

    def reset(self, inputs: Mapping[str, Any]) -> np.ndarray:
        """The entry at an episode start (histories restarted from this tick)."""
        ...

    def push(self, inputs: Mapping[str, Any], last_action: np.ndarray, dt: float | None = None) -> np.ndarray:
        """The entry one control step on."""
        ...


class VectorFromArray:
    """Generic ``"vector"`` builder: a ``Float32MultiArray`` of one frame (``prod(shape) / history``
    values) -> the entry's float32 vector ``[*shape]``, frames oldest first (a reset repeats the first)."""

    def __init__(self, metadata: Mapping[str, Any], entry: Mapping[str, Any], agent_index: int, sources: Sequence[str]):
        _one_source(entry, sources)
        check_agent_index(agent_index, metadata.get("n_agents"))
        self.name, self.source, self.shape = str(entry["name"]), sources[0], tuple(int(s) for s in entry["shape"])
        if str(entry.get("dtype", "float32")) != "float32":
            raise ValueError(
                f"entry {self.name!r}: the 'vector' builder makes float32, the entry is {entry.get('dtype')}"
            )
        self.history = int(entry.get("history", 1))
        size = int(np.prod(self.shape))
        if self.history < 1 or size % self.history:
            raise ValueError(f"entry {self.name!r}: {size} values do not split into {self.history} history frames")
        self.frame_size = size // self.history
        self._frames: np.ndarray | None = None  # [history, frame_size]

    def _frame(self, inputs: Mapping[str, Any]) -> np.ndarray:
        data = np.asarray(inputs[self.source], dtype=np.float32).reshape(-1)
        if data.size != self.frame_size:
            raise InvalidInput(f"{data.size} values on {self.source}, the entry {self.name!r} takes {self.frame_size}")
        return data

    def reset(self, inputs: Mapping[str, Any]) -> np.ndarray:
        self._frames = np.repeat(self._frame(inputs)[None], self.history, axis=0)
        return self._frames.reshape(self.shape).copy()

    def push(self, inputs: Mapping[str, Any], last_action: np.ndarray, dt: float | None = None) -> np.ndarray:
        if self._frames is None:
            return self.reset(inputs)
        self._frames = np.concatenate((self._frames[1:], self._frame(inputs)[None]), axis=0)
        return self._frames.reshape(self.shape).copy()


class ImageFromMessage:
    """Generic ``"image"`` builder: a ``sensor_msgs/Image`` -> the entry's uint8 ``[H, W, C]`` (C = 3 RGB
    from rgb8/bgr8, C = 1 from mono8); another size or channel count is an :class:`InvalidInput`."""

    def __init__(self, metadata: Mapping[str, Any], entry: Mapping[str, Any], agent_index: int, sources: Sequence[str]):
        _one_source(entry, sources)
        check_agent_index(agent_index, metadata.get("n_agents"))
        self.name, self.source, self.shape = str(entry["name"]), sources[0], tuple(int(s) for s in entry["shape"])
        if len(self.shape) != 3 or str(entry.get("dtype", "uint8")) != "uint8" or int(entry.get("history", 1)) != 1:
            raise ValueError(
                f"entry {self.name!r}: the 'image' builder makes one uint8 [H, W, C] frame, not {dict(entry)}"
            )

    def reset(self, inputs: Mapping[str, Any]) -> np.ndarray:
        frame = inputs[self.source]
        if not isinstance(frame, ImageFrame):
            raise InvalidInput(f"{self.source} is not an image")
        if frame.pixels.shape != self.shape:
            h, w, c = frame.pixels.shape
            raise InvalidInput(
                f"image {h}x{w} {frame.encoding} on {self.source}, the entry {self.name!r} takes "
                f"{self.shape[0]}x{self.shape[1]} with {self.shape[2]} channel(s)"
            )
        return frame.pixels

    def push(self, inputs: Mapping[str, Any], last_action: np.ndarray, dt: float | None = None) -> np.ndarray:
        return self.reset(inputs)


GENERIC_BUILDERS: dict[str, type] = {"vector": VectorFromArray, "image": ImageFromMessage}
"""Builder names a profile may use without a task module."""


def _one_source(entry: Mapping[str, Any], sources: Sequence[str]) -> None:
    if len(sources) != 1:
        raise ValueError(f"entry {entry.get('name')!r}: a generic builder reads exactly one input, got {list(sources)}")


def make_builder(
    spec: ObservationSpec,
    metadata: Mapping[str, Any],
    entry: Mapping[str, Any],
    agent_index: int,
    params: Mapping[str, Any] | None = None,
    model_path: str | None = None,
) -> EntryBuilder:
    """The builder of one entry: a generic one by name, or the task's ``module:Class``. A profile entry with
    builder ``params`` gets their values (``params``: the node's, default the profile's) and ``model_path``."""
    factory = GENERIC_BUILDERS.get(spec.builder) or import_object(spec.builder)
    if not spec.params:
        return factory(metadata, entry, agent_index, list(spec.sources))
    values = {**dict(spec.params), **dict(params or {})}
    return factory(metadata, entry, agent_index, list(spec.sources), params=values, model_path=model_path)
