"""How a cable_load policy runs on a robot: the per-MAV constants its observation builder needs (stored in the ONNX
metadata) and the ROS deployment profile (:mod:`deploy_ros.profile`). The robot-side builder is
:mod:`sim.tasks.cable_load.robot_observation`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.tasks.cable_load.spec import ACTION_NAMES

if TYPE_CHECKING:
    from sim.tasks.cable_load.env import CableLoadEnv


def deployment_constants(env: CableLoadEnv) -> dict:
    """Per-MAV geometry behind ``own_attach`` and ``own_slot_rel`` (nominal values, load frame, m)."""
    return {
        "own_attach": env.attach.cpu().tolist(),
        "nominal_offset": env.nominal_offset.cpu().tolist(),
        "slot_yaw_lead_deg": env.cfg.slot_yaw_lead_deg,
        "cable_attach_on_mav": env.model.cable_attach.cpu().tolist(),
        "integral": {  # own_attach_err_int, one step per control step
            "dt": env.cfg.control_dt,
            "tau_s": env.cfg.integral_tau_s,
            "err_clip": env.cfg.integral_err_clip,
            "limit": env.cfg.integral_limit,
        },
    }


def deployment_profile() -> dict:
    """ROS deployment (:mod:`deploy_ros.profile`): each MAV builds ``policy`` from its own odometry
    (``/mav<i>/odom``), the load's and the goal pose; it commands acceleration and body-rate
    feed-forward, safe = zeros (no commanded acceleration: the onboard INDI controller holds its
    velocity). The load odometry times the steps of ``own_attach_err_int``."""
    return {
        "inputs": {
            "odom": {"msg": "nav_msgs/Odometry", "topic": "odom", "qos": "sensor", "stale": True},
            "load": {"msg": "nav_msgs/Odometry", "topic": "/load/odom", "qos": "sensor", "stale": True},
            "goal": {"msg": "geometry_msgs/PoseStamped", "topic": "/load/goal", "qos": "reliable", "stale": False},
        },
        "observations": {
            "policy": {
                "builder": "sim.tasks.cable_load.robot_observation:PolicyObservation",
                "from": ["odom", "load", "goal"],
            }
        },
        "command": {"msg": "std_msgs/Float32MultiArray", "topic": "command", "safe": [0.0] * len(ACTION_NAMES)},
        "step_inputs": ["load", "odom"],
        "bridge": "sim.tasks.cable_load.ros_bridge:CableLoadBridge",
    }
