"""Sim bridge: one covey environment of any task stepped in real time, speaking the robots' topics (SITL).

    python -m sim.ros.bridge --ros-args -p model:=assets/policies/cable_load/policy.onnx

The model's metadata gives the task config (``task_cfg``; noise and randomisation are switched off
as in evaluation) and, in its deployment profile (``ros.bridge``), the task's bridge adapter: a
``"module:Class"`` in the task package, constructed as ``Class(node, task_cfg, seed)``. The adapter
makes the env (``adapter.env``), declares its own parameters (e.g. a goal), publishes what the
robots' estimators would from the env state (``adapter.publish(stamp)``), names the command topic
of every agent (``adapter.command_topics``: group -> one topic per agent) and reports the episode
(``adapter.result()``: a JSON-friendly dict). Optional hooks: ``adapter.other_actions()`` (group -> actions
``[1, n, act_dim]`` of groups without command topics, e.g. a scripted opponent, on the current state; zeros
otherwise), ``adapter.after_step(info)`` (after each step, before the state is published; ``info``: the step's
info dict, whose ``episode`` entry holds the metrics of episodes that ended with it) and ``adapter.finished()``
(True ends the run as ``duration_s`` does, e.g. after a number of games). This node does the rest, the same for
every task:

    /clock           rosgraph_msgs/Clock  sim time (nodes may run with use_sim_time)
    <command topics> std_msgs/Float32MultiArray (subscribed): each agent's command in physical units,
                     in the order of the group's action names; it becomes the action
                     ``command / action_scale`` clipped to [-1, 1]. An agent without a command newer
                     than ``command_timeout_s`` gets the profile's safe command, and so does one whose
                     last command was malformed (wrong size, NaN/inf, beyond the action range):
                     counted as ``bad_commands`` in the result.

Parameters: ``model`` (ONNX file, required), ``seed`` (0), ``scenario`` (""; a named case of the task,
as ``evaluate.py scenario=<name>``, merged over the model's ``task_cfg``: e.g. ``mav_loss`` to fly a
MAV loss in SITL), ``rate_hz`` (default the policy rate),
``realtime_factor`` (1.0 = real time), ``command_timeout_s`` (0.1), ``duration_s`` (stop after this
much sim time and write ``result_file``; 0 = run forever), ``wait_for_commands`` (true: hold the
start state, still publishing it, until every agent has sent a command; give up with exit code 1
after ``wait_timeout_s``, 60), ``lockstep`` (false; true: step only when every agent has answered the
current state, its policy node running with ``lockstep`` too, so a loaded machine slows the run down
instead of delaying commands: the result is the in-process evaluation's, for SITL tests; the timer
then sets the fastest pace, a state unanswered for ``command_timeout_s`` is sent again, and none for
``wait_timeout_s`` ends the run with exit code 1), ``result_file`` (JSON: the adapter's result plus ``sim_time_s``,
``steps``, ``stale_command_steps`` and ``stepping_wall_s``, the wall time from the first step, written at the
end), ``compile`` (false; true: the adapter makes its env with ``torch.compile`` of the control loop and warms
it up before the first tick: about 3x faster steps on a CPU after a one-off compile of 1-3 min, for machines
that cannot otherwise step the task in real time; adapters read it as ``node.compile``).

Delays, jitter and drops on the robot path (all 0 by default: the messages pass straight through). The **state
path** is every message the adapter publishes (sensors, game state; not ``/clock``, which is sim time itself), the
**command path** every command the bridge receives. Each has ``<path>_delay_s`` (>= 0), ``<path>_jitter_s`` (>= 0)
and ``<path>_drop`` (a share in [0, 1)), ``<path>`` = ``state`` or ``command``: a message's latency is
``delay + U(0, jitter)`` (the delay is the least latency; jitter never reorders one topic's or one agent's
messages: a message is not due before the one sent before it), and each message is dropped with probability
``drop``, the draws seeded from ``seed`` (one generator per path), so a run is reproducible. What a drop leaves:

- state: the nodes keep their older input; a policy node re-sends its last command for unchanged header stamps
  (in lockstep it sends nothing: it answers each state once) and, after its ``stale_timeout_s``, the safe command;
- command: the bridge keeps applying the agent's last command; in real time one older than ``command_timeout_s``
  (wall clock, from its arrival) gives way to the safe command, in lockstep one older than ``command_timeout_s``
  of sim time; an agent flies the safe command until its first command arrives. Both count as
  ``stale_command_steps``.

In real time the latencies are wall-clock seconds (not scaled by ``realtime_factor``) and each message of the state
path is delayed and dropped on its own. In lockstep a latency is rounded (halves up) to ``k`` whole control steps
(``latency / control_dt``, so that a study is deterministic however loaded the machine): a command sent in answer to
the state after ``s`` steps acts from step ``s + k``, and the state after step ``t`` reaches the nodes after step
``t + k``. A state is then one message (all its topics together, delayed and dropped as one); the start state is
delivered at once and never dropped; the bridge waits for answers only when a new state reached the nodes (a dropped
or not-yet-due state leaves them on the older one: the bridge steps on their held commands), and when several states
fall due at one step only the newest is delivered (``superseded``). Every answer counts in the lockstep handshake; a
dropped command's content is discarded. The result's ``link`` (only when a path is on) counts per path the
``messages`` sent, those ``delayed`` (latency above 0, in lockstep at least one step), ``dropped`` and, in lockstep,
``superseded`` states. The state path may hold an adapter's messages: an adapter builds new ones at each ``publish``
(as every adapter does), never refilling one it published before.

This node runs the simulator, so it needs torch (the policy nodes do not) and lives on the simulator side;
``python -m deploy_ros.sim_bridge`` starts it too. It names no task. Adapters build their messages with
:mod:`sim.ros.messages`.
"""

from __future__ import annotations

import json
import math
import signal
import sys
import time
from collections import deque
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import numpy as np
import rclpy
import torch
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from rosgraph_msgs.msg import Clock
from std_msgs.msg import Float32MultiArray

from covey_common.cli import check_params_files, report
from covey_common.profile import import_object
from covey_common.ros_params import float_parameter
from sim.ros.messages import sim_stamp


def read_metadata(model: str | Path) -> dict:
    """The ``covey`` metadata of an exported model (FileNotFoundError / ValueError when unusable)."""
    from policies.export import read_metadata as read

    if not Path(model).is_file():
        raise FileNotFoundError(f"model file {model} does not exist")
    try:
        return read(model)
    except ValueError:
        raise
    except Exception as exc:  # onnx raises protobuf's DecodeError (and others) for a corrupt file
        reason = " ".join(str(exc).split())
        raise ValueError(f"{model} is not a loadable ONNX model (corrupt or truncated? re-export): {reason}") from exc


def read_task_cfg(model: str | Path) -> dict:
    """The task config stored in an exported model's ``covey`` metadata."""
    meta = read_metadata(model)
    if "task_cfg" not in meta:
        raise ValueError(f"{model}: its covey metadata has no task_cfg")
    return dict(meta["task_cfg"])


COMMAND_TOL = 1e-3  # relative slack on the action range for float32 round-off of a node's command


def command_action(command: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """The env actions ``[n_agents, act_dim]`` (float32, clipped to [-1, 1]) of commands in physical units
    ``[n_agents, act_dim]``, as the bridge applies them: ``command / action_scale`` in float32. In-process checks of
    the robot path call this too, so that they apply a command to the bit the bridge does."""
    return (np.asarray(command, dtype=np.float32) / np.asarray(scale, dtype=np.float32)).clip(-1.0, 1.0)


class Link:
    """One path of the robot link (the state or the command path): each message is dropped with probability
    ``drop`` or held for ``delay + U(0, jitter)``, in seconds, or in whole control steps when ``step_s`` is given
    (lockstep); one FIFO queue per channel (a topic, an agent), so jitter never reorders a channel.

    Args:
        path: "state" or "command" (parameter names ``<path>_delay_s``... in errors).
        delay, jitter: seconds (>= 0); drop: the share of messages lost, in [0, 1).
        rng: the path's generator (seeded from the bridge's seed).
        step_s: the control period: latencies rounded to whole steps and times counted in steps (None: seconds).

    Raises:
        ValueError: a negative or non-finite delay or jitter, a drop share outside [0, 1).
    """

    def __init__(
        self, path: str, delay: float, jitter: float, drop: float, rng: np.random.Generator, step_s: float | None
    ) -> None:
        for name, value in (("delay_s", delay), ("jitter_s", jitter)):
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{path}_{name} must be a finite number of seconds >= 0, got {value:g}")
        if not (0.0 <= drop < 1.0):
            raise ValueError(f"{path}_drop must be a share in [0, 1), got {drop:g}")
        self.delay, self.jitter, self.drop, self.rng, self.step_s = delay, jitter, drop, rng, step_s
        self.active = delay > 0 or jitter > 0 or drop > 0
        self.queues: dict[Hashable, deque[tuple[float, Any]]] = {}
        self.last_due: dict[Hashable, float] = {}
        self.counts = {"messages": 0, "delayed": 0, "dropped": 0}

    def send(self, channel: Hashable, item: Any, now: float, at_once: bool = False) -> bool:
        """Queue ``item`` on ``channel`` at time ``now`` (s, or steps); False if it was dropped. ``at_once``: neither
        delayed nor dropped (lockstep's start state)."""
        self.counts["messages"] += 1
        if not at_once and self.drop > 0 and self.rng.random() < self.drop:
            self.counts["dropped"] += 1
            return False
        latency = 0.0 if at_once else self.delay + (self.jitter * self.rng.random() if self.jitter > 0 else 0.0)
        if self.step_s is not None:
            latency = math.floor(latency / self.step_s + 0.5)  # whole control steps (round half up)
        self.counts["delayed"] += latency > 0
        due = max(now + latency, self.last_due.get(channel, -math.inf))  # not before the channel's previous one
        self.last_due[channel] = due
        self.queues.setdefault(channel, deque()).append((due, item))
        return True

    def due(self, channel: Hashable, now: float) -> list[Any]:
        """The items of ``channel`` due at ``now``, oldest first (taken off the queue)."""
        queue, out = self.queues.get(channel), []
        while queue and queue[0][0] <= now:
            out.append(queue.popleft()[1])
        return out

    def channels(self) -> list[Hashable]:
        return list(self.queues)


class _StatePublisher:
    """An adapter's publisher: what it publishes inside ``SimBridge.publish_state`` goes to the state path."""

    def __init__(self, bridge: SimBridge, publisher: Any) -> None:
        self._bridge, self._publisher = bridge, publisher

    def publish(self, msg: Any) -> None:
        outbox = self._bridge.outbox
        if outbox is None:  # published outside a state (none of the adapters does): straight through
            self._publisher.publish(msg)
        else:
            outbox.append((self._publisher, msg))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._publisher, name)


# --------------------------------------------------------------------------- node


class SimBridge(Node):
    """Steps the task's env on a wall-clock timer; see the module docstring for topics and parameters.

    Args:
        **kwargs: passed to ``rclpy.node.Node`` (``context``, ``parameter_overrides``...).

    Raises:
        ValueError, FileNotFoundError: no model, or one without a task config or bridge adapter.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("covey_sim_bridge", **kwargs)
        model = self.declare_parameter("model", "").value
        seed = int(self.declare_parameter("seed", 0).value)
        self.compile = bool(self.declare_parameter("compile", False).value)  # read by the adapter
        if not model:
            raise ValueError("sim_bridge needs -p model:=<file.onnx>")
        meta = read_metadata(model)
        ros = meta.get("ros") or {}
        if "task_cfg" not in meta or not ros.get("bridge"):
            raise ValueError(
                f"{model} (task {meta.get('task')!r}) names no sim bridge adapter (metadata ros.bridge) or task_cfg"
            )
        task_cfg = dict(meta["task_cfg"])
        scenario = str(self.declare_parameter("scenario", "").value)
        if scenario:
            from sim.core.registry import apply_scenario

            task_cfg = apply_scenario(task_cfg, scenario)
        self.outbox: list[tuple[Any, Any]] | None = None  # the state being published (publish_state)
        self._state_publishers = True  # the adapter's publishers feed the state path (create_publisher)
        self.adapter = import_object(ros["bridge"])(self, task_cfg, seed)
        self._state_publishers = False
        self.env = self.adapter.env
        spec = self.env.spec
        rate = float_parameter(self, "rate_hz", spec.control_hz)
        factor = float_parameter(self, "realtime_factor", 1.0)
        self.command_timeout = float_parameter(self, "command_timeout_s", 0.1)
        self.duration = float_parameter(self, "duration_s", 0.0)
        self.result_file = self.declare_parameter("result_file", "").value
        # Hold the start state (still publishing it) until every agent has sent a command, so that
        # nodes still starting up do not cost the team the first seconds of the episode.
        self.waiting = bool(self.declare_parameter("wait_for_commands", True).value)
        self.wait_timeout = float_parameter(self, "wait_timeout_s", 60.0)
        self.lockstep = bool(self.declare_parameter("lockstep", False).value)
        step_s = spec.control_dt if self.lockstep else None
        self.links = {
            path: Link(
                path,
                float_parameter(self, f"{path}_delay_s", 0.0),
                float_parameter(self, f"{path}_jitter_s", 0.0),
                float_parameter(self, f"{path}_drop", 0.0),
                np.random.default_rng([seed, k]),
                step_s,
            )
            for k, path in enumerate(("state", "command"))
        }
        self.delivered: list[tuple[Any, Any]] = []  # lockstep: the state the nodes have (resent when unanswered)
        self.superseded = 0  # lockstep: states overtaken by a newer one due at the same step
        self.expect_answers = True  # lockstep: a new state reached the nodes, so the bridge waits for their answers
        self.started = time.monotonic()
        self.failed = ""
        self.sim_time = 0.0
        self.steps = 0
        self.first_step_at: float | None = (
            None  # wall clock (monotonic) of the first step: the result's stepping_wall_s
        )
        self.stale_count = 0
        self.bad_commands = 0  # commands of the wrong size or non-finite (dropped; the agent gets the safe command)
        self.done = False

        topics: dict[str, list[str]] = dict(self.adapter.command_topics)
        self.scale: dict[str, np.ndarray] = {}
        self.safe: dict[str, np.ndarray] = {}
        self.commands: dict[str, np.ndarray] = {}
        self.command_time: dict[str, np.ndarray] = {}
        self.answered: dict[str, np.ndarray] = {}  # lockstep: which agents answered the current state
        for group, names in topics.items():
            g = spec.groups[group]
            if len(names) != g.n_agents:
                raise ValueError(f"bridge adapter gives {len(names)} command topics for {g.n_agents} agents of {group}")
            self.scale[group] = np.asarray(g.action_scale, dtype=np.float32)
            # The policy nodes on these topics fly this model (whatever its group was called in training, e.g. a
            # skills level's "drones" commanding a match's team_a): its profile's safe command is theirs.
            safe = np.asarray(ros["command"]["safe"], dtype=np.float32)
            if safe.shape != (g.action_dim,):
                raise ValueError(
                    f"the profile's safe command has {safe.size} values, group {group} acts with {g.action_dim}"
                )
            self.safe[group] = safe
            self.commands[group] = np.zeros((g.n_agents, g.action_dim), dtype=np.float32)
            self.command_time[group] = np.full(g.n_agents, -math.inf)
            self.answered[group] = np.zeros(g.n_agents, dtype=bool)
            for i, topic in enumerate(names):
                self.create_subscription(Float32MultiArray, topic, self._on_command(group, i, topic), 10)
        self.clock_pub = self.create_publisher(Clock, "/clock", 10)
        self.publish_state()
        self.state_sent = self.state_since = time.monotonic()  # lockstep: last (re)send, first send of this state
        self.timer = self.create_timer(1.0 / (rate * factor), self.tick)
        if not self.lockstep and any(link.delay > 0 or link.jitter > 0 for link in self.links.values()):
            self.create_timer(0.001, self.deliver_due)  # real time: held messages go out within a millisecond
        self.get_logger().info(
            f"{meta.get('task')} bridge: {', '.join(f'{g}: {len(t)} agents' for g, t in topics.items())} at "
            f"{rate:g} Hz x{factor:g}; {self.adapter.describe()}"
        )

    def create_publisher(self, *args: Any, **kwargs: Any) -> Any:
        """``Node.create_publisher``; while the adapter is made, its publishers feed the state path."""
        publisher = super().create_publisher(*args, **kwargs)
        return _StatePublisher(self, publisher) if getattr(self, "_state_publishers", False) else publisher

    def clock(self) -> float:
        """The time of commands' arrival and age: sim time in lockstep, the wall clock (monotonic) in real time."""
        return self.sim_time if self.lockstep else time.monotonic()

    def _on_command(self, group: str, i: int, topic: str):
        def callback(msg: Float32MultiArray) -> None:
            self.answered[group][i] = True  # lockstep: any answer is one (a dropped one too: its content is lost)
            link = self.links["command"]
            if not link.active:
                self.apply_command(group, i, topic, msg)
                return
            if link.send((group, i, topic), msg, self.steps if self.lockstep else time.monotonic()):
                self.deliver_commands()

        return callback

    def apply_command(self, group: str, i: int, topic: str, msg: Float32MultiArray) -> None:
        """A command arrives: agent ``i`` of ``group`` flies it from the next step (a bad one voids the last)."""
        data = np.asarray(msg.data, dtype=np.float64)
        ok = data.shape == (self.commands[group].shape[1],) and np.isfinite(data).all()
        # Beyond the action range (|command / scale| > 1): a broken node, not a command to clip and fly.
        if not ok or np.abs(data / self.scale[group]).max() > 1.0 + COMMAND_TOL:
            # A bad command voids the last good one: this agent flies the safe command from the next tick
            # (in lockstep a bad answer is an answer: the agent flies the safe command).
            self.command_time[group][i] = -math.inf
            self.bad_commands += 1
            self.get_logger().warning(f"{topic}: bad command {list(msg.data)[:8]}", throttle_duration_sec=1.0)
            return
        self.commands[group][i] = data.astype(np.float32)
        self.command_time[group][i] = self.clock()

    def deliver_commands(self) -> None:
        """Apply every held command now due (in lockstep: due at the coming step)."""
        link = self.links["command"]
        now = self.steps if self.lockstep else time.monotonic()
        for channel in link.channels():
            for msg in link.due(channel, now):
                self.apply_command(*channel, msg)

    def deliver_due(self) -> None:
        """Real time (the millisecond timer): publish the held state messages and apply the held commands now due."""
        now = time.monotonic()
        state = self.links["state"]
        for channel in state.channels():
            for publisher, msg in state.due(channel, now):
                publisher.publish(msg)
        self.deliver_commands()

    def tick(self) -> None:
        if self.done:
            return
        now = time.monotonic()
        if self.lockstep:
            self.lockstep_tick(now)
            return
        fresh = {g: (now - t) <= self.command_timeout for g, t in self.command_time.items()}
        if self.waiting:
            self.waiting = not all(f.all() for f in fresh.values())
            if self.waiting:
                if now - self.started > self.wait_timeout:
                    silent = {g: np.flatnonzero(~f).tolist() for g, f in fresh.items() if not f.all()}
                    self.failed = f"no commands from agents {silent} in {self.wait_timeout:g} s"
                    self.get_logger().error(self.failed)
                    self.done = True
                    return
                self.publish_state()  # keep the nodes' inputs fresh; sim time stands still
                return
            self.get_logger().info("every agent sends commands: stepping")
        self.step(fresh)

    def lockstep_tick(self, now: float) -> None:
        """Lockstep: step once every agent has answered the current state; until then resend it now and
        then (a lost message), and give up after ``wait_timeout_s``."""
        if self.expect_answers and not all(a.all() for a in self.answered.values()):
            if now - self.state_since > self.wait_timeout:
                silent = {g: np.flatnonzero(~a).tolist() for g, a in self.answered.items() if not a.all()}
                self.failed = f"lockstep: no answer from agents {silent} in {self.wait_timeout:g} s"
                self.get_logger().error(self.failed)
                self.done = True
            elif now - self.state_sent > self.command_timeout:
                self.resend_state()
                self.state_sent = now
            return
        if self.waiting:
            self.waiting = False
            self.get_logger().info("every agent answered the start state: stepping in lockstep")
        self.deliver_commands()
        # A voided (bad) answer flies the safe command, as a stale one does in real time; so does a command held
        # (its successors dropped or not yet due) for longer than command_timeout_s of sim time.
        self.step({g: self.sim_time - t <= self.command_timeout + 1e-9 for g, t in self.command_time.items()})
        for a in self.answered.values():
            a[:] = False
        self.state_sent = self.state_since = time.monotonic()

    def step(self, fresh: dict[str, np.ndarray]) -> None:
        """One control step: each agent's last command where ``fresh`` (per group ``[n_agents]`` bool), the
        safe command elsewhere (counted as stale); then the new state is published."""
        if self.first_step_at is None:
            self.first_step_at = time.monotonic()
        actions = {}
        for group, f in fresh.items():
            self.stale_count += int((~f).sum())
            command = np.where(f[:, None], self.commands[group], self.safe[group])
            actions[group] = torch.as_tensor(command_action(command, self.scale[group]))
        played = getattr(self.adapter, "other_actions", dict)()  # groups the adapter plays itself (a scripted team)
        zeros = self.env.zero_actions()
        info = self.env.step(
            {g: actions[g].unsqueeze(0) if g in actions else played.get(g, zeros[g]) for g in self.env.spec.groups}
        )[-1]
        self.steps += 1
        self.sim_time = self.steps * self.env.spec.control_dt
        getattr(self.adapter, "after_step", lambda info: None)(info)
        self.publish_state()
        over = getattr(self.adapter, "finished", lambda: False)()
        if over or (self.duration and self.sim_time >= self.duration - 1e-9):
            self.finish()

    def finish(self) -> None:
        self.done = True
        result: dict[str, Any] = dict(self.adapter.result())
        result.update(
            sim_time_s=self.sim_time,
            steps=self.steps,
            stale_command_steps=self.stale_count,
            bad_commands=self.bad_commands,
        )
        if self.first_step_at is not None:  # the wall time it stepped for: sim_time_s / this is its real-time ratio
            result["stepping_wall_s"] = time.monotonic() - self.first_step_at
        if any(link.active for link in self.links.values()):
            result["link"] = {path: dict(link.counts) for path, link in self.links.items()}
            if self.lockstep:
                result["link"]["state"]["superseded"] = self.superseded
        if self.result_file:
            Path(self.result_file).write_text(json.dumps(result))
        _ignore_stop_signals()
        try:
            self.get_logger().info(f"done: {json.dumps(result)}")
        except Exception:  # noqa: BLE001 - stopping on a signal: the context may be gone already
            pass

    def publish_state(self) -> None:
        """The clock, then the adapter's messages of the current state through the state path."""
        stamp = sim_stamp(self.sim_time)
        self.clock_pub.publish(Clock(clock=stamp))
        self.outbox = state = []
        try:
            self.adapter.publish(stamp)
        finally:
            self.outbox = None
        link = self.links["state"]
        if not link.active:
            self.send(state)
        elif self.lockstep:  # one message of the whole state, due in whole steps; the start state at once
            link.send("state", state, self.steps, at_once=self.steps == 0)
            due = link.due("state", self.steps)
            self.superseded += max(len(due) - 1, 0)
            self.expect_answers = bool(due)
            if due:
                self.send(due[-1])
        else:  # each message on its own
            now = time.monotonic()
            for publisher, msg in state:
                link.send(publisher.topic_name, (publisher, msg), now)
            self.deliver_due()

    def send(self, state: list[tuple[Any, Any]]) -> None:
        for publisher, msg in state:
            publisher.publish(msg)
        self.delivered = state

    def resend_state(self) -> None:
        """Lockstep: publish the state the nodes should answer again (a message may have been lost)."""
        if not self.links["state"].active:
            self.publish_state()  # the same state anew (the sim has not moved)
            return
        self.clock_pub.publish(Clock(clock=sim_stamp(self.sim_time)))
        self.send(self.delivered)


def _ignore_stop_signals() -> None:
    """Ignore SIGINT from here on: the result is written, and a stop signal now (a supervisor ending a run that fell
    behind real time, as benchmarks/sitl_soak.py does) would only kill the exiting process with -SIGINT."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: nothing to protect there
        pass


def main(argv: list[str] | None = None) -> int:
    """Entry point; any error is one line on stderr and exit code 1 (``COVEY_DEBUG=1``: the traceback).

    Stopped early (Ctrl-C, SIGTERM) after it started stepping, it still writes ``result_file`` for
    the sim time it ran.
    """
    node = None
    try:
        torch.set_num_threads(1)
        check_params_files(argv)
        rclpy.init(args=argv if argv is not None else sys.argv)
        node = SimBridge()
        while rclpy.ok() and not node.done:
            rclpy.spin_once(node, timeout_sec=0.1)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception as err:  # noqa: BLE001 - one line for the operator, whatever failed
        if node is None or rclpy.ok():
            return report("sim_bridge", err)
        # Otherwise a signal shut the context down under a running callback: a stop, not a failure.
    finally:
        if node is not None and not node.done and node.steps > 0 and not node.failed:
            node.finish()
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
        if node is not None and node.done:
            _ignore_stop_signals()  # again: rclpy's shutdown restores the handler it found (KeyboardInterrupt)
    return 1 if node is None or node.failed else 0


if __name__ == "__main__":
    sys.exit(main())
