"""drone_volleyball's side of the ROS sim bridge (:mod:`sim.ros.bridge`): a game against the scripted team.

Named by the skills model's deployment profile (``ros.bridge``; :mod:`sim.tasks.drone_volleyball.deployment`). The
env is the match the model's team plays (``task_cfg`` with the match's name, evaluation overrides); team A's drones
are the policy nodes', team B is the rule-based scripted team (``teams.scripted_team``), played here each step. It
publishes what motion capture and the referee would, on the topics of ``deploy_ros/params/drone_volleyball.yaml``:

    /drone<j>/odom   nav_msgs/Odometry        every drone, pose in ``world``, twist in the body frame (REP 105)
    /ball/odom       nav_msgs/Odometry        the ball, identity orientation
    /game/state      sensor_msgs/JointState   the game state (names: ``robot_observation.game_fields``)

and takes team A's commands on ``/drone<i>/command``. Parameters (besides the bridge's own): ``games`` (stop after
this many finished games; 0 = run on), ``points_to_win`` (0 = the model's), ``engine`` (what steps the bodies, as
``evaluate.py engine=``: ``covey``, the default, or ``mujoco`` to play the games in MuJoCo, a sim-to-sim check over
ROS). Result: every finished game's score
(``scores``: ``[[a, b], ...]``), ``wins_a``, the score of the game in progress, the rallies played and the finished
games' event counts (``events``), and the sum of the ball's position over every step (``ball_path_sum``, m, float64):
a fingerprint of the whole flight, which lockstep checks compare with their in-process twin to the bit.
"""

from __future__ import annotations

from typing import Any

import torch

import sim
from sim.core.compiled import reset_for_wall_clock
from sim.core.config import deep_merge
from sim.physics.quaternion import quat_rotate_inv
from sim.tasks.drone_volleyball.deployment import match_cfg
from sim.tasks.drone_volleyball.robot_observation import game_fields


def make_env(task_cfg: dict, seed: int, points_to_win: int = 0, engine: str = "covey", compile: bool = False):
    """One evaluation-mode match env of the team's config (``points_to_win`` > 0 overrides the game's length;
    ``engine``: what steps the bodies, ``sim.make``'s, e.g. ``"mujoco"``; ``compile``: the step through
    ``torch.compile``, compiled here by two warm-up steps before the reset, so that the first real-time tick does
    not stall)."""
    cfg = deep_merge(match_cfg(task_cfg), sim.evaluation_overrides(task_cfg["name"]))
    if points_to_win > 0:
        cfg = deep_merge(cfg, {"rules": {"points_to_win": points_to_win}})
    env = sim.make(cfg, num_envs=1, device="cpu", seed=seed, engine=engine, compile=compile)
    reset_for_wall_clock(env, seed)
    return env


def game_state(env) -> list[float]:
    """Env 0's game state, in the order of :func:`game_fields` (``game_step`` is the match's episode step)."""
    ru = env.rules
    values = [
        env.episode_step[0],
        ru.served[0],
        ru.serving_team[0],
        ru.server[0],
        ru.rotation[0, 0],
        ru.rotation[0, 1],
        ru.last_team[0],
        ru.last_toucher[0],
        ru.touches[0],
        ru.rally_time[0],
        ru.score[0, 0],
        ru.score[0, 1],
        *env.touched[0],
    ]
    return [float(v) for v in values]


def messages(env, stamp: Any) -> dict[str, Any]:
    """Topic -> message of env 0's state at ``stamp``: every drone's and the ball's odometry, the game state."""
    from sensor_msgs.msg import JointState

    from sim.ros.messages import odometry_msg

    d, out = env.drones, {}
    for j in range(env.num_drones):
        v_body = quat_rotate_inv(d.quat[0, j], d.vel[0, j])
        out[f"/drone{j}/odom"] = odometry_msg(
            stamp, f"drone{j}/base_link", d.pos[0, j], d.quat[0, j], v_body, d.ang_vel[0, j]
        )
    identity = torch.tensor((1.0, 0.0, 0.0, 0.0))
    out["/ball/odom"] = odometry_msg(stamp, "ball", env.ball_pos[0], identity, env.ball_vel[0], torch.zeros(3))
    state = JointState(name=list(game_fields(env.n)), position=game_state(env))
    state.header.stamp, state.header.frame_id = stamp, "world"
    out["/game/state"] = state
    return out


class VolleyballBridge:
    """The bridge adapter: ``VolleyballBridge(node, task_cfg, seed)`` (see the module docstring)."""

    def __init__(self, node: Any, task_cfg: dict, seed: int) -> None:
        from nav_msgs.msg import Odometry
        from sensor_msgs.msg import JointState

        from sim.tasks.drone_volleyball.teams import scripted_team

        self.games = int(node.declare_parameter("games", 0).value)
        points = int(node.declare_parameter("points_to_win", 0).value)
        self.engine = str(node.declare_parameter("engine", "covey").value)
        self.env = make_env(task_cfg, seed, points, self.engine, bool(getattr(node, "compile", False)))
        n = self.env.n
        self.command_topics = {"team_a": [f"/drone{i}/command" for i in range(n)]}
        self.opponent = scripted_team(self.env)
        self.pubs = {f"/drone{j}/odom": node.create_publisher(Odometry, f"/drone{j}/odom", 10) for j in range(2 * n)}
        self.pubs["/ball/odom"] = node.create_publisher(Odometry, "/ball/odom", 10)
        self.pubs["/game/state"] = node.create_publisher(JointState, "/game/state", 10)
        self.scores: list[list[int]] = []
        self.events: dict[str, int] = {}  # the rules' event counts of the finished games (rally outcomes, faults)
        self.rallies = 0
        self.ball_path_sum = torch.zeros(3, dtype=torch.float64)

    def describe(self) -> str:
        rules = self.env.cfg.rules
        return (
            f"games to {rules.points_to_win} against the scripted team"
            + (f", {self.games} games" if self.games else "")
            + (f", bodies stepped by {self.engine}" if self.engine != "covey" else "")
        )

    def other_actions(self) -> dict[str, torch.Tensor]:
        """Team B's actions ``[1, n, 4]`` from the scripted team on the current state (the bridge's hook for groups
        without command topics)."""
        return {"team_b": self.opponent(self.env, None, 1)}

    def after_step(self, info: dict[str, Any]) -> None:
        """Keep each finished game's score (read from the episode's last counters, before the auto-reset)."""
        ev = self.env.events
        self.ball_path_sum += self.env.ball_pos[0].double()
        self.rallies += int(ev.rally_over[0])
        if bool(ev.game_over[0]):
            counters = {k: int(v[0]) for k, v in self.env.final_counters.items()}
            self.scores.append([counters["points_a"], counters["points_b"]])
            for k, v in counters.items():
                self.events[k] = self.events.get(k, 0) + v

    def finished(self) -> bool:
        """Whether the asked number of games has been played."""
        return self.games > 0 and len(self.scores) >= self.games

    def publish(self, stamp: Any) -> None:
        for topic, msg in messages(self.env, stamp).items():
            self.pubs[topic].publish(msg)

    def result(self) -> dict[str, Any]:
        return {
            "scores": self.scores,
            "wins_a": sum(a > b for a, b in self.scores),
            "score_now": [int(s) for s in self.env.rules.score[0]],
            "rallies": self.rallies,
            "events": self.events,
            "ball_path_sum": [float(v) for v in self.ball_path_sum],
            "engine": self.engine,
        }
