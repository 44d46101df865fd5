"""Robot-side policy observation: the simulator's observation vector rebuilt from robot state (numpy only).

An exported covey model (``policies.export``) reads the policy observation exactly as the simulator
builds it. Its ``covey`` metadata describes that layout (``observation``: ``terms`` of one frame in
order, ``history`` frames oldest first) and carries the constants the robot needs for it
(``deployment``). :class:`ObservationBuilder` turns one robot's :class:`RobotInputs` (its own
state, the load state and the goal pose) plus its previous action into that vector, with the same
history semantics as the simulator: at a reset the history is ``history`` copies of the first
frame; each step drops the oldest frame and appends the newest.

Each term is computed by a function in a name -> builder mapping (:data:`TERM_BUILDERS` holds the
``cable_load`` terms); other tasks add theirs with :func:`register_term` or pass their own mapping.

Conventions (those of ``sim.physics``): quaternions are ``[w, x, y, z]`` and rotate body -> world;
positions and linear velocities are in the world frame, angular velocities in the body frame.

No torch here: this runs on a robot with numpy and onnxruntime only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# --------------------------------------------------------------------------- quaternions
# Numpy twins of sim/physics/quaternion.py (same formulas, same component order). Computed in
# float64: the sim runs float32, and float64 here keeps the difference at float32 round-off.


def quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product ``a * b``, ``[..., 4]`` (wxyz)."""
    aw, ax, ay, az = np.moveaxis(np.asarray(a, np.float64), -1, 0)
    bw, bx, by, bz = np.moveaxis(np.asarray(b, np.float64), -1, 0)
    return np.stack(
        (
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ),
        axis=-1,
    )


def quat_conj(q: np.ndarray) -> np.ndarray:
    """Conjugate (the inverse of a unit quaternion), ``[..., 4]``."""
    q = np.asarray(q, np.float64)
    return np.concatenate((q[..., :1], -q[..., 1:]), axis=-1)


def quat_rotate(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Rotate body-frame ``v [..., 3]`` into the world frame: ``R(q) v``."""
    q = np.asarray(q, np.float64)
    v = np.asarray(v, np.float64)
    w, u = q[..., :1], q[..., 1:]
    t = 2.0 * np.cross(u, v)
    return v + w * t + np.cross(u, t)


def quat_rotate_inv(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Rotate world-frame ``v [..., 3]`` into the body frame: ``R(q)^T v``."""
    return quat_rotate(quat_conj(q), v)


def quat_to_matrix(q: np.ndarray) -> np.ndarray:
    """Rotation matrix ``[..., 3, 3]`` (body -> world) of a unit quaternion ``[..., 4]``."""
    w, x, y, z = np.moveaxis(np.asarray(q, np.float64), -1, 0)
    flat = np.stack(
        (
            1 - 2 * (y * y + z * z),
            2 * (x * y - w * z),
            2 * (x * z + w * y),
            2 * (x * y + w * z),
            1 - 2 * (x * x + z * z),
            2 * (y * z - w * x),
            2 * (x * z - w * y),
            2 * (y * z + w * x),
            1 - 2 * (x * x + y * y),
        ),
        axis=-1,
    )
    return flat.reshape(flat.shape[:-1] + (3, 3))


def matrix_to_6d(rot: np.ndarray) -> np.ndarray:
    """6D rotation encoding ``[..., 6]``: column 0 (3 numbers) then column 1 of ``rot [..., 3, 3]``."""
    return np.concatenate((rot[..., :, 0], rot[..., :, 1]), axis=-1)


def quat_from_euler(roll: float | np.ndarray, pitch: float | np.ndarray, yaw: float | np.ndarray) -> np.ndarray:
    """Quaternion ``[..., 4]`` of intrinsic z-y'-x'' (yaw, pitch, roll) Euler angles (rad)."""
    cr, sr = np.cos(np.multiply(roll, 0.5)), np.sin(np.multiply(roll, 0.5))
    cp, sp = np.cos(np.multiply(pitch, 0.5)), np.sin(np.multiply(pitch, 0.5))
    cy, sy = np.cos(np.multiply(yaw, 0.5)), np.sin(np.multiply(yaw, 0.5))
    return np.stack(
        (
            cr * cp * cy + sr * sp * sy,
            sr * cp * cy - cr * sp * sy,
            cr * sp * cy + sr * cp * sy,
            cr * cp * sy - sr * sp * cy,
        ),
        axis=-1,
    )


def quat_from_yaw(yaw: float | np.ndarray) -> np.ndarray:
    """Yaw-only quaternion ``[..., 4]`` (rotation by ``yaw`` rad about world z)."""
    zero = np.zeros_like(np.asarray(yaw, np.float64))
    return quat_from_euler(zero, zero, yaw)


def quat_yaw(q: np.ndarray) -> np.ndarray:
    """Yaw (rad) of the body x axis projected on the world xy plane, ``[...]``."""
    w, x, y, z = np.moveaxis(np.asarray(q, np.float64), -1, 0)
    return np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))


def wrap_angle(angle: float | np.ndarray) -> np.ndarray:
    """``angle`` wrapped to [-pi, pi), the same ``remainder`` form the sim uses."""
    return np.remainder(np.asarray(angle, np.float64) + math.pi, 2 * math.pi) - math.pi


# --------------------------------------------------------------------------- inputs


@dataclass
class RobotInputs:
    """What one robot knows at a control tick. Float arrays; world frame unless stated.

    Attributes:
        own_pos: ``[3]`` own centre-of-mass position (m).
        own_quat: ``[4]`` own attitude, wxyz, body -> world.
        own_vel: ``[3]`` own linear velocity, world frame (m/s).
        own_ang_vel: ``[3]`` own angular velocity, BODY frame (rad/s).
        load_pos: ``[3]`` load centre position (m).
        load_quat: ``[4]`` load attitude, wxyz, load -> world.
        load_vel: ``[3]`` load linear velocity, world frame (m/s).
        load_ang_vel: ``[3]`` load angular velocity, LOAD (body) frame (rad/s).
        goal_pos: ``[3]`` goal position of the load (m).
        goal_quat: ``[4]`` goal attitude of the load, wxyz.
    """

    own_pos: np.ndarray
    own_quat: np.ndarray
    own_vel: np.ndarray
    own_ang_vel: np.ndarray
    load_pos: np.ndarray
    load_quat: np.ndarray
    load_vel: np.ndarray
    load_ang_vel: np.ndarray
    goal_pos: np.ndarray
    goal_quat: np.ndarray

    def __post_init__(self) -> None:
        for name, size in _INPUT_SIZES.items():
            arr = np.asarray(getattr(self, name), dtype=np.float64)
            if arr.shape != (size,):
                raise ValueError(f"RobotInputs.{name} must have shape ({size},), got {arr.shape}")
            setattr(self, name, arr)

    def is_finite(self) -> bool:
        """True when every entry is finite (no NaN or inf)."""
        return all(bool(np.isfinite(getattr(self, name)).all()) for name in _INPUT_SIZES)

    @classmethod
    def neutral(cls) -> RobotInputs:
        """Everything at rest at the origin with identity attitudes (used to dry-run the builders)."""
        z3, q = np.zeros(3), np.array([1.0, 0.0, 0.0, 0.0])
        return cls(z3, q, z3, z3, z3, q, z3, z3, z3, q)


_INPUT_SIZES = {
    "own_pos": 3,
    "own_quat": 4,
    "own_vel": 3,
    "own_ang_vel": 3,
    "load_pos": 3,
    "load_quat": 4,
    "load_vel": 3,
    "load_ang_vel": 3,
    "goal_pos": 3,
    "goal_quat": 4,
}


@dataclass(frozen=True)
class TermContext:
    """What a term builder may read: this tick's inputs and action, and the model's constants.

    Attributes:
        inputs: the robot's state at this tick.
        last_action: ``[act_dim]`` previous normalised action in [-1, 1].
        agent_index: this robot's index in its group (row of the per-agent deployment constants).
        deployment: the metadata's ``deployment`` dict (task constants, per-agent lists).
        cache: per-frame scratch space for values several terms share.
        memory: state that persists from frame to frame (integrators), emptied at every reset.
        advance: True when this frame is a control step after the previous one (``push``), False
            at a reset or a dry run: stateful terms integrate only when it is True.
    """

    inputs: RobotInputs
    last_action: np.ndarray
    agent_index: int
    deployment: Mapping[str, Any]
    cache: dict[str, Any] = field(default_factory=dict)
    memory: dict[str, Any] = field(default_factory=dict)
    advance: bool = False
    dt: float | None = None  # seconds this step advanced (None: the model's control period)

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


# --------------------------------------------------------------------------- cable_load terms
# Each mirrors one entry of sim/tasks/cable_load/env.py ``_frame`` (same order of operations).


def _load_rot(ctx: TermContext) -> np.ndarray:
    return matrix_to_6d(quat_to_matrix(ctx.inputs.load_quat))


def _goal_rot_rel(ctx: TermContext) -> np.ndarray:
    rel = quat_mul(quat_conj(ctx.inputs.load_quat), ctx.inputs.goal_quat)  # goal attitude in the load frame
    return matrix_to_6d(quat_to_matrix(rel))


def goal_slot(
    goal_pos: np.ndarray, goal_quat: np.ndarray, load_quat: np.ndarray, nominal_offset: np.ndarray, lead_deg: float
) -> np.ndarray:
    """The robot's nominal hover slot at the yaw-limited goal pose, world frame ``[3]`` (m).

    Replicates ``CableLoadEnv._goal_slot``: the goal heading is turned back to at most ``lead_deg``
    ahead of the load's heading (the "carrot"), then the nominal offset ``[3]`` (load frame) is
    rotated by that carrot attitude and added to the goal position.
    """
    carrot = goal_carrot(goal_quat, load_quat, lead_deg)
    return np.asarray(goal_pos, np.float64) + quat_rotate(carrot, nominal_offset)


def goal_carrot(goal_quat: np.ndarray, load_quat: np.ndarray, lead_deg: float) -> np.ndarray:
    """The goal attitude ``[4]`` with its heading at most ``lead_deg`` ahead of the load's
    (``CableLoadEnv._goal_carrot``)."""
    lead = math.radians(lead_deg)
    yaw_err = wrap_angle(quat_yaw(goal_quat) - quat_yaw(load_quat))
    back = np.clip(yaw_err, -lead, lead) - yaw_err
    return quat_mul(quat_from_yaw(back), goal_quat)


def _own_slot_rel(ctx: TermContext) -> np.ndarray:
    d = ctx.deployment
    if "slot_yaw_lead_deg" not in d:
        raise ValueError("metadata deployment has no 'slot_yaw_lead_deg'")
    offset = ctx.agent_constant("nominal_offset", 3)
    slot = goal_slot(ctx.inputs.goal_pos, ctx.inputs.goal_quat, ctx.inputs.load_quat, offset, d["slot_yaw_lead_deg"])
    return slot - ctx.inputs.own_pos


def _own_attach_err_int(ctx: TermContext) -> np.ndarray:
    """Leaky, clipped integral of the own attachment point's error to the goal pose
    (``CableLoadEnv._integrate_attach_error``); advances one control step per ``push``."""
    d = ctx.deployment
    if "integral" not in d or "slot_yaw_lead_deg" not in d:
        raise ValueError("metadata deployment has no 'integral' settings or 'slot_yaw_lead_deg'")
    cfg = d["integral"]
    value = ctx.memory.get("own_attach_err_int", np.zeros(3))
    if ctx.advance:
        attach = ctx.agent_constant("own_attach", 3)
        inp = ctx.inputs
        carrot = goal_carrot(inp.goal_quat, inp.load_quat, d["slot_yaw_lead_deg"])
        goal = inp.goal_pos + quat_rotate(carrot, attach)
        err = np.clip(goal - (inp.load_pos + quat_rotate(inp.load_quat, attach)), -cfg["err_clip"], cfg["err_clip"])
        dt, tau = float(cfg["dt"] if ctx.dt is None else ctx.dt), float(cfg["tau_s"])
        leak = 1.0 - dt / tau if tau > 0 else 1.0
        value = np.clip(leak * value + dt * err, -cfg["limit"], cfg["limit"])
    ctx.memory["own_attach_err_int"] = value
    return value


TERM_BUILDERS: dict[str, TermBuilder] = {
    "goal_pos_rel": lambda c: c.inputs.goal_pos - c.inputs.load_pos,
    "load_rot": _load_rot,
    "goal_rot_rel": _goal_rot_rel,
    "load_vel": lambda c: c.inputs.load_vel,
    "load_ang_vel": lambda c: c.inputs.load_ang_vel,
    "own_pos_rel": lambda c: c.inputs.own_pos - c.inputs.load_pos,
    "own_vel": lambda c: c.inputs.own_vel,
    "own_rot": lambda c: matrix_to_6d(quat_to_matrix(c.inputs.own_quat)),
    "own_ang_vel": lambda c: c.inputs.own_ang_vel,
    "own_attach": lambda c: c.agent_constant("own_attach", 3),
    "own_slot_rel": _own_slot_rel,
    "own_attach_err_int": _own_attach_err_int,
    "last_action": lambda c: c.last_action,
}
"""Term name -> builder for every ``cable_load`` policy term (the default mapping)."""


def register_term(name: str, builder: TermBuilder) -> None:
    """Add (or replace) the builder of term ``name`` in the default mapping :data:`TERM_BUILDERS`."""
    TERM_BUILDERS[name] = builder


# --------------------------------------------------------------------------- builder


class ObservationBuilder:
    """One agent's policy observation from robot inputs, laid out as the model's metadata says.

    Args:
        metadata: the model's ``covey`` metadata (needs ``observation``; ``n_agents``, ``action`` and
            ``deployment`` when present are validated / used).
        agent_index: this robot's index in its group, ``0 <= agent_index < n_agents``.
        builders: term name -> builder; default :data:`TERM_BUILDERS`.

    Raises:
        ValueError: a term without a builder (all unknown names listed), a bad ``agent_index``, a
            frame size (sum of term sizes x history) different from the observation shape, or a
            builder that fails on or returns the wrong size for a neutral dry run (e.g. missing
            deployment constants).
    """

    def __init__(
        self, metadata: Mapping[str, Any], agent_index: int, builders: Mapping[str, TermBuilder] | None = None
    ):
        if "observation" not in metadata:
            raise ValueError("metadata has no 'observation' layout")
        layout = metadata["observation"]
        self.builders = dict(TERM_BUILDERS if builders is None else builders)
        self.terms: list[tuple[str, int]] = [(str(t["name"]), int(t["size"])) for t in layout["terms"]]
        unknown = [name for name, _ in self.terms if name not in self.builders]
        if unknown:
            raise ValueError(f"no observation builder for term(s) {unknown}; known: {sorted(self.builders)}")

        n_agents = metadata.get("n_agents")
        if isinstance(agent_index, bool) or not isinstance(agent_index, int | np.integer):
            raise ValueError(f"agent_index must be an int, got {agent_index!r}")
        if agent_index < 0 or (n_agents is not None and agent_index >= int(n_agents)):
            raise ValueError(f"agent_index {agent_index} out of range for a group of {n_agents} agents")
        self.agent_index = int(agent_index)

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
        self.frame(RobotInputs.neutral(), np.zeros(self.act_dim or self._term_size("last_action") or 0), memory={})

    def _term_size(self, name: str) -> int | None:
        return next((size for n, size in self.terms if n == name), None)

    @property
    def ready(self) -> bool:
        """Whether the history holds frames (after :meth:`reset`)."""
        return self._history is not None

    def frame(
        self,
        inputs: RobotInputs,
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
            except (KeyError, IndexError, TypeError) as err:
                raise ValueError(f"observation term {name!r} failed: {type(err).__name__}: {err}") from err
            if value.shape != (size,):
                raise ValueError(f"observation term {name!r} built {value.size} values, the layout says {size}")
            parts.append(value)
        return np.concatenate(parts).astype(np.float32)

    def reset(self, inputs: RobotInputs) -> np.ndarray:
        """Fill the history with copies of the first frame (previous action zero, as at a sim reset).

        Returns:
            The observation ``[obs_dim]`` float32.
        """
        self._memory = {}
        first = self.frame(inputs, np.zeros(self.act_dim or self._term_size("last_action") or 0))
        self._history = np.repeat(first[None], self.history, axis=0)
        return self.observation()

    def push(self, inputs: RobotInputs, last_action: np.ndarray, dt: float | None = None) -> np.ndarray:
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
