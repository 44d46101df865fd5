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

from robot_path import RobotTeam  # noqa: E402
from test_sitl import GOAL, MODEL, SEED  # noqa: E402

from deploy_ros.launch import node_commands, params_file, running_nodes  # noqa: E402
from sim.ros.bridge import read_task_cfg  # noqa: E402
from sim.ros.messages import sim_stamp  # noqa: E402
from sim.tasks.cable_load.config import GROUP  # noqa: E402
from sim.tasks.cable_load.ros_bridge import load_errors, make_env, messages  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SIM_SECONDS = 4.0  # the load travels most of the way to the goal (1.2 m off, turned and tilted) in this time


def robot_path_run(engine: str, seconds: float) -> tuple[np.ndarray, float]:
    """Final load position ``[3]`` (m) and position error (m) of the robot path run in process (``RobotTeam``: what
    the bridge and the nodes do in lockstep, without DDS)."""
    env = make_env(read_task_cfg(MODEL), SEED, GOAL, engine=engine, randomize=True)
    group = env.spec.groups[GROUP]
    # Relative topics resolve in each node's namespace /mav<i> (deploy_ros/params/cable_load.yaml).
    team = RobotTeam(MODEL, group.n_agents, group.action_scale, namespace="/mav{i}")
    with torch.inference_mode():
        for step in range(round(seconds / env.spec.control_dt)):
            stamp = sim_stamp(step * env.spec.control_dt)
            env.step({GROUP: team.actions(messages(env, stamp), stamp)})
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
