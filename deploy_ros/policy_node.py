"""Generic ROS 2 policy node: an exported covey ONNX model driving one robot.

    python -m deploy_ros.policy_node --ros-args -r __ns:=/mav0 \\
        -p model:=runs/cable_load.onnx -p agent_index:=0 [-p use_sim_time:=true]

At ``rate_hz`` it builds the policy observation from the latest messages (own odometry, load
odometry, goal pose) exactly as the simulator does (:class:`deploy_ros.observation.ObservationBuilder`,
laid out per the model's ``covey`` metadata), runs onnxruntime (one thread) and publishes the
model's ``command`` output (physical units). If anything is wrong it publishes the SAFE command
instead and says why on ``status``; it never crashes on bad input.

Parameters:
    model (str, required): path of the exported ``.onnx`` file (``export.py``).
    agent_index (int, required): this robot's index in its group (its row of the per-agent
        deployment constants, e.g. its cable attachment point on the load).
    odom_topic (str, "odom"): own ``nav_msgs/Odometry``.
    load_topic (str, "/load/odom"): the load's ``nav_msgs/Odometry``.
    goal_topic (str, "/load/goal"): the load goal, ``geometry_msgs/PoseStamped``.
    command_topic (str, "command"): output, ``std_msgs/Float32MultiArray``.
    stale_timeout_s (float, 0.1): odometry older than this (node clock, receive time) is stale; 0 disables
        the check (not advised on a robot).
    goal_timeout_s (float, 0.0): the same for the goal; 0 (default) = a goal never goes stale, as it is a
        set-point that holds until replaced, not a sensor stream.
    max_abs_obs (float, 100.0): any observation entry with a larger magnitude is out of range.
    rate_hz (float, 0.0): control rate; 0 or less = the model's ``control_hz`` (the rate it was trained at).
    use_sim_time (bool): the standard ROS parameter; ages and the timer then follow ``/clock``.

Message conventions (ROS REP 103/105 and the ``nav_msgs/Odometry`` definition):
    * Odometry ``pose`` is in the common world frame (``header.frame_id``, ENU, z up) shared by the
      robot, the load and the goal; the ``frame_id`` strings are not checked.
    * Odometry ``twist`` (linear and angular) is in the BODY frame (``child_frame_id``). The builder
      needs the linear velocity in the world frame (as in the sim), so it is rotated by the pose's
      orientation; the angular velocity stays in the body frame (as in the sim).
    * Quaternions arrive as ``(x, y, z, w)`` and are reordered to covey's ``[w, x, y, z]``; they are
      normalised, and one whose norm is off by more than ``QUAT_NORM_TOL`` (e.g. all zeros) makes the
      input invalid.

Outputs:
    ``command_topic`` (std_msgs/Float32MultiArray): ``data`` = the command in the metadata's action
        order and units; ``layout.dim`` = one dimension of size act_dim whose ``label`` names the
        entries, "<name>[<unit>],<name>[<unit>],...". SAFE command: all zeros, which in the
        ``cable_load`` action semantics means zero commanded acceleration and no body-rate
        feed-forward for the onboard (INDI) controller.
    ``status`` (std_msgs/String), every tick: "ok" or "safe: <reason>".

Safety: a tick publishes the SAFE command (and logs a throttled warning) when an input is missing,
stale, non-finite or malformed, when the observation is non-finite or beyond ``max_abs_obs``, when
the model output is non-finite or outside its bounds, or on any internal error. The previous action
fed back to the policy is then zero, and the observation history restarts (as at a sim reset) on the
first good tick after.

Time: the observation history and integrators (``own_attach_err_int``) step once per tick whose
odometry header stamps (own and load; unset stamps always step) differ from the previous tick's;
a tick with the same stamps (a simulator holding its start, a stalled estimator within the stale
timeout) re-sends the last command. The policy was trained with one such step per control period.

No torch: numpy, onnxruntime and rclpy only.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import rclpy
from geometry_msgs.msg import PoseStamped
from nav_msgs.msg import Odometry
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from rclpy.time import Time
from std_msgs.msg import Float32MultiArray, MultiArrayDimension, String

from deploy_ros.observation import ObservationBuilder, RobotInputs, quat_rotate

ONNX_METADATA_KEY = "covey"  # = policies.export.ONNX_METADATA_KEY (not imported: policies needs torch)
QUAT_NORM_TOL = 0.1  # |norm - 1| beyond this: a malformed quaternion, not round-off
ACTION_TOL = 1e-4  # slack on the model's action bounds (float32 clamp)
WARN_PERIOD_S = 1.0


class InvalidInput(ValueError):
    """A message that cannot be used (non-finite values, malformed quaternion)."""


# --------------------------------------------------------------------------- model


def load_policy(path: str | Path) -> tuple[Any, dict]:
    """A single-thread onnxruntime session of ``path`` and its ``covey`` metadata (no ``onnx`` package needed)."""
    import onnxruntime as ort

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"model file {path} does not exist")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1  # one robot, batch 1: threads only add latency jitter
    opts.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
    props = session.get_modelmeta().custom_metadata_map
    if ONNX_METADATA_KEY not in props:
        raise ValueError(f"{path} has no '{ONNX_METADATA_KEY}' metadata: not a covey export")
    return session, json.loads(props[ONNX_METADATA_KEY])


# --------------------------------------------------------------------------- messages


def _quat_wxyz(o: Any) -> np.ndarray:
    """``geometry_msgs/Quaternion`` (x, y, z, w) -> normalised ``[w, x, y, z]``; InvalidInput when malformed."""
    q = np.array([o.w, o.x, o.y, o.z], dtype=np.float64)
    if not np.isfinite(q).all():
        raise InvalidInput("non-finite orientation")
    norm = float(np.linalg.norm(q))
    if abs(norm - 1.0) > QUAT_NORM_TOL:
        raise InvalidInput(f"orientation quaternion has norm {norm:.3g}")
    return q / norm


def _vec(v: Any, what: str) -> np.ndarray:
    out = np.array([v.x, v.y, v.z], dtype=np.float64)
    if not np.isfinite(out).all():
        raise InvalidInput(f"non-finite {what}")
    return out


def odometry_state(msg: Odometry) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(pos [3] world m, quat [4] wxyz body->world, vel [3] WORLD m/s, ang_vel [3] BODY rad/s)``.

    The twist is in the body frame (``child_frame_id``, the Odometry convention); the linear part
    is rotated to the world frame, the angular part kept in the body frame (both as in the sim).

    Raises:
        InvalidInput: non-finite values or a malformed quaternion.
    """
    pose, twist = msg.pose.pose, msg.twist.twist
    quat = _quat_wxyz(pose.orientation)
    pos = _vec(pose.position, "position")
    vel_body = _vec(twist.linear, "linear velocity")
    ang_vel = _vec(twist.angular, "angular velocity")
    return pos, quat, quat_rotate(quat, vel_body), ang_vel


def pose_state(msg: PoseStamped) -> tuple[np.ndarray, np.ndarray]:
    """``(pos [3] world m, quat [4] wxyz)`` of a ``PoseStamped``; InvalidInput when malformed."""
    return _vec(msg.pose.position, "position"), _quat_wxyz(msg.pose.orientation)


@dataclass
class _Latest:
    """The last message of one input: parsed values or why it is unusable, and when it came (node clock)."""

    value: tuple[np.ndarray, ...] | None
    error: str | None
    stamp: Time
    header: tuple[int, int] | None = None  # the message's own header stamp (sec, nanosec), if it has one


def _stamp_dt(previous: tuple | None, current: tuple, control_dt: float) -> float | None:
    """Seconds between two ticks' load odometry header stamps, clamped to [0, 5 control periods]
    (None without stamps: integrators then assume one control period, as the simulator does)."""
    if previous is None or previous[1] is None or current[1] is None:
        return None
    (s0, n0), (s1, n1) = previous[1], current[1]
    return min(max((s1 - s0) + (n1 - n0) * 1e-9, 0.0), 5.0 * control_dt)


# --------------------------------------------------------------------------- node


class PolicyNode(Node):
    """Runs one robot's policy; see the module docstring for parameters, topics and conventions.

    Args:
        node_name: the ROS node name.
        **kwargs: passed to ``rclpy.node.Node`` (``context``, ``namespace``, ``parameter_overrides``...).

    Raises:
        ValueError, FileNotFoundError: missing/invalid parameters or model (at construction only).
    """

    def __init__(self, node_name: str = "covey_policy", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        dyn = ParameterDescriptor(dynamic_typing=True)  # accept -p rate_hz:=100 (int) as well as 100.0
        p = {
            "model": self.declare_parameter("model", "").value,
            "agent_index": self.declare_parameter("agent_index", -1).value,
            "odom_topic": self.declare_parameter("odom_topic", "odom").value,
            "load_topic": self.declare_parameter("load_topic", "/load/odom").value,
            "goal_topic": self.declare_parameter("goal_topic", "/load/goal").value,
            "command_topic": self.declare_parameter("command_topic", "command").value,
            "stale_timeout_s": self.declare_parameter("stale_timeout_s", 0.1, dyn).value,
            "goal_timeout_s": self.declare_parameter("goal_timeout_s", 0.0, dyn).value,
            "max_abs_obs": self.declare_parameter("max_abs_obs", 100.0, dyn).value,
            "rate_hz": self.declare_parameter("rate_hz", 0.0, dyn).value,
        }
        if not p["model"]:
            raise ValueError("parameter 'model' (path of the exported .onnx file) is required")
        if not isinstance(p["agent_index"], int) or p["agent_index"] < 0:
            raise ValueError(
                f"parameter 'agent_index' (this robot's index in its group) is required, got {p['agent_index']!r}"
            )
        self.session, self.metadata = load_policy(p["model"])
        self.builder = ObservationBuilder(self.metadata, p["agent_index"])
        self.agent_index = p["agent_index"]
        act = self.metadata["action"]
        self.action_names: list[str] = list(act["names"])
        self.action_low, self.action_high = float(act["low"]), float(act["high"])
        self.act_dim = len(self.action_names)
        self.stale_timeout_s = float(p["stale_timeout_s"])
        self.goal_timeout_s = float(p["goal_timeout_s"])
        self.max_abs_obs = float(p["max_abs_obs"])
        rate = float(p["rate_hz"]) if float(p["rate_hz"]) > 0 else float(self.metadata["control_hz"])
        if not math.isfinite(rate) or rate <= 0:
            raise ValueError(f"bad control rate {rate} Hz")
        self.rate_hz = rate
        self.control_dt = 1.0 / float(self.metadata["control_hz"])  # the trained control period
        # A per-agent model takes [B, n_agents, obs_dim] and agent a reads row a.
        self._per_agent = len(self.session.get_inputs()[0].shape) == 3
        self._n_agents = int(self.metadata.get("n_agents", 1))
        self._frame_terms = [t["name"] for t in self.metadata["observation"]["terms"] for _ in range(int(t["size"]))]

        self._latest: dict[str, _Latest] = {}
        self._last_action = np.zeros(self.act_dim, dtype=np.float32)
        self._needs_reset = True  # restart the history on the next good tick
        self._last_state_key: tuple | None = None  # odometry header stamps of the last stepped tick
        self._last_command = np.zeros(self.act_dim, dtype=np.float32)
        self.last_status = ""

        # One dimension of size act_dim (a plain vector, as MultiArrayLayout means it); its label
        # names the entries: "acc_x[m/s^2],acc_y[m/s^2],...".
        label = ",".join(f"{n}[{u}]" for n, u in zip(self.action_names, act["units"], strict=True))
        self._layout_dims = [MultiArrayDimension(label=label, size=self.act_dim, stride=self.act_dim)]
        self.command_pub = self.create_publisher(Float32MultiArray, p["command_topic"], 10)
        self.status_pub = self.create_publisher(String, "status", 10)
        # Odometry: best effort (matches both reliable and best-effort publishers; only the newest matters).
        # Goal: reliable, so a set-point sent once over a lossy link is not dropped.
        goal_qos = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)
        subs = {
            "odom": (Odometry, p["odom_topic"], odometry_state, qos_profile_sensor_data),
            "load": (Odometry, p["load_topic"], odometry_state, qos_profile_sensor_data),
            "goal": (PoseStamped, p["goal_topic"], pose_state, goal_qos),
        }
        self._topics: dict[str, str] = {}  # input -> resolved topic name (for status messages)
        for key, (msg_type, topic, parse, qos) in subs.items():
            self._topics[key] = self.create_subscription(msg_type, topic, self._callback(key, parse), qos).topic_name
        self.timer = self.create_timer(1.0 / rate, self._on_timer)
        self.get_logger().info(
            f"policy {p['model']} ({self.metadata.get('task')}/{self.metadata.get('group')}, run "
            f"{self.metadata.get('run_id')}), agent {self.agent_index}, {rate:g} Hz, inputs {self._topics}"
        )

    # ----------------------------------------------------------------- inputs
    def _callback(self, key: str, parse: Any) -> Any:
        def on_message(msg: Any) -> None:
            now = self.get_clock().now()
            header = getattr(getattr(msg, "header", None), "stamp", None)
            head = (int(header.sec), int(header.nanosec)) if header is not None else None
            head = None if head == (0, 0) else head  # an unset stamp says nothing about time
            try:
                self._latest[key] = _Latest(parse(msg), None, now, head)
            except InvalidInput as err:
                self._latest[key] = _Latest(None, str(err), now)
            except Exception as err:  # never let a bad message kill the node
                self._latest[key] = _Latest(None, f"unreadable message ({type(err).__name__}: {err})", now)

        return on_message

    def _gather(self, now: Time) -> tuple[RobotInputs | None, str | None]:
        """This tick's inputs, or why there are none usable."""
        values = {}
        for key, topic in self._topics.items():
            latest = self._latest.get(key)
            if latest is None:
                return None, f"no message yet on {topic}"
            if latest.error is not None:
                return None, f"bad message on {topic}: {latest.error}"
            timeout = self.goal_timeout_s if key == "goal" else self.stale_timeout_s
            age = (now - latest.stamp).nanoseconds * 1e-9 if now >= latest.stamp else -1.0
            if age < 0:  # the clock went backwards (e.g. a simulator restarted /clock): trust nothing
                return None, f"{topic} received in the future (clock jumped back)"
            if timeout > 0 and age > timeout:
                return None, f"stale {topic} ({age:.3f} s old > {timeout:g} s)"
            values[key] = latest.value
        (own_pos, own_quat, own_vel, own_w), (ld_pos, ld_quat, ld_vel, ld_w) = values["odom"], values["load"]
        goal_pos, goal_quat = values["goal"]
        inputs = RobotInputs(own_pos, own_quat, own_vel, own_w, ld_pos, ld_quat, ld_vel, ld_w, goal_pos, goal_quat)
        return inputs, None

    # ----------------------------------------------------------------- control tick
    def _on_timer(self) -> None:
        try:
            reason = self._tick()
        except Exception as err:  # the node must keep commanding something safe whatever happens
            reason = f"internal error ({type(err).__name__}: {err})"
        if reason is not None:
            self._publish_safe(reason)

    def _tick(self) -> str | None:
        """One control step; publishes the policy command and returns None, or returns why not."""
        inputs, reason = self._gather(self.get_clock().now())
        if inputs is None:
            return reason
        # The measured state has not moved on since the last tick (same odometry header stamps, e.g. a
        # simulator holding its start state): re-send the last command without stepping the history
        # and the integrators (own_attach_err_int), which would otherwise integrate time that did not pass.
        state_key = tuple(self._latest[k].header for k in ("odom", "load"))
        if not self._needs_reset and None not in state_key and state_key == self._last_state_key:
            self._publish(self._last_command, "ok")
            return None
        dt = _stamp_dt(self._last_state_key, state_key, self.control_dt)
        self._last_state_key = state_key
        if self._needs_reset:
            # First good tick (or the first after a safe one): history = copies of this frame, previous action 0.
            self._last_action = np.zeros(self.act_dim, dtype=np.float32)
            obs = self.builder.reset(inputs)
        else:
            obs = self.builder.push(inputs, self._last_action, dt=dt)
        self._needs_reset = False
        if not np.isfinite(obs).all():
            return f"non-finite observation ({self._term_at(int(np.argmin(np.isfinite(obs))))})"
        worst = int(np.argmax(np.abs(obs)))
        if abs(float(obs[worst])) > self.max_abs_obs:
            value = float(obs[worst])
            return f"observation out of range ({self._term_at(worst)} = {value:.3g}, limit {self.max_abs_obs:g})"
        action, command = self._run(obs)
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

    def _term_at(self, index: int) -> str:
        """The term name of flat observation entry ``index`` (frames repeat the same terms)."""
        return self._frame_terms[index % len(self._frame_terms)]

    def _run(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(action [act_dim] normalised, command [act_dim] physical)`` of onnxruntime on ``obs [obs_dim]``."""
        if self._per_agent:
            # Each row meets its own agent's weights; only ours is read.
            batch = np.repeat(obs[None, None], self._n_agents, axis=1)
            action, command = self.session.run(["action", "command"], {"obs": batch})
            return action[0, self.agent_index], command[0, self.agent_index]
        action, command = self.session.run(["action", "command"], {"obs": obs[None].astype(np.float32)})
        return action[0], command[0]

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
            self._publish(np.zeros(self.act_dim, dtype=np.float32), f"safe: {reason}")
            self.get_logger().warning(f"safe command: {reason}", throttle_duration_sec=WARN_PERIOD_S)
        except Exception as err:  # e.g. during shutdown; nothing more we can do this tick
            self.last_status = f"safe: {reason} (publish failed: {err})"


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``python -m deploy_ros.policy_node --ros-args -p model:=<file.onnx> -p agent_index:=<i>``."""
    rclpy.init(args=argv)
    node = None
    try:
        node = PolicyNode()
        rclpy.spin(node)
    except (ValueError, FileNotFoundError) as err:
        print(f"policy_node: {err}", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
