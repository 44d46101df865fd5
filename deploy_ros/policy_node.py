"""Generic ROS 2 policy node: an exported covey ONNX model (covey-onnx-v2) driving one robot.

    python -m deploy_ros.policy_node --ros-args -r __ns:=/mav0 \\
        -p model:=assets/policies/cable_load/policy.onnx -p agent_index:=0 [-p use_sim_time:=true]

The model's metadata carries the task's deployment profile (``"ros"``, see :mod:`deploy_ros.profile`):
which ROS messages to subscribe to, which builder turns them into each observation entry, and the
command message with its safe value. At ``rate_hz`` the node builds every observation entry from the
latest messages, runs onnxruntime (one thread; recurrent state carried from tick to tick) and
publishes the model's ``command`` output (physical units). If anything is wrong it publishes the
profile's SAFE command instead and says why on ``status``; it never crashes on bad input.

Parameters:
    model (str, required): path of the exported ``.onnx`` file (``export.py``).
    agent_index (int, required): this robot's index in its group (its row of per-agent weights and
        deployment constants).
    <builder param> (any): a task builder's own parameters (profile ``params``, e.g. ``strategy_model``), default
        the profile's.
    <input>_topic (str): for every profile input (e.g. ``odom_topic``, ``camera_topic``): its topic,
        default the profile's.
    <input>_timeout_s (float, -1): a message older than this (node clock, receive time) is stale;
        -1 = ``stale_timeout_s`` for streams and 0 for set-points (profile ``"stale": false``); 0
        disables the check.
    command_topic (str): output topic, default the profile's.
    stale_timeout_s (float, 0.1): the default timeout of stream inputs (0 disables it; not advised).
    max_abs_obs (float, 100.0): any float observation entry with a larger magnitude is out of range.
    max_stamp_lead_s (float, 1.0): a stream message stamped further ahead of the node's clock is
        refused (its clock is not this node's); 0 disables the check (unsynchronised clocks).
    rate_hz (float, 0.0): control rate; 0 or less = the model's ``control_hz`` (the rate it was trained at).
    use_sim_time (bool): the standard ROS parameter; ages and the timer then follow ``/clock``.
    lockstep (bool, false): no timer; the node answers each new simulator state exactly once, as soon as
        every ``step_inputs`` message of that state (equal header stamps, newer than the last answered
        ones) and every other input have arrived: one command per sim step, whatever the machine's load
        (the ages and frozen stamps of step inputs are then not checked: the simulator waits for the answer).
        For SITL with the sim bridge's ``lockstep`` (which steps only when every agent has answered);
        never on a robot, whose state does not wait for the policy.

Outputs:
    ``command_topic`` (std_msgs/Float32MultiArray): ``data`` = the command in the metadata's action
        order and units; ``layout.dim`` = one dimension of size act_dim whose ``label`` names the
        entries, "<name>[<unit>],<name>[<unit>],...".
    ``status`` (std_msgs/String), every tick: "ok" or "safe: <reason>".

Safety: a tick publishes the SAFE command (and logs a throttled warning) when an input is missing,
stale, non-finite or malformed (an image of the wrong size or encoding too), when a float
observation is non-finite or beyond ``max_abs_obs``, when the model output is non-finite or outside
its bounds, or on any internal error. The previous action fed back to the policy is then zero, and
on the first good tick after, the observation histories and the recurrent state restart (as at a
sim reset).

Stamps of a stream (inputs with a timeout) are checked too: a header stamp older than the previous
one (out of order, or a restarted clock) gives one safe tick mid-run, then the node follows the new
timeline; stamps that stopped advancing for longer than the input's timeout while messages keep
coming (a hung estimator) are stale; a stamp more than ``max_stamp_lead_s`` ahead of the node's
clock is refused.

Time: histories, integrators and the recurrent state step once per tick whose ``step_inputs``
header stamps (unset stamps always step) differ from the previous tick's; a tick with the same
stamps (a simulator holding its start, a stalled estimator within the stale timeout) re-sends the
last command. The policy was trained with one such step per control period.

No torch: numpy, onnxruntime and rclpy only.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from rclpy.time import Time
from std_msgs.msg import Float32MultiArray, MultiArrayDimension, String

from covey_common.cli import check_params_files, report
from covey_common.onnx import OnnxPolicy, load_policy
from covey_common.ros_params import float_parameter
from deploy_ros.messages import MAX_ABS_VALUE, PARSERS, InvalidInput, message_class
from deploy_ros.profile import DeploymentProfile, EntryBuilder, make_builder

__all__ = ["PolicyNode", "load_policy", "main"]

ACTION_TOL = 1e-4  # slack on the model's action bounds (float32 clamp)
WARN_PERIOD_S = 1.0


@dataclass
class _Latest:
    """The last message of one input: parsed value or why it is unusable, and when it came (node clock)."""

    value: Any
    error: str | None
    stamp: Time
    header: tuple[int, int] | None = None  # the message's own header stamp (sec, nanosec), if it has one


@dataclass
class _StampTrack:
    """How one input's header stamps move: the newest stamp, when (node clock) it last changed, whether
    it ever advanced, and a pending 'went backwards' that the next tick reports."""

    head: tuple[int, int]
    changed: Time
    advanced: bool = False
    backwards: str = ""


def _stamp_dt(previous: tuple | None, current: tuple, control_dt: float) -> float | None:
    """Seconds between two ticks' header stamps of the first step input, clamped to [0, 5 control periods]
    (None without stamps: integrators then assume one control period, as the simulator does)."""
    if previous is None or previous[0] is None or current[0] is None:
        return None
    (s0, n0), (s1, n1) = previous[0], current[0]
    return min(max((s1 - s0) + (n1 - n0) * 1e-9, 0.0), 5.0 * control_dt)


def _qos(kind: str) -> QoSProfile:
    # Streams: best effort, newest only (matches both reliable and best-effort publishers).
    # Set-points: reliable, so one sent once over a lossy link is not dropped.
    return qos_profile_sensor_data if kind == "sensor" else QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)


def _sized(parse: Callable[[Any], Any], size: int | None) -> Callable[[Any], Any]:
    """``parse``, then the profile's exact length check of an array input (None: no check)."""
    if size is None:
        return parse

    def parse_sized(msg: Any) -> Any:
        value = np.asarray(parse(msg))
        if value.size != size:
            raise InvalidInput(f"{value.size} values, the input takes {size}")
        if value.size and np.abs(value).max() > MAX_ABS_VALUE:  # checked on arrival: it may not be a step input
            raise InvalidInput(f"value {np.abs(value).max():.3g} beyond {MAX_ABS_VALUE:g}")
        return value

    return parse_sized


def _with_fields(parse: Callable[[Any], Any], fields: tuple[str, ...] | None) -> Callable[[Any], Any]:
    """``parse``, then the profile's check that a named record carries every required field (None: no check)."""
    if not fields:
        return parse

    def parse_named(msg: Any) -> Any:
        value = parse(msg)
        missing = [f for f in fields if f not in value.names]
        if missing:
            raise InvalidInput(f"record without field(s) {missing}")
        return value

    return parse_named


class PolicyNode(Node):
    """Runs one robot's policy; see the module docstring for parameters, topics and conventions.

    Args:
        node_name: the ROS node name.
        **kwargs: passed to ``rclpy.node.Node`` (``context``, ``namespace``, ``parameter_overrides``...).

    Raises:
        ValueError, FileNotFoundError: missing/invalid parameters, model or profile (at construction only).
    """

    def __init__(self, node_name: str = "covey_policy", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        model = self.declare_parameter("model", "").value
        agent_index = self.declare_parameter("agent_index", -1).value
        if not model:
            raise ValueError("parameter 'model' (path of the exported .onnx file) is required")
        if not isinstance(agent_index, int) or agent_index < 0:
            raise ValueError(
                f"parameter 'agent_index' (this robot's index in its group) is required, got {agent_index!r}"
            )
        self.policy = OnnxPolicy(model, agent_index)
        self.metadata = meta = self.policy.metadata
        self.profile = profile = DeploymentProfile.from_metadata(meta)
        n_agents = meta.get("n_agents")
        if n_agents is not None and agent_index >= int(n_agents):
            raise ValueError(f"agent_index {agent_index} out of range for a group of {n_agents} agents")
        self.agent_index = agent_index
        self.builders: dict[str, EntryBuilder] = {
            e["name"]: make_builder(
                profile.observations[e["name"]], meta, e, agent_index, self._builder_params(e["name"]), str(model)
            )
            for e in self.policy.entries
        }
        # Flat index -> term name of each float vector entry, for naming the offending value.
        self._term_names = {
            e["name"]: [t["name"] for t in e.get("terms", []) for _ in range(int(t["size"]))] * int(e.get("history", 1))
            for e in self.policy.entries
        }
        act = meta["action"]
        self.action_names: list[str] = list(act["names"])
        self.action_low, self.action_high = float(act["low"]), float(act["high"])
        self.act_dim = len(self.action_names)
        self.safe_command = np.asarray(profile.command.safe, dtype=np.float32)

        stale_default = self._float_param("stale_timeout_s", 0.1)
        self.max_abs_obs = self._float_param("max_abs_obs", 100.0)
        self.max_stamp_lead = self._float_param("max_stamp_lead_s", 1.0)
        rate_param = self._float_param("rate_hz", 0.0)
        command_topic = self.declare_parameter("command_topic", profile.command.topic).value
        topics, self.timeouts = {}, {}
        for name, spec in profile.inputs.items():
            topics[name] = self.declare_parameter(f"{name}_topic", spec.topic).value
            timeout = self._float_param(f"{name}_timeout_s", -1.0)
            self.timeouts[name] = timeout if timeout >= 0 else (stale_default if spec.stale else 0.0)
        rate = rate_param if rate_param > 0 else float(meta["control_hz"])
        if not math.isfinite(rate) or rate <= 0:
            raise ValueError(f"bad control rate {rate} Hz")
        self.rate_hz = rate
        self.lockstep = bool(self.declare_parameter("lockstep", False).value)
        self.control_dt = 1.0 / float(meta["control_hz"])  # the trained control period

        self._latest: dict[str, _Latest] = {}
        self._stamps: dict[str, _StampTrack] = {}
        self._last_action = np.zeros(self.act_dim, dtype=np.float32)
        self._needs_reset = True  # restart histories and memory on the next good tick
        self._last_state_key: tuple | None = None  # step inputs' header stamps of the last stepped tick
        self._last_command = self.safe_command.copy()
        self._fresh_steps: set[str] = set()  # lockstep: step inputs received since the last answered state
        self._answered_key: tuple | None = None  # lockstep: header stamps of the last answered state
        self.last_status = ""

        # One dimension of size act_dim (a plain vector, as MultiArrayLayout means it); its label
        # names the entries: "acc_x[m/s^2],acc_y[m/s^2],...".
        label = ",".join(f"{n}[{u}]" for n, u in zip(self.action_names, act["units"], strict=True))
        self._layout_dims = [MultiArrayDimension(label=label, size=self.act_dim, stride=self.act_dim)]
        self.command_pub = self.create_publisher(Float32MultiArray, command_topic, 10)
        self.status_pub = self.create_publisher(String, "status", 10)
        self._topics: dict[str, str] = {}  # input -> resolved topic name (for status messages)
        for name, spec in profile.inputs.items():
            callback = self._callback(name, _with_fields(_sized(PARSERS[spec.msg], spec.size), spec.fields))
            sub = self.create_subscription(message_class(spec.msg), topics[name], callback, _qos(spec.qos))
            self._topics[name] = sub.topic_name
        self.timer = None if self.lockstep else self.create_timer(1.0 / rate, self.tick)
        pace = "lockstep with the simulator" if self.lockstep else f"{rate:g} Hz"
        self.get_logger().info(
            f"policy {model} ({meta.get('task')}/{meta.get('group')}, run {meta.get('run_id')}), agent "
            f"{agent_index}, {pace}, inputs {self._topics}, recurrent {bool(self.policy.memory_inputs)}"
        )

    # ----------------------------------------------------------------- inputs
    def _builder_params(self, entry: str) -> dict[str, Any]:
        """The task builder's parameters of ``entry`` (profile ``params``), declared with the profile's defaults."""
        return {k: self.declare_parameter(k, v).value for k, v in self.profile.observations[entry].params}

    def _float_param(self, name: str, default: float) -> float:
        """A float parameter; ``-p rate_hz:=100`` (an int) is accepted too, anything else is a ValueError naming it."""
        return float_parameter(self, name, default)

    def _callback(self, key: str, parse: Callable[[Any], Any]) -> Callable[[Any], None]:
        def on_message(msg: Any) -> None:
            now = self.get_clock().now()
            header = getattr(getattr(msg, "header", None), "stamp", None)
            head = (int(header.sec), int(header.nanosec)) if header is not None else None
            head = None if head == (0, 0) else head  # an unset stamp says nothing about time
            if head is not None:
                self._track_stamp(key, head, now)
            try:
                self._latest[key] = _Latest(parse(msg), None, now, head)
            except InvalidInput as err:
                self._latest[key] = _Latest(None, str(err), now)
            except Exception as err:  # never let a bad message kill the node
                self._latest[key] = _Latest(None, f"unreadable message ({type(err).__name__}: {err})", now)
            if self.lockstep:
                self._lockstep_tick(key)

        return on_message

    def _lockstep_tick(self, key: str) -> None:
        """Lockstep: tick once per new simulator state, when all of it (and every other input) is here.

        A state is its step inputs' header stamps (equal across them, as the bridge stamps one state);
        a republished state (same stamps) is not answered again, so the bridge can resend a state whose
        messages were lost without getting two answers from the nodes that had it."""
        if key in self.profile.step_inputs:
            self._fresh_steps.add(key)
        if len(self._fresh_steps) < len(self.profile.step_inputs) or len(self._latest) < len(self._topics):
            return  # not every input yet: no answer (the bridge holds this state until there is one)
        state_key = tuple(self._latest[k].header for k in self.profile.step_inputs)
        if len(set(state_key)) > 1:
            return  # messages of different states: wait for the rest of the newer one
        self._fresh_steps.clear()
        if state_key == self._answered_key:
            return
        self._answered_key = state_key
        self.tick()

    def _track_stamp(self, key: str, head: tuple[int, int], now: Time) -> None:
        track = self._stamps.get(key)
        if track is None:
            self._stamps[key] = _StampTrack(head, now)
        elif head > track.head:
            track.head, track.changed, track.advanced = head, now, True
        elif head < track.head:
            # Out of order, or the source's clock restarted: report it once, then follow the new timeline.
            back = (track.head[0] - head[0]) + (track.head[1] - head[1]) * 1e-9
            track.backwards = f"header stamps went back {back:.3g} s (out of order, or its clock restarted)"
            track.head, track.changed, track.advanced = head, now, False

    def _stamp_problem(self, key: str, now: Time) -> str | None:
        """Why the header stamps of stream ``key`` cannot be trusted this tick, or None. Set-points and
        inputs without stamps are not checked."""
        track, timeout = self._stamps.get(key), self.timeouts[key]
        if track is None or timeout <= 0:
            return None
        if track.backwards:
            why, track.backwards = track.backwards, ""
            if not self._needs_reset:  # mid-run only: at a (re)start the histories begin afresh anyway
                return why
        frozen = (now - track.changed).nanoseconds * 1e-9
        if track.advanced and frozen > timeout and not self._current_by_construction(key):
            # Messages keep coming but the state they carry does not move (a hung estimator): stale.
            # A stream that never advanced (a simulator holding its start state) is not stale here.
            return f"header stamps not advancing for {frozen:.3f} s (> {timeout:g} s)"
        lead = track.head[0] + track.head[1] * 1e-9 - now.nanoseconds * 1e-9
        if self.max_stamp_lead > 0 and lead > self.max_stamp_lead:
            return (
                f"stamped {lead:.3g} s ahead of this node's clock (clocks not synchronised? "
                "-p max_stamp_lead_s:=0 disables the check)"
            )
        return None

    def _current_by_construction(self, key: str) -> bool:
        """Whether input ``key`` is current whatever its age: in lockstep a step input's state is the simulator's
        current one (the bridge holds it until every node answered), however long its messages took to arrive on a
        loaded machine, so its age by this node's clock says nothing. A safe tick there would restart the histories
        mid-flight and part the run from the in-process one."""
        return self.lockstep and key in self.profile.step_inputs

    def _gather(self, now: Time) -> tuple[dict[str, Any] | None, str | None]:
        """This tick's parsed inputs (name -> value), or why they are not usable."""
        values = {}
        for key, topic in self._topics.items():
            latest = self._latest.get(key)
            if latest is None:
                return None, f"no message yet on {topic}"
            if latest.error is not None:
                return None, f"bad message on {topic}: {latest.error}"
            timeout = self.timeouts[key]
            age = (now - latest.stamp).nanoseconds * 1e-9 if now >= latest.stamp else -1.0
            if age < 0:  # the clock went backwards (e.g. a simulator restarted /clock): trust nothing
                return None, f"{topic} received in the future (clock jumped back)"
            if timeout > 0 and age > timeout and not self._current_by_construction(key):
                return None, f"stale {topic} ({age:.3f} s old > {timeout:g} s)"
            stamp_problem = self._stamp_problem(key, now)
            if stamp_problem:
                return None, f"{topic}: {stamp_problem}"
            values[key] = latest.value
        return values, None

    # ----------------------------------------------------------------- control tick
    def tick(self) -> None:
        """One control tick (the timer's callback): the policy command, or the safe one with the reason."""
        try:
            reason = self._step()
        except Exception as err:  # the node must keep commanding something safe whatever happens
            reason = f"internal error ({type(err).__name__}: {err})"
        if reason is not None:
            self._publish_safe(reason)

    def _step(self) -> str | None:
        """One control step; publishes the policy command and returns None, or returns why not."""
        values, reason = self._gather(self.get_clock().now())
        if values is None:
            return reason
        # The measured state has not moved on since the last tick (same header stamps, e.g. a simulator
        # holding its start state): re-send the last command without stepping histories, integrators and
        # the recurrent state, which would otherwise count time that did not pass.
        state_key = tuple(self._latest[k].header for k in self.profile.step_inputs)
        if not self._needs_reset and state_key and None not in state_key and state_key == self._last_state_key:
            self._publish(self._last_command, "ok")
            return None
        dt = _stamp_dt(self._last_state_key, state_key, self.control_dt) if state_key else None
        self._last_state_key = state_key
        obs = {}
        try:
            for name, builder in self.builders.items():
                sources = {s: values[s] for s in self.profile.observations[name].sources}
                if self._needs_reset:
                    # First good tick (or the first after a safe one): fresh histories, previous action 0.
                    obs[name] = builder.reset(sources)
                else:
                    obs[name] = builder.push(sources, self._last_action, dt=dt)
        except InvalidInput as err:
            return f"bad input for {name!r}: {err}"
        if self._needs_reset:
            self.policy.reset()  # recurrent state back to zeros, as at an episode start
        self._needs_reset = False
        for name, value in obs.items():
            problem = self._check_range(name, np.asarray(value))
            if problem:
                return problem
        action, command = self.policy.run(obs)
        if not (np.isfinite(action).all() and np.isfinite(command).all()):
            return "non-finite policy output"
        if action.min() < self.action_low - ACTION_TOL or action.max() > self.action_high + ACTION_TOL:
            return f"policy action outside [{self.action_low:g}, {self.action_high:g}]"
        if self.last_status != "ok":
            self.get_logger().info("inputs valid: commanding the policy", throttle_duration_sec=WARN_PERIOD_S)
        self._publish(command, "ok")
        self._last_action = action.astype(np.float32)
        self._last_command = command
        return None

    def _check_range(self, name: str, value: np.ndarray) -> str | None:
        """Why float entry ``name`` cannot be fed (non-finite or beyond ``max_abs_obs``), or None."""
        if not np.issubdtype(value.dtype, np.floating):
            return None  # images (uint8), indices and masks are in range by type
        flat = value.reshape(-1)
        if not np.isfinite(flat).all():
            return f"non-finite observation ({self._term_at(name, int(np.argmin(np.isfinite(flat))))})"
        worst = int(np.argmax(np.abs(flat)))
        if abs(float(flat[worst])) > self.max_abs_obs:
            value_text = f"{float(flat[worst]):.3g}"
            return f"observation out of range ({self._term_at(name, worst)} = {value_text}, limit {self.max_abs_obs:g})"
        return None

    def _term_at(self, entry: str, index: int) -> str:
        """The term name of flat index ``index`` of ``entry`` (the entry's name where it has no terms)."""
        names = self._term_names.get(entry) or []
        return names[index] if index < len(names) else f"{entry}[{index}]"

    # ----------------------------------------------------------------- outputs
    def _publish(self, command: np.ndarray, status: str) -> None:
        msg = Float32MultiArray()
        msg.layout.dim = list(self._layout_dims)
        msg.data = [float(c) for c in command]
        self.command_pub.publish(msg)
        self.status_pub.publish(String(data=status))
        self.last_status = status

    def _publish_safe(self, reason: str) -> None:
        self._last_action = np.zeros(self.act_dim, dtype=np.float32)
        self._needs_reset = True
        try:
            self._publish(self.safe_command, f"safe: {reason}")
            self.get_logger().warning(f"safe command: {reason}", throttle_duration_sec=WARN_PERIOD_S)
        except Exception as err:  # e.g. during shutdown; nothing more we can do this tick
            self.last_status = f"safe: {reason} (publish failed: {err})"


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``python -m deploy_ros.policy_node --ros-args -p model:=<file.onnx> -p agent_index:=<i>``.

    Any error (bad arguments or parameters, a missing or corrupt model, an internal failure) is one
    line on stderr and exit code 1 (``COVEY_DEBUG=1``: the traceback).
    """
    node = None
    try:
        check_params_files(argv)
        rclpy.init(args=argv)
        node = PolicyNode()
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception as err:  # noqa: BLE001 - one line for the operator, whatever failed
        if node is None or rclpy.ok():
            return report("policy_node", err)
        # Otherwise Ctrl-C shut the context down while spin built its wait set: a stop, not a failure.
    finally:
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
