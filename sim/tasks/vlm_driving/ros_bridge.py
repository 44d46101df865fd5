"""vlm_driving's side of the sim bridge (:mod:`sim.ros.bridge`): one car driven over ROS among the traffic.

The bridge publishes what the car's own stack would (see :mod:`sim.tasks.vlm_driving.deploy`), under ``/car0``:
env 0's BEV mask stack as ``perception/bev`` (``sensor_msgs/Image`` 8UC6, exactly the policy's ``bev`` entry),
its odometry ``odom`` (map frame; body-frame twist), the lane localisation ``lane`` (``[lateral offset m,
on_road]``) with every step, and the route ``route`` (``nav_msgs/Path`` in the map frame, every route point with its
heading). The route is a set-point, sent when it changes, when a subscriber joins and every :data:`ROUTE_REPEAT_S`,
not with every step: a 550-pose Path costs a node ~10 ms to deserialise, a tenth of a control step. The car's
command arrives on ``/car0/command`` (``[steer rad, pedal]``), which the bridge turns back into the action
``command / action_scale``.
"""

from __future__ import annotations

import math
import time
from typing import Any

import sim
from sim.core.compiled import reset_for_wall_clock
from sim.tasks.vlm_driving.env import GROUP

NAMESPACE = "/car0"  # deploy_ros/params/vlm_driving.yaml: namespace /car{i}
MAP_FRAME = "map"
ROUTE_REPEAT_S = 1.0  # wall-clock seconds between repeats of an unchanged route


def make_env(task_cfg: dict, seed: int, compile: bool = False):
    """One env of the model's task (``observation=bev``), as evaluated (the expert reward: no VLM to load)."""
    from sim.core.config import deep_merge
    from sim.core.registry import evaluation_overrides

    cfg = deep_merge(dict(task_cfg), evaluation_overrides("vlm_driving"))
    cfg["observation"] = "bev"
    env = sim.make(cfg, num_envs=1, seed=seed, compile=compile)
    reset_for_wall_clock(env, seed)
    return env


def route_msg(env: Any, stamp: Any) -> Any:
    """Env 0's route as a ``nav_msgs/Path`` in the map frame: every valid route point with its heading."""
    from geometry_msgs.msg import PoseStamped
    from nav_msgs.msg import Path

    from sim.ros.messages import set_pose

    maps = env.maps
    m, r = int(env.map_id[0]), int(env.route_id[0])
    n = int(maps.route_len[m, r])
    xy, yaw = maps.route_xy[m, r, :n].tolist(), maps.route_yaw[m, r, :n].tolist()
    msg = Path()
    msg.header.stamp, msg.header.frame_id = stamp, MAP_FRAME
    for (x, y), a in zip(xy, yaw, strict=True):
        pose = PoseStamped()
        pose.header = msg.header
        set_pose(pose.pose, (x, y, 0.0), (math.cos(a / 2), 0.0, 0.0, math.sin(a / 2)))
        msg.poses.append(pose)
    return msg


class DrivingBridge:
    """The bridge adapter: ``DrivingBridge(node, task_cfg, seed)`` (see the module docstring)."""

    def __init__(self, node: Any, task_cfg: dict, seed: int) -> None:
        from nav_msgs.msg import Odometry, Path
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import Image
        from std_msgs.msg import Float32MultiArray

        self.env = make_env(task_cfg, seed, bool(getattr(node, "compile", False)))
        self.command_topics = {GROUP: [f"{NAMESPACE}/command"]}
        self.bev_pub = node.create_publisher(Image, f"{NAMESPACE}/perception/bev", 10)
        self.odom_pub = node.create_publisher(Odometry, f"{NAMESPACE}/odom", 10)
        reliable = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)
        self.route_pub = node.create_publisher(Path, f"{NAMESPACE}/route", reliable)
        self.lane_pub = node.create_publisher(Float32MultiArray, f"{NAMESPACE}/lane", 10)
        self._route: tuple[tuple[int, int], Any] | None = None  # (map, route) -> its Path, built once per route
        self._route_sent = -math.inf  # time.monotonic() of the last route message
        self._route_subs = 0  # subscribers of the route when it was last sent

    def describe(self) -> str:
        return f"one car on map {int(self.env.map_id[0])}, route {int(self.env.route_id[0])}"

    def publish(self, stamp: Any) -> None:
        """Env 0's BEV, odometry, route and lane localisation at sim time ``stamp``."""
        from sensor_msgs.msg import Image
        from std_msgs.msg import Float32MultiArray

        from sim.ros.messages import odometry_msg

        env = self.env
        bev = env.bev()[0].cpu().numpy()  # uint8 [B, B, C]
        h, w, c = bev.shape
        img = Image(height=h, width=w, encoding=f"8UC{c}", is_bigendian=0, step=w * c, data=bev.tobytes())
        img.header.stamp, img.header.frame_id = stamp, "car0/bev"
        self.bev_pub.publish(img)
        x, y, yaw, vx, vy, yaw_rate = env.ego[0].tolist()
        quat = [math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)]
        self.odom_pub.publish(
            odometry_msg(stamp, "car0/base_link", [x, y, 0.0], quat, [vx, vy, 0.0], [0.0, 0.0, yaw_rate], MAP_FRAME)
        )
        key = (int(env.map_id[0]), int(env.route_id[0]))
        changed = self._route is None or self._route[0] != key
        if changed:
            self._route = (key, route_msg(env, stamp))
        subs = self.route_pub.get_subscription_count()
        if changed or subs > self._route_subs or time.monotonic() - self._route_sent >= ROUTE_REPEAT_S:
            path = self._route[1]
            path.header.stamp = stamp
            self.route_pub.publish(path)
            self._route_sent, self._route_subs = time.monotonic(), subs
        d = env.derived
        self.lane_pub.publish(Float32MultiArray(data=[float(d["where_lateral"][0]), float(d["on_road"][0])]))

    def result(self) -> dict[str, float]:
        """Env 0's episode in progress: route completion, mean speed, wrong-lane share, collision, its step."""
        out = {k: float(v[0]) for k, v in self.env.step_metrics().items()}
        out["episode_step"] = float(self.env.episode_step[0])
        return out
