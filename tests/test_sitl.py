"""Software in the loop: the sim bridge and three policy nodes, separate processes over real DDS on
loopback, fly the shipped cable_load policy: in lockstep the result must be the pure-python evaluation's;
in real time it must still reach near the goal."""

from __future__ import annotations

import json
import math
import signal
import time
from pathlib import Path

import pytest
import torch
from ros_domains import claim_ros_domain, ros_env

rclpy = pytest.importorskip("rclpy")
pytest.importorskip("onnxruntime")

from deploy_ros.launch import node_commands, params_file, running_nodes  # noqa: E402
from sim.ros.bridge import read_task_cfg  # noqa: E402
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


def fly_sitl(tmp_path: Path, lockstep: bool) -> dict:
    """The bridge and three policy nodes as processes over DDS on loopback; the bridge's result."""
    result = tmp_path / "result.json"
    goal = "[" + ",".join(f"{g:.6f}" for g in GOAL) + "]"
    extra = ["-p", f"model:={MODEL}", "-p", f"goal:={goal}", "-p", f"seed:={SEED}"]
    extra += ["-p", f"duration_s:={SIM_SECONDS}", "-p", f"result_file:={result}"]
    if lockstep:  # as fast as the nodes answer, up to 5x real time
        extra += ["-p", "lockstep:=true", "-p", "realtime_factor:=5.0"]
    cmds = node_commands(params_file("cable_load"), extra)
    assert set(cmds) == {"sim_bridge", "mav0", "mav1", "mav2"}
    env = ros_env("sitl")
    with running_nodes(cmds, tmp_path, env, cwd=ROOT) as procs:
        procs["sim_bridge"].wait(timeout=120)
    bridge_log = (tmp_path / "sim_bridge.log").read_text()
    assert procs["sim_bridge"].returncode == 0 and result.is_file(), bridge_log[-3000:]
    out = json.loads(result.read_text())
    assert out["sim_time_s"] == pytest.approx(SIM_SECONDS)
    return out


@pytest.mark.skipif(not MODEL.is_file(), reason="no shipped cable_load policy.onnx")
def test_bridge_and_three_policy_nodes_in_lockstep_reproduce_the_python_run(tmp_path: Path) -> None:
    """In lockstep every command answers the state it was computed from, however loaded the machine: the
    ROS run (messages, observation builders, onnxruntime in three processes) must be the python run."""
    ref_pos, ref_ori = python_reference(MODEL)
    out = fly_sitl(tmp_path, lockstep=True)
    print(f"SITL lockstep {out}; pure python: pos_err_m {ref_pos:.5f}, ori_err_deg {ref_ori:.4f}")
    assert out["stale_command_steps"] == 0 and out["bad_commands"] == 0, out
    # float32 commands and float64 messages against the in-process tensors: the same flight to round-off.
    assert out["pos_err_m"] == pytest.approx(ref_pos, abs=1e-3), (out, ref_pos)
    assert out["ori_err_deg"] == pytest.approx(ref_ori, abs=0.05), (out, ref_ori)
    assert ref_pos < 0.15 and ref_ori < 15.0, (ref_pos, ref_ori)
    start_err = math.dist([0, 0, 0], GOAL[:3])
    assert ref_pos < 0.5 * start_err


@pytest.mark.skipif(not MODEL.is_file(), reason="no shipped cable_load policy.onnx")
def test_bridge_and_three_policy_nodes_fly_the_shipped_policy_in_real_time(tmp_path: Path) -> None:
    """In real time the nodes tick on their own timers: commands arrive up to a step late (two unsynchronised
    100 Hz timers; the policy was trained with an action delay of 0-1 steps), more on a loaded machine."""
    out = fly_sitl(tmp_path, lockstep=False)
    print(f"SITL real time {out}")
    # Quiet runs end at 0.04-0.07 m; with other processes on the two cores late commands cost accuracy
    # (0.07 m and 17.8 deg once in CI, beside a parallel test worker), so the bound here is twice the task's
    # targets (0.15 m, 15 deg); lockstep above checks the numbers.
    assert out["pos_err_m"] < 0.3 and out["ori_err_deg"] < 30.0, out
    assert out["stale_command_steps"] <= 0.05 * out["steps"] * 3, out


@pytest.mark.skipif(not MODEL.is_file(), reason="no shipped cable_load policy.onnx")
def test_a_stop_signal_after_the_result_is_written_does_not_fail_the_bridge(tmp_path: Path) -> None:
    """A supervisor stops a bridge that fell behind real time with SIGINT (benchmarks/sitl_soak.py); one arriving
    while the bridge exits after writing its result killed it with -SIGINT (a CI failure of the soak test). SIGINT
    every 2 ms from its "done" line on: it still exits 0 (it did not, 4 of 4 runs, before)."""
    extra = ["-p", f"model:={MODEL}", "-p", "duration_s:=2.0", "-p", f"result_file:={tmp_path / 'result.json'}"]
    extra += ["-p", "lockstep:=true", "-p", "realtime_factor:=5.0"]
    cmds = node_commands(params_file("cable_load"), extra)
    log = tmp_path / "sim_bridge.log"
    with running_nodes(cmds, tmp_path, ros_env("sitl"), cwd=ROOT) as procs:
        bridge = procs["sim_bridge"]
        deadline = time.monotonic() + 120
        while bridge.poll() is None and "done:" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.001)
        signals = 0
        while bridge.poll() is None and time.monotonic() < deadline:
            bridge.send_signal(signal.SIGINT)
            signals += 1
            time.sleep(0.002)
    assert signals > 0, "the bridge exited before any signal: nothing was tested"
    assert bridge.returncode == 0, log.read_text()[-2000:]
    assert json.loads((tmp_path / "result.json").read_text())["sim_time_s"] == pytest.approx(2.0)


def test_bridge_in_process_steps_with_stale_commands_and_refuses_models_without_an_adapter(tmp_path: Path) -> None:
    """Without commands the bridge steps on the profile's safe command and counts every agent-step as stale."""
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.parameter import Parameter

    from sim.ros.bridge import SimBridge

    ctx = rclpy.Context()
    rclpy.init(context=ctx, domain_id=claim_ros_domain("sitl_in_process"))
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
        # Lockstep with no policy nodes: the start state is resent, never stepped, and the wait ends in a failure.
        params = {"model": str(MODEL), "lockstep": True, "wait_timeout_s": 0.3, "command_timeout_s": 0.05}
        node = SimBridge(context=ctx, parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])
        resent = []
        node.publish_state = lambda: resent.append(node.sim_time)  # type: ignore[method-assign]
        executor = SingleThreadedExecutor(context=ctx)
        executor.add_node(node)
        while not node.done:
            executor.spin_once(timeout_sec=0.1)
        executor.shutdown()
        assert node.steps == 0 and len(resent) >= 3 and set(resent) == {0.0}, resent
        assert node.failed.startswith("lockstep: no answer from agents {'mavs': [0, 1, 2]}"), node.failed
        node.destroy_node()
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
