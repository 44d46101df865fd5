"""Sim bridge: one covey cable_load environment stepped in real time, speaking the robots' topics.

    python -m deploy_ros.sim_bridge --ros-args -p model:=assets/policies/cable_load/policy.onnx

It publishes what the team's estimators would and takes the commands the policy nodes send, so
the same nodes fly the simulated team or the real one (software in the loop):

    /mav<i>/odom     nav_msgs/Odometry   pose in ``world``; twist in the body frame (REP 105)
    /load/odom       nav_msgs/Odometry   the load, same conventions
    /load/goal       geometry_msgs/PoseStamped  the goal pose of the load, ``world``
    /clock           rosgraph_msgs/Clock sim time (nodes may run with use_sim_time)
    /mav<i>/command  std_msgs/Float32MultiArray (subscribed) the policy command in physical
                     units, in the order of the model's action names (acc_x, acc_y, acc_z in
                     m/s^2, world; roll_rate, pitch_rate in rad/s); a MAV without a command newer
                     than ``command_timeout_s`` gets zeros (the controller holds its velocity).

Parameters: ``model`` (ONNX file: the task config comes from its metadata; noise and
randomisation are switched off as in evaluation), ``seed`` (start and goal draw), ``goal``
(``[x, y, z, roll, pitch, yaw]`` in m / rad relative to the start, empty = drawn), ``rate_hz``
(default the policy rate), ``realtime_factor`` (1.0 = real time), ``command_timeout_s`` (0.1),
``duration_s`` (stop after this much sim time and write ``result_file``; 0 = run forever),
``wait_for_commands`` (true: hold the start state until every MAV has sent a command; give up
with exit code 1 after ``wait_timeout_s``, 60),
``result_file`` (JSON with the final load pose error, written at the end).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import rclpy
import torch
from geometry_msgs.msg import PoseStamped
from nav_msgs.msg import Odometry
from rclpy.node import Node
from rosgraph_msgs.msg import Clock
from std_msgs.msg import Float32MultiArray

import sim
from sim.core.config import deep_merge
from sim.core.registry import evaluation_overrides
from sim.physics.quaternion import quat_from_euler, quat_rotate_inv

GROUP = "mavs"


def read_task_cfg(model: str | Path) -> dict:
    """The task config stored in an exported model's ``covey`` metadata."""
    from policies.export import read_metadata

    meta = read_metadata(model)
    if "task_cfg" not in meta:
        raise ValueError(f"{model}: its covey metadata has no task_cfg")
    return dict(meta["task_cfg"])


def _integral_slice(env) -> slice:
    """Where ``own_attach_err_int`` sits in one observation frame."""
    return env.spec.groups[GROUP].observations["policy"].slices()["own_attach_err_int"]


def make_env(task_cfg: dict, seed: int, goal: list[float] | None = None):
    """One evaluation-mode env; ``goal`` = ``[x, y, z, roll, pitch, yaw]`` relative to the start."""
    cfg = deep_merge(dict(task_cfg), evaluation_overrides(task_cfg["name"]))
    env = sim.make(cfg, num_envs=1, device="cpu", seed=seed)
    env.reset(seed=seed)
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


class SimBridge(Node):
    """Steps the env on a wall-clock timer; see the module docstring for topics and parameters."""

    def __init__(self) -> None:
        super().__init__("covey_sim_bridge")
        model = self.declare_parameter("model", "").value
        seed = int(self.declare_parameter("seed", 0).value)
        goal = list(self.declare_parameter("goal", [0.0]).value)
        if not model:
            raise ValueError("sim_bridge needs -p model:=<file.onnx>")
        self.env = make_env(read_task_cfg(model), seed, goal if len(goal) == 6 else None)
        spec = self.env.spec
        rate = float(self.declare_parameter("rate_hz", spec.control_hz).value)
        factor = float(self.declare_parameter("realtime_factor", 1.0).value)
        self.command_timeout = float(self.declare_parameter("command_timeout_s", 0.1).value)
        self.duration = float(self.declare_parameter("duration_s", 0.0).value)
        self.result_file = self.declare_parameter("result_file", "").value
        # Hold the start state (still publishing it) until every MAV has sent a command, so that
        # nodes still starting up do not cost the team the first seconds of the episode.
        self.waiting = bool(self.declare_parameter("wait_for_commands", True).value)
        self.wait_timeout = float(self.declare_parameter("wait_timeout_s", 60.0).value)
        self.started = time.monotonic()
        self.failed = ""
        group = spec.groups[GROUP]
        self.scale = np.asarray(group.action_scale, dtype=np.float32)
        self.n = group.n_agents
        self.sim_time = 0.0
        self.steps = 0
        self.commands = np.zeros((self.n, group.action_dim), dtype=np.float32)
        self.command_time = np.full(self.n, -math.inf)
        self.stale_count = 0
        self.done = False
        self.odom_pubs = [self.create_publisher(Odometry, f"/mav{i}/odom", 10) for i in range(self.n)]
        self.load_pub = self.create_publisher(Odometry, "/load/odom", 10)
        self.goal_pub = self.create_publisher(PoseStamped, "/load/goal", 10)
        self.clock_pub = self.create_publisher(Clock, "/clock", 10)
        for i in range(self.n):
            self.create_subscription(Float32MultiArray, f"/mav{i}/command", self._on_command(i), 10)
        self.publish_state()
        self.timer = self.create_timer(1.0 / (rate * factor), self.tick)
        self.get_logger().info(f"cable_load bridge: {self.n} MAVs at {rate:g} Hz x{factor:g}, goal {self.goal_text()}")

    def goal_text(self) -> str:
        return f"{[round(x, 3) for x in self.env.goal_pos[0].tolist()]}"

    def _on_command(self, i: int):
        def callback(msg: Float32MultiArray) -> None:
            data = np.asarray(msg.data, dtype=np.float32)
            if data.shape != (self.commands.shape[1],) or not np.isfinite(data).all():
                self.get_logger().warning(f"mav{i}: bad command {list(msg.data)}", throttle_duration_sec=1.0)
                return
            self.commands[i] = data
            self.command_time[i] = time.monotonic()

        return callback

    def tick(self) -> None:
        if self.done:
            return
        fresh = (time.monotonic() - self.command_time) <= self.command_timeout
        if self.waiting:
            self.waiting = not fresh.all()
            if self.waiting:
                if time.monotonic() - self.started > self.wait_timeout:
                    self.failed = f"no commands from MAVs {np.flatnonzero(~fresh).tolist()} in {self.wait_timeout:g} s"
                    self.get_logger().error(self.failed)
                    self.done = True
                    return
                self.publish_state()  # keep the nodes' inputs fresh; sim time stands still
                return
            self.get_logger().info("every MAV sends commands: stepping")
        self.stale_count += int((~fresh).sum())
        action = np.where(fresh[:, None], self.commands / self.scale, 0.0).clip(-1.0, 1.0)
        self.env.step({GROUP: torch.as_tensor(action, dtype=torch.float32).unsqueeze(0)})
        self.steps += 1
        self.sim_time = self.steps * self.env.spec.control_dt
        self.publish_state()
        if self.duration and self.sim_time >= self.duration - 1e-9:
            self.finish()

    def finish(self) -> None:
        self.done = True
        pos_err, ori_err = load_errors(self.env)
        result = {"pos_err_m": pos_err, "ori_err_deg": ori_err, "sim_time_s": self.sim_time, "steps": self.steps}
        result["stale_command_steps"] = self.stale_count
        self.get_logger().info(f"done: {json.dumps(result)}")
        if self.result_file:
            Path(self.result_file).write_text(json.dumps(result))

    # ----------------------------------------------------------------- messages
    def publish_state(self) -> None:
        stamp = self.stamp()
        clock = Clock()
        clock.clock = stamp
        self.clock_pub.publish(clock)
        d, ld = self.env.drones, self.env.load
        for i, pub in enumerate(self.odom_pubs):
            pub.publish(odometry(stamp, f"mav{i}/base_link", d.pos[0, i], d.quat[0, i], d.vel[0, i], d.ang_vel[0, i]))
        self.load_pub.publish(odometry(stamp, "load", ld.pos[0], ld.quat[0], ld.vel[0], ld.ang_vel[0]))
        goal = PoseStamped()
        goal.header.stamp, goal.header.frame_id = stamp, "world"
        set_pose(goal.pose, self.env.goal_pos[0], self.env.goal_quat[0])
        self.goal_pub.publish(goal)

    def stamp(self):
        from builtin_interfaces.msg import Time

        sec = int(self.sim_time)
        return Time(sec=sec, nanosec=int(round((self.sim_time - sec) * 1e9)))


def set_pose(pose, pos: torch.Tensor, quat: torch.Tensor) -> None:
    pose.position.x, pose.position.y, pose.position.z = (float(v) for v in pos)
    pose.orientation.w, pose.orientation.x, pose.orientation.y, pose.orientation.z = (float(v) for v in quat)


def odometry(stamp, child: str, pos, quat, vel_world, ang_vel_body) -> Odometry:
    """An Odometry message: pose in ``world``, twist in the body frame ``child`` (REP 105)."""
    msg = Odometry()
    msg.header.stamp, msg.header.frame_id, msg.child_frame_id = stamp, "world", child
    set_pose(msg.pose.pose, pos, quat)
    v_body = quat_rotate_inv(quat, vel_world)
    msg.twist.twist.linear.x, msg.twist.twist.linear.y, msg.twist.twist.linear.z = (float(v) for v in v_body)
    w = ang_vel_body
    msg.twist.twist.angular.x, msg.twist.twist.angular.y, msg.twist.twist.angular.z = (float(v) for v in w)
    return msg


def main(argv: list[str] | None = None) -> int:
    torch.set_num_threads(1)
    rclpy.init(args=argv if argv is not None else sys.argv)
    node = SimBridge()
    try:
        while rclpy.ok() and not node.done:
            rclpy.spin_once(node, timeout_sec=0.1)
    except KeyboardInterrupt:
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
    return 1 if node.failed else 0


if __name__ == "__main__":
    sys.exit(main())
