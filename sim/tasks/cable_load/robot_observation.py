"""cable_load's policy observation rebuilt on a robot from its own odometry, the load's and the goal (numpy only).

The deployment profile (:meth:`CableLoadEnv.deployment_profile`) names
:class:`PolicyObservation` as the robot-side builder of the ``policy`` entry, fed by the
``odom``, ``load`` and ``goal`` inputs; the ROS policy node imports it by name. Each term below
mirrors one entry of ``CableLoadEnv._frame`` (same order of operations); the generic term/history
machinery is :class:`covey_common.observation.ObservationBuilder`.

Conventions (those of ``sim.physics``): quaternions are ``[w, x, y, z]`` and rotate body -> world;
positions and linear velocities are in the world frame, angular velocities in the body frame.

No torch here (a robot has numpy and onnxruntime only): import this module without the simulator.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from covey_common.observation import ObservationBuilder, TermBuilder, TermContext
from covey_common.quaternion import (
    matrix_to_6d,
    quat_conj,
    quat_from_yaw,
    quat_mul,
    quat_rotate,
    quat_to_matrix,
    quat_yaw,
    wrap_angle,
)

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

    @classmethod
    def from_messages(cls, own: Any, load: Any, goal: Any) -> RobotInputs:
        """From parsed messages: two odometries (``pos``, ``quat``, ``vel`` world, ``ang_vel`` body,
        as :func:`deploy_ros.messages.parse_odometry` gives them) and a pose (``pos``, ``quat``)."""
        return cls(
            own.pos, own.quat, own.vel, own.ang_vel, load.pos, load.quat, load.vel, load.ang_vel, goal.pos, goal.quat
        )


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


# --------------------------------------------------------------------------- terms
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
"""Term name -> builder for every ``cable_load`` policy term."""


# --------------------------------------------------------------------------- the policy entry


def observation_builder(
    metadata: Mapping[str, Any],
    agent_index: int,
    layout: Mapping[str, Any] | None = None,
    builders: Mapping[str, TermBuilder] | None = None,
) -> ObservationBuilder:
    """A term/history builder of cable_load's policy vector from :class:`RobotInputs`.

    Args:
        metadata: the model's ``covey`` metadata (``observation``, ``deployment``, ``action``, ``n_agents``).
        agent_index: this MAV's index in the group.
        layout: the entry layout; default ``metadata["observation"]``.
        builders: term builders; default :data:`TERM_BUILDERS`.
    """
    terms = TERM_BUILDERS if builders is None else builders
    return ObservationBuilder(metadata, agent_index, terms, RobotInputs.neutral(), layout)


class PolicyObservation:
    """The ``policy`` entry builder the ROS node drives: parsed messages in, ``[obs_dim]`` float32 out.

    ``inputs`` maps the profile's source names (own odometry, load odometry, goal pose, in the
    order of the profile's ``from`` list) to their parsed messages.
    """

    def __init__(self, metadata: Mapping[str, Any], entry: Mapping[str, Any], agent_index: int, sources: Sequence[str]):
        if len(sources) != 3:
            raise ValueError(
                f"cable_load's policy observation reads 3 inputs (own odometry, load, goal), got {sources}"
            )
        self.sources = tuple(sources)
        self.builder = observation_builder(metadata, agent_index, layout=entry)

    def _inputs(self, inputs: Mapping[str, Any]) -> RobotInputs:
        own, load, goal = (inputs[s] for s in self.sources)
        return RobotInputs.from_messages(own, load, goal)

    def reset(self, inputs: Mapping[str, Any]) -> np.ndarray:
        """History restarted from this tick's messages (as at a sim reset); ``[obs_dim]`` float32."""
        return self.builder.reset(self._inputs(inputs))

    def push(self, inputs: Mapping[str, Any], last_action: np.ndarray, dt: float | None = None) -> np.ndarray:
        """One control step on: this tick's messages and the previous action; ``[obs_dim]`` float32."""
        return self.builder.push(self._inputs(inputs), last_action, dt=dt)
