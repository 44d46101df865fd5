"""vlm_driving's BEV policy on a car: the robot-side ``ego`` builder reproduces the simulator's entry, the policy
exports to ONNX with parity on BEV inputs, and in SITL (the sim bridge and the policy node over DDS) the node commands
what the torch actor commands on the same observations, at the 10 Hz control rate; bad inputs give the safe command."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from ros_domains import claim_ros_domain, ros_env

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")
pytest.importorskip("onnxscript")

import sim  # noqa: E402
from deploy_ros.messages import OdometryState, parse_image, parse_path  # noqa: E402
from policies import ActorCritic, PolicyCfg  # noqa: E402
from sim.tasks.vlm_driving.robot_observation import EgoObservation, route_stations  # noqa: E402
from training.runner import group_dims  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TASK_CFG = {"name": "vlm_driving", "observation": "bev", "reward": "expert"}
GROUP = "ego"
SAFE = [0.0, -1.0]  # wheels straight, full brake
INPUTS = ("bev", "odom", "route", "lane")
STREAMS = ("bev", "odom", "lane")  # published every step (the route when it changes, and every second)


def _export_cli():
    spec = importlib.util.spec_from_file_location("covey_export_cli", ROOT / "export.py")
    if spec.name not in sys.modules:
        sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # dataclasses look their module up
        spec.loader.exec_module(sys.modules[spec.name])
    return sys.modules[spec.name]


def _car_inputs(env, i: int) -> dict:
    """What env ``i``'s car stack reports, as the node parses it: odometry (world-frame velocity), the route
    ``[N, 3]`` (x, y, yaw of every route point) and the lane localisation ``[lateral, on_road]``."""
    x, y, yaw, vx, vy, yaw_rate = env.ego[i].double().tolist()
    c, s = math.cos(yaw), math.sin(yaw)
    quat = np.array([math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)])
    odom = OdometryState(np.array([x, y, 0.0]), quat, np.array([c * vx - s * vy, s * vx + c * vy, 0.0]), np.zeros(3))
    m, r = int(env.map_id[i]), int(env.route_id[i])
    n = int(env.maps.route_len[m, r])
    route = torch.cat((env.maps.route_xy[m, r, :n], env.maps.route_yaw[m, r, :n, None]), -1).double().numpy()
    lane = np.array([float(env.derived["where_lateral"][i]), float(env.derived["on_road"][i])], np.float32)
    return {"odom": odom, "route": route, "lane": lane}


def _ego_builder(env) -> EgoObservation:
    g = env.spec.groups[GROUP]
    entry = {"name": "ego", **g.observations["ego"].to_dict()}
    meta = {"n_agents": 1, "action": {"names": list(g.action_names)}, "deployment": env.deployment_constants()}
    return EgoObservation(meta, entry, 0, ["odom", "route", "lane"])


def _place_before_the_turn(env, i: int, metres: int = 12) -> None:
    """Put env ``i``'s car on the right-turn route (route 1 of its map) ``metres`` before the turn, at 6 m/s, as
    ``_reset_idx`` places a car (the traffic respawned around it)."""
    maps, m = env.maps, int(env.map_id[i])
    yaw = maps.route_yaw[m, 1, : int(maps.route_len[m, 1])]
    turning = (torch.atan2(torch.sin(yaw[10:] - yaw[:-10]), torch.cos(yaw[10:] - yaw[:-10])).abs() > 0.4).nonzero()
    start = int(turning[0]) - metres
    ids = torch.tensor([i])
    env.route_id[i], env.route_start[i], env.route_i[i] = 1, start, start
    env.ego[i] = torch.tensor([*maps.route_xy[m, 1, start].tolist(), float(yaw[start]), 6.0, 0.0, 0.0])
    env.command[i] = 0.0
    env.traffic.reset(ids, env.map_id, env.ego[:, :2], env._route_ahead(ids))
    env.car_history[:, i] = env._car_snapshot()[i]
    env._derive()


def test_route_stations_are_bit_equal_to_the_maps():
    """The builder's float32 arc lengths equal the map bank's bit for bit on every route (waypoints hinge on it)."""
    env = sim.make(TASK_CFG, num_envs=1, seed=0)
    maps = env.maps
    for m in range(maps.num_maps):
        for r in range(maps.route_xy.shape[1]):
            n = int(maps.route_len[m, r])
            np.testing.assert_array_equal(route_stations(maps.route_xy[m, r, :n].numpy()), maps.route_s[m, r, :n])


def test_robot_side_ego_matches_the_simulator_through_the_turn():
    """Six cars on several maps, one of them through the right turn, driven by the noisy scripted driver for
    60 steps: the builder's ``ego`` equals the env's within 1e-4 every step (episodes that end restart both)."""
    E = 6
    env = sim.make(TASK_CFG, num_envs=E, seed=0)
    obs = env.reset(seed=3)
    _place_before_the_turn(env, 0)
    obs = env.observe()
    assert len(set(env.map_id.tolist())) >= 3, env.map_id
    builders = [_ego_builder(env) for _ in range(E)]
    built = np.stack([b.reset(_car_inputs(env, i)) for i, b in enumerate(builders)])
    worst = np.abs(built - obs[GROUP]["ego"][:, 0].numpy()).max()
    gen = torch.Generator().manual_seed(0)
    yaw0 = float(env.ego[0, 2])
    for _ in range(60):
        action = (env.scripted_actions() + 0.3 * torch.randn(E, 1, 2, generator=gen)).clamp(-1.0, 1.0)
        obs, _, terminated, truncated, _ = env.step({GROUP: action})
        done = (terminated | truncated).tolist()
        built = np.stack(
            [
                b.reset(_car_inputs(env, i)) if done[i] else b.push(_car_inputs(env, i), action[i, 0].numpy())
                for i, b in enumerate(builders)
            ]
        )
        worst = max(worst, np.abs(built - obs[GROUP]["ego"][:, 0].numpy()).max())
    turned = math.remainder(float(env.ego[0, 2]) - yaw0, 2 * math.pi)
    assert turned < -1.0 and int(env.episode_step[0]) == 60, (turned, env.episode_step)  # car 0 turned right
    print(f"ego builder vs env: max |diff| {worst:.2e} over {E} cars x 61 observations, car 0 turned {turned:.2f} rad")
    assert worst < 1e-4, worst
    with pytest.raises(ValueError, match="3 inputs"):
        EgoObservation({}, {}, 0, ["odom"])


def test_builder_relocalises_on_its_route_when_the_car_is_moved():
    """A car moved 150 m along its route (a new episode the node does not see): the tracking finds it again on the
    whole route, so everything but the smoothed commands equals a fresh builder's; the builder imports no torch."""
    import subprocess

    env = sim.make(TASK_CFG, num_envs=1, seed=0)
    env.reset(seed=1)
    b, fresh = _ego_builder(env), _ego_builder(env)
    b.reset(_car_inputs(env, 0))
    b.push(_car_inputs(env, 0), np.array([0.5, 0.5], np.float32))
    m, r, i = int(env.map_id[0]), int(env.route_id[0]), int(env.route_i[0]) + 150
    env.ego[0, :3] = torch.tensor([*env.maps.route_xy[m, r, i].tolist(), float(env.maps.route_yaw[m, r, i])])
    moved = _car_inputs(env, 0)
    got, want = b.push(moved, np.zeros(2, np.float32)), fresh.reset(moved)
    np.testing.assert_allclose(np.delete(got, [1, 2]), np.delete(want, [1, 2]), atol=1e-6)
    assert np.abs(want[8:]).max() > 0.2  # real waypoints
    np.testing.assert_array_equal(got[1:3], [0.09375, 0.09375])  # 0.75 * 0.25 * 0.5: the commands still smoothed
    code = "import sys, sim.tasks.vlm_driving.robot_observation; assert 'torch' not in sys.modules"
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # no site hooks that import torch
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env=clean)


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> tuple[Path, ActorCritic]:
    """A freshly initialised BEV actor (CNN on the mask stack + MLP), exported with the task's metadata."""
    from policies.export import export_onnx

    cli = _export_cli()
    env = sim.make(TASK_CFG, num_envs=4, seed=0)
    g = env.spec.groups[GROUP]
    torch.manual_seed(0)
    ac = ActorCritic(group_dims(g), PolicyCfg(actor_hidden=(64, 64), critic_hidden=(32,)))
    ac.set_action_prior(g.action_prior_matrix())
    with torch.no_grad():
        ac.actor[-1].weight.mul_(20.0)  # actions well away from 0, not all saturated
    ac.eval()
    recorded = cli.record_observations(env, {GROUP: ac.deterministic_actor()}, 10)[GROUP]
    recorded = {k: v.flatten(0, 1) for k, v in recorded.items()}  # [steps * E * A, ...]: a shared actor's rows
    path = tmp_path_factory.mktemp("vlm_driving") / "policy.onnx"
    meta = cli.group_metadata(env, GROUP, dict(TASK_CFG), {"run_id": "test"})
    report = export_onnx(ac, path, meta, torch.tensor(g.action_scale), recorded_obs=recorded, atol=1e-4)
    print(f"export parity: {report}")
    assert report.recorded_action < 1e-4 and report.random_action < 1e-4, report
    return path, ac


def test_bev_policy_exports_with_parity_and_its_profile(model):
    """onnxruntime matches torch within 1e-4 on BEV frames of a driven env; the metadata carries the profile."""
    from policies.export import onnx_runtime_session, read_metadata

    path, ac = model
    meta = read_metadata(path)
    assert [e["name"] for e in meta["inputs"]] == ["bev", "ego"], meta["inputs"]
    bev = next(e for e in meta["inputs"] if e["name"] == "bev")
    assert bev["dtype"] == "uint8" and bev["shape"] == [48, 48, 6]
    ros = meta["ros"]
    assert ros["inputs"]["bev"]["msg"] == "sensor_msgs/Image" and ros["inputs"]["route"]["msg"] == "nav_msgs/Path"
    assert ros["command"]["safe"] == SAFE and ros["bridge"].endswith("DrivingBridge")
    assert meta["action"]["scale"] == [pytest.approx(0.6), 1.0]
    env = sim.make(TASK_CFG, num_envs=8, seed=5)
    obs = env.reset(seed=5)
    session = onnx_runtime_session(path)
    worst = 0.0
    for _ in range(5):
        o = obs[GROUP]
        with torch.no_grad():
            action = ac.act_deterministic(o)
        feed = {"bev": o["bev"][:, 0].numpy(), "ego": o["ego"][:, 0].numpy()}  # a shared actor: one row per car
        onnx_action, command = session.run(["action", "command"], feed)
        worst = max(worst, float(np.abs(onnx_action - action[:, 0].numpy()).max()))
        np.testing.assert_allclose(command, onnx_action * np.float32([0.6, 1.0]), atol=1e-6)
        obs, *_ = env.step({GROUP: action})
    print(f"ONNX vs torch on driven BEV frames: max |action diff| {worst:.2e}")
    assert worst < 1e-4, worst
    assert float(o["bev"].float().mean()) > 1.0  # the frames were not blank


# --------------------------------------------------------------------------- SITL, lockstep in one process


class Lockstep:
    """The sim bridge and the policy node (both timers off) with a test node on one executor: each step the
    bridge publishes, the node ticks on what it received, the bridge steps on the node's command."""

    def __init__(self, model: Path, **node_params: object) -> None:
        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.parameter import Parameter
        from std_msgs.msg import Float32MultiArray

        from deploy_ros.policy_node import PolicyNode
        from sim.ros.bridge import SimBridge

        self.ctx = rclpy.Context()
        rclpy.init(context=self.ctx, domain_id=claim_ros_domain("driving_in_process"))

        def params(d: dict) -> list:
            return [Parameter(k, value=v) for k, v in d.items()]

        bridge = {"model": str(model), "seed": 7, "wait_for_commands": False, "command_timeout_s": 60.0}
        self.bridge = SimBridge(context=self.ctx, parameter_overrides=params(bridge))
        self.bridge.timer.cancel()
        node = {"model": str(model), "agent_index": 0, **node_params}
        self.node = PolicyNode(context=self.ctx, namespace="/car0", parameter_overrides=params(node))
        self.node.timer.cancel()
        self.test = rclpy.create_node("vlm_driving_tester", context=self.ctx)
        self.commands: list[list[float]] = []  # what the node published on /car0/command
        self.test.create_subscription(
            Float32MultiArray, "/car0/command", lambda m: self.commands.append(list(m.data)), 10
        )
        self.executor = SingleThreadedExecutor(context=self.ctx)
        for n in (self.bridge, self.node, self.test):
            self.executor.add_node(n)

    def spin_until(self, cond: Callable[[], bool], timeout: float = 5.0) -> bool:
        end = time.monotonic() + timeout
        while not cond() and time.monotonic() < end:
            self.executor.spin_once(timeout_sec=0.005)
        return cond()

    def received(self, before: dict) -> Callable[[], bool]:
        return lambda: all(self.node._latest.get(k) is not v for k, v in before.items())

    def publish_and_wait(self) -> None:
        before = {k: self.node._latest.get(k) for k in INPUTS}
        route_pub = self.bridge.adapter.route_pub
        assert self.spin_until(lambda: route_pub.get_subscription_count() > 0), "the node never subscribed"
        self.bridge.publish_state()  # the route again: a subscriber joined
        assert self.spin_until(self.received(before)), "the node did not get the bridge's messages"

    def close(self) -> None:
        import rclpy

        self.executor.shutdown()
        for n in (self.bridge, self.node, self.test):
            n.destroy_node()
        rclpy.shutdown(context=self.ctx)


def test_sitl_node_commands_what_torch_commands_and_refuses_bad_input(model):
    """Bridge -> DDS -> policy node (ego rebuilt from odometry, Path and lane; ONNX) -> DDS -> bridge, 30 steps:
    every command equals the torch actor's on the env's own observations (1e-4). Then a BEV of the wrong channels
    or size, or odometry gone stale, gives the safe command (straight, full brake)."""
    pytest.importorskip("rclpy")
    from sensor_msgs.msg import Image

    from sim.ros.messages import sim_stamp

    path, ac = model
    h = Lockstep(path, stale_timeout_s=1.0)
    try:
        env = h.bridge.env
        scale = np.asarray(env.spec.groups[GROUP].action_scale, np.float32)
        h.publish_and_wait()
        worst, tick_s = 0.0, []
        for _ in range(30):
            obs = env.observe()[GROUP]
            with torch.no_grad():
                expected = ac.act_deterministic(obs)[0, 0].numpy() * scale
            before = float(h.bridge.command_time[GROUP][0])
            t0 = time.thread_time()
            h.node.tick()
            tick_s.append(time.thread_time() - t0)
            assert h.node.last_status == "ok", h.node.last_status
            worst = max(worst, float(np.abs(h.node._last_command - expected).max()))
            assert h.spin_until(lambda b=before: h.bridge.command_time[GROUP][0] != b), "no command at the bridge"
            latest = {k: h.node._latest[k] for k in STREAMS}
            h.bridge.tick()  # steps on the node's command, publishes the next state
            assert h.spin_until(h.received(latest)), "the node did not get the bridge's messages"
        assert int(env.episode_step[0]) == 30 and h.bridge.bad_commands == 0  # one episode: no restart in between
        print(f"SITL lockstep: node command vs torch max |diff| {worst:.2e}; tick {1e3 * max(tick_s):.1f} ms at most")
        assert worst < 1e-4, worst
        assert max(tick_s) < 0.1, tick_s  # each tick's own work fits the 10 Hz control period

        pub = h.test.create_publisher(Image, "/car0/perception/bev", 10)
        assert h.spin_until(lambda: pub.get_subscription_count() > 0)
        good = env.bev()[0].numpy()
        for k, pixels, encoding, why in (
            (1, good[..., :3], "rgb8", "48x48 rgb8 on bev, the entry 'bev' takes 48x48 with 6 channel"),
            (2, good[:32, :32], "8UC6", "32x32 8uc6 on bev"),
            (3, good, "8UC6", "stale /car0/odom"),
        ):
            hh, ww, c = pixels.shape
            img = Image(height=hh, width=ww, encoding=encoding, step=ww * c, data=pixels.tobytes())
            img.header.stamp = sim_stamp(h.bridge.sim_time + 0.1 * k)
            if "stale" in why:
                time.sleep(1.2)  # odometry (published last with the previous step) is now older than 1 s
            before = h.node._latest["bev"]
            pub.publish(img)
            assert h.spin_until(lambda b=before: h.node._latest["bev"] is not b)
            sent = len(h.commands)
            h.node.tick()
            assert why in h.node.last_status, h.node.last_status
            assert h.spin_until(lambda n=sent: len(h.commands) > n) and h.commands[-1] == SAFE, h.commands[-1]
    finally:
        h.close()


# --------------------------------------------------------------------------- SITL, separate processes in real time


def test_sitl_processes_drive_at_the_control_rate(model, tmp_path: Path):
    """The launcher's node set (sim bridge + one policy node, separate processes over DDS) drives 3 s of sim time
    in real time: all 30 steps commanded by the node within the command timeout, no bad commands."""
    pytest.importorskip("rclpy")
    from deploy_ros.launch import node_commands, params_file, running_nodes

    path, _ = model
    seconds = 3.0
    result = tmp_path / "result.json"
    extra = ["-p", f"model:={path}", "-p", f"duration_s:={seconds}", "-p", f"result_file:={result}"]
    cmds = node_commands(params_file("vlm_driving"), extra)
    assert set(cmds) == {"sim_bridge", "car0"}
    env = ros_env("driving_sitl")
    with running_nodes(cmds, tmp_path, env, cwd=ROOT) as procs:
        procs["sim_bridge"].wait(timeout=120)
    bridge_log = (tmp_path / "sim_bridge.log").read_text()
    assert procs["sim_bridge"].returncode == 0 and result.is_file(), bridge_log[-3000:]
    out = json.loads(result.read_text())
    print(f"SITL processes: {out}")
    policy_log = (tmp_path / "car0.log").read_text()
    assert "commanding the policy" in policy_log, policy_log[-2000:]
    assert out["steps"] == round(seconds * 10) and out["bad_commands"] == 0, out
    assert out["stale_command_steps"] <= 0.1 * out["steps"], out


def test_selftest_flies_the_exported_bev_policy(model):
    """``python -m deploy_ros.selftest`` synthesises an 8UC6 BEV, odometry, a route and a 2-value lane message."""
    pytest.importorskip("rclpy")
    from deploy_ros import selftest

    command = selftest.run(str(model[0]), ticks=5)
    assert "nan" not in command, command


# --------------------------------------------------------------------------- messages


def test_multichannel_images_and_paths_parse():
    from types import SimpleNamespace

    from deploy_ros.messages import InvalidInput, image_encoding

    bev = np.random.default_rng(0).integers(0, 256, size=(4, 5, 6), dtype=np.uint8)

    def img(pixels: np.ndarray, encoding: str, pad: int = 2) -> SimpleNamespace:
        h, w, c = pixels.shape
        rows = np.zeros((h, w * c + pad), dtype=np.uint8)
        rows[:, : w * c] = pixels.reshape(h, -1)
        return SimpleNamespace(height=h, width=w, encoding=encoding, step=w * c + pad, data=rows.tobytes())

    np.testing.assert_array_equal(parse_image(img(bev, "8UC6")).pixels, bev)
    np.testing.assert_array_equal(parse_image(img(bev[..., :1], "8UC1")).pixels, bev[..., :1])
    np.testing.assert_array_equal(parse_image(img(bev[..., :3], "rgb8")).pixels, bev[..., :3])  # unchanged
    assert [image_encoding(c) for c in (1, 3, 6, 16)] == ["mono8", "rgb8", "8UC6", "8UC16"]
    for bad in ("8UC0", "8UC17", "8UC", "16UC6", "8UCx"):
        with pytest.raises(InvalidInput, match="not supported"):
            parse_image(img(bev, bad))
    with pytest.raises(InvalidInput, match="does not hold"):
        parse_image(img(bev, "8UC7"))  # 6 channels sent, 7 declared: the buffer is short

    def path(poses: list[tuple[float, float, float, float]]) -> SimpleNamespace:
        """Poses of (x, y, yaw, quaternion scale)."""
        out = []
        for x, y, yaw, k in poses:
            q = SimpleNamespace(w=k * math.cos(yaw / 2), x=0.0, y=0.0, z=k * math.sin(yaw / 2))
            out.append(SimpleNamespace(pose=SimpleNamespace(position=SimpleNamespace(x=x, y=y, z=0.0), orientation=q)))
        return SimpleNamespace(poses=out)

    poses = [(1.0, 2.0, 0.3, 1.0), (2.0, 2.5, -3.0, 1.0), (3.0, 3.0, 3.1, 1.05)]
    np.testing.assert_allclose(parse_path(path(poses)), [p[:3] for p in poses], atol=1e-12)
    with pytest.raises(InvalidInput, match="empty path"):
        parse_path(path([]))
    with pytest.raises(InvalidInput, match="non-finite pose 1 of 3"):
        parse_path(path([poses[0], (math.nan, 0.0, 0.0, 1.0), poses[2]]))
    with pytest.raises(InvalidInput, match="pose 2 has norm 0"):
        parse_path(path([*poses[:2], (0.0, 0.0, 0.0, 0.0)]))
    with pytest.raises(InvalidInput, match="beyond"):
        parse_path(path([(1e9, 0.0, 0.0, 1.0)]))
