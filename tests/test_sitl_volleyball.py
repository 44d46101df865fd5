"""Software in the loop for drone_volleyball's games team: the sim bridge (the match, the scripted team inside it) and
three policy nodes (each flying the skills model with the team strategy and the rule layer in its builder), separate
processes over DDS on loopback. In lockstep the games must be, to the bit, the robot path run in process (the same
messages, parsers, builders, ONNX runner and command conversion without DDS), and the in-process games of the team
as ``evaluate.py`` plays it (torch observations) to a point; in real time at the control rate (50 Hz) the nodes must
keep up."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from ros_domains import ros_env

rclpy = pytest.importorskip("rclpy")
pytest.importorskip("onnxruntime")

from robot_path import RobotTeam  # noqa: E402
from test_volleyball_ros_observation import SKILLS, STRATEGY, in_process_team  # noqa: E402

from deploy_ros.launch import node_commands, params_file, running_nodes  # noqa: E402
from sim.ros.bridge import read_task_cfg  # noqa: E402
from sim.ros.messages import sim_stamp  # noqa: E402
from sim.tasks.drone_volleyball.ros_bridge import make_env, messages  # noqa: E402
from sim.tasks.drone_volleyball.teams import scripted_team  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SEED = 2
# Two games to 2 (684 steps): what fits in about a minute on two loaded cores (a game to 5 is ~1,700 steps). Seed 5's
# two games (a 1-2 loss, then 2-0; 2,412 steps, ~2.5 min) were reproduced once too; docs/deployment.md has the full
# check, 8 games to 5.
GAMES, POINTS = 2, 2

pytestmark = pytest.mark.skipif(not SKILLS.is_file() or not STRATEGY.is_file(), reason="no shipped games team")


def in_process_games(seed: int, points: int, games: int) -> list[list[int]]:
    """The scores of ``games`` consecutive games of the games team against the scripted team in one env (its
    exported models, as the nodes run them), the bridge's start for ``seed``."""
    env = make_env(read_task_cfg(SKILLS), seed, points)
    team_a, team_b = in_process_team(env), scripted_team(env)
    obs, scores = env.observe(), []
    with torch.no_grad():
        while len(scores) < games:
            obs, *_ = env.step({"team_a": team_a(env, obs, 0), "team_b": team_b(env, obs, 1)})
            if bool(env.events.game_over[0]):
                scores.append([int(env.final_counters[k][0]) for k in ("points_a", "points_b")])
    return scores


def robot_path_games(seed: int, points: int, games: int, engine: str = "covey", max_steps: int = 0) -> dict:
    """``games`` games against the scripted team on the robot path, in process (``RobotTeam``: the bridge's messages
    through the nodes' parsers, builders with the strategy and rule layer, and ONNX runner, the commands through the
    bridge's conversion, as in lockstep SITL but without DDS). The bridge's result fields: ``scores``, ``steps``,
    ``events``, ``ball_path_sum`` (``engine``: what steps the bodies, as the bridge's; ``max_steps`` > 0: stop after
    that many steps, as the bridge's ``duration_s``)."""
    env = make_env(read_task_cfg(SKILLS), seed, points, engine)
    team_b = scripted_team(env)
    team_a = RobotTeam(SKILLS, env.n, env.spec.groups["team_a"].action_scale, params={"strategy_model": str(STRATEGY)})
    steps, scores, events, ball_path_sum = 0, [], {}, torch.zeros(3, dtype=torch.float64)
    with torch.no_grad():
        while len(scores) < games and not (max_steps and steps >= max_steps):
            stamp = sim_stamp(steps * env.spec.control_dt)
            env.step({"team_a": team_a.actions(messages(env, stamp), stamp), "team_b": team_b(env, None, 1)})
            steps += 1
            ball_path_sum += env.ball_pos[0].double()
            if bool(env.events.game_over[0]):
                counters = {k: int(v[0]) for k, v in env.final_counters.items()}
                scores.append([counters["points_a"], counters["points_b"]])
                events = {k: events.get(k, 0) + v for k, v in counters.items()}
    return {"scores": scores, "steps": steps, "events": events, "ball_path_sum": [float(v) for v in ball_path_sum]}


def play_sitl(tmp_path: Path, extra: list[str], timeout_s: float) -> dict:
    """The bridge and three policy nodes as processes on this test's DDS domain; the bridge's result."""
    result = tmp_path / "result.json"
    cmds = node_commands(params_file("drone_volleyball"), [*extra, "-p", f"result_file:={result}"])
    assert set(cmds) == {"sim_bridge", "drone0", "drone1", "drone2"}
    env = {**ros_env("sitl_volleyball"), "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"}
    with running_nodes(cmds, tmp_path, env, cwd=ROOT) as procs:
        procs["sim_bridge"].wait(timeout=timeout_s)
    log = (tmp_path / "sim_bridge.log").read_text()
    assert procs["sim_bridge"].returncode == 0 and result.is_file(), log[-3000:]
    return json.loads(result.read_text())


def test_the_games_team_over_ros_in_lockstep_plays_the_in_process_games(tmp_path: Path) -> None:
    """Lockstep: each state is answered once by every node before the bridge steps, so the games over ROS are the
    robot path's in process to the bit (DDS changes nothing: same steps, events and ball trajectory), and those of the
    team as evaluated in torch to a point: same winners, scores within a point (the robot path's float64 messages and
    numpy builders differ from the env's float32 tensors by ~1e-6; 8 games to 5 of seed 0 came out the same point for
    point, but a chaotic match may grow such a difference into another rally)."""
    reference = in_process_games(SEED, POINTS, GAMES)
    robot = robot_path_games(SEED, POINTS, GAMES)
    extra = ["-p", f"seed:={SEED}", "-p", f"games:={GAMES}", "-p", f"points_to_win:={POINTS}"]
    extra += ["-p", "lockstep:=true", "-p", "realtime_factor:=10.0"]
    out = play_sitl(tmp_path, extra, timeout_s=400)
    print(f"SITL lockstep {out}; robot path in process {robot}; torch in process {reference}")
    assert out["stale_command_steps"] == 0 and out["bad_commands"] == 0, out
    assert {k: out[k] for k in robot} == robot, (out, robot)
    assert len(out["scores"]) == GAMES, out
    for ros, ref in zip(out["scores"], reference, strict=True):
        assert (ros[0] > ros[1]) == (ref[0] > ref[1]), (out["scores"], reference)
        assert abs(ros[0] - ref[0]) <= 1 and abs(ros[1] - ref[1]) <= 1, (out["scores"], reference)


def test_a_rally_in_real_time_at_the_control_rate_has_few_stale_commands(tmp_path: Path) -> None:
    """Real time at 50 Hz: the nodes tick on their own timers and the bridge steps on its own; at most 5% of the
    drone-steps fly without a fresh command."""
    extra = ["-p", f"seed:={SEED}", "-p", "duration_s:=8.0"]
    out = play_sitl(tmp_path, extra, timeout_s=120)
    print(f"SITL real time {out}")
    assert out["steps"] == 400, out
    assert out["stale_command_steps"] <= 0.05 * out["steps"] * 3, out
    assert out["bad_commands"] == 0, out


def test_the_games_team_over_ros_in_mujoco_in_lockstep_flies_the_in_process_mujoco_run(tmp_path: Path) -> None:
    """Sim-to-sim over ROS: the bridge steps the match in MuJoCo (``engine:=mujoco``; the ball's contacts are
    MuJoCo's), and 3 s of lockstep (a serve and its return: ball contacts in MuJoCo) are the robot path's run in
    MuJoCo in process to the bit."""
    steps = 150
    robot = robot_path_games(SEED, POINTS, GAMES, engine="mujoco", max_steps=steps)
    assert robot["steps"] == steps and robot["scores"] == [], robot
    extra = ["-p", f"seed:={SEED}", "-p", f"points_to_win:={POINTS}", "-p", "engine:=mujoco"]
    extra += ["-p", f"duration_s:={steps / 50:g}", "-p", "lockstep:=true", "-p", "realtime_factor:=10.0"]
    out = play_sitl(tmp_path, extra, timeout_s=300)
    print(f"SITL lockstep in MuJoCo {out}; robot path in process {robot}")
    assert out["engine"] == "mujoco" and out["stale_command_steps"] == 0 and out["bad_commands"] == 0, out
    assert {k: out[k] for k in robot} == robot, (out, robot)
