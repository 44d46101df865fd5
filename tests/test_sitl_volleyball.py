"""Software in the loop for drone_volleyball's games team: the sim bridge (the match, the scripted team inside it) and
three policy nodes (each flying the skills model with the team strategy and the rule layer in its builder), separate
processes over DDS on loopback. In lockstep the games must be the in-process games of the same seeds; in real time
at the control rate (50 Hz) the nodes must keep up."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from ros_domains import ros_env

rclpy = pytest.importorskip("rclpy")
pytest.importorskip("onnxruntime")

from test_volleyball_ros_observation import SKILLS, STRATEGY, in_process_team  # noqa: E402

from deploy_ros.launch import node_commands, params_file, running_nodes  # noqa: E402
from sim.ros.bridge import read_task_cfg  # noqa: E402
from sim.tasks.drone_volleyball.ros_bridge import make_env  # noqa: E402
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
    """Lockstep: each state is answered once by every node before the bridge steps, so the games over ROS (float64
    messages, float32 commands, the builders' numpy strategy and rule layer) are the in-process games: same winners,
    scores within a point."""
    reference = in_process_games(SEED, POINTS, GAMES)
    extra = ["-p", f"seed:={SEED}", "-p", f"games:={GAMES}", "-p", f"points_to_win:={POINTS}"]
    extra += ["-p", "lockstep:=true", "-p", "realtime_factor:=10.0"]
    out = play_sitl(tmp_path, extra, timeout_s=400)
    print(f"SITL lockstep {out}; in process {reference}")
    assert out["stale_command_steps"] == 0 and out["bad_commands"] == 0, out
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
