"""Robot-side vector observations built from named terms with history, as the simulator builds them (numpy only).

An exported covey model reads each vector observation entry exactly as the simulator builds it. Its
metadata describes the entry's layout (``terms`` of one frame in order, ``history`` frames oldest
first; ``metadata["observation"]`` for the "policy" entry, or the entry's own dict in
``metadata["inputs"]``) and carries the constants the robot needs (``deployment``).
:class:`ObservationBuilder` turns one robot's inputs (any object the task's term builders read) plus
its previous action into that vector, with the simulator's history semantics: at a reset the
history is ``history`` copies of the first frame; each step drops the oldest frame and appends the
newest.

The terms themselves belong to the task (e.g. ``sim/tasks/cable_load/robot_observation.py``): a
mapping of term name -> builder, each a function of a :class:`TermContext`.

No torch here: this runs on a robot with numpy and onnxruntime only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from covey_common.spec import terms_from_dicts


@dataclass(frozen=True)
class TermContext:
    """What a term builder may read: this tick's inputs and action, and the model's constants.

    Attributes:
        inputs: the robot's state at this tick (the task's own input object).
        last_action: ``[act_dim]`` previous normalised action in [-1, 1].
        agent_index: this robot's index in its group (row of the per-agent deployment constants).
        deployment: the metadata's ``deployment`` dict (task constants, per-agent lists).
        cache: per-frame scratch space for values several terms share.
        memory: state that persists from frame to frame (integrators), emptied at every reset.
        advance: True when this frame is a control step after the previous one (``push``), False
            at a reset or a dry run: stateful terms integrate only when it is True.
        dt: seconds this step advanced (None: the model's control period).
    """

    inputs: Any
    last_action: np.ndarray
    agent_index: int
    deployment: Mapping[str, Any]
    cache: dict[str, Any] = field(default_factory=dict)
    memory: dict[str, Any] = field(default_factory=dict)
    advance: bool = False
    dt: float | None = None

    def agent_constant(self, key: str, size: int) -> np.ndarray:
        """``deployment[key][agent_index]`` as a float64 ``[size]`` array (ValueError when absent or malformed)."""
        if key not in self.deployment:
            raise ValueError(f"metadata deployment has no {key!r}")
        rows = self.deployment[key]
        if not 0 <= self.agent_index < len(rows):
            raise ValueError(f"deployment {key!r} has {len(rows)} rows, no row for agent {self.agent_index}")
        row = np.asarray(rows[self.agent_index], dtype=np.float64)
        if row.shape != (size,):
            raise ValueError(f"deployment {key!r}[{self.agent_index}] must have {size} numbers, got {row.shape}")
        return row


TermBuilder = Callable[[TermContext], np.ndarray]


def check_agent_index(agent_index: Any, n_agents: int | None) -> int:
    """``agent_index`` as an int in ``[0, n_agents)``; ValueError naming it otherwise (bools are not indices)."""
    if isinstance(agent_index, bool) or not isinstance(agent_index, int | np.integer):
        raise ValueError(f"agent_index must be an int, got {agent_index!r}")
    if agent_index < 0 or (n_agents is not None and agent_index >= int(n_agents)):
        raise ValueError(f"agent_index {agent_index} out of range for a group of {n_agents} agents")
    return int(agent_index)


class ObservationBuilder:
    """One agent's vector observation from robot inputs, laid out as the model's metadata says.

    Args:
        metadata: the model's ``covey`` metadata (``n_agents``, ``action`` and ``deployment`` are
            validated / used when present).
        agent_index: this robot's index in its group, ``0 <= agent_index < n_agents``.
        builders: term name -> builder (the task's terms).
        neutral: inputs at rest, used to dry-run every builder at construction.
        layout: the entry's layout (``shape``, ``terms``, ``history``); default ``metadata["observation"]``.

    Raises:
        ValueError: a term without a builder (all unknown names listed), a bad ``agent_index``, a
            frame size (sum of term sizes x history) different from the entry shape, or a builder
            that fails on or returns the wrong size for the neutral dry run (e.g. missing
            deployment constants).
    """

    def __init__(
        self,
        metadata: Mapping[str, Any],
        agent_index: int,
        builders: Mapping[str, TermBuilder],
        neutral: Any,
        layout: Mapping[str, Any] | None = None,
    ):
        if layout is None:
            if "observation" not in metadata:
                raise ValueError("metadata has no 'observation' layout")
            layout = metadata["observation"]
        self.builders = dict(builders)
        self.terms: list[tuple[str, int]] = [(t.name, t.size) for t in terms_from_dicts(layout["terms"])]
        unknown = [name for name, _ in self.terms if name not in self.builders]
        if unknown:
            raise ValueError(f"no observation builder for term(s) {unknown}; known: {sorted(self.builders)}")
        self.agent_index = check_agent_index(agent_index, metadata.get("n_agents"))

        self.history = int(layout.get("history", 1))
        self.frame_size = sum(size for _, size in self.terms)
        self.obs_dim = int(layout["shape"][-1])
        if self.history < 1 or self.frame_size * self.history != self.obs_dim:
            raise ValueError(
                f"observation layout mismatch: {len(self.terms)} terms of {self.frame_size} values x history "
                f"{self.history} = {self.frame_size * self.history}, but the shape says {self.obs_dim}"
            )
        self.act_dim = len(metadata["action"]["names"]) if "action" in metadata else None
        self.deployment: Mapping[str, Any] = metadata.get("deployment") or {}
        self._history: np.ndarray | None = None  # [history, frame_size] float32, oldest first
        self._memory: dict[str, Any] = {}  # stateful terms' state (TermContext.memory)

        # Dry run on neutral inputs: missing deployment constants and wrong term sizes show up now, not mid-flight.
        self.frame(neutral, self._zero_action(), memory={})

    def _zero_action(self) -> np.ndarray:
        size = self.act_dim if self.act_dim is not None else next((s for n, s in self.terms if n == "last_action"), 0)
        return np.zeros(size)

    @property
    def ready(self) -> bool:
        """Whether the history holds frames (after :meth:`reset`)."""
        return self._history is not None

    def frame(
        self,
        inputs: Any,
        last_action: np.ndarray,
        advance: bool = False,
        memory: dict[str, Any] | None = None,
        dt: float | None = None,
    ) -> np.ndarray:
        """One frame, ``[frame_size]`` float32: the terms in metadata order.

        Args:
            inputs: this tick's robot state.
            last_action: ``[act_dim]`` the previous normalised action (the model's ``action`` output).
            advance: stateful terms (integrators) take one control step (what :meth:`push` does).
            memory: the stateful terms' state; default the builder's own (a dry run passes ``{}``).
            dt: seconds since the previous frame for integrators (default: the model's control period).
        """
        last_action = np.asarray(last_action, dtype=np.float64).reshape(-1)
        if self.act_dim is not None and last_action.shape != (self.act_dim,):
            raise ValueError(f"last_action must have shape ({self.act_dim},), got {last_action.shape}")
        memory = self._memory if memory is None else memory
        ctx = TermContext(inputs, last_action, self.agent_index, self.deployment, memory=memory, advance=advance, dt=dt)
        parts = []
        for name, size in self.terms:
            try:
                value = np.asarray(self.builders[name](ctx), dtype=np.float64).reshape(-1)
            except ValueError as err:
                raise ValueError(f"observation term {name!r}: {err}") from err
            except (KeyError, IndexError, TypeError, AttributeError) as err:
                raise ValueError(f"observation term {name!r} failed: {type(err).__name__}: {err}") from err
            if value.shape != (size,):
                raise ValueError(f"observation term {name!r} built {value.size} values, the layout says {size}")
            parts.append(value)
        return np.concatenate(parts).astype(np.float32)

    def reset(self, inputs: Any) -> np.ndarray:
        """Fill the history with copies of the first frame (previous action zero, as at a sim reset).

        Returns:
            The observation ``[obs_dim]`` float32.
        """
        self._memory = {}
        first = self.frame(inputs, self._zero_action())
        self._history = np.repeat(first[None], self.history, axis=0)
        return self.observation()

    def push(self, inputs: Any, last_action: np.ndarray, dt: float | None = None) -> np.ndarray:
        """Drop the oldest frame, append the frame of ``inputs`` and ``last_action``; integrators
        advance by ``dt`` seconds (default: the model's control period, as in the simulator).

        Returns:
            The observation ``[obs_dim]`` float32, frames oldest first.

        Raises:
            RuntimeError: before the first :meth:`reset`.
        """
        if self._history is None:
            raise RuntimeError("ObservationBuilder.push before reset: call reset(inputs) first")
        new = self.frame(inputs, last_action, advance=True, dt=dt)
        self._history = np.concatenate((self._history[1:], new[None]), axis=0)
        return self.observation()

    def observation(self) -> np.ndarray:
        """The current observation ``[obs_dim]`` float32 (a copy)."""
        if self._history is None:
            raise RuntimeError("ObservationBuilder has no history yet: call reset(inputs) first")
        return self._history.reshape(-1).copy()
