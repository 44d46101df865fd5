"""Software in the loop for the hepi tasks: the sim bridge and the shipped insertion, rope or cloth policy's node,
separate processes over DDS on loopback, in lockstep. The object must end where an in-process run of the robot path
puts it (the bridge's messages, the robot's point cloud and odometry parsers, the numpy graph builder with the rope's
and cloth's finite-difference point velocities, onnxruntime, float32 commands)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from ros_domains import ros_env

pytest.importorskip("rclpy")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("mujoco")

from robot_path import RobotTeam  # noqa: E402

from deploy_ros.launch import node_commands, params_file, running_nodes  # noqa: E402
from policies.export import ONNX_METADATA_KEY, read_metadata  # noqa: E402
from sim.ros.messages import sim_stamp  # noqa: E402
from sim.tasks.hepi.base import GROUP  # noqa: E402
from sim.tasks.hepi.ros_bridge import NAMESPACE, make_env, measurements, messages, task_error  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# (task, seed, sim seconds): the peg carried most of the way to the pre-insertion pose in 30 control steps; the rope
# halfway round its pole in 50; the cloth most of the way over its bar in 50.
FLIGHTS = [("hepi_insertion", 2, 1.2), ("hepi_rope_closing", 0, 1.0), ("hepi_cloth_hanging", 0, 1.0)]


def shipped(task: str) -> Path:
    return ROOT / "assets" / "policies" / task / "policy.onnx"


def bridge_model(task: str, seed: int, tmp_path: Path) -> Path:
    """The shipped model, or, when its export predates the current deployment profile (its ``bridge`` entry and
    step inputs), a copy carrying that profile (the weights and everything else unchanged)."""
    meta = read_metadata(shipped(task))
    env = make_env(meta["task_cfg"], seed, meta["deployment"])
    profile = env.deployment_profile(GROUP)
    if meta["ros"] == profile:
        return shipped(task)
    meta["ros"] = profile
    model = onnx.load(str(shipped(task)))
    for prop in model.metadata_props:
        if prop.key == ONNX_METADATA_KEY:
            prop.value = json.dumps(meta)
    out = tmp_path / "policy.onnx"
    onnx.save(model, str(out))
    return out


def robot_path_run(model: Path, seed: int, seconds: float) -> tuple[np.ndarray, float, float]:
    """The object points ``[No, 3]`` (m) after ``seconds`` of the robot path run in process, and the task error
    (m) at the start and at the end."""
    meta = read_metadata(model)
    env = make_env(meta["task_cfg"], seed, meta["deployment"])
    team = RobotTeam(model, 1, env.spec.groups[GROUP].action_scale, namespace=NAMESPACE)
    start = task_error(env)[0]
    with torch.inference_mode():
        for step in range(round(seconds / env.spec.control_dt)):
            stamp = sim_stamp(step * env.spec.control_dt)
            env.step({GROUP: team.actions(messages(env, stamp), stamp)})
    return measurements(env)["points"], start, task_error(env)[0]


@pytest.mark.parametrize(("task", "seed", "seconds"), FLIGHTS)
def test_a_hepi_policy_over_ros_in_lockstep_flies_the_in_process_robot_path(
    task: str, seed: int, seconds: float, tmp_path: Path
) -> None:
    """Lockstep makes the ROS run deterministic: every object point must end where the in-process robot path puts
    it, to the bit (the bound, 1e-6 m, is float32 round-off at 0.5 m, in case a platform's DDS or onnxruntime
    differs), with no stale or safe command, and the object must have moved towards its target."""
    if not shipped(task).is_file():
        pytest.skip(f"no shipped {task} policy.onnx")
    model = bridge_model(task, seed, tmp_path)
    ref_points, start_err, ref_err = robot_path_run(model, seed, seconds)
    result = tmp_path / "result.json"
    extra = ["-p", f"model:={model}", "-p", f"seed:={seed}", "-p", f"duration_s:={seconds}"]
    extra += ["-p", f"result_file:={result}", "-p", "lockstep:=true", "-p", "realtime_factor:=20.0"]
    cmds = node_commands(params_file(task), extra)
    assert set(cmds) == {"sim_bridge", "robot0"}
    with running_nodes(cmds, tmp_path, ros_env("sitl_hepi"), cwd=ROOT) as procs:
        procs["sim_bridge"].wait(timeout=120)
    log = (tmp_path / "sim_bridge.log").read_text()
    assert procs["sim_bridge"].returncode == 0 and result.is_file(), log[-3000:]
    node_log = (tmp_path / "robot0.log").read_text()
    assert "safe command" not in node_log, node_log[-2000:]
    out = json.loads(result.read_text())
    gap = float(np.abs(np.asarray(out["points_m"]) - ref_points).max())
    print(
        f"SITL {task}: error {out['error_m']:.5f} m (start {start_err:.5f}, in process {ref_err:.5f}); gap {gap:.2e} m"
    )
    assert out["sim_time_s"] == pytest.approx(seconds)
    assert out["stale_command_steps"] == 0 and out["bad_commands"] == 0, out
    assert gap <= 1e-6, gap
    assert out["error_m"] == pytest.approx(ref_err, abs=1e-6)
    assert ref_err < 0.7 * start_err, (
        start_err,
        ref_err,
    )  # a real flight towards the target, not an object left hanging
