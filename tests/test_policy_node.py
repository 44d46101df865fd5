"""deploy_ros.policy_node in-process with rclpy: commands equal onnxruntime on the builder's observation; safe
fallback on NaN, malformed and stale inputs; recovery with a fresh history."""

from __future__ import annotations

import importlib.util
import itertools
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

os.environ.setdefault("ROS_DOMAIN_ID", "37")  # away from other ROS traffic on this machine
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")

rclpy = pytest.importorskip("rclpy")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

from geometry_msgs.msg import PoseStamped  # noqa: E402
from nav_msgs.msg import Odometry  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from std_msgs.msg import Float32MultiArray, String  # noqa: E402

import sim  # noqa: E402
from deploy_ros.observation import ObservationBuilder, RobotInputs, quat_rotate_inv  # noqa: E402
from deploy_ros.policy_node import PolicyNode, load_policy  # noqa: E402
from policies import ActorCritic, GroupDims, PolicyCfg  # noqa: E402
from policies.export import export_onnx  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
AGENT = 1
_NS = itertools.count()  # a fresh topic namespace per harness


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> tuple[Path, dict, RobotInputs]:
    """A freshly initialised cable_load policy exported with export.py's metadata, and robot inputs for agent 1."""
    env = sim.make("cable_load", num_envs=1, seed=0, randomization={"enabled": False}, obs_noise={"enabled": False})
    g = env.spec.groups["mavs"]
    torch.manual_seed(0)
    dims = GroupDims(g.n_agents, g.observations["policy"].shape[-1], g.state_shape[-1], g.action_dim)
    ac = ActorCritic(dims, PolicyCfg(actor_hidden=(64, 64), critic_hidden=(32,)))
    ac.set_action_prior(g.action_prior_matrix())
    with torch.no_grad():
        ac.actor[-1].weight.mul_(30.0)  # non-trivial but mostly unsaturated actions
    spec = importlib.util.spec_from_file_location("covey_export_cli", ROOT / "export.py")
    export_cli = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(export_cli)
    meta = export_cli.group_metadata(env, "mavs", {"name": "cable_load"}, {"run_id": "test-node"})
    path = tmp_path_factory.mktemp("node") / "mavs.onnx"
    export_onnx(ac.eval(), path, meta, torch.tensor(g.action_scale), random_samples=256)
    # A moving, tilted state (velocities on every axis) so the body -> world velocity rotation matters.
    e = 0
    inputs = RobotInputs(
        own_pos=env.drones.pos[e, AGENT].numpy(),
        own_quat=np.array([0.97, 0.1, -0.15, 0.16]) / np.linalg.norm([0.97, 0.1, -0.15, 0.16]),
        own_vel=np.array([0.4, -0.3, 0.2]),
        own_ang_vel=np.array([0.1, -0.2, 0.05]),
        load_pos=env.load.pos[e].numpy(),
        load_quat=np.array([0.99, -0.05, 0.08, 0.1]) / np.linalg.norm([0.99, -0.05, 0.08, 0.1]),
        load_vel=np.array([0.2, 0.1, -0.1]),
        load_ang_vel=np.array([0.03, 0.02, -0.04]),
        goal_pos=env.goal_pos[e].numpy(),
        goal_quat=env.goal_quat[e].numpy(),
    )
    return path, load_policy(path)[1], inputs


# --------------------------------------------------------------------------- messages from RobotInputs


def _odom(pos: np.ndarray, quat: np.ndarray, vel_world: np.ndarray, ang_vel_body: np.ndarray) -> Odometry:
    msg = Odometry()
    msg.header.frame_id, msg.child_frame_id = "world", "base_link"
    p, o = msg.pose.pose.position, msg.pose.pose.orientation
    p.x, p.y, p.z = (float(v) for v in pos)
    o.w, o.x, o.y, o.z = (float(v) for v in quat)
    vb = quat_rotate_inv(quat, vel_world)  # Odometry twist is in the body (child) frame
    t = msg.twist.twist
    t.linear.x, t.linear.y, t.linear.z = (float(v) for v in vb)
    t.angular.x, t.angular.y, t.angular.z = (float(v) for v in ang_vel_body)
    return msg


def messages(inputs: RobotInputs) -> dict[str, object]:
    goal = PoseStamped()
    goal.header.frame_id = "world"
    gp, go = goal.pose.position, goal.pose.orientation
    gp.x, gp.y, gp.z = (float(v) for v in inputs.goal_pos)
    go.w, go.x, go.y, go.z = (float(v) for v in inputs.goal_quat)
    return {
        "odom": _odom(inputs.own_pos, inputs.own_quat, inputs.own_vel, inputs.own_ang_vel),
        "load": _odom(inputs.load_pos, inputs.load_quat, inputs.load_vel, inputs.load_ang_vel),
        "goal": goal,
    }


# --------------------------------------------------------------------------- harness


class Harness:
    """A policy node and a test node (publishing inputs at 50 Hz, recording outputs) on one executor."""

    def __init__(self, model_path: Path, ns: str, **params: object) -> None:
        self.ctx = rclpy.Context()
        rclpy.init(context=self.ctx)
        topics = {"odom": f"/{ns}/odom", "load": f"/{ns}/load/odom", "goal": f"/{ns}/load/goal"}
        overrides = {
            "model": str(model_path),
            "agent_index": AGENT,
            "odom_topic": topics["odom"],
            "load_topic": topics["load"],
            "goal_topic": topics["goal"],
            "command_topic": "command",
            **params,
        }
        self.node = PolicyNode(
            context=self.ctx,
            namespace=f"/{ns}",
            parameter_overrides=[Parameter(k, value=v) for k, v in overrides.items()],
        )
        self.test = rclpy.create_node(f"tester_{ns}", context=self.ctx)
        self.pubs = {
            "odom": self.test.create_publisher(Odometry, topics["odom"], 10),
            "load": self.test.create_publisher(Odometry, topics["load"], 10),
            "goal": self.test.create_publisher(PoseStamped, topics["goal"], 10),
        }
        self.outgoing: dict[str, object] = {}  # what the test node publishes on each tick
        self.commands: list[np.ndarray] = []
        self.statuses: list[str] = []
        self.labels: list[str] = []
        self.test.create_subscription(Float32MultiArray, f"/{ns}/command", self._on_command, 100)
        self.test.create_subscription(String, f"/{ns}/status", lambda m: self.statuses.append(m.data), 100)
        self.test.create_timer(0.02, self._publish)
        self.executor = SingleThreadedExecutor(context=self.ctx)
        self.executor.add_node(self.node)
        self.executor.add_node(self.test)

    def _on_command(self, msg: Float32MultiArray) -> None:
        self.commands.append(np.array(msg.data, dtype=np.float32))
        self.labels = [d.label for d in msg.layout.dim]

    def _publish(self) -> None:
        for key, msg in self.outgoing.items():
            self.pubs[key].publish(msg)

    def spin_until(self, done: Callable[[], bool], timeout: float = 4.0) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self.executor.spin_once(timeout_sec=0.01)
            if done():
                return True
        return False

    def spin_for(self, seconds: float) -> None:
        self.spin_until(lambda: False, seconds)

    def close(self) -> None:
        self.executor.shutdown()
        self.node.destroy_node()
        self.test.destroy_node()
        rclpy.shutdown(context=self.ctx)


@pytest.fixture
def harness(model):
    made: list[Harness] = []

    def make(**params: object) -> Harness:
        h = Harness(model[0], f"covey_test_{os.getpid()}_{next(_NS)}", **params)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()


def expected_commands(path: Path, meta: dict, inputs: RobotInputs, n: int) -> list[np.ndarray]:
    """onnxruntime on the builder's observations for ``n`` ticks of constant inputs, starting at a reset."""
    session, _ = load_policy(path)
    builder = ObservationBuilder(meta, AGENT)
    obs = builder.reset(inputs)
    out = []
    for _ in range(n):
        action, command = session.run(["action", "command"], {"obs": obs[None]})
        out.append(command[0])
        obs = builder.push(inputs, action[0])
    return out


def ok_count(h: Harness) -> int:
    return sum(s == "ok" for s in h.statuses)


# --------------------------------------------------------------------------- tests


def test_commands_equal_onnxruntime_on_the_builder_observation(harness, model) -> None:
    path, meta, inputs = model
    h = harness(stale_timeout_s=5.0)  # generous: this test is about values, not timing
    assert h.spin_until(lambda: len(h.statuses) >= 2)
    assert h.statuses[0].startswith("safe: no message yet") and not h.commands[0].any()
    h.outgoing = messages(inputs)
    assert h.spin_until(lambda: ok_count(h) >= 4)
    first = h.statuses.index("ok")
    assert all(s.startswith("safe") for s in h.statuses[:first]) and h.statuses[first : first + 4] == ["ok"] * 4
    expected = expected_commands(path, meta, inputs, 4)
    scale = np.array(meta["action"]["scale"])
    for k in range(4):
        got = h.commands[first + k]
        np.testing.assert_allclose(got, expected[k], atol=1e-5, err_msg=f"tick {k} after the first good input")
        assert np.abs(got / scale).max() > 0.05  # a real command, not the safe zeros
    # The history and the fed-back action matter: the ticks differ although the inputs are constant.
    assert np.abs(expected[1] - expected[0]).max() > 1e-3
    assert (np.abs(expected[0] / scale) < 0.99).any()  # not all saturated, so the values are informative
    units = meta["action"]["units"]
    assert h.labels == [",".join(f"{n}[{u}]" for n, u in zip(meta["action"]["names"], units, strict=True))]
    assert h.labels[0].startswith("acc_x[m/s^2],acc_y[m/s^2]")


def test_nan_and_malformed_inputs_give_the_safe_command_then_recover_with_a_fresh_history(harness, model) -> None:
    path, meta, inputs = model
    h = harness(stale_timeout_s=5.0)
    good = messages(inputs)
    h.outgoing = dict(good)
    assert h.spin_until(lambda: ok_count(h) >= 2)

    bad = messages(inputs)["odom"]
    bad.pose.pose.position.y = float("nan")
    h.outgoing["odom"] = bad
    assert h.spin_until(lambda: h.statuses[-1].startswith("safe"))
    n_safe = len(h.statuses)
    h.spin_for(0.1)  # it keeps ticking: safe commands keep coming, no crash
    assert len(h.statuses) > n_safe and h.statuses[-1] == h.statuses[n_safe - 1]
    assert "non-finite position" in h.statuses[-1] and "odom" in h.statuses[-1]
    safe_cmds = h.commands[n_safe - 1 :]
    assert len(safe_cmds) >= 2 and not np.any(safe_cmds)

    mark = len(h.statuses)
    h.outgoing = dict(good)
    assert h.spin_until(lambda: "ok" in h.statuses[mark:])
    k = h.statuses.index("ok", mark)
    # Recovery restarts the history like a sim reset: the same command as the very first good tick.
    np.testing.assert_allclose(h.commands[k], expected_commands(path, meta, inputs, 1)[0], atol=1e-5)

    zero_q = messages(inputs)["goal"]
    o = zero_q.pose.orientation
    o.w, o.x, o.y, o.z = 0.0, 0.0, 0.0, 0.0  # all-zero quaternion, e.g. an unfilled message
    h.outgoing["goal"] = zero_q
    assert h.spin_until(lambda: h.statuses[-1].startswith("safe"))
    assert "quaternion" in h.statuses[-1] and not h.commands[-1].any()
    h.outgoing = dict(good)
    mark = len(h.statuses)
    assert h.spin_until(lambda: "ok" in h.statuses[mark:])


def test_missing_and_stale_inputs_give_the_safe_command(harness, model) -> None:
    _, _, inputs = model
    h = harness(stale_timeout_s=0.4)
    msgs = messages(inputs)
    h.outgoing = {"odom": msgs["odom"], "goal": msgs["goal"]}  # no load odometry yet
    assert h.spin_until(lambda: any("load/odom" in s for s in h.statuses))
    assert "no message yet" in h.statuses[-1] and not h.commands[-1].any()
    h.outgoing = dict(msgs)
    assert h.spin_until(lambda: h.statuses[-1] == "ok")
    assert h.commands[-1].any()

    h.outgoing = {"odom": msgs["odom"], "goal": msgs["goal"]}  # the load odometry stops
    stopped = time.monotonic()
    h.spin_for(0.15)  # well within the timeout: still commanding
    assert h.statuses[-1] == "ok"
    assert h.spin_until(lambda: h.statuses[-1].startswith("safe"), timeout=3.0)
    # Not before the timeout (the last load message left at most one 20 ms publish period before the stop).
    assert time.monotonic() - stopped > 0.4 - 0.05
    t_safe = len(h.statuses)
    assert "stale" in h.statuses[-1] and "load/odom" in h.statuses[-1]
    h.spin_for(0.1)
    assert not np.any(h.commands[t_safe - 1 :]) and all(s.startswith("safe: stale") for s in h.statuses[t_safe - 1 :])


def test_out_of_range_observation_gives_the_safe_command(harness, model) -> None:
    _, meta, inputs = model
    h = harness(stale_timeout_s=5.0, max_abs_obs=0.5)  # the goal and slot offsets are metres: beyond 0.5
    h.outgoing = messages(inputs)
    assert h.spin_until(lambda: bool(h.statuses) and "out of range" in h.statuses[-1])
    assert not h.commands[-1].any() and "ok" not in h.statuses
    names = {t["name"] for t in meta["observation"]["terms"]}
    assert h.statuses[-1].split("(")[1].split(" =")[0] in names  # the offending term is named


def test_main_exits_with_an_error_on_missing_parameters(model) -> None:
    from deploy_ros.policy_node import main

    assert main(["policy_node", "--ros-args", "-p", "agent_index:=0"]) == 1
    assert main(["policy_node", "--ros-args", "-p", f"model:={model[0]}", "-p", "agent_index:=9"]) == 1


def test_deploy_ros_runs_without_torch() -> None:
    code = (
        "import sys, deploy_ros.observation, deploy_ros.policy_node; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_required_parameters_and_the_model_are_checked(tmp_path: Path, model) -> None:
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    try:
        with pytest.raises(ValueError, match="model"):
            PolicyNode(context=ctx, parameter_overrides=[Parameter("agent_index", value=0)])
        with pytest.raises(ValueError, match="agent_index"):
            PolicyNode(context=ctx, parameter_overrides=[Parameter("model", value=str(model[0]))])
        with pytest.raises(ValueError, match="agent_index"):
            PolicyNode(
                context=ctx,
                parameter_overrides=[Parameter("model", value=str(model[0])), Parameter("agent_index", value=3)],
            )
        with pytest.raises(FileNotFoundError):
            PolicyNode(
                context=ctx,
                parameter_overrides=[
                    Parameter("model", value=str(tmp_path / "no.onnx")),
                    Parameter("agent_index", value=0),
                ],
            )
    finally:
        rclpy.shutdown(context=ctx)
