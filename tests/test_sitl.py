"""Software in the loop: the sim bridge and three policy nodes, separate processes over real DDS on
loopback, fly the shipped cable_load policy; the result must match the pure-python evaluation."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch

rclpy = pytest.importorskip("rclpy")
pytest.importorskip("onnxruntime")

from deploy_ros.launch import node_commands, params_file, running_nodes  # noqa: E402
from deploy_ros.sim_bridge import read_task_cfg  # noqa: E402
from sim.tasks.cable_load.ros_bridge import load_errors, make_env  # noqa: E402
from training.evaluation import onnx_policy, onnx_session  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "assets" / "policies" / "cable_load" / "policy.onnx"
GOAL = [0.6, -0.4, 1.0, 0.15, -0.1, 1.2]  # m and rad relative to the start: a tilted, turned goal
SIM_SECONDS = 10.0
SEED = 3


def python_reference(model: Path) -> tuple[float, float]:
    """Final load errors of the same policy, start and goal, run in-process through env observations."""
    env = make_env(read_task_cfg(model), SEED, GOAL)
    act = onnx_policy(onnx_session(model), env)
    obs = env._observations()
    with torch.inference_mode():
        for _ in range(round(SIM_SECONDS / env.spec.control_dt)):
            obs, *_ = env.step(act(obs))
    return load_errors(env)


@pytest.mark.skipif(not MODEL.is_file(), reason="no shipped cable_load policy.onnx")
def test_bridge_and_three_policy_nodes_fly_the_shipped_policy(tmp_path: Path) -> None:
    ref_pos, ref_ori = python_reference(MODEL)
    result = tmp_path / "result.json"
    goal = "[" + ",".join(f"{g:.6f}" for g in GOAL) + "]"
    extra = ["-p", f"model:={MODEL}", "-p", f"goal:={goal}", "-p", f"seed:={SEED}"]
    extra += ["-p", f"duration_s:={SIM_SECONDS}", "-p", f"result_file:={result}"]
    cmds = node_commands(params_file("cable_load"), extra)
    assert set(cmds) == {"sim_bridge", "mav0", "mav1", "mav2"}
    env = {**os.environ, "ROS_DOMAIN_ID": "61", "ROS_LOCALHOST_ONLY": "1", "OMP_NUM_THREADS": "1"}
    with running_nodes(cmds, tmp_path, env, cwd=ROOT) as procs:
        procs["sim_bridge"].wait(timeout=120)
    bridge_log = (tmp_path / "sim_bridge.log").read_text()
    assert procs["sim_bridge"].returncode == 0 and result.is_file(), bridge_log[-3000:]
    out = json.loads(result.read_text())
    print(f"SITL {out}; pure python: pos_err_m {ref_pos:.4f}, ori_err_deg {ref_ori:.3f}")
    assert out["sim_time_s"] == pytest.approx(SIM_SECONDS)
    # Over ROS the commands arrive up to a step late (two unsynchronised 100 Hz timers), which the
    # policy was trained to tolerate (action delay 0-1 steps). The ROS run must reach the task's
    # targets (0.15 m, 15 deg). It does not reproduce the python run exactly: with the integral prior
    # the final error over ROS was 0.041 and 0.072 m in two quiet runs (python: 0.029 m; up to 0.17 m
    # with two trainings beside it), an open timing question noted in issue 3; so the bound is the
    # task target, not a ratio to the python run.
    assert out["pos_err_m"] < 0.15 and out["ori_err_deg"] < 15.0, (out, ref_pos, ref_ori)
    assert ref_pos < 0.15 and ref_ori < 15.0, (ref_pos, ref_ori)
    assert out["stale_command_steps"] <= 0.05 * out["steps"] * 3, out
    # And the policy did fly somewhere: well below the start error.
    start_err = math.dist([0, 0, 0], GOAL[:3])
    assert ref_pos < 0.5 * start_err and np.isfinite(out["pos_err_m"])


def test_bridge_in_process_steps_with_stale_commands_and_refuses_models_without_an_adapter(tmp_path: Path) -> None:
    """Without commands the bridge steps on the profile's safe command and counts every agent-step as stale."""
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.parameter import Parameter

    from deploy_ros.sim_bridge import SimBridge

    ctx = rclpy.Context()
    rclpy.init(context=ctx, domain_id=62)
    result = tmp_path / "result.json"
    params = {"model": str(MODEL), "wait_for_commands": False, "realtime_factor": 50.0, "duration_s": 0.05}
    params["result_file"] = str(result)
    try:
        node = SimBridge(context=ctx, parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])
        assert node.adapter.command_topics == {"mavs": ["/mav0/command", "/mav1/command", "/mav2/command"]}
        executor = SingleThreadedExecutor(context=ctx)
        executor.add_node(node)
        while not node.done:
            executor.spin_once(timeout_sec=0.1)
        executor.shutdown()
        out = json.loads(result.read_text())
        assert out["steps"] == 5 and out["stale_command_steps"] == 5 * 3
        assert {"pos_err_m", "ori_err_deg", "sim_time_s"} <= set(out)
        node.destroy_node()
        bad = tmp_path / "no_bridge.onnx"
        import onnx

        from policies.export import ONNX_METADATA_KEY

        m = onnx.load(str(MODEL))
        meta = json.loads(next(p.value for p in m.metadata_props if p.key == ONNX_METADATA_KEY))
        meta["ros"].pop("bridge")
        onnx.helper.set_model_props(m, {ONNX_METADATA_KEY: json.dumps(meta)})
        onnx.save(m, str(bad))
        with pytest.raises(ValueError, match="names no sim bridge adapter"):
            SimBridge(context=ctx, parameter_overrides=[Parameter("model", value=str(bad))])
        unknown = [Parameter("model", value=str(MODEL)), Parameter("scenario", value="no_such_case")]
        with pytest.raises(ValueError, match="no scenario 'no_such_case'; known: .*'nominal'"):
            SimBridge(context=ctx, parameter_overrides=unknown)
    finally:
        rclpy.shutdown(context=ctx)


@pytest.mark.slow
def test_the_compiled_bridge_env_starts_where_the_eager_one_does_and_steps_the_same() -> None:
    """``compile:=true`` (the soak's bridge): the warm-up steps leave no trace, the start state is the
    seed's, and compiled steps follow the eager ones (~1-3 min to compile; ``pytest -m slow``)."""
    cfg = read_task_cfg(MODEL)
    eager, compiled = make_env(cfg, SEED, GOAL), make_env(cfg, SEED, GOAL, compile=True)
    for env in (eager, compiled):
        assert env.episode_step.tolist() == [0]
    assert torch.equal(compiled.load.pos, eager.load.pos) and torch.equal(compiled.goal_pos, eager.goal_pos)
    actions = {g: torch.full_like(a, 0.3) for g, a in eager.zero_actions().items()}
    for _ in range(50):
        obs_e, *_ = eager.step(actions)
        obs_c, *_ = compiled.step(actions)
    # Fused kernels sum floats in another order; over 50 steps of cables the drift reaches ~1e-4 relative.
    for group, entries in obs_e.items():
        for name, value in entries.items():
            torch.testing.assert_close(obs_c[group][name], value, rtol=1e-3, atol=1e-3)
