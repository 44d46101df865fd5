"""How drone_volleyball's hierarchical team runs on robots: the ROS deployment profile of its skills model, the
constants its robot-side builder needs (stored in the ONNX metadata) and the stamping of both into an export.

The team is two models: the strategy (task ``drone_volleyball_strategy``, one agent per team, a decision every
``decision_steps`` control steps) and the skills (task ``drone_volleyball_coplay``, every drone). On robots each
drone's policy node flies the skills model; its observation builder
(:class:`sim.tasks.drone_volleyball.robot_observation.SkillObservation`) runs the strategy model (builder parameter
``strategy_model``, default the games team's beside it) and the rule layer between them. Inputs (all streams,
stamped with the state they carry, so they time the control step):

    /drone<j>/odom   nav_msgs/Odometry        every drone (motion capture), pose world, twist body (REP 105)
    /ball/odom       nav_msgs/Odometry        the ball (motion capture), identity orientation
    /game/state      sensor_msgs/JointState   the referee's game state: ``name`` = ``robot_observation.game_fields``,
                                              values in ``position`` (``velocity`` and ``effort`` empty)

Command (``/drone<i>/command``, std_msgs/Float32MultiArray): collective thrust as a fraction of the range
(-1 none, +1 full) and the body rates roll, pitch, yaw (rad/s, body frame FLU) for the onboard rate controller;
safe = hover thrust with zero rates.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sim.tasks.drone_volleyball.match_env import VolleyballMatchEnv

BUILDER = "sim.tasks.drone_volleyball.robot_observation:SkillObservation"
BRIDGE = "sim.tasks.drone_volleyball.ros_bridge:VolleyballBridge"
STRATEGY_MODEL = "games_strategy.onnx"  # the games team's strategy, beside the skills file


def deployment_constants(env: VolleyballMatchEnv) -> dict[str, Any]:
    """What the robot-side builder reads (team frame where a point): the court's and the rule layer's constants."""
    from sim.tasks.drone_volleyball.config import SKILLS
    from sim.tasks.drone_volleyball.rule_strategy import RuleBasedStrategy
    from sim.tasks.drone_volleyball.strategy import FORMATIONS, HIT_TARGETS

    cfg, n = env.cfg, env.n
    rule = RuleBasedStrategy(env)  # its defaults; team A's rows are in the team frame
    return {
        "n": n,
        "skills": list(SKILLS),
        "paddle_offset": cfg.paddle_offset,
        "decision_steps": cfg.strategy.decision_steps,
        "max_touches": cfg.rules.max_touches,
        "rally_time_limit_s": cfg.rules.rally_time_limit_s,
        "gravity": 9.81,
        "ball_drag_k": cfg.ball.drag_k,
        "prediction": {"horizon_s": 3.0, "dt": 0.02},  # RuleBasedStrategy.interception_point's
        "rule_layer": {
            "hit_height": rule.hit_height,
            "low_height": rule.low_height,
            "setter_point": rule.setter_point[0].tolist(),
            "attack_point": rule.attack_point[0].tolist(),
        },
        "hit_targets": [list(p) for p in HIT_TARGETS],
        "formations": [[list(p) for p in f] for f in FORMATIONS],
    }


def hover_command(env: VolleyballMatchEnv) -> list[float]:
    """The safe command: hover thrust, zero body rates (physical units, float32-exact)."""
    import numpy as np

    return [float(np.float32(env.hover_thrust_action)), 0.0, 0.0, 0.0]


def deployment_profile(env: VolleyballMatchEnv) -> dict[str, Any]:
    """ROS deployment of the skills model (:mod:`covey_common.profile`): see the module docstring."""
    from sim.tasks.drone_volleyball.robot_observation import game_fields

    D = 2 * env.n
    odom = {"msg": "nav_msgs/Odometry", "qos": "sensor", "stale": True}
    inputs = {f"drone{j}": {**odom, "topic": f"/drone{j}/odom"} for j in range(D)}
    inputs["ball"] = {**odom, "topic": "/ball/odom"}
    inputs["game"] = {
        "msg": "sensor_msgs/JointState",
        "topic": "/game/state",
        "qos": "sensor",
        "stale": True,
        "fields": list(game_fields(env.n)),
    }
    return {
        "inputs": inputs,
        "observations": {
            "policy": {"builder": BUILDER, "from": list(inputs), "params": {"strategy_model": STRATEGY_MODEL}}
        },
        "command": {"msg": "std_msgs/Float32MultiArray", "topic": "command", "safe": hover_command(env)},
        "step_inputs": list(inputs),
        "bridge": BRIDGE,
    }


def match_cfg(task_cfg: dict) -> dict:
    """The match (task ``drone_volleyball``) a team's model plays, from its task config (a level's)."""
    from sim.tasks.drone_volleyball.env import DroneVolleyballEnv

    return {**task_cfg, "name": DroneVolleyballEnv.task_name}


def stamp_model(path: str | Path) -> dict[str, Any]:
    """Write the deployment profile and constants into the ``covey`` metadata of the skills export ``path``
    (the graph is left as it is); returns the new metadata. For exports made before the task defined them."""
    import onnx

    import sim

    model = onnx.load(str(path))
    props = {p.key: p for p in model.metadata_props}
    meta = json.loads(props["covey"].value)
    env = sim.make(match_cfg(meta["task_cfg"]), num_envs=1, device="cpu")
    meta["deployment"] = deployment_constants(env)
    meta["ros"] = deployment_profile(env)
    props["covey"].value = json.dumps(meta)
    onnx.save(model, str(path))
    return meta


if __name__ == "__main__":  # python -m sim.tasks.drone_volleyball.deployment <skills.onnx>...
    import sys

    for arg in sys.argv[1:]:
        stamp_model(arg)
        print(f"{arg}: deployment profile written")
