"""vlm_driving on a car over ROS 2: the deployment profile of a BEV policy (:mod:`deploy_ros.profile`).

What the car's own stack publishes, in the policy node's namespace (e.g. ``/car0``):

    perception/bev  sensor_msgs/Image 8UC6     the BEV mask stack the policy was trained on (road, markings, route,
                                                cars now and at past steps; ``bev_size`` px square, ego-centred,
                                                heading up), straight into the ``bev`` entry
    odom            nav_msgs/Odometry          ego pose in the map frame and body-frame twist (speed, heading)
    route           nav_msgs/Path              the route to follow in the map frame, one pose about every metre from
                                                its start (x, y, yaw); a set-point: reliable, it does not go stale
    lane            std_msgs/Float32MultiArray ``[lateral offset m (+ left of the lane's direction), on_road 0/1]``
                                                from localisation on an HD map

The ``ego`` entry is rebuilt from odometry, route and lane by
:class:`sim.tasks.vlm_driving.robot_observation.EgoObservation`; the command is the action times its scale:
``[steer rad, pedal]`` (pedal +1 full throttle, -1 full brake, as the car maps it).

``export.py`` stores the profile in the ONNX metadata (the env's ``deployment_profile``); the policy node reads it
from there and never imports this module.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sim.tasks.vlm_driving.config import DrivingCfg

EGO_BUILDER = "sim.tasks.vlm_driving.robot_observation:EgoObservation"
BRIDGE = "sim.tasks.vlm_driving.ros_bridge:DrivingBridge"
LANE_VALUES = 2  # lateral offset, on_road
FULL_BRAKE = -1.0  # the pedal's brake end


def deployment_profile(cfg: DrivingCfg) -> dict[str, Any]:
    """The ROS profile of a ``observation=bev`` policy (see the module docstring); ``{}`` for ``observation=state``,
    whose ``traffic`` entry is the privileged state of every nearby car (positions, headings, velocities), which a
    car's perception does not give as such: not deployable.

    Safe command: wheels straight and the pedal at full brake, ``[0.0, -1.0]``. A car that cannot trust its policy
    should stop where it is in its lane rather than coast on (zero pedal would roll on at speed); both values are
    exact in float32, which the command message is sent in.
    """
    if cfg.observation != "bev":
        return {}
    return {
        "inputs": {
            "bev": {"msg": "sensor_msgs/Image", "topic": "perception/bev", "qos": "sensor", "stale": True},
            "odom": {"msg": "nav_msgs/Odometry", "topic": "odom", "qos": "sensor", "stale": True},
            "route": {"msg": "nav_msgs/Path", "topic": "route", "qos": "reliable", "stale": False},
            # size: the values of one message, for tools that synthesise inputs (deploy_ros.selftest).
            "lane": {
                "msg": "std_msgs/Float32MultiArray",
                "topic": "lane",
                "qos": "sensor",
                "stale": True,
                "size": LANE_VALUES,
            },
        },
        "observations": {
            "bev": {"builder": "image", "from": ["bev"]},
            "ego": {"builder": EGO_BUILDER, "from": ["odom", "route", "lane"]},
        },
        "command": {
            "msg": "std_msgs/Float32MultiArray",
            "topic": "command",
            "safe": [0.0, float(np.float32(FULL_BRAKE))],
        },
        # One control step per BEV frame (perception's cadence is the simulator's control step).
        "step_inputs": ["bev"],
        "bridge": BRIDGE,
    }
