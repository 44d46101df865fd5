"""cable_load's robot-side observation (covey_common.observation + the task's terms) equals the simulator's, term by
term and step by step."""

from __future__ import annotations

import copy
import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import sim
from covey_common.quaternion import matrix_to_6d, quat_from_euler, quat_mul, quat_rotate, quat_to_matrix, quat_yaw
from sim.physics import quaternion as tq
from sim.tasks.cable_load.robot_observation import TERM_BUILDERS, RobotInputs, observation_builder

ROOT = Path(__file__).resolve().parents[1]
ATOL = 1e-5


def _export_module():
    spec = importlib.util.spec_from_file_location("covey_export_cli", ROOT / "export.py")
    if spec.name not in sys.modules:
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up while building the class
        spec.loader.exec_module(module)
    return sys.modules[spec.name]


def cable_metadata(env) -> dict:
    """The metadata export.py writes for the ``mavs`` group (the same function)."""
    return _export_module().group_metadata(env, "mavs", {"name": "cable_load"}, {})


def robot_inputs(env, e: int, i: int) -> RobotInputs:
    """MAV ``i`` of env ``e`` as a robot would measure it (sim frames: body rates, world velocities)."""
    d, ld = env.drones, env.load
    return RobotInputs(
        own_pos=d.pos[e, i].numpy(),
        own_quat=d.quat[e, i].numpy(),
        own_vel=d.vel[e, i].numpy(),
        own_ang_vel=d.ang_vel[e, i].numpy(),
        load_pos=ld.pos[e].numpy(),
        load_quat=ld.quat[e].numpy(),
        load_vel=ld.vel[e].numpy(),
        load_ang_vel=ld.ang_vel[e].numpy(),
        goal_pos=env.goal_pos[e].numpy(),
        goal_quat=env.goal_quat[e].numpy(),
    )


def test_quaternion_helpers_match_the_sim() -> None:
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(64, 4, generator=gen)
    q = q / q.norm(dim=-1, keepdim=True)
    p = torch.randn(64, 4, generator=gen)
    p = p / p.norm(dim=-1, keepdim=True)
    v = torch.randn(64, 3, generator=gen)
    rpy = torch.rand(64, 3, generator=gen) * 6 - 3
    np.testing.assert_allclose(quat_mul(q.numpy(), p.numpy()), tq.quat_mul(q, p).numpy(), atol=1e-6)
    np.testing.assert_allclose(quat_rotate(q.numpy(), v.numpy()), tq.quat_rotate(q, v).numpy(), atol=1e-5)
    np.testing.assert_allclose(quat_to_matrix(q.numpy()), tq.quat_to_matrix(q).numpy(), atol=1e-6)
    np.testing.assert_allclose(quat_yaw(q.numpy()), tq.quat_yaw(q).numpy(), atol=1e-5)
    np.testing.assert_allclose(quat_from_euler(*rpy.numpy().T), tq.quat_from_euler(*rpy.unbind(-1)).numpy(), atol=1e-6)
    # 6D = first column then second column (not rows): check on a 90 deg yaw, R = [[0,-1,0],[1,0,0],[0,0,1]].
    r = quat_to_matrix(quat_from_euler(0.0, 0.0, math.pi / 2))
    np.testing.assert_allclose(matrix_to_6d(r), [0, 1, 0, -1, 0, 0], atol=1e-12)


# The second case has 0.25 s episodes: time-limit resets inside ``step`` at steps 25 and 50 restart the
# history and the integral; its small integral limit and leak exercise the integrator's clamp and decay.
@pytest.mark.parametrize(
    "num_mavs, history, episode_s, integral",
    [(3, 3, 20.0, {}), (4, 2, 0.25, {"integral_limit": 0.02, "integral_tau_s": 0.5})],
)
def test_builder_reproduces_the_sim_observation_every_step(
    num_mavs: int, history: int, episode_s: float, integral: dict
) -> None:
    env = sim.make(
        "cable_load",
        num_envs=2,
        seed=0,
        num_mavs=num_mavs,
        history_len=history,
        episode_length_s=episode_s,
        randomization={"enabled": False},
        obs_noise={"enabled": False},
        **integral,
    )
    meta = cable_metadata(env)
    obs = env.reset()
    builders = [[observation_builder(meta, i) for i in range(num_mavs)] for _ in range(env.num_envs)]
    lead = math.radians(meta["deployment"]["slot_yaw_lead_deg"])
    gen = torch.Generator().manual_seed(1)
    resets, clamped, checked, act_seen, integral_seen = 0, 0, 0, 0.0, 0.0

    def check(obs_sim: torch.Tensor, step: int, fresh: torch.Tensor) -> None:
        nonlocal checked, clamped, act_seen, integral_seen
        integral_seen = max(integral_seen, float(env.attach_err_int.abs().max()))
        for e in range(env.num_envs):
            yaw_err = abs(
                (float(tq.quat_yaw(env.goal_quat[e]) - tq.quat_yaw(env.load.quat[e])) + math.pi) % (2 * math.pi)
                - math.pi
            )
            clamped += yaw_err > lead + 0.05
            for i in range(num_mavs):
                inputs = robot_inputs(env, e, i)
                b = builders[e][i]
                if fresh[e]:
                    mine = b.reset(inputs)  # a reset: history = copies of the first frame
                else:
                    mine = b.push(inputs, env.last_action[e, i].numpy())
                    act_seen = max(act_seen, float(np.abs(env.last_action[e, i].numpy()).max()))
                assert mine.dtype == np.float32 and mine.shape == (meta["observation"]["shape"][0],)
                diff = np.abs(mine - obs_sim[e, i].numpy())
                assert diff.max() < ATOL, f"step {step} env {e} agent {i}: max diff {diff.max():.3g} at {diff.argmax()}"
                checked += 1

    check(obs["mavs"]["policy"], 0, torch.ones(env.num_envs, dtype=torch.bool))
    for step in range(1, 51):
        # Large random actions (over-range too: the env clamps, and so must last_action).
        act = torch.randn(env.num_envs, num_mavs, 5, generator=gen) * 0.8
        obs, _, terminated, truncated, _ = env.step({"mavs": act})
        done = terminated | truncated
        resets += int(done.sum())
        check(obs["mavs"]["policy"], step, done)
    assert checked == 51 * env.num_envs * num_mavs
    assert resets == (0 if episode_s > 1 else 2 * env.num_envs)
    assert clamped > 0, "the yaw-lead clamp of own_slot_rel must be exercised"
    assert act_seen > 0.5  # non-trivial previous actions in the observation
    # own_attach_err_int moved (and in the second case sat at its clamp).
    assert integral_seen > (0.05 if episode_s > 1 else 0.0199), integral_seen


def test_goal_slot_matches_the_sim_including_the_yaw_lead_clamp_and_wrap() -> None:
    env = sim.make("cable_load", num_envs=8, seed=0, randomization={"enabled": False}, obs_noise={"enabled": False})
    meta = cable_metadata(env)
    env.reset()
    # Goal yaws on both sides of the lead (30 deg) and across the +-pi wrap, with tilts and a tilted load.
    goal_yaw = torch.tensor([0.2, 170.0, -170.0, 179.5, -179.5, 45.0, -95.0, 10.0]).deg2rad()
    load_yaw = torch.tensor([0.0, -170.0, 170.0, -179.0, 179.0, 0.0, 60.0, 175.0]).deg2rad()
    tilt = torch.full((8,), 0.2)
    env.goal_quat = tq.quat_from_euler(tilt, -tilt, goal_yaw)
    env.load.quat = tq.quat_from_euler(-0.5 * tilt, 0.3 * tilt, load_yaw)
    env.goal_pos = env.goal_pos + torch.tensor([0.5, -1.0, 0.3])
    slot_sim = env._goal_slot()  # [E, N, 3]
    for e in range(8):
        for i in range(env.n):
            b = observation_builder(meta, i)
            inputs = robot_inputs(env, e, i)
            mine = b.frame(inputs, np.zeros(5))
            sl = slice(*_term_slice(meta, "own_slot_rel"))
            np.testing.assert_allclose(mine[sl], (slot_sim[e, i] - env.drones.pos[e, i]).numpy(), atol=ATOL)
    raw = env.goal_pos.unsqueeze(1) + tq.quat_rotate(env.goal_quat.unsqueeze(1), env.nominal_offset)
    gap = (raw - slot_sim).norm(dim=-1).amax(-1)  # [E] m
    # Env 6 (155 deg behind) is clamped: its slots are metres from the raw goal's. Env 1 (20 deg across the
    # +-pi wrap) and env 0 are within the lead: the slots are the raw goal's.
    assert float(gap[6]) > 0.5
    assert float(gap[0]) < 1e-5 and float(gap[1]) < 1e-5


def _term_slice(meta: dict, name: str) -> tuple[int, int]:
    start = 0
    for t in meta["observation"]["terms"]:
        if t["name"] == name:
            return start, start + t["size"]
        start += t["size"]
    raise KeyError(name)


@pytest.fixture(scope="module")
def meta() -> dict:
    env = sim.make("cable_load", num_envs=1, seed=0)
    return cable_metadata(env)


def test_unknown_terms_are_named(meta: dict) -> None:
    bad = copy.deepcopy(meta)
    bad["observation"]["terms"].append({"name": "wind_speed", "size": 1})
    bad["observation"]["terms"].append({"name": "battery", "size": 1})
    with pytest.raises(ValueError, match=r"wind_speed.*battery"):
        observation_builder(bad, 0)


@pytest.mark.parametrize("index", [-1, 3, 7, 1.0, True])
def test_bad_agent_index(meta: dict, index) -> None:
    with pytest.raises(ValueError, match="agent_index"):
        observation_builder(meta, index)


def test_frame_size_mismatch_with_the_shape(meta: dict) -> None:
    bad = copy.deepcopy(meta)
    bad["observation"]["shape"] = [bad["observation"]["shape"][0] + 1]
    with pytest.raises(ValueError, match="mismatch"):
        observation_builder(bad, 0)
    bad = copy.deepcopy(meta)
    bad["observation"]["terms"][0]["size"] = 4  # goal_pos_rel is 3 values; the builder makes 3
    bad["observation"]["shape"] = [bad["observation"]["shape"][0] + bad["observation"]["history"]]
    with pytest.raises(ValueError, match="goal_pos_rel"):
        observation_builder(bad, 0)


def test_missing_deployment_constants_fail_at_construction(meta: dict) -> None:
    bad = copy.deepcopy(meta)
    del bad["deployment"]["nominal_offset"]
    with pytest.raises(ValueError, match="nominal_offset"):
        observation_builder(bad, 0)
    bad = copy.deepcopy(meta)
    bad["deployment"]["own_attach"] = bad["deployment"]["own_attach"][:1]  # a row for agent 0 only
    observation_builder(bad, 0)
    with pytest.raises(ValueError, match="own_attach"):
        observation_builder(bad, 1)


def test_push_before_reset_and_history_order(meta: dict) -> None:
    b = observation_builder(meta, 0)
    inputs = RobotInputs.neutral()
    with pytest.raises(RuntimeError, match="reset"):
        b.push(inputs, np.zeros(5))
    first = b.reset(inputs)
    frame = b.frame_size
    assert np.array_equal(first[:frame], first[-frame:])
    act = np.array([0.1, -0.2, 0.3, -0.4, 0.5])
    second = b.push(inputs, act)
    # Newest frame last, with the action; the older frames are the reset copies.
    sl = slice(*_term_slice(meta, "last_action"))
    np.testing.assert_allclose(second[-frame:][sl], act, atol=1e-7)
    np.testing.assert_array_equal(second[:-frame], first[frame:])
    with pytest.raises(ValueError, match="last_action"):
        b.push(inputs, np.zeros(4))


def test_other_tasks_can_add_builders(meta: dict) -> None:
    extra = copy.deepcopy(meta)
    extra["observation"]["terms"].append({"name": "wind_speed", "size": 1})
    extra["observation"]["shape"] = [extra["observation"]["shape"][0] + extra["observation"]["history"]]
    b = observation_builder(extra, 0, builders={**TERM_BUILDERS, "wind_speed": lambda c: np.array([4.5])})
    assert b.reset(RobotInputs.neutral())[-1] == pytest.approx(4.5)


def test_robot_inputs_validate_shapes() -> None:
    with pytest.raises(ValueError, match="own_quat"):
        RobotInputs(*([np.zeros(3)] * 1 + [np.zeros(3)] + [np.zeros(3)] * 8))
    bad = RobotInputs.neutral()
    bad.load_vel = np.array([0.0, np.nan, 0.0])
    assert not bad.is_finite() and RobotInputs.neutral().is_finite()


# --------------------------------------------------------------------------- deployment profile and generic builders


def _v2(meta: dict) -> dict:
    """``meta`` with the v2 per-entry inputs (export.py writes them; older metadata has only ``observation``)."""
    return {**meta, "inputs": meta.get("inputs") or [{"name": "policy", **meta["observation"]}]}


def test_cable_load_profile_builds_the_policy_entry_from_parsed_messages(meta: dict) -> None:
    from deploy_ros.messages import OdometryState, PoseState
    from deploy_ros.profile import DeploymentProfile, make_builder

    meta = _v2(meta)
    profile = DeploymentProfile.from_metadata(meta)
    assert set(profile.observations) == {e["name"] for e in meta["inputs"]}
    assert profile.inputs["goal"].qos == "reliable" and not profile.inputs["goal"].stale
    assert profile.command.safe == (0.0,) * len(meta["action"]["names"])
    entry = meta["inputs"][0]
    builder = make_builder(profile.observations["policy"], meta, entry, 2)
    gen = np.random.default_rng(0)

    def quat() -> np.ndarray:
        q = gen.normal(size=4)
        return q / np.linalg.norm(q)

    own = OdometryState(gen.normal(size=3), quat(), gen.normal(size=3), gen.normal(size=3))
    load = OdometryState(gen.normal(size=3), quat(), gen.normal(size=3), gen.normal(size=3))
    goal = PoseState(gen.normal(size=3), quat())
    ref = observation_builder(meta, 2)
    robot = RobotInputs.from_messages(own, load, goal)
    msgs = {"odom": own, "load": load, "goal": goal}
    np.testing.assert_array_equal(builder.reset(msgs), ref.reset(robot))
    act = gen.uniform(-1, 1, size=5)
    np.testing.assert_array_equal(builder.push(msgs, act, dt=0.01), ref.push(robot, act, dt=0.01))


def test_profile_problems_are_named(meta: dict) -> None:
    from deploy_ros.profile import DeploymentProfile

    meta = _v2(meta)
    good = meta["ros"]
    with pytest.raises(ValueError, match="no ROS deployment profile"):
        DeploymentProfile.from_metadata({**meta, "ros": {}})
    cases = [
        (lambda p: p["inputs"]["odom"].update(msg="nav_msgs/OccupancyGrid"), "nav_msgs/OccupancyGrid"),
        (lambda p: p["inputs"]["odom"].update(qos="fast"), "qos"),
        (lambda p: p["observations"].pop("policy"), r"no observation for model input\(s\) \['policy'\]"),
        (lambda p: p["observations"]["policy"].update({"from": ["odom", "imu"]}), "imu"),
        (lambda p: p["command"].update(safe=[0.0]), "safe command has 1 values"),
        (lambda p: p["inputs"].update(command=p["inputs"]["odom"]), "'command'"),
        (lambda p: p.update(step_inputs=["gps"]), "step_inputs"),
        (lambda p: p.pop("command"), "malformed"),
    ]
    for change, message in cases:
        bad = copy.deepcopy(good)
        change(bad)
        with pytest.raises(ValueError, match=message):
            DeploymentProfile.from_metadata({**meta, "ros": bad})


def test_the_base_env_has_no_profile_and_task_builders_must_import(meta: dict) -> None:
    from deploy_ros.profile import DeploymentProfile, ObservationSpec, make_builder
    from sim.core.env import MultiAgentEnv

    env = sim.make("cable_load", num_envs=1)
    assert MultiAgentEnv.deployment_profile(env, "mavs") == {}
    meta = _v2(meta)
    with pytest.raises(ValueError, match="cannot import 'sim.tasks.cable_load.nope:Builder'"):
        make_builder(
            ObservationSpec("policy", "sim.tasks.cable_load.nope:Builder", ("odom",)), meta, meta["inputs"][0], 0
        )
    assert DeploymentProfile.from_metadata(meta).step_inputs == ("load", "odom")


def test_generic_vector_builder_keeps_the_history_and_checks_the_size() -> None:
    from deploy_ros.messages import InvalidInput
    from deploy_ros.profile import VectorFromArray

    entry = {"name": "policy", "shape": [6], "dtype": "float32", "kind": "vector", "history": 2}
    b = VectorFromArray({"n_agents": 1}, entry, 0, ["obs"])
    np.testing.assert_array_equal(b.reset({"obs": np.array([1.0, 2.0, 3.0])}), [1, 2, 3, 1, 2, 3])
    np.testing.assert_array_equal(b.push({"obs": np.array([4.0, 5.0, 6.0])}, np.zeros(2)), [1, 2, 3, 4, 5, 6])
    with pytest.raises(InvalidInput, match="2 values on obs, the entry 'policy' takes 3"):
        b.push({"obs": np.array([1.0, 2.0])}, np.zeros(2))
    with pytest.raises(ValueError, match="history"):
        VectorFromArray({}, {**entry, "history": 4}, 0, ["obs"])
    with pytest.raises(ValueError, match="exactly one input"):
        VectorFromArray({}, entry, 0, ["a", "b"])


def test_images_are_parsed_to_rgb_and_checked_against_the_entry() -> None:
    from types import SimpleNamespace

    from deploy_ros.messages import InvalidInput, parse_image
    from deploy_ros.profile import ImageFromMessage

    rgb = np.random.default_rng(0).integers(0, 256, size=(4, 5, 3), dtype=np.uint8)

    def msg(pixels: np.ndarray, encoding: str, pad: int = 3) -> SimpleNamespace:
        h, w, c = pixels.shape
        rows = np.zeros((h, w * c + pad), dtype=np.uint8)
        rows[:, : w * c] = pixels.reshape(h, -1)
        return SimpleNamespace(height=h, width=w, encoding=encoding, step=w * c + pad, data=rows.tobytes())

    np.testing.assert_array_equal(parse_image(msg(rgb, "rgb8")).pixels, rgb)
    np.testing.assert_array_equal(parse_image(msg(rgb[..., ::-1], "bgr8")).pixels, rgb)
    assert parse_image(msg(rgb[..., :1], "mono8")).pixels.shape == (4, 5, 1)
    with pytest.raises(InvalidInput, match="not supported"):
        parse_image(msg(rgb, "rgba8"))
    short = msg(rgb, "rgb8")
    short.data = short.data[:-10]
    with pytest.raises(InvalidInput, match="does not hold"):
        parse_image(short)
    entry = {"name": "image", "shape": [4, 5, 3], "dtype": "uint8", "kind": "image"}
    b = ImageFromMessage({}, entry, 0, ["camera"])
    np.testing.assert_array_equal(b.reset({"camera": parse_image(msg(rgb[..., ::-1], "bgr8"))}), rgb)
    with pytest.raises(InvalidInput, match="4x4 rgb8 on camera, the entry 'image' takes 4x5"):
        b.push({"camera": parse_image(msg(rgb[:, :4], "rgb8"))}, np.zeros(2))
    with pytest.raises(ValueError, match="uint8"):
        ImageFromMessage({}, {**entry, "dtype": "float32"}, 0, ["camera"])
