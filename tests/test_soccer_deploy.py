"""robot_soccer's vision agent on a robot: the robot-side ``proprio`` builder matches the simulator's entry, the
recurrent image policy exports to ONNX with parity, and in SITL (sim bridge + policy node, separate processes over
DDS) the node runs it from camera image topics at the 20 Hz control rate."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from ros_domains import ros_env

pytest.importorskip("mujoco")

import sim  # noqa: E402
from deploy_ros.messages import OdometryState  # noqa: E402
from sim.tasks.robot_soccer.robot_observation import ProprioObservation  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "assets" / "policies" / "robot_soccer" / "policy.onnx"
VISION = {"observation": "vision", "camera": {"background": ""}}


def _odometry(env, i: int = 0) -> OdometryState:
    """What the robot's wheel odometry reports for robot ``i`` of env 0 (world-frame velocity, as parsed)."""
    pos, yaw = env.robot_poses()
    s = env._read()
    y = float(yaw[0, i])
    vel = np.array([*s["vel"][0, i].tolist(), 0.0])
    quat = np.array([math.cos(y / 2), 0.0, 0.0, math.sin(y / 2)])
    return OdometryState(pos[0, i].double().numpy(), quat, vel, np.array([0.0, 0.0, float(s["yaw_rate"][0, i])]))


def test_robot_side_proprio_matches_the_simulator():
    env = sim.make("robot_soccer", num_envs=1, opponent="chaser", **VISION)
    entry = {"shape": [7], "terms": [{"name": t.name, "size": t.size} for t in env.spec.groups["team_a"].observations
                                     ["proprio"].terms], "history": 1}  # fmt: skip
    meta = {"n_agents": 1, "action": {"names": list(env.spec.groups["team_a"].action_names)}}
    builder = ProprioObservation(meta, entry, 0, ["odom"])
    obs = env.reset(seed=4)
    built = builder.reset({"odom": _odometry(env)})
    np.testing.assert_allclose(built, obs["team_a"]["proprio"][0, 0].numpy(), atol=1e-5)
    gen = torch.Generator().manual_seed(0)
    for _ in range(15):
        action = env.sample_actions(gen)
        obs, *_ = env.step(action)
        built = builder.push({"odom": _odometry(env)}, action["team_a"][0, 0].numpy())
        np.testing.assert_allclose(built, obs["team_a"]["proprio"][0, 0].numpy(), atol=1e-4)
    with pytest.raises(ValueError, match="1 input"):
        ProprioObservation(meta, entry, 0, ["odom", "camera"])


@pytest.fixture(scope="module")
def vision_model(tmp_path_factory) -> Path:
    """The shipped vision agent, else a briefly trained recurrent one exported here (same inputs and profile)."""
    if SHIPPED.is_file():
        return SHIPPED
    import importlib.util

    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from training.runner import Runner

    spec = importlib.util.spec_from_file_location("covey_export_cli", ROOT / "export.py")
    if spec.name not in sys.modules:
        sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # dataclasses look their module up
        spec.loader.exec_module(sys.modules[spec.name])
    export_cli = sys.modules[spec.name]

    tmp = tmp_path_factory.mktemp("soccer_vision")
    over = ["task=robot_soccer", "task.observation=vision", "algo=ppo", "algo.policy.memory=lstm", "num_envs=8"]
    over += ["train.rollout_steps=8", "train.total_steps=64", "train.eval_every=0", "train.progress=false"]
    over += ["device=cpu", "torch_threads=1", "wandb.mode=disabled", f"runs_dir={tmp}"]
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
        cfg = OmegaConf.to_container(compose(config_name="config", overrides=over), resolve=True)
    runner = Runner(cfg)
    runner.learn()
    report = export_cli.export_checkpoint(
        runner.run_dir / "checkpoints" / "latest.pt", tmp / "policy.onnx", record_steps=20
    )
    parity = report["parity"]["team_a"]
    assert parity["max_abs_diff_random"] < 1e-5 and parity["max_abs_diff_recorded"] < 1e-5, parity
    return tmp / "policy.onnx"


def test_exported_vision_agent_reads_images_and_carries_its_memory(vision_model: Path):
    from policies.export import read_metadata

    meta = read_metadata(vision_model)
    names = [e["name"] for e in meta["inputs"]]
    assert names[:2] == ["image", "proprio"] and meta["memory"], meta["inputs"]
    image = next(e for e in meta["inputs"] if e["name"] == "image")
    assert image["dtype"] == "uint8" and image["shape"] == [30, 40, 3]
    assert meta["ros"]["inputs"]["camera"]["msg"] == "sensor_msgs/Image"
    assert meta["ros"]["bridge"].endswith("SoccerBridge")


def test_sitl_runs_the_vision_agent_from_image_topics(vision_model: Path, tmp_path: Path):
    pytest.importorskip("rclpy")
    pytest.importorskip("onnxruntime")
    from deploy_ros.launch import node_commands, params_file, running_nodes

    seconds = 3.0
    result = tmp_path / "result.json"
    extra = ["-p", f"model:={vision_model}", "-p", f"duration_s:={seconds}", "-p", f"result_file:={result}"]
    cmds = node_commands(params_file("robot_soccer"), extra)
    assert set(cmds) == {"sim_bridge", "player0"}
    env = ros_env("soccer_sitl")
    with running_nodes(cmds, tmp_path, env, cwd=ROOT) as procs:
        procs["sim_bridge"].wait(timeout=120)
    bridge_log = (tmp_path / "sim_bridge.log").read_text()
    assert procs["sim_bridge"].returncode == 0 and result.is_file(), bridge_log[-3000:]
    out = json.loads(result.read_text())
    policy_log = (tmp_path / "player0.log").read_text()
    assert "commanding the policy" in policy_log, policy_log[-2000:]
    assert out["steps"] == round(seconds * 20) and out["bad_commands"] == 0, out
    # The node answered (nearly) every camera frame within the command timeout: it keeps the 20 Hz rate.
    assert out["stale_command_steps"] <= 0.1 * out["steps"], out
