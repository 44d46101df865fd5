"""The hepi tasks' side of the ROS sim bridge (:mod:`sim.ros.bridge`): the env, what it publishes, the result.

Named by the deployment profile (``ros.bridge``, :meth:`sim.tasks.hepi.base.HepiEnv.deployment_profile`). One agent
(the grippers) in namespace ``/robot0`` (``deploy_ros/params/hepi_<task>.yaml``); the bridge publishes what the
robot's perception and arm state estimators would:

    /robot0/object_points   sensor_msgs/PointCloud2     the object's tracked points, world frame, graph node order
                                                        (insertion: the peg's 24 keypoints; rope: its 40 vertices
                                                        from one end; cloth: its particles row by row), float32
    /robot0/target          geometry_msgs/PoseStamped   the hole (insertion) or the pole / bar (a point of its
                                                        axis, the axis along the profile's ``line_axis``)
    /robot0/gripper<i>/odom nav_msgs/Odometry           gripper i at its held point: pose in ``world``, twist in the
                                                        body frame (REP 105), the held point's velocity (insertion:
                                                        the peg's twist at its grasp point, its attitude and body
                                                        rates; rope and cloth: the held vertex's velocity, the
                                                        gripper's orientation, no rotation)

and takes the velocity command on ``/robot0/command``. The object points carry no velocity: the rope's and cloth's
builder differentiates consecutive clouds where the simulator reads the physics state, so a ROS run is the robot's
observation, not ``evaluate.py``'s (the in-process robot path of tests/test_sitl_hepi.py reproduces it to the bit).

An insertion model is deployed on one peg, the one its export's ``deployment.peg`` names (the builder's keypoint
targets are that peg's): the bridge's world holds only that shape and size. Parameter (besides the bridge's own):
``episode`` (false; true: the run ends with the first episode, its time limit or a termination). Result: the task's
error now (``error_m``: insertion's mean keypoint error, rope's and cloth's task error), ``success_now``, the object
points (``points_m``) and, per finished episode, its metrics as ``evaluate.py`` averages them (``episodes``:
``metrics/success``, ``metrics/keypoint_err_m`` or ``metrics/task_error``...).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

import sim
from sim.core.compiled import reset_for_wall_clock
from sim.core.config import deep_merge
from sim.physics.quaternion import quat_rotate_inv
from sim.tasks.hepi.base import GROUP

NAMESPACE = "/robot0"  # the agent's namespace (deploy_ros/params/hepi_*.yaml: covey_launch.namespace /robot{i})


def make_env(task_cfg: dict, seed: int, deployment: dict | None = None, compile: bool = False):
    """One evaluation-mode env of the model's task (noise and randomisation off); an insertion model's world holds
    only the peg its ``deployment`` constants name."""
    cfg = deep_merge(dict(task_cfg), sim.evaluation_overrides(task_cfg["name"]))
    peg = (deployment or {}).get("peg")
    if peg:  # the first variant of the export's config: its shape at one size
        cfg = deep_merge(cfg, {"shapes": [peg["shape"]], "n_sizes": 1, "size_range": [peg["size_m"]] * 2})
    env = sim.make(cfg, num_envs=1, device="cpu", seed=seed, compile=compile)
    reset_for_wall_clock(env, seed)
    return env


def _flex(env) -> bool:
    from sim.tasks.hepi.flex import FlexEnv

    return isinstance(env, FlexEnv)


def measurements(env) -> dict[str, np.ndarray]:
    """What the robot measures of env 0, float64: ``points [No, 3]``, the target's ``target_pos [3]`` and
    ``target_quat [4]``, and per gripper ``gripper_pos [Na, 3]``, ``gripper_quat [Na, 4]``, ``gripper_vel [Na, 3]``
    (world) and ``gripper_ang_vel [Na, 3]`` (body); see the module docstring."""
    na = env.n_actuator
    if _flex(env):
        points = env.vertices()[0]
        target_pos, target_quat = env.world.mocap_pos[0, na], env.world.mocap_quat[0, na]
        grip_pos, grip_quat = env.grippers()[0], env.world.mocap_quat[0, :na]
        grip_vel = env.vertex_velocities()[0, env.held_nodes]
        grip_ang = torch.zeros(na, 3)
    else:
        f = env.frames()
        points = env.keypoints()[0][0]
        target_pos, target_quat = env.hole_pos[0], env.hole_quat[0]
        grip_pos = env._held_positions()[0]
        grip_quat = f["quat"][0].expand(na, 4)
        grip_vel = f["vel"][0] + torch.linalg.cross(f["omega"][0].expand(na, 3), grip_pos - f["pos"][0])
        grip_ang = quat_rotate_inv(f["quat"][0], f["omega"][0]).expand(na, 3)
    out = dict(
        points=points,
        target_pos=target_pos,
        target_quat=target_quat,
        gripper_pos=grip_pos,
        gripper_quat=grip_quat,
        gripper_vel=grip_vel,
        gripper_ang_vel=grip_ang,
    )
    return {k: v.detach().to(torch.float64).cpu().numpy() for k, v in out.items()}


def point_cloud_msg(stamp: Any, points: np.ndarray, frame: str = "world") -> Any:
    """A ``sensor_msgs/PointCloud2`` of ``points [n, 3]`` (m): one row, float32 ``x, y, z``, little-endian."""
    from sensor_msgs.msg import PointCloud2, PointField

    msg = PointCloud2()
    msg.header.stamp, msg.header.frame_id = stamp, frame
    msg.height, msg.width = 1, len(points)
    msg.fields = [PointField(name=c, offset=4 * k, datatype=PointField.FLOAT32, count=1) for k, c in enumerate("xyz")]
    msg.is_bigendian, msg.point_step, msg.row_step, msg.is_dense = False, 12, 12 * len(points), True
    msg.data = np.ascontiguousarray(points, dtype="<f4").tobytes()
    return msg


def messages(env, stamp: Any) -> dict[str, Any]:
    """Topic -> message of env 0's state at ``stamp`` (the module docstring's topics)."""
    from sim.ros.messages import odometry_msg, pose_msg

    m = measurements(env)
    out = {
        f"{NAMESPACE}/object_points": point_cloud_msg(stamp, m["points"]),
        f"{NAMESPACE}/target": pose_msg(stamp, m["target_pos"], m["target_quat"]),
    }
    for a in range(env.n_actuator):
        q = torch.as_tensor(m["gripper_quat"][a])
        v_body = quat_rotate_inv(q, torch.as_tensor(m["gripper_vel"][a])).numpy()
        out[f"{NAMESPACE}/gripper{a}/odom"] = odometry_msg(
            stamp, f"gripper{a}", m["gripper_pos"][a], m["gripper_quat"][a], v_body, m["gripper_ang_vel"][a]
        )
    return out


def task_error(env) -> tuple[float, bool]:
    """Env 0's task error now (m: insertion's mean keypoint error, rope's and cloth's task error) and success."""
    err = env.task_terms()["task_error_m"] if _flex(env) else env.keypoint_error()
    return float(err[0]), bool(env.success()[0])


class HepiBridge:
    """The bridge adapter: ``HepiBridge(node, task_cfg, seed)`` (see the module docstring)."""

    def __init__(self, node: Any, task_cfg: dict, seed: int) -> None:
        from geometry_msgs.msg import PoseStamped
        from nav_msgs.msg import Odometry
        from sensor_msgs.msg import PointCloud2

        from sim.ros.bridge import read_metadata

        deployment = read_metadata(node.get_parameter("model").value).get("deployment") or {}
        self.whole_episode = bool(node.declare_parameter("episode", False).value)
        self.env = make_env(task_cfg, seed, deployment, bool(getattr(node, "compile", False)))
        self.episodes: list[dict[str, float]] = []  # every finished episode's metrics (the step's info["episode"])
        types = {"object_points": PointCloud2, "target": PoseStamped}
        types.update({f"gripper{a}/odom": Odometry for a in range(self.env.n_actuator)})
        self.pubs = {f"{NAMESPACE}/{t}": node.create_publisher(c, f"{NAMESPACE}/{t}", 10) for t, c in types.items()}
        self.command_topics = {GROUP: [f"{NAMESPACE}/command"]}

    def describe(self) -> str:
        env = self.env
        peg = getattr(env.cfg, "shapes", None)
        return env.task_name + (f", peg {peg[0]} {env.variant_size[0] * 1e3:.1f} mm" if peg else "")

    def publish(self, stamp: Any) -> None:
        """The object points, the target pose and every gripper's odometry at sim time ``stamp``."""
        for topic, msg in messages(self.env, stamp).items():
            self.pubs[topic].publish(msg)

    def after_step(self, info: dict[str, Any]) -> None:
        """Keep the metrics of an episode that ended with this step (read before the auto-reset replaced its state)."""
        stats = info.get("episode")
        if stats is not None:
            self.episodes.append({k: float(v) for k, v in stats.items() if torch.as_tensor(v).numel() == 1})

    def finished(self) -> bool:
        return self.whole_episode and bool(self.episodes)

    def result(self) -> dict[str, Any]:
        """The task error and success now, the object points, and every finished episode's metrics."""
        err, ok = task_error(self.env)
        points = measurements(self.env)["points"]
        return {"error_m": err, "success_now": ok, "points_m": points.tolist(), "episodes": list(self.episodes)}
