"""cable_load's side of the ROS sim bridge (:mod:`sim.ros.bridge`): the env, what it publishes, the result.

Named by the deployment profile (``ros.bridge``). It publishes what the team's estimators and the
operator would, on the topics the policy nodes of ``deploy_ros/params/cable_load.yaml`` read:

    /mav<i>/odom     nav_msgs/Odometry          pose in ``world``; twist in the body frame (REP 105)
    /load/odom       nav_msgs/Odometry          the load, same conventions
    /load/goal       geometry_msgs/PoseStamped  the goal pose of the load, ``world``

and takes each MAV's command on ``/mav<i>/command``. Parameters (besides the bridge's own):
``goal`` (``[x, y, z, roll, pitch, yaw]`` in m / rad relative to the start; anything else = drawn
from the seed), ``engine`` (what steps the bodies, as ``evaluate.py engine=``: ``covey``, the default, or
``mujoco[:<integrator>]`` to fly the team in MuJoCo: a sim-to-sim check over ROS), ``randomize`` (false; true: the
task's physical randomisation as trained, e.g. a scenario's heterogeneous team; the robots' inputs stay exact, the
messages carry no observation noise) and ``episode`` (false; true: the run ends with the episode, at its last step
or at a termination). Result: the final load position error (m), orientation error (deg) and position (m), the
backend that stepped the bodies, ``terminated`` and, once the episode has reached its final window
(``evaluation_window_s``, as ``evaluate.py`` averages), the window means ``window_pos_err_m`` and
``window_ori_err_deg``.
"""

from __future__ import annotations

import math
from typing import Any

import torch

import sim
from sim.core.compiled import reset_for_wall_clock
from sim.core.config import deep_merge
from sim.physics.quaternion import quat_from_euler, quat_rotate_inv
from sim.tasks.cable_load.config import GROUP


def _integral_slice(env) -> slice:
    """Where ``own_attach_err_int`` sits in one observation frame."""
    return env.spec.groups[GROUP].observations["policy"].slices()["own_attach_err_int"]


def make_env(
    task_cfg: dict,
    seed: int,
    goal: list[float] | None = None,
    compile: bool = False,
    engine: str = "covey",
    randomize: bool = False,
):
    """One evaluation-mode env (noise and randomisation off); ``goal`` = ``[x, y, z, roll, pitch, yaw]``
    relative to the start (None: the seed's draw). ``compile``: the control loop through
    ``torch.compile``, compiled here (``sim.core.compiled.reset_for_wall_clock``) so that the first
    real-time tick does not stall for minutes. ``engine``: what steps the bodies (``sim.make``'s ``engine``,
    e.g. ``"mujoco"``). ``randomize``: keep the config's randomisation (observation noise stays off)."""
    overrides = sim.evaluation_overrides(task_cfg["name"])
    if randomize:
        overrides.pop("randomization", None)
    cfg = deep_merge(dict(task_cfg), overrides)
    env = sim.make(cfg, num_envs=1, device="cpu", seed=seed, compile=compile, engine=engine)
    reset_for_wall_clock(env, seed)
    if goal:
        if len(goal) != 6:
            raise ValueError(f"goal must be [x, y, z, roll, pitch, yaw], got {goal}")
        g = torch.tensor(goal, dtype=torch.float32)
        env.goal_pos = env.start_pos + g[:3]
        env.goal_quat = quat_from_euler(g[3:4], g[4:5], g[5:6])
        env._update_observation_buffers()  # the first observation already sees this goal
        env.history[:] = env.history[:, :, -1:].clone()  # as at reset: history filled with that frame
        env.attach_err_int.zero_()  # ... and the integral at zero (the update above integrated one step)
        env.history[..., _integral_slice(env)] = 0.0
    return env


def load_errors(env) -> tuple[float, float]:
    """Load position error (m) and orientation error (deg) of env 0."""
    pos, ori = env.errors()
    return float(pos[0]), math.degrees(float(ori[0]))


def messages(env, stamp: Any) -> dict[str, Any]:
    """Topic -> message of env 0's state at ``stamp``: every MAV's odometry, the load's and the goal."""
    from sim.ros.messages import odometry_msg, pose_msg

    d, ld, out = env.drones, env.load, {}
    for i in range(env.spec.groups[GROUP].n_agents):
        v_body = quat_rotate_inv(d.quat[0, i], d.vel[0, i])
        out[f"/mav{i}/odom"] = odometry_msg(
            stamp, f"mav{i}/base_link", d.pos[0, i], d.quat[0, i], v_body, d.ang_vel[0, i]
        )
    v_body = quat_rotate_inv(ld.quat[0], ld.vel[0])
    out["/load/odom"] = odometry_msg(stamp, "load", ld.pos[0], ld.quat[0], v_body, ld.ang_vel[0])
    out["/load/goal"] = pose_msg(stamp, env.goal_pos[0], env.goal_quat[0])
    return out


class EpisodeWindow:
    """The episode of env 0 as ``evaluate.py`` scores it: whether it terminated, and the means of the load errors
    over its final window (the states the policy acts on at steps ``T - W .. T - 1`` of a ``T``-step episode).
    Call :meth:`after_step` after every env step."""

    def __init__(self, env) -> None:
        self.env = env
        self.length = int(env.max_episode_steps)
        self.window = min(max(1, round(env.evaluation_window_s / env.spec.control_dt)), self.length)
        self.steps, self.samples, self.sums = 0, 0, [0.0, 0.0]
        self.terminated = False

    @property
    def over(self) -> bool:
        """The episode terminated, or reached its last state (the one its final action is taken on)."""
        return self.terminated or self.steps >= self.length - 1

    def after_step(self) -> None:
        if self.over:
            return
        self.steps += 1
        if int(self.env.episode_step[0]) == 0:  # an auto-reset before the time limit: it terminated
            self.terminated = True
            return
        if self.steps >= self.length - self.window:
            pos, ori = load_errors(self.env)
            self.sums[0] += pos
            self.sums[1] += ori
            self.samples += 1

    def result(self) -> dict[str, Any]:
        """``terminated``, and the window means once the window is complete."""
        out: dict[str, Any] = {"terminated": self.terminated}
        if self.samples == self.window:
            out.update(window_pos_err_m=self.sums[0] / self.window, window_ori_err_deg=self.sums[1] / self.window)
        return out


class CableLoadBridge:
    """The bridge adapter: ``CableLoadBridge(node, task_cfg, seed)`` (see the module docstring)."""

    def __init__(self, node: Any, task_cfg: dict, seed: int) -> None:
        from geometry_msgs.msg import PoseStamped
        from nav_msgs.msg import Odometry

        goal = list(node.declare_parameter("goal", [0.0]).value)
        self.engine = str(node.declare_parameter("engine", "covey").value)
        randomize = bool(node.declare_parameter("randomize", False).value)
        self.whole_episode = bool(node.declare_parameter("episode", False).value)
        compile = bool(getattr(node, "compile", False))
        self.env = make_env(task_cfg, seed, goal if len(goal) == 6 else None, compile, self.engine, randomize)
        self.episode = EpisodeWindow(self.env)
        n = self.env.spec.groups[GROUP].n_agents
        self.command_topics = {GROUP: [f"/mav{i}/command" for i in range(n)]}
        self.pubs = {f"/mav{i}/odom": node.create_publisher(Odometry, f"/mav{i}/odom", 10) for i in range(n)}
        self.pubs["/load/odom"] = node.create_publisher(Odometry, "/load/odom", 10)
        self.pubs["/load/goal"] = node.create_publisher(PoseStamped, "/load/goal", 10)

    def describe(self) -> str:
        return f"engine {self.engine}, goal {[round(x, 3) for x in self.env.goal_pos[0].tolist()]}"

    def publish(self, stamp: Any) -> None:
        """Every MAV's odometry, the load's and the goal, at sim time ``stamp``."""
        for topic, msg in messages(self.env, stamp).items():
            self.pubs[topic].publish(msg)

    def after_step(self, info: dict[str, Any]) -> None:
        self.episode.after_step()

    def finished(self) -> bool:
        return self.whole_episode and self.episode.over

    def result(self) -> dict[str, Any]:
        """The final load errors and position, the backend that stepped the bodies (``mujoco``, ``native``...) and
        the episode's outcome (:meth:`EpisodeWindow.result`)."""
        pos_err, ori_err = load_errors(self.env)
        load_pos = self.env.load.pos[0].tolist()
        out = {"pos_err_m": pos_err, "ori_err_deg": ori_err, "load_pos_m": load_pos, "backend": self.env.backend.name}
        return {**out, **self.episode.result()}
