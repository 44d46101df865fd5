"""robot_soccer's side of the sim bridge (:mod:`sim.ros.bridge`): one game against the scripted opponent.

The bridge plays team_a's robots over ROS: each robot's head camera frame (the composited 40x30 view the policy was
trained on, with the env's frame latency) as ``/player<i>/camera/image`` (``sensor_msgs/Image``, rgb8) and its
wheel odometry as ``/player<i>/odom``; their commands arrive on ``/player<i>/command``. team_b is the scripted
opponent inside the env (``opponent`` of the model's task config; a model trained in matches plays the chaser).
Parameter (besides the bridge's own): ``games`` (0: play on; n: end the run after n finished games). The result
lists every finished game (``games``: team_a's result, 1 won, 0 lost, 0.5 draw, its goals, the opponent's and the
game's steps). A recurrent policy node carries its memory from one game into the next (nothing tells it a game
ended); a run of ``games:=1`` per seed is what ``evaluate.py`` scores, one game from a fresh memory.
"""

from __future__ import annotations

import math
from typing import Any

import sim
from sim.core.compiled import reset_for_wall_clock
from sim.core.teams import GROUPS

GROUP = GROUPS[0]


def make_env(task_cfg: dict, seed: int, compile: bool = False):
    """One env of the model's task, as evaluated (no randomisation), with a scripted opponent inside."""
    from sim.core.config import deep_merge
    from sim.core.registry import evaluation_overrides

    cfg = deep_merge(dict(task_cfg), evaluation_overrides("robot_soccer"))
    if cfg.get("opponent", "none") == "none":
        cfg["opponent"] = "chaser"
    env = sim.make(cfg, num_envs=1, seed=seed, compile=compile)
    reset_for_wall_clock(env, seed)
    return env


class SoccerBridge:
    """The bridge adapter: ``SoccerBridge(node, task_cfg, seed)`` (see the module docstring)."""

    def __init__(self, node: Any, task_cfg: dict, seed: int) -> None:
        from nav_msgs.msg import Odometry
        from sensor_msgs.msg import Image

        self.env = make_env(task_cfg, seed, bool(getattr(node, "compile", False)))
        self.n = self.env.spec.groups[GROUP].n_agents
        self.command_topics = {GROUP: [f"/player{i}/command" for i in range(self.n)]}
        self.image_pubs = [node.create_publisher(Image, f"/player{i}/camera/image", 10) for i in range(self.n)]
        self.odom_pubs = [node.create_publisher(Odometry, f"/player{i}/odom", 10) for i in range(self.n)]
        self.games = int(node.declare_parameter("games", 0).value)
        self.finished_games: list[dict[str, float]] = []
        self.steps_in_game = 0

    def describe(self) -> str:
        return f"{self.n} player(s) vs the scripted {self.env.cfg.opponent}"

    def publish(self, stamp: Any) -> None:
        """Every player's camera frame (as its policy would observe it) and odometry at sim time ``stamp``."""
        from sensor_msgs.msg import Image

        from sim.ros.messages import odometry_msg

        env = self.env
        frames = env.observe()[GROUP]["image"][0].cpu().numpy()  # [A, H, W, 3] uint8
        pos, yaw = env.robot_poses()
        vel = env._read()["vel"][0]
        yaw_rate = env._read()["yaw_rate"][0]
        for i in range(self.n):
            img = Image()
            img.header.stamp, img.header.frame_id = stamp, f"player{i}/camera"
            img.height, img.width = int(frames.shape[1]), int(frames.shape[2])
            img.encoding, img.is_bigendian, img.step = "rgb8", 0, int(frames.shape[2]) * 3
            img.data = frames[i].tobytes()
            self.image_pubs[i].publish(img)
            y = float(yaw[0, i])
            c, s = math.cos(y), math.sin(y)
            v = vel[i].tolist()
            v_body = [c * v[0] + s * v[1], -s * v[0] + c * v[1], 0.0]
            quat = [math.cos(y / 2), 0.0, 0.0, math.sin(y / 2)]
            self.odom_pubs[i].publish(
                odometry_msg(
                    stamp, f"player{i}/base_link", pos[0, i].tolist(), quat, v_body, [0.0, 0.0, float(yaw_rate[i])]
                )
            )

    def after_step(self, info: dict[str, Any]) -> None:
        """Record a game that ended with this step (the env has started the next: its step counter is back at 0)."""
        env = self.env
        self.steps_in_game += 1
        if int(env.episode_step[0]) == 0:
            final = env.final_counters
            self.finished_games.append(
                {
                    "result_a": float(env.game_result[0]),
                    "goals_a": float(final["points_a"][0]),
                    "goals_b": float(final["points_b"][0]),
                    "steps": self.steps_in_game,
                }
            )
            self.steps_in_game = 0

    def finished(self) -> bool:
        return 0 < self.games <= len(self.finished_games)

    def result(self) -> dict[str, Any]:
        """The game in progress (a goal ends a game and the env starts the next), the last finished one and every
        finished game."""
        env, c = self.env, self.env.counters
        steps = max(1, int(env.episode_step[0]))
        return {
            "goals_a": float(c["points_a"][0]),
            "goals_b": float(c["points_b"][0]),
            "touches_a": float(c["hits_a"][0]),
            "ball_in_view_a": float(c["ball_in_view_a"][0]) / steps,
            "last_game_result_a": float(env.game_result[0]),  # 1 won, 0 lost, 0.5 draw, NaN none finished
            "games": list(self.finished_games),
        }
