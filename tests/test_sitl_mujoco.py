"""Software in the loop on a second engine: the sim bridge with ``engine:=mujoco`` and the shipped cable_load team's
three policy nodes, separate processes over DDS on loopback, in lockstep. The load must end where an in-process
MuJoCo run of the same ONNX policy puts it when that run builds each MAV's observation as the nodes do (the bridge's
messages, the robot's parsers and builders, onnxruntime, float32 commands)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from ros_domains import ros_env

pytest.importorskip("rclpy")
pytest.importorskip("onnxruntime")
pytest.importorskip("mujoco")

from test_sitl import GOAL, MODEL, SEED  # noqa: E402

from covey_common.onnx import OnnxPolicy, load_policy  # noqa: E402
from covey_common.profile import DeploymentProfile  # noqa: E402
from deploy_ros.launch import node_commands, params_file, running_nodes  # noqa: E402
from deploy_ros.messages import PARSERS  # noqa: E402
from deploy_ros.profile import make_builder  # noqa: E402
from sim.ros.bridge import command_action, read_task_cfg  # noqa: E402
from sim.ros.messages import sim_stamp  # noqa: E402
from sim.tasks.cable_load.config import GROUP  # noqa: E402
from sim.tasks.cable_load.ros_bridge import load_errors, make_env, messages  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SIM_SECONDS = 4.0  # the load travels most of the way to the goal (1.2 m off, turned and tilted) in this time


def robot_path_run(engine: str, seconds: float) -> tuple[np.ndarray, float]:
    """Final load position ``[3]`` (m) and position error (m) of an in-process run that does what the bridge and the
    nodes do in lockstep: each state as the bridge's messages, parsed and built into each MAV's observation by the
    node's builder (reset on the first state, then pushed with the previous action and the stamps' dt), the policy
    on onnxruntime, its float32 command turned into the action as the bridge does."""
    _, meta = load_policy(MODEL)
    profile = DeploymentProfile.from_metadata(meta)
    env = make_env(read_task_cfg(MODEL), SEED, GOAL, engine=engine, randomize=True)
    group = env.spec.groups[GROUP]
    policies = [OnnxPolicy(MODEL, i) for i in range(group.n_agents)]
    builders = [
        {e["name"]: make_builder(profile.observations[e["name"]], meta, e, i, None, str(MODEL)) for e in p.entries}
        for i, p in enumerate(policies)
    ]
    scale = np.asarray(group.action_scale, np.float32)
    last = np.zeros((group.n_agents, group.action_dim), np.float32)
    previous = None
    with torch.inference_mode():
        for step in range(round(seconds / env.spec.control_dt)):
            stamp = sim_stamp(step * env.spec.control_dt)
            msgs = messages(env, stamp)
            dt = None if previous is None else (stamp.sec - previous.sec) + (stamp.nanosec - previous.nanosec) * 1e-9
            previous = stamp
            commands = []
            for i, (policy, entries) in enumerate(zip(policies, builders, strict=True)):
                # Relative topics resolve in the node's namespace /mav<i> (deploy_ros/params/cable_load.yaml).
                topic = {
                    k: s.topic if s.topic.startswith("/") else f"/mav{i}/{s.topic}" for k, s in profile.inputs.items()
                }
                values = {k: PARSERS[s.msg](msgs[topic[k]]) for k, s in profile.inputs.items()}
                obs = {}
                for name, builder in entries.items():
                    sources = {s: values[s] for s in profile.observations[name].sources}
                    obs[name] = builder.reset(sources) if dt is None else builder.push(sources, last[i], dt=dt)
                action, command = policy.run(obs)
                last[i] = action
                commands.append(command)
            env.step({GROUP: torch.as_tensor(command_action(np.stack(commands), scale)).unsqueeze(0)})
    return env.load.pos[0].numpy().astype(np.float64), load_errors(env)[0]


def fly_sitl(tmp_path: Path, engine: str, seconds: float) -> dict:
    """The bridge (``engine:=<engine>``, the seed's randomised team) and the three policy nodes in lockstep; the
    bridge's result."""
    result = tmp_path / "result.json"
    goal = "[" + ",".join(f"{g:.6f}" for g in GOAL) + "]"
    extra = ["-p", f"seed:={SEED}", "-p", f"model:={MODEL}", "-p", f"goal:={goal}", "-p", f"engine:={engine}"]
    extra += ["-p", "randomize:=true", "-p", f"duration_s:={seconds}", "-p", f"result_file:={result}"]
    extra += ["-p", "lockstep:=true", "-p", "realtime_factor:=5.0"]
    cmds = node_commands(params_file("cable_load"), extra)
    with running_nodes(cmds, tmp_path, ros_env("sitl_mujoco"), cwd=ROOT) as procs:
        procs["sim_bridge"].wait(timeout=240)
    log = (tmp_path / "sim_bridge.log").read_text()
    assert procs["sim_bridge"].returncode == 0 and result.is_file(), log[-3000:]
    for name in cmds:
        node_log = (tmp_path / f"{name}.log").read_text()
        assert "safe command" not in node_log, f"{name} flew a safe command: " + node_log[-2000:]
    out = json.loads(result.read_text())
    assert out["sim_time_s"] == pytest.approx(seconds)
    return out


@pytest.mark.skipif(not MODEL.is_file(), reason="no shipped cable_load policy.onnx")
def test_the_team_over_ros_on_the_mujoco_bridge_flies_the_in_process_mujoco_run(tmp_path: Path) -> None:
    """Lockstep makes the ROS run deterministic: MuJoCo behind the bridge must give the in-process MuJoCo flight of
    the robot path to 1e-3 m (measured: the same to the last bit), and the bodies must have been MuJoCo's. The team is
    the seed's randomised one (masses, cable lengths, motors, action delay), so a bridge on another seed would part
    from the reference."""
    ref_pos, ref_err = robot_path_run("mujoco", SIM_SECONDS)
    out = fly_sitl(tmp_path, "mujoco", SIM_SECONDS)
    gap = float(np.abs(np.asarray(out["load_pos_m"]) - ref_pos).max())
    print(f"SITL on MuJoCo {out}; in-process MuJoCo: load {ref_pos.tolist()}, pos_err_m {ref_err:.5f}; gap {gap:.2e} m")
    assert out["backend"] == "mujoco", out
    assert out["stale_command_steps"] == 0 and out["bad_commands"] == 0, out
    assert gap < 1e-3, (out, ref_pos)
    assert out["pos_err_m"] == pytest.approx(ref_err, abs=1e-3), (out, ref_err)
    start_err = float(np.linalg.norm(GOAL[:3]))
    assert ref_err < 0.5 * start_err, ref_err  # the team flew towards the goal: the comparison is of a real flight
