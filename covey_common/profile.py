"""The deployment profile: which ROS messages feed which observation entry of a model, and what it commands.

A task describes its deployment once (``MultiAgentEnv.deployment_profile(group)``); ``export.py``
stores it in the ONNX metadata under ``"ros"``, and the policy node reads it from there. Format
(JSON)::

    {"inputs": {                                   # one subscription each
        "odom": {"msg": "nav_msgs/Odometry", "topic": "odom", "qos": "sensor", "stale": true},
        "goal": {"msg": "geometry_msgs/PoseStamped", "topic": "/load/goal", "qos": "reliable", "stale": false},
        "camera": {"msg": "sensor_msgs/Image", "topic": "camera/image", "qos": "sensor", "stale": true}},
     "observations": {                             # one per ONNX input (metadata["inputs"] names)
        "policy": {"builder": "sim.tasks.cable_load.robot_observation:PolicyObservation", "from": ["odom", "goal"]},
        "image": {"builder": "image", "from": ["camera"]}},
     "command": {"msg": "std_msgs/Float32MultiArray", "topic": "command", "safe": [0.0, 0.0]},
     "step_inputs": ["odom"],                      # optional, see below
     "bridge": "sim.tasks.cable_load.ros_bridge:CableLoadBridge"}   # optional: the sim bridge's task side

* ``msg``: a type of :data:`covey_common.messages.MESSAGE_TYPES` (parsed by :data:`deploy_ros.messages.PARSERS`).
  ``topic``: relative names are resolved in the node's namespace. ``qos``: ``"sensor"`` (best effort, newest
  only: state streams) or ``"reliable"`` (set-points sent once must not be lost). ``stale``: true for a stream that goes
  stale after the node's timeout; false for a set-point that holds until replaced.
* ``points`` (``sensor_msgs/PointCloud2`` inputs, optional): how many points a cloud carries, for
  tools that synthesise inputs (``deploy_ros.selftest``, tests); the builder checks the real count.
* ``size`` (``std_msgs/Float32MultiArray`` inputs a task's own builder reads, optional): the array's
  exact length; the node refuses another length on arrival (the safe command), also when the input is
  not a step input, and tools synthesise arrays of that length.
* ``fields`` (``sensor_msgs/JointState`` inputs, optional): the names the record must carry (a game state's
  ``served``, ``touches``, ...); the node refuses a message without one of them on arrival, and tools
  synthesise records of these names.
* ``builder``: ``"vector"`` (a ``Float32MultiArray`` frame -> the entry's float32 vector, with its
  history), ``"image"`` (``sensor_msgs/Image`` rgb8, bgr8, mono8 or 8UC1..8UC16 -> uint8 ``[H, W, C]``,
  size and channels checked),
  or ``"module:Class"`` of a task's own builder (numpy only), constructed as
  ``Class(metadata, entry, agent_index, sources)`` with ``reset(inputs)`` and
  ``push(inputs, last_action, dt)`` methods (``inputs``: source name -> parsed message).
* ``params`` (a task builder's, optional): node parameters the builder reads, name -> default (e.g. the path of a
  companion model a hierarchical team's builder runs, ``"strategy_model": "games_strategy.onnx"``). The node
  declares each as a ROS parameter with that default and constructs the builder with
  ``params={name: value}`` and ``model_path`` (the model's file, so that relative paths can be read beside it).
* ``command.safe``: the command (physical units, action order) sent whenever the policy cannot be
  trusted: e.g. zero acceleration (hover) or zero velocity (stop).
* ``step_inputs``: the inputs whose header stamps mark a new control step (default: every stale
  input). A tick whose stamps did not change re-sends the last command without stepping histories,
  integrators or recurrent state; the first listed input times the step (``dt`` for integrators).

An empty profile (the ``MultiAgentEnv`` default) means the task does not say how to deploy it: the
node refuses such a model with one line. No torch here; the generic ``vector`` / ``image`` builders and
:func:`~deploy_ros.profile.make_builder` are in :mod:`deploy_ros.profile`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from covey_common.messages import MESSAGE_TYPES

QOS_KINDS = ("sensor", "reliable")
NODE_PARAMETERS = frozenset(
    (
        "model",
        "agent_index",
        "rate_hz",
        "lockstep",
        "stale_timeout_s",
        "max_abs_obs",
        "max_stamp_lead_s",
        "use_sim_time",
    )
)  # the policy node's own parameters, which a builder's ``params`` may not reuse


@dataclass(frozen=True)
class InputSpec:
    """One subscribed input: message type, default topic, QoS kind and whether it goes stale."""

    name: str
    msg: str
    topic: str
    qos: str
    stale: bool
    size: int | None = None  # a Float32MultiArray a task builder reads: its exact length (checked on arrival)
    fields: tuple[str, ...] | None = None  # a JointState record's required names (checked on arrival)


@dataclass(frozen=True)
class ObservationSpec:
    """How one ONNX input (observation entry) is built: the builder name and its source inputs, in order."""

    entry: str
    builder: str
    sources: tuple[str, ...]
    params: tuple[tuple[str, Any], ...] = ()  # a task builder's node parameters: (name, default) pairs


@dataclass(frozen=True)
class CommandSpec:
    """The published command: message type, default topic and the safe value ``[act_dim]`` (physical units)."""

    msg: str
    topic: str
    safe: tuple[float, ...]


@dataclass(frozen=True)
class DeploymentProfile:
    """A parsed, validated ``metadata["ros"]`` (see the module docstring)."""

    inputs: dict[str, InputSpec]
    observations: dict[str, ObservationSpec]
    command: CommandSpec
    step_inputs: tuple[str, ...]
    bridge: str | None = None

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any]) -> DeploymentProfile:
        """Parse ``metadata["ros"]`` and check it against the model's inputs and action.

        Raises:
            ValueError: one line naming what is missing or wrong (an empty or absent profile too).
        """
        raw = metadata.get("ros") or {}
        if not raw:
            raise ValueError(
                f"the model (task {metadata.get('task')!r}) has no ROS deployment profile (metadata 'ros'): "
                "its task does not define deployment_profile(group), or the file predates covey-onnx-v2"
            )
        return cls.parse(raw, [str(e["name"]) for e in metadata.get("inputs", [])], _act_dim(metadata))

    @classmethod
    def parse(cls, raw: Mapping[str, Any], entries: Sequence[str], act_dim: int | None) -> DeploymentProfile:
        """Parse a profile dict; ``entries`` are the model's observation inputs, each of which needs a builder."""
        try:
            inputs = {
                str(name): InputSpec(
                    str(name),
                    str(d["msg"]),
                    str(d["topic"]),
                    str(d.get("qos", "sensor")),
                    bool(d.get("stale", True)),
                    int(d["size"]) if d.get("size") is not None else None,
                    tuple(str(f) for f in d["fields"]) if d.get("fields") is not None else None,
                )
                for name, d in dict(raw["inputs"]).items()
            }
            observations = {
                str(name): ObservationSpec(
                    str(name),
                    str(d["builder"]),
                    tuple(str(s) for s in d["from"]),
                    tuple((str(k), v) for k, v in dict(d.get("params") or {}).items()),
                )
                for name, d in dict(raw["observations"]).items()
            }
            c = raw["command"]
            command = CommandSpec(str(c["msg"]), str(c["topic"]), tuple(float(v) for v in c["safe"]))
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"malformed ROS deployment profile ({type(err).__name__}: {err})") from err
        for spec in inputs.values():
            if spec.msg not in MESSAGE_TYPES:
                raise ValueError(
                    f"profile input {spec.name!r}: message type {spec.msg!r} unknown; known: {sorted(MESSAGE_TYPES)}"
                )
            if spec.qos not in QOS_KINDS:
                raise ValueError(f"profile input {spec.name!r}: qos {spec.qos!r} not one of {QOS_KINDS}")
            if spec.name == "command":  # its <name>_topic parameter would clash with command_topic
                raise ValueError("a profile input may not be named 'command'")
        missing = [e for e in entries if e not in observations]
        if missing:
            raise ValueError(f"the ROS profile builds no observation for model input(s) {missing}")
        for obs in observations.values():
            clash = [k for k, _ in obs.params if k in NODE_PARAMETERS or k.endswith(("_topic", "_timeout_s"))]
            if clash:
                raise ValueError(
                    f"profile observation {obs.entry!r}: builder params {clash} clash with node parameters"
                )
            unknown = [s for s in obs.sources if s not in inputs]
            if unknown or not obs.sources:
                raise ValueError(f"profile observation {obs.entry!r} reads unknown input(s) {unknown or '(none)'}")
        if command.msg != "std_msgs/Float32MultiArray":
            raise ValueError(f"profile command message {command.msg!r}: only std_msgs/Float32MultiArray is supported")
        if act_dim is not None and len(command.safe) != act_dim:
            raise ValueError(f"profile safe command has {len(command.safe)} values, the action has {act_dim}")
        if not np.isfinite(command.safe).all():
            raise ValueError("profile safe command is not finite")
        steps = tuple(str(s) for s in raw.get("step_inputs", [n for n, s in inputs.items() if s.stale]))
        if any(s not in inputs for s in steps):
            raise ValueError(f"profile step_inputs {list(steps)} name unknown inputs; known: {sorted(inputs)}")
        bridge = raw.get("bridge")
        return cls(inputs, observations, command, steps, None if bridge is None else str(bridge))


def _act_dim(metadata: Mapping[str, Any]) -> int | None:
    action = metadata.get("action")
    return len(action["names"]) if action else None


def import_object(path: str) -> Any:
    """``"package.module:attr"`` -> the object (ValueError with the path when it cannot be imported)."""
    module, sep, attr = path.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"expected 'module:name', got {path!r}")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"cannot import {path!r}: {type(err).__name__}: {err}") from err
