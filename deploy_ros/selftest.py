"""Check a robot install: a policy node on an exported model, fed plausible inputs, commands the policy.

    python -m deploy_ros.selftest assets/policies/cable_load/policy.onnx [--agent 0] [--ticks 20]

Starts :class:`deploy_ros.policy_node.PolicyNode` in-process (its own ROS context, topics under a
private namespace, localhost only) and a publisher of one synthetic message per profile input (a
hovering robot for odometry, a nearby goal pose, a grey image with the entry's channels, a small
vector, a few points, a straight route through the robot, a named record of zeros), stamped as a stream that
advances. It ticks the node and passes when the node publishes finite policy commands with status ``ok``.
Prints one line either way; exit 0 on success, 1 otherwise. numpy, onnxruntime and rclpy only:
this is what CI runs in a venv without torch (``pip install ./robot``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from covey_common.cli import report


def synthetic_message(msg_type: str, entry: dict | None, k: int, spec: dict | None = None):
    """A plausible message of ``msg_type`` for tick ``k`` (``entry``: the model input it feeds, for sizes;
    ``spec``: the profile input, whose ``points`` gives a point cloud's size and ``size`` an array's, where the
    input feeds a task builder rather than the entry itself)."""
    from deploy_ros.messages import image_encoding, message_class

    msg = message_class(msg_type)()
    if hasattr(msg, "header"):
        msg.header.stamp.sec, msg.header.frame_id = 1 + k, "world"
    if msg_type == "nav_msgs/Odometry":
        msg.pose.pose.position.z = 1.0
        msg.pose.pose.orientation.w = 1.0
    elif msg_type == "geometry_msgs/PoseStamped":
        msg.pose.position.x, msg.pose.position.z = 0.2, 1.0
        msg.pose.orientation.w = 1.0
    elif msg_type == "sensor_msgs/Image":
        h, w, c = (int(s) for s in entry["shape"])
        msg.height, msg.width, msg.encoding, msg.step = h, w, image_encoding(c), w * c
        msg.data = bytes(np.full(h * w * c, 90, np.uint8))
    elif msg_type == "std_msgs/Float32MultiArray":
        size = (spec or {}).get("size")
        msg.data = [0.1] * int(size or int(np.prod(entry["shape"])) // int(entry.get("history", 1)))
    elif msg_type == "nav_msgs/Path":
        from geometry_msgs.msg import PoseStamped

        # A straight route along +x through the (resting) robot, one pose a metre, from 5 m behind it.
        for x in range(-5, 60):
            pose = PoseStamped()
            pose.header = msg.header
            pose.pose.position.x, pose.pose.orientation.w = float(x), 1.0
            msg.poses.append(pose)
    elif msg_type == "sensor_msgs/PointCloud2":
        from sensor_msgs.msg import PointField

        n = int((spec or {}).get("points") or entry["shape"][0])
        msg.fields = [PointField(name=a, offset=4 * i, datatype=7, count=1) for i, a in enumerate("xyz")]
        msg.height, msg.width, msg.point_step, msg.row_step = 1, n, 12, 12 * n
        msg.data = np.random.default_rng(0).uniform(-0.3, 0.3, (n, 3)).astype(np.float32).tobytes()
    elif msg_type == "sensor_msgs/JointState":  # a named record (e.g. a game state): every field zero
        msg.name = list((spec or {}).get("fields") or [])
        msg.position = [0.0] * len(msg.name)
    else:
        raise ValueError(f"selftest has no synthetic {msg_type} message")
    return msg


def run(model: str, agent: int = 0, ticks: int = 20) -> str:
    """Run the check; returns the node's last command as text. ValueError (one line) when it fails."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.parameter import Parameter

    from covey_common.onnx import load_policy
    from deploy_ros.messages import message_class
    from deploy_ros.policy_node import PolicyNode

    _, meta = load_policy(model)
    ros = meta.get("ros") or {}
    if not ros.get("inputs"):
        raise ValueError(f"{model} has no ROS deployment profile (metadata 'ros')")
    entries = {e["name"]: e for e in meta.get("inputs", [])}
    feeds = {
        key: next((entries.get(o) for o, spec in ros["observations"].items() if key in spec["from"]), None)
        for key in ros["inputs"]
    }
    ns = f"/covey_selftest_{os.getpid()}"
    ctx = rclpy.Context()
    rclpy.init(context=ctx, domain_id=int(os.environ.get("ROS_DOMAIN_ID", "0")))
    params = {"model": str(model), "agent_index": agent, "command_topic": f"{ns}/command", "stale_timeout_s": 5.0}
    params.update({f"{key}_topic": f"{ns}/{key}" for key in ros["inputs"]})
    node = PolicyNode(context=ctx, parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])
    node.timer.cancel()  # ticked below, after each round of inputs has arrived
    feeder = rclpy.create_node("covey_selftest_feeder", context=ctx)
    pubs = {
        key: feeder.create_publisher(message_class(spec["msg"]), f"{ns}/{key}", 10)
        for key, spec in ros["inputs"].items()
    }
    executor = SingleThreadedExecutor(context=ctx)
    executor.add_node(node)
    executor.add_node(feeder)
    try:
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline and any(p.get_subscription_count() == 0 for p in pubs.values()):
            executor.spin_once(timeout_sec=0.01)
        oks = 0
        for k in range(ticks):
            before = {key: node._latest.get(key) for key in pubs}
            for key, spec in ros["inputs"].items():
                pubs[key].publish(synthetic_message(spec["msg"], feeds[key], k, spec))
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline and any(node._latest.get(key) is before[key] for key in pubs):
                executor.spin_once(timeout_sec=0.005)
            node.tick()
            oks += node.last_status == "ok"
        if oks < ticks - 1:  # the very first tick may still be starting its histories
            raise ValueError(f"{model}: the node commanded the policy on {oks} of {ticks} ticks: {node.last_status}")
        command = np.asarray(node._last_command, dtype=np.float64)
        if not np.isfinite(command).all():
            raise ValueError(f"{model}: non-finite command {command}")
        return np.array2string(command, precision=3)
    finally:
        executor.shutdown()
        node.destroy_node()
        feeder.destroy_node()
        rclpy.shutdown(context=ctx)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy_ros.selftest", description=__doc__.split("\n")[0])
    parser.add_argument("model", help="an exported covey ONNX model (covey-onnx-v2 with a ROS profile)")
    parser.add_argument("--agent", type=int, default=0, help="agent_index of the node (default 0)")
    parser.add_argument("--ticks", type=int, default=20, help="control ticks to run (default 20)")
    args = parser.parse_args(argv)
    try:
        command = run(args.model, args.agent, args.ticks)
    except Exception as err:  # noqa: BLE001 - one line, whatever failed
        return report("selftest", err)
    torch_loaded = "torch" in sys.modules
    print(
        f"selftest: ok: {args.model} agent {args.agent}: {args.ticks} ticks, last command {command}"
        f"{' (torch was imported!)' if torch_loaded else ' (no torch imported)'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
