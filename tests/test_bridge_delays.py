"""Delays, jitter and drops on the sim bridge's robot path (sim/ros/bridge.py): in lockstep a command delay of k
steps is the in-process flight with the commands applied k steps late, a state delay makes the nodes answer older
states, drops lose about the asked share, zero settings change nothing, bad settings fail with one line.

The bridge runs in this process with a stand-in for the policy nodes (a responder answering each state it receives
with a command drawn for that state's step), so that the expected schedule of applied commands is known exactly."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from ros_domains import claim_ros_domain

rclpy = pytest.importorskip("rclpy")

from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402

from sim.ros.bridge import Link, SimBridge, command_action, read_metadata, read_task_cfg  # noqa: E402
from sim.tasks.cable_load.ros_bridge import make_env  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "assets" / "policies" / "cable_load" / "policy.onnx"
GOAL = [0.3, -0.2, 0.5, 0.1, 0.0, 0.3]
SEED, STEPS, N = 4, 60, 3  # 0.6 s at 100 Hz, three MAVs

pytestmark = pytest.mark.skipif(not MODEL.is_file(), reason="no shipped cable_load policy.onnx")


def drawn_commands(scale: np.ndarray) -> np.ndarray:
    """The responder's command of every state ``[STEPS + 1, N, act_dim]`` (physical units, within half the range)."""
    u = np.random.default_rng(7).uniform(-0.5, 0.5, (STEPS + 1, N, scale.size))
    return (u * scale).astype(np.float32)


class Responder(Node):
    """Answers each state it receives (MAV ``i``'s odometry, once per header stamp) with ``commands[step][i]``."""

    def __init__(self, commands: np.ndarray, dt: float, **kwargs) -> None:
        from nav_msgs.msg import Odometry
        from std_msgs.msg import Float32MultiArray

        super().__init__("responder", **kwargs)
        self.commands, self.dt, self.answered = commands, dt, [set() for _ in range(N)]
        self.pubs = [self.create_publisher(Float32MultiArray, f"/mav{i}/command", 10) for i in range(N)]
        for i in range(N):
            self.create_subscription(Odometry, f"/mav{i}/odom", self._answer(i, Float32MultiArray), 10)

    def _answer(self, i: int, msg_type):
        def callback(msg) -> None:
            step = round((msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9) / self.dt)
            if step not in self.answered[i]:
                self.answered[i].add(step)
                self.pubs[i].publish(msg_type(data=[float(c) for c in self.commands[step, i]]))

        return callback


def run_bridge(params: dict, tmp_path: Path, respond: bool = True) -> tuple[dict, np.ndarray, list[set[int]]]:
    """The bridge (lockstep unless ``params`` say otherwise) flying STEPS steps on the responder's commands: its
    result, the load position after every step ``[STEPS, 3]`` and the steps each MAV's responder answered."""
    ctx = rclpy.Context()
    rclpy.init(context=ctx, domain_id=claim_ros_domain("bridge_delays"))
    result = tmp_path / "result.json"
    base = {"model": str(MODEL), "seed": SEED, "goal": GOAL, "lockstep": True, "realtime_factor": 100.0}
    base.update(duration_s=STEPS * 0.01, result_file=str(result), wait_timeout_s=20.0)
    try:
        bridge = SimBridge(
            context=ctx, parameter_overrides=[Parameter(k, value=v) for k, v in {**base, **params}.items()]
        )
        env, loads, hook = bridge.env, [], getattr(bridge.adapter, "after_step", lambda info: None)

        def after_step(info: dict) -> None:  # the adapter's hook, then the load's position
            hook(info)
            loads.append(env.load.pos[0].tolist())

        bridge.adapter.after_step = after_step
        scale = bridge.scale["mavs"]
        responder = Responder(drawn_commands(scale), env.spec.control_dt, context=ctx)
        executor = SingleThreadedExecutor(context=ctx)
        executor.add_node(bridge)
        if respond:
            executor.add_node(responder)
        while not bridge.done:
            executor.spin_once(timeout_sec=0.1)
        executor.shutdown()
        assert not bridge.failed, bridge.failed
        answered = responder.answered
        bridge.destroy_node()
        responder.destroy_node()
    finally:
        rclpy.shutdown(context=ctx)
    return json.loads(result.read_text()), np.asarray(loads), answered


def in_process(applied: list[int | None]) -> np.ndarray:
    """The load position after every step ``[STEPS, 3]`` of the same env stepped in-process on the responder's command
    of state ``applied[t]`` at step ``t`` (None: the profile's safe command), converted as the bridge converts it."""
    cfg = read_task_cfg(MODEL)
    env = make_env(cfg, SEED, GOAL)
    group = env.spec.groups["mavs"]
    scale = np.asarray(group.action_scale, dtype=np.float32)
    commands = drawn_commands(scale)
    safe = np.broadcast_to(
        np.asarray(read_metadata(MODEL)["ros"]["command"]["safe"], dtype=np.float32), (N, scale.size)
    )
    loads = []
    for s in applied:
        action = torch.as_tensor(command_action(safe if s is None else commands[s], scale))
        env.step({"mavs": action.unsqueeze(0)})
        loads.append(env.load.pos[0].tolist())
    return np.asarray(loads)


def lockstep_schedule(state_steps: int, command_steps: int) -> list[int | None]:
    """The documented lockstep semantics: the state after step ``s`` reaches the nodes after step ``s + state_steps``
    (the start state at once), its answer acts from step ``s + state_steps + command_steps``; each step flies the
    newest command that has arrived (None: none yet)."""
    arrival = {s: (0 if s == 0 else s + state_steps) + command_steps for s in range(STEPS + 1)}
    applied = []
    for t in range(STEPS):
        arrived = [s for s, a in arrival.items() if a <= t]
        applied.append(max(arrived) if arrived else None)
    return applied


@pytest.mark.parametrize(
    ("params", "state_steps", "command_steps"),
    [({}, 0, 0), ({"command_delay_s": 0.024}, 0, 2), ({"state_delay_s": 0.02, "command_delay_s": 0.01}, 2, 1)],
)
def test_lockstep_delays_are_the_in_process_flight_with_commands_applied_late(
    tmp_path: Path, params: dict, state_steps: int, command_steps: int
) -> None:
    """Lockstep rounds each delay to whole control steps (0.024 s -> 2 steps at 100 Hz); the flight is then the
    in-process one on the commands the documented schedule applies; no delay is the plain lockstep flight."""
    out, loads, answered = run_bridge(params, tmp_path)
    schedule = lockstep_schedule(state_steps, command_steps)
    np.testing.assert_allclose(loads, in_process(schedule), rtol=0, atol=1e-6)
    # The nodes saw (and answered) exactly the states that reached them: every one, only later (the last, sent as
    # the run ends, is not answered).
    assert answered == [set(range(STEPS - state_steps))] * N
    assert out["stale_command_steps"] == N * schedule.count(None), out
    if params:
        assert out["link"]["command"] == {
            "messages": N * (STEPS - state_steps),
            "delayed": N * (STEPS - state_steps),
            "dropped": 0,
        }
    else:
        assert "link" not in out, out  # zero settings: the result is the bridge's as before
    if command_steps:  # a delay of k steps is not k steps of no delay: the flights part
        assert np.abs(loads - in_process(lockstep_schedule(0, 0))).max() > 1e-5


def test_explicit_zero_settings_change_nothing(tmp_path: Path) -> None:
    """Delay, jitter and drop 0 on both paths: the same flight to the bit and the same result as without them."""
    zero = {f"{p}_{k}": 0.0 for p in ("state", "command") for k in ("delay_s", "jitter_s", "drop")}
    plain, loads_plain, _ = run_bridge({}, tmp_path)
    zeros, loads_zero, _ = run_bridge(zero, tmp_path)
    assert np.array_equal(loads_plain, loads_zero)
    for out in (plain, zeros):
        out.pop("stepping_wall_s")
    assert plain == zeros


def test_dropped_states_and_commands_in_lockstep(tmp_path: Path) -> None:
    """Drop shares of 0.5: about half of each path's messages are lost (binomial, 4 sigma); a lost state is never
    answered (the nodes stay on the older one), the bridge steps on without waiting for it, and every step is taken."""
    out, _, answered = run_bridge({"state_drop": 0.5, "command_drop": 0.5}, tmp_path)
    state, command = out["link"]["state"], out["link"]["command"]
    assert state["messages"] == STEPS + 1 and out["steps"] == STEPS
    for counts in (state, command):
        n = counts["messages"] - (counts is state)  # the start state is never dropped
        assert abs(counts["dropped"] - n / 2) <= 4 * math.sqrt(n / 4), counts
        assert counts["delayed"] == 0
    # Every delivered state was answered by every MAV, and only those: states delivered = answers per MAV.
    delivered = state["messages"] - state["dropped"]
    assert all(len(a) == delivered for a in answered), (answered, state)
    assert command["messages"] == N * delivered


def test_link_draws_delays_jitter_and_drops_reproducibly_and_in_order() -> None:
    """Seconds: each latency in [delay, delay + jitter], never reordering a channel, the drop share as asked, the
    same draws for the same seed; steps: latencies rounded to whole control steps."""

    def send_all(seed: int) -> tuple[Link, list]:
        link = Link("state", 0.02, 0.03, 0.3, np.random.default_rng([seed, 0]), None)
        sent = [(t * 0.01, link.send("topic", t, t * 0.01)) for t in range(4000)]
        return link, sent

    link, sent = send_all(1)
    due = [(d, item) for d, item in link.queues["topic"]]
    kept = [(t, ok) for t, ok in sent if ok]
    assert [item for _, item in due] == sorted(item for _, item in due)  # FIFO
    assert all(
        d >= t + 0.02 - 1e-12 and d <= max(t + 0.05, prev) + 1e-12
        for (t, _), (d, _), prev in zip(kept, due, [0.0] + [d for d, _ in due][:-1], strict=True)
    )
    assert abs(link.counts["dropped"] - 1200) <= 4 * math.sqrt(4000 * 0.3 * 0.7), link.counts
    assert send_all(1)[1] == sent and send_all(2)[1] != sent
    assert link.due("topic", 1e9) == [item for _, item in due] and link.due("topic", 1e9) == []
    steps = Link("command", 0.015, 0.0, 0.0, np.random.default_rng(0), 0.01)
    steps.send("agent", "a", 5)
    assert steps.due("agent", 6) == [] and steps.due("agent", 7) == ["a"]  # 0.015 s = 1.5 steps -> 2


@pytest.mark.parametrize(
    ("param", "value", "message"),
    [
        ("command_delay_s", -0.01, "command_delay_s must be a finite number of seconds >= 0, got -0.01"),
        ("state_jitter_s", math.inf, "state_jitter_s must be a finite number of seconds >= 0, got inf"),
        ("state_drop", 1.0, r"state_drop must be a share in \[0, 1\), got 1"),
        ("command_drop", -0.1, r"command_drop must be a share in \[0, 1\), got -0.1"),
    ],
)
def test_bad_settings_are_refused_naming_the_parameter(param: str, value: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Link(
            param.split("_")[0],
            *(value if param.endswith(k) else 0.0 for k in ("delay_s", "jitter_s", "drop")),
            np.random.default_rng(0),
            None,
        )


def test_the_bridge_command_line_refuses_a_bad_drop_share_with_one_line() -> None:
    cmd = [sys.executable, "-m", "sim.ros.bridge", "--ros-args", "-p", f"model:={MODEL}", "-p", "state_drop:=1.5"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 1
    assert proc.stderr.strip() == "sim_bridge: state_drop must be a share in [0, 1), got 1.5", proc.stderr


def test_real_time_delays_hold_messages_and_commands_until_due(tmp_path: Path) -> None:
    """Real time: with 20 ms on the state path and 10 ms on the command path every message is held (counted as
    delayed) and still delivered: the responder answers, the MAVs fly its commands, not the safe one."""
    out, _, answered = run_bridge(
        {
            "lockstep": False,
            "realtime_factor": 1.0,
            "state_delay_s": 0.02,
            "command_delay_s": 0.01,
            "state_jitter_s": 0.005,
        },
        tmp_path,
    )
    state, command = out["link"]["state"], out["link"]["command"]
    assert state["delayed"] == state["messages"] > 5 * STEPS and state["dropped"] == 0, state
    assert command["delayed"] == command["messages"] > 0 and command["dropped"] == 0, command
    assert all(answered), answered
    assert out["stale_command_steps"] < 0.5 * N * STEPS, out
