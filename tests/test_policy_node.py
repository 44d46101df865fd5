"""deploy_ros.policy_node in-process with rclpy, driven by covey-onnx-v2 models and their ROS deployment profile.

cable_load: commands equal onnxruntime on the task builder's observation; safe fallback on NaN,
malformed and stale inputs; recovery with a fresh history. An image policy fed from
``sensor_msgs/Image`` and a recurrent policy carrying its hidden state (reset on a safe tick), both
small torch modules exported here.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from ros_domains import claim_ros_domain
from torch import nn

os.environ["ROS_DOMAIN_ID"] = str(claim_ros_domain("policy_node"))  # this process's own
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")

rclpy = pytest.importorskip("rclpy")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

import onnx  # noqa: E402
from geometry_msgs.msg import PoseStamped  # noqa: E402
from nav_msgs.msg import Odometry  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from sensor_msgs.msg import Image  # noqa: E402
from std_msgs.msg import Float32MultiArray, String  # noqa: E402

import sim  # noqa: E402
from covey_common.onnx import OnnxPolicy, load_policy  # noqa: E402
from covey_common.quaternion import quat_rotate_inv  # noqa: E402
from deploy_ros.policy_node import PolicyNode  # noqa: E402
from policies import ActorCritic, GroupDims, PolicyCfg  # noqa: E402
from policies.export import export_onnx  # noqa: E402
from sim.tasks.cable_load.robot_observation import RobotInputs, observation_builder  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
AGENT = 1
_NS = itertools.count()  # a fresh topic namespace per harness


# --------------------------------------------------------------------------- v2 models


def write_model(
    module: nn.Module, path: Path, examples: dict[str, torch.Tensor], outputs: list[str], meta: dict
) -> Path:
    """Export ``module(*examples.values())`` with ONNX inputs named as ``examples`` (batch axis dynamic)
    and covey-onnx-v2 ``meta`` in the ``covey`` metadata, as ``policies.export`` writes it."""
    batch = torch.export.Dim("batch")
    with torch.no_grad():
        torch.onnx.export(
            module.eval(),
            tuple(examples.values()),
            str(path),
            input_names=list(examples),
            output_names=outputs,
            dynamic_shapes=tuple({0: batch} for _ in examples),
            opset_version=18,
            external_data=False,
            verbose=False,
        )
    model = onnx.load(str(path))
    onnx.helper.set_model_props(model, {"covey": json.dumps({"format": "covey-onnx-v2", **meta})})
    onnx.save(model, str(path))
    return path


class _ActorCommand(nn.Module):
    """``policy -> (action, action * scale)`` of a deterministic actor."""

    def __init__(self, actor: nn.Module, scale: torch.Tensor) -> None:
        super().__init__()
        self.actor = actor
        self.register_buffer("scale", scale)

    def forward(self, policy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        action = self.actor(policy)
        return action, action * self.scale


def _action_meta(names: list[str], scale: list[float]) -> dict:
    return {"names": names, "units": ["m/s"] * len(names), "scale": scale, "low": -1.0, "high": 1.0}


def _export_cli():
    """The export.py module (its ``group_metadata`` is what the CLI writes), loaded once."""
    spec = importlib.util.spec_from_file_location("covey_export_cli", ROOT / "export.py")
    if spec.name not in sys.modules:
        sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # dataclasses look their module up
        spec.loader.exec_module(sys.modules[spec.name])
    return sys.modules[spec.name]


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
    meta = _export_cli().group_metadata(env, "mavs", {"name": "cable_load"}, {"run_id": "test-node"})
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


CABLE_INPUTS = {"odom": (Odometry, "odom"), "load": (Odometry, "load/odom"), "goal": (PoseStamped, "load/goal")}


# --------------------------------------------------------------------------- harness


class Harness:
    """A policy node and a test node (publishing inputs at 50 Hz, recording outputs) on one executor.

    ``inputs`` maps each profile input to its message type and a topic under the harness namespace;
    the node gets them as ``<input>_topic`` parameters.
    """

    def __init__(
        self, model_path: Path, ns: str, inputs: dict[str, tuple[type, str]], agent: int = AGENT, **params: object
    ) -> None:
        self.ctx = rclpy.Context()
        rclpy.init(context=self.ctx)
        topics = {k: f"/{ns}/{t}" for k, (_, t) in inputs.items()}
        overrides = {"model": str(model_path), "agent_index": agent, "command_topic": "command", **params}
        overrides.update({f"{k}_topic": t for k, t in topics.items()})
        self.node = PolicyNode(
            context=self.ctx,
            namespace=f"/{ns}",
            parameter_overrides=[Parameter(k, value=v) for k, v in overrides.items()],
        )
        self.test = rclpy.create_node(f"tester_{ns}", context=self.ctx)
        self.pubs = {k: self.test.create_publisher(cls, topics[k], 10) for k, (cls, _) in inputs.items()}
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
def make_harness():
    made: list[Harness] = []

    def make(path: Path, inputs: dict[str, tuple[type, str]], **params: object) -> Harness:
        h = Harness(path, f"covey_test_{os.getpid()}_{next(_NS)}", inputs, **params)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()


@pytest.fixture
def harness(make_harness, model):
    """A cable_load harness maker."""
    return lambda **params: make_harness(model[0], CABLE_INPUTS, **params)


def expected_commands(path: Path, meta: dict, inputs: RobotInputs, n: int) -> list[np.ndarray]:
    """onnxruntime on the builder's observations for ``n`` ticks of constant inputs, starting at a reset."""
    session, _ = load_policy(path)
    builder = observation_builder(meta, AGENT)
    obs = builder.reset(inputs)
    out = []
    for _ in range(n):
        action, command = session.run(["action", "command"], {"policy": obs[None]})
        out.append(command[0])
        obs = builder.push(inputs, action[0])
    return out


def ok_count(h: Harness) -> int:
    return sum(s == "ok" for s in h.statuses)


# --------------------------------------------------------------------------- cable_load


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


def test_lockstep_node_answers_each_state_once_when_all_of_it_has_arrived(harness, model) -> None:
    """Lockstep (SITL on a loaded machine): no timer; one command per new state (equal step-input stamps),
    none for a republished state, none while an input is missing or the state is only half here."""
    path, meta, inputs = model
    h = harness(stale_timeout_s=5.0, lockstep=True)
    assert h.node.timer is None

    dt_ns = round(1e9 / float(meta["control_hz"]))

    def state(k: int, goal: bool = True, load_k: int | None = None) -> dict[str, object]:
        """The messages of sim step ``k`` (stamped ``k`` control periods after 1 s)."""
        msgs = messages(inputs)
        msgs["odom"].header.stamp.sec, msgs["odom"].header.stamp.nanosec = 1, k * dt_ns
        msgs["load"].header.stamp.sec, msgs["load"].header.stamp.nanosec = 1, (k if load_k is None else load_k) * dt_ns
        if not goal:
            del msgs["goal"]
        return msgs

    h.outgoing = state(1, goal=False)  # republished every 20 ms, as the bridge resends a held state
    h.spin_for(0.3)
    assert h.commands == [] and h.statuses == []  # no goal yet: not an answer, not a safe tick either
    h.outgoing = state(1)
    assert h.spin_until(lambda: len(h.commands) >= 1)
    h.spin_for(0.3)
    assert len(h.commands) == 1 and h.statuses == ["ok"]  # the same state again and again: one answer
    h.outgoing = state(2, load_k=1)  # the odometry of the next state, its load pose not yet
    h.spin_for(0.3)
    assert len(h.commands) == 1
    h.outgoing = state(2)
    assert h.spin_until(lambda: len(h.commands) >= 2)
    h.spin_for(0.3)
    assert len(h.commands) == 2
    expected = expected_commands(path, meta, inputs, 2)
    for k in range(2):  # one history step per answered state
        np.testing.assert_allclose(h.commands[k], expected[k], atol=1e-5)


def test_lockstep_node_answers_a_state_whose_messages_arrive_far_apart(harness, model) -> None:
    """Lockstep on a loaded machine: the messages of one state may arrive long after each other (a descheduled
    bridge). The state is the simulator's current one by construction (it waits for the answer), so the node
    answers with the policy, not with the safe command of an input older than the stale timeout, which would
    restart its histories mid-flight (seen in SITL: the run then left the in-process one)."""
    path, meta, inputs = model
    h = harness(stale_timeout_s=0.1, lockstep=True)
    dt_ns = round(1e9 / float(meta["control_hz"]))

    def state(k: int) -> dict[str, object]:
        msgs = messages(inputs)
        for key in ("odom", "load"):
            msgs[key].header.stamp.sec, msgs[key].header.stamp.nanosec = 1, k * dt_ns
        return msgs

    for k in (1, 2):
        msgs = state(k)
        h.pubs["odom"].publish(msgs["odom"])  # once, not republished: it ages while the rest is late
        h.spin_for(0.3)
        assert len(h.commands) == k - 1  # half a state: no answer yet
        h.pubs["load"].publish(msgs["load"])
        h.pubs["goal"].publish(msgs["goal"])
        assert h.spin_until(lambda k=k: len(h.commands) >= k and len(h.statuses) >= k)
    assert h.statuses == ["ok", "ok"], h.statuses
    expected = expected_commands(path, meta, inputs, 2)
    for k in range(2):  # two policy steps on one history, not a safe tick and a restart
        np.testing.assert_allclose(h.commands[k], expected[k], atol=1e-5)


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


def test_deploy_ros_and_the_robot_side_builders_run_without_torch() -> None:
    """With torch made unimportable (a robot), the node starts on the shipped cable_load model, importing
    the task's robot-side builder by name."""
    shipped = ROOT / "assets" / "policies" / "cable_load" / "policy.onnx"
    code = (
        "import sys; sys.modules['torch'] = None; "
        "import rclpy; from rclpy.parameter import Parameter; from deploy_ros.policy_node import PolicyNode; "
        "rclpy.init(); "
        f"node = PolicyNode(parameter_overrides=[Parameter('model', value='{shipped}'), "
        "Parameter('agent_index', value=1)]); "
        "assert type(node.builders['policy']).__name__ == 'PolicyObservation'; node.destroy_node(); rclpy.shutdown(); "
        "print(sorted(m for m, v in sys.modules.items() if m.split('.')[0] == 'torch' and v is not None))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr[-2000:]


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


def test_models_without_a_profile_or_in_format_v1_are_refused_in_one_line(tmp_path: Path, model) -> None:
    _, meta, _ = model
    module = _ActorCommand(nn.Sequential(nn.Linear(4, 2), nn.Tanh()), torch.ones(2))
    v1 = {**meta, "format": "covey-onnx-v1", "inputs": [], "ros": {}, "action": _action_meta(["a", "b"], [1.0, 1.0])}
    path = write_model(module, tmp_path / "v1.onnx", {"obs": torch.zeros(2, 4)}, ["action", "command"], v1)
    with pytest.raises(ValueError, match="re-export"):
        OnnxPolicy(path, 0)
    no_ros = {**v1, "inputs": [{"name": "obs", "shape": [4], "dtype": "float32", "kind": "vector", "history": 1}]}
    path = write_model(module, tmp_path / "no_ros.onnx", {"obs": torch.zeros(2, 4)}, ["action", "command"], no_ros)
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    try:
        params = [Parameter("model", value=str(path)), Parameter("agent_index", value=0)]
        with pytest.raises(ValueError, match="no ROS deployment profile") as err:
            PolicyNode(context=ctx, parameter_overrides=params)
        assert "\n" not in str(err.value)
    finally:
        rclpy.shutdown(context=ctx)


# --------------------------------------------------------------------------- an image policy


class _PixelPolicy(nn.Module):
    """uint8 ``image [B, H, W, 3]`` + float ``proprio [B, 2]`` -> a 2-D action (normalised in the graph)."""

    def __init__(self, h: int, w: int) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.net = nn.Sequential(nn.Linear(h * w * 3 + 2, 16), nn.Tanh(), nn.Linear(16, 2))
        self.register_buffer("scale", torch.tensor([0.5, 2.0]))

    def forward(self, image: torch.Tensor, proprio: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.cat((image.float().flatten(1) / 255.0 - 0.5, proprio), dim=-1)
        action = torch.tanh(3.0 * self.net(x))
        return action, action * self.scale


H, W = 12, 16


def _image_msg(pixels_rgb: np.ndarray, encoding: str) -> Image:
    """An Image of ``pixels_rgb [h, w, 3]`` in ``encoding`` (rgb8 or bgr8), rows padded to show ``step`` is honoured."""
    data = pixels_rgb[..., ::-1] if encoding == "bgr8" else pixels_rgb
    h, w, c = data.shape
    padded = np.zeros((h, w * c + 4), dtype=np.uint8)
    padded[:, : w * c] = data.reshape(h, w * c)
    msg = Image(height=h, width=w, encoding=encoding, step=w * c + 4)
    msg.data = padded.tobytes()
    return msg


@pytest.fixture(scope="module")
def pixel_model(tmp_path_factory) -> Path:
    meta = {
        "task": "test_pixels",
        "group": "ego",
        "n_agents": 1,
        "inputs": [
            {"name": "image", "shape": [H, W, 3], "dtype": "uint8", "kind": "image", "history": 1},
            {"name": "proprio", "shape": [2], "dtype": "float32", "kind": "vector", "history": 1, "terms": []},
        ],
        "input_axes": ["batch"],
        "action": _action_meta(["vx", "vy"], [0.5, 2.0]),
        "control_hz": 50.0,
        "ros": {
            "inputs": {
                "camera": {"msg": "sensor_msgs/Image", "topic": "camera/image", "qos": "sensor", "stale": True},
                "proprio": {"msg": "std_msgs/Float32MultiArray", "topic": "proprio", "qos": "sensor", "stale": True},
            },
            "observations": {
                "image": {"builder": "image", "from": ["camera"]},
                "proprio": {"builder": "vector", "from": ["proprio"]},
            },
            "command": {"msg": "std_msgs/Float32MultiArray", "topic": "command", "safe": [0.0, 0.0]},
        },
    }
    examples = {"image": torch.zeros(2, H, W, 3, dtype=torch.uint8), "proprio": torch.zeros(2, 2)}
    return write_model(
        _PixelPolicy(H, W), tmp_path_factory.mktemp("pix") / "pix.onnx", examples, ["action", "command"], meta
    )


def test_image_policy_is_fed_from_sensor_image_and_checks_size_and_encoding(make_harness, pixel_model) -> None:
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, size=(H, W, 3), dtype=np.uint8)
    proprio = np.array([0.3, -0.7], dtype=np.float32)
    h = make_harness(
        pixel_model, {"camera": (Image, "camera/image"), "proprio": (Float32MultiArray, "proprio")}, agent=0
    )
    h.outgoing = {"camera": _image_msg(pixels, "bgr8"), "proprio": Float32MultiArray(data=proprio.tolist())}
    assert h.spin_until(lambda: ok_count(h) >= 2)
    session, _ = load_policy(pixel_model)
    _, expected = session.run(["action", "command"], {"image": pixels[None], "proprio": proprio[None]})
    got = h.commands[h.statuses.index("ok")]
    np.testing.assert_allclose(got, expected[0], atol=1e-6)
    # The image matters: other pixels, another command (so the check above is not vacuous).
    _, other = session.run(["action", "command"], {"image": 255 - pixels[None], "proprio": proprio[None]})
    assert np.abs(other[0] - expected[0]).max() > 1e-3

    h.outgoing["camera"] = _image_msg(pixels[:, :-2], "rgb8")  # 2 columns short
    assert h.spin_until(lambda: h.statuses[-1].startswith("safe"))
    assert f"{H}x{W - 2}" in h.statuses[-1] and "'image'" in h.statuses[-1] and not h.commands[-1].any()
    mono = Image(height=H, width=W, encoding="mono8", step=W, data=pixels[..., 0].tobytes())
    h.outgoing["camera"] = mono
    assert h.spin_until(lambda: "mono8" in h.statuses[-1])
    assert h.statuses[-1].startswith("safe") and "3 channel" in h.statuses[-1]
    h.outgoing["camera"] = Image(height=H, width=W, encoding="rgb16", step=W * 6, data=bytes(H * W * 6))
    assert h.spin_until(lambda: "rgb16" in h.statuses[-1])
    assert "not supported" in h.statuses[-1]
    mark = len(h.statuses)
    h.outgoing["camera"] = _image_msg(pixels, "rgb8")
    assert h.spin_until(lambda: "ok" in h.statuses[mark:])
    np.testing.assert_allclose(h.commands[h.statuses.index("ok", mark)], expected[0], atol=1e-6)


# --------------------------------------------------------------------------- a recurrent policy


class _RecurrentPolicy(nn.Module):
    """``policy [B, 3]``, ``h_in [B, 1, 4]`` -> ``action [B, 2]``, ``command``, ``h_out [B, 1, 4]`` (an RNN cell)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(2)
        self.cell = nn.Linear(3 + 4, 4)
        self.head = nn.Linear(4, 2)

    def forward(self, policy: torch.Tensor, h_in: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = torch.tanh(self.cell(torch.cat((policy, h_in[:, 0]), dim=-1)) + 0.8 * h_in[:, 0])
        action = torch.tanh(self.head(h))
        return action, action * 3.0, h.unsqueeze(1)


@pytest.fixture(scope="module")
def recurrent_model(tmp_path_factory) -> Path:
    meta = {
        "task": "test_memory",
        "group": "ego",
        "n_agents": 1,
        "inputs": [{"name": "policy", "shape": [3], "dtype": "float32", "kind": "vector", "history": 1, "terms": []}],
        "input_axes": ["batch"],
        "memory": {"inputs": ["h_in"], "outputs": ["h_out"], "shapes": [[1, 4]]},
        "action": _action_meta(["vx", "vy"], [3.0, 3.0]),
        "control_hz": 50.0,
        "ros": {
            "inputs": {"obs": {"msg": "std_msgs/Float32MultiArray", "topic": "obs", "qos": "sensor", "stale": True}},
            "observations": {"policy": {"builder": "vector", "from": ["obs"]}},
            "command": {"msg": "std_msgs/Float32MultiArray", "topic": "command", "safe": [0.0, 0.0]},
        },
    }
    examples = {"policy": torch.zeros(2, 3), "h_in": torch.zeros(2, 1, 4)}
    outputs = ["action", "command", "h_out"]
    return write_model(_RecurrentPolicy(), tmp_path_factory.mktemp("rnn") / "rnn.onnx", examples, outputs, meta)


def test_recurrent_policy_carries_its_hidden_state_and_resets_it_on_a_safe_tick(make_harness, recurrent_model) -> None:
    obs = np.array([0.5, -1.0, 0.25], dtype=np.float32)
    session, _ = load_policy(recurrent_model)
    expected, hidden = [], np.zeros((1, 1, 4), dtype=np.float32)
    for _ in range(4):  # constant input: only the carried state makes the ticks differ
        _, command, hidden = session.run(["action", "command", "h_out"], {"policy": obs[None], "h_in": hidden})
        expected.append(command[0])
    assert np.abs(expected[1] - expected[0]).max() > 1e-3

    h = make_harness(recurrent_model, {"obs": (Float32MultiArray, "obs")}, agent=0)
    h.outgoing = {"obs": Float32MultiArray(data=obs.tolist())}
    assert h.spin_until(lambda: ok_count(h) >= 4)
    first = h.statuses.index("ok")
    for k in range(4):  # Float32MultiArray has no header: every tick is a step
        np.testing.assert_allclose(h.commands[first + k], expected[k], atol=1e-5, err_msg=f"tick {k}")

    h.outgoing = {"obs": Float32MultiArray(data=[0.5, float("nan"), 0.25])}
    assert h.spin_until(lambda: h.statuses[-1].startswith("safe"))
    assert "non-finite" in h.statuses[-1] and not h.commands[-1].any()
    h.outgoing = {"obs": Float32MultiArray(data=[0.5, -1.0])}  # the wrong size is a safe tick too
    assert h.spin_until(lambda: "takes 3" in h.statuses[-1])
    mark = len(h.statuses)
    h.outgoing = {"obs": Float32MultiArray(data=obs.tolist())}
    assert h.spin_until(lambda: h.statuses[mark:].count("ok") >= 2)
    k = h.statuses.index("ok", mark)
    # The hidden state restarted from zeros: the first two good ticks replay the start.
    np.testing.assert_allclose(h.commands[k], expected[0], atol=1e-5)
    np.testing.assert_allclose(h.commands[k + 1], expected[1], atol=1e-5)


class _PerAgentRecurrent(nn.Module):
    """Per-agent weights: ``policy [B, A, 3]``, ``h_in [B, A, 1, 2]`` -> action/command ``[B, A, 2]``, ``h_out``."""

    def __init__(self, n_agents: int) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.w = nn.Parameter(torch.randn(n_agents, 3, 2))

    def forward(self, policy: torch.Tensor, h_in: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = torch.tanh(torch.einsum("bai,aio->bao", policy, self.w) + 0.9 * h_in[:, :, 0])
        return h, 2.0 * h, h.unsqueeze(2)


def test_per_agent_recurrent_model_reads_its_own_row_and_carries_its_own_state(tmp_path: Path) -> None:
    meta = {
        "task": "test_team",
        "group": "team",
        "n_agents": 3,
        "inputs": [{"name": "policy", "shape": [3], "dtype": "float32", "kind": "vector", "history": 1}],
        "input_axes": ["batch", "agent"],
        "memory": {"inputs": ["h_in"], "outputs": ["h_out"], "shapes": [[1, 2]]},
        "action": _action_meta(["vx", "vy"], [2.0, 2.0]),
        "control_hz": 50.0,
    }
    module = _PerAgentRecurrent(3)
    examples = {"policy": torch.zeros(2, 3, 3), "h_in": torch.zeros(2, 3, 1, 2)}
    path = write_model(module, tmp_path / "team.onnx", examples, ["action", "command", "h_out"], meta)
    obs = np.array([0.3, -0.2, 0.6], dtype=np.float32)
    for agent in range(3):
        policy = OnnxPolicy(path, agent)
        h = torch.zeros(1, 3, 1, 2)
        for tick in range(3):
            action, command = policy.run({"policy": obs})
            with torch.no_grad():
                ref, ref_cmd, h = module(torch.from_numpy(obs).expand(1, 3, 3), h)
            np.testing.assert_allclose(action, ref[0, agent].numpy(), atol=1e-6, err_msg=f"agent {agent} tick {tick}")
            np.testing.assert_allclose(command, ref_cmd[0, agent].numpy(), atol=1e-6)
        policy.reset()
        np.testing.assert_array_equal(policy.memory[0], np.zeros((1, 2), np.float32))
    with pytest.raises(ValueError, match="shape"):
        policy.run({"policy": obs[:2]})


# --------------------------------------------------------------------------- the example tasks, end to end


def _export_task(task: str, path: Path, cfg: PolicyCfg) -> tuple[Path, dict, object]:
    """A fresh policy of ``task``'s only group exported by export.py's metadata and ``export_onnx``, and its env."""
    from training.runner import group_dims

    env = sim.make(task, num_envs=1, seed=0)
    ((group, g),) = env.spec.groups.items()
    dims = group_dims(g)
    torch.manual_seed(0)
    ac = ActorCritic(dims, cfg).eval()
    meta = _export_cli().group_metadata(env, group, {"name": task}, {"run_id": "test-node"})
    export_onnx(ac, path, meta, torch.tensor(g.action_scale), random_samples=64)
    return path, load_policy(path)[1], env


def test_pixel_reach_policy_runs_from_a_camera_topic(make_harness, tmp_path: Path) -> None:
    path, meta, env = _export_task("pixel_reach", tmp_path / "pixel.onnx", PolicyCfg(actor_hidden=(32,)))
    assert [e["name"] for e in meta["inputs"]] == ["image"] and meta["ros"]["observations"]["image"][
        "builder"
    ] == "image"
    obs = env.reset()
    (group,) = env.spec.groups
    pixels = obs[group]["image"][0, 0].numpy()  # [H, W, 3] uint8, what the robot's camera should see
    msg = Image(height=pixels.shape[0], width=pixels.shape[1], encoding="rgb8", step=pixels.shape[1] * 3)
    msg.data = pixels.tobytes()
    h = make_harness(path, {"camera": (Image, "camera/image")}, agent=0)
    h.outgoing = {"camera": msg}
    assert h.spin_until(lambda: ok_count(h) >= 1)
    session, _ = load_policy(path)
    _, expected = session.run(["action", "command"], {"image": pixels[None]})
    np.testing.assert_allclose(h.commands[h.statuses.index("ok")], expected[0], atol=1e-5)


def test_memory_reach_gru_policy_carries_its_state_between_ticks(make_harness, tmp_path: Path) -> None:
    cfg = PolicyCfg(actor_hidden=(32,), memory="gru", memory_hidden=16)
    path, meta, env = _export_task("memory_reach", tmp_path / "memory.onnx", cfg)
    mem = meta["memory"]
    assert mem["inputs"] == ["h_in"] and meta["ros"]["observations"]["policy"]["builder"] == "vector"
    (group,) = env.spec.groups
    frame = env.reset()[group]["policy"][0, 0].numpy()  # the cue is shown: the state must remember it
    session, _ = load_policy(path)
    state, expected = np.zeros((1, *mem["shapes"][0]), np.float32), []
    for _ in range(3):
        _, command, state = session.run(["action", "command", "h_out"], {"policy": frame[None], "h_in": state})
        expected.append(command[0])
    assert np.abs(expected[2] - expected[0]).max() > 1e-5  # the carried state changes the command
    h = make_harness(path, {"obs": (Float32MultiArray, "obs")}, agent=0)
    h.outgoing = {"obs": Float32MultiArray(data=frame.tolist())}
    assert h.spin_until(lambda: ok_count(h) >= 3)
    first = h.statuses.index("ok")
    for k in range(3):
        np.testing.assert_allclose(h.commands[first + k], expected[k], atol=1e-5, err_msg=f"tick {k}")


# --------------------------------------------------------------------------- shipped example policies, closed loop


def _lockstep(h: Harness, key: str, msg: object) -> tuple[np.ndarray, str]:
    """Publish ``msg`` on input ``key``, wait until the node has it, run one node tick; its command and status."""
    before, n = h.node._latest.get(key), len(h.commands)
    h.pubs[key].publish(msg)
    assert h.spin_until(lambda: h.node._latest.get(key) is not before), f"the node never received {key}"
    h.node.tick()
    assert h.spin_until(lambda: len(h.commands) > n and len(h.statuses) > n)
    return h.commands[-1], h.statuses[-1]


def _episodes_through_the_node(task: str, h: Harness, key: str, to_msg: Callable, seeds: range) -> list[float]:
    """Final distances of ``task`` episodes whose actions come from the node (command / scale) fed by ``to_msg``."""
    out = []
    for seed in seeds:
        env = sim.make(task, num_envs=1, seed=seed)
        ((group, g),) = env.spec.groups.items()
        obs = env.reset(seed=seed)
        h.node._needs_reset = True  # a new episode, as after a safe tick (fresh history and memory)
        for k in range(env.max_episode_steps):
            command, status = _lockstep(h, key, to_msg(obs[group], k))
            assert status == "ok", status
            action = torch.as_tensor(command / np.asarray(g.action_scale, np.float32)).view(1, 1, -1)
            obs, _, _, _, info = env.step({group: action})
        out.append(float(info["episode"]["metrics/final_dist_m"]))
    return out


def _episodes_in_process(task: str, path: Path, entry: str, seeds: range) -> list[float]:
    """The same episodes with onnxruntime called directly (the recurrent state fed back by hand)."""
    session, meta = load_policy(path)
    mem = meta.get("memory") or {}
    out = []
    for seed in seeds:
        env = sim.make(task, num_envs=1, seed=seed)
        (group,) = env.spec.groups
        obs = env.reset(seed=seed)
        state = [np.zeros((1, *s), np.float32) for s in mem.get("shapes", [])]
        for _ in range(env.max_episode_steps):
            feed = {entry: obs[group][entry][:, 0].numpy(), **dict(zip(mem.get("inputs", []), state, strict=True))}
            _, command, *state = session.run(["action", "command", *mem.get("outputs", [])], feed)
            action = torch.as_tensor(command / np.asarray(meta["action"]["scale"], np.float32)).view(1, 1, -1)
            obs, _, _, _, info = env.step({group: action})
        out.append(float(info["episode"]["metrics/final_dist_m"]))
    return out


SHIPPED = ROOT / "assets" / "policies"
SEEDS = range(3)


@pytest.mark.skipif(not (SHIPPED / "pixel_reach" / "policy.onnx").is_file(), reason="no shipped pixel_reach policy")
def test_shipped_pixel_reach_policy_reaches_targets_from_camera_images(make_harness) -> None:
    path = SHIPPED / "pixel_reach" / "policy.onnx"

    def image(obs: dict, k: int) -> Image:
        pixels = obs["image"][0, 0].numpy()  # [48, 48, 3] RGB, what the camera sees
        msg = Image(height=pixels.shape[0], width=pixels.shape[1], encoding="bgr8", step=pixels.shape[1] * 3)
        msg.header.stamp.sec = k + 1  # a new frame: the node steps once per camera stamp
        msg.data = pixels[..., ::-1].tobytes()
        return msg

    h = make_harness(path, {"camera": (Image, "camera/image")}, agent=0, stale_timeout_s=5.0)
    h.node.timer.cancel()  # ticks in lockstep with the env below
    ros = _episodes_through_the_node("pixel_reach", h, "camera", image, SEEDS)
    direct = _episodes_in_process("pixel_reach", path, "image", SEEDS)
    np.testing.assert_allclose(ros, direct, atol=1e-4)  # the same episodes, through ROS or not
    assert sum(d < 0.1 for d in ros) >= len(SEEDS) - 1, ros  # success: final distance < 0.1 m


@pytest.mark.skipif(not (SHIPPED / "memory_reach" / "policy.onnx").is_file(), reason="no shipped memory_reach policy")
def test_shipped_memory_reach_gru_policy_remembers_the_cue_through_the_node(make_harness) -> None:
    path = SHIPPED / "memory_reach" / "policy.onnx"
    assert load_policy(path)[1]["memory"]["inputs"]  # recurrent: the node must carry h between ticks

    def frame(obs: dict, k: int) -> Float32MultiArray:
        return Float32MultiArray(data=obs["policy"][0, 0].tolist())

    h = make_harness(path, {"obs": (Float32MultiArray, "obs")}, agent=0, stale_timeout_s=5.0)
    h.node.timer.cancel()
    ros = _episodes_through_the_node("memory_reach", h, "obs", frame, SEEDS)
    direct = _episodes_in_process("memory_reach", path, "policy", SEEDS)
    np.testing.assert_allclose(ros, direct, atol=1e-4)
    assert sum(d < 0.1 for d in ros) >= len(SEEDS) - 1, ros  # the target is shown only in the first 2 steps
