"""The MuJoCo model of robot_soccer: covey's arena (``assets/scenes/soccer_arena.xml``) plus a ball and the robots.

One source of truth for the pitch: the arena file (the same one the radiance field was captured from) is loaded with
``mujoco.MjSpec`` and the dynamic bodies are added to it. Pitch geometry used by the task (world frame, z up, origin
at the centre spot; team_a attacks +x):

    pitch lines   x in [-2.25, 2.25], y in [-1.5, 1.5];  goal mouths |y| < 0.8, z < 0.8 at x = +-2.25
    boards        inner faces at |x| = 2.9 (beside the goals) and |y| = 2.1

Each robot is a box on three joints (``<name>_x``, ``<name>_y`` slides, ``<name>_yaw`` hinge) held just above the
floor, with velocity servos on the joints (world-frame targets; the task turns body-frame commands into them); it
collides with the ball, the boards, the goals and the other robots. A kicker plate in front of the body slides out
(``<name>_kick``, a stiff position servo) to kick the ball. The ball is a free sphere with rolling friction.
Robots: ``a0, a1, ...`` (team_a) then ``b0, b1, ...`` (team_b). With ``robot_kind=humanoid`` each robot is the small
biped of :mod:`.humanoid` instead (a free body with 18 position-servoed joints, standing on the floor).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import mujoco
import numpy as np

from sim.tasks.robot_soccer.config import RobotSoccerCfg
from sim.tasks.robot_soccer.humanoid import add_humanoid

ARENA_XML = Path(__file__).resolve().parents[3] / "assets" / "scenes" / "soccer_arena.xml"
PITCH_HALF = (2.25, 1.5)  # m: half length (goal line) and half width (touch line)
GOAL_HALF_WIDTH = 0.8  # m
GOAL_HEIGHT = 0.8  # m
BOARD_INNER = (2.9, 2.1)  # m
TEAM_RGB = ((0.9, 0.2, 0.15), (0.15, 0.35, 0.9))  # team_a red, team_b blue
BALL_RGB = (1.0, 0.55, 0.05)
HEAD_RADIUS = 0.045  # m: the head sphere the camera sits in
KICK_PLATE = (0.01, 0.06, 0.035)  # m: half sizes of the kicker plate (thin in x)
FOOT_MASS = 0.3  # kg: heavy enough that the stiff kick servo stays stable at a 10 ms physics step


def robot_names(players_per_team: int) -> list[str]:
    """``["a0", ..., "b0", ...]``: team_a first."""
    return [f"{t}{i}" for t in "ab" for i in range(players_per_team)]


def build_model(cfg: RobotSoccerCfg, scale: dict[str, float] | None = None) -> mujoco.MjModel:
    """The soccer model; ``scale`` multiplies ``friction``, ``mass`` (robots and ball) and ``gain`` (servo gains
    and force limits) for a randomised variant (all 1 when None). Every variant has the same sizes."""
    s = {"friction": 1.0, "mass": 1.0, "gain": 1.0, **(scale or {})}
    spec = mujoco.MjSpec.from_file(str(ARENA_XML))
    spec.option.timestep = cfg.physics_dt
    spec.option.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    for g in spec.worldbody.geoms:  # the floor's friction is the pitch's
        if g.type == mujoco.mjtGeom.mjGEOM_PLANE:
            g.friction = np.array([1.0 * s["friction"], 0.005, 0.0001])
    rc, bc = cfg.robot, cfg.ball

    ball = spec.worldbody.add_body(name="ball", pos=[0, 0, bc.radius])
    ball.add_freejoint(name="ball")
    ball.add_geom(
        name="ball",
        type=mujoco.mjtGeom.mjGEOM_SPHERE,
        size=[bc.radius, 0, 0],
        mass=bc.mass * s["mass"],
        rgba=[*BALL_RGB, 1.0],
        condim=6,
        friction=[bc.friction * s["friction"], 0.005, bc.rolling_friction * s["friction"]],
        solref=[0.01, 0.5],  # a bouncy contact: the ball leaves a robot it was pushed by
    )

    if cfg.robot_kind == "humanoid":
        for name in robot_names(cfg.players_per_team):
            add_humanoid(spec, name, TEAM_RGB[0 if name[0] == "a" else 1], cfg.humanoid, s)
        return spec.compile()
    hx, hy, hz = rc.half_size
    gap = 0.004  # m: the body floats this high above the floor (no floor contact, no wheel model)
    for name in robot_names(cfg.players_per_team):
        team = 0 if name[0] == "a" else 1
        body = spec.worldbody.add_body(name=name, pos=[0, 0, hz + gap])
        for axis, jtype, direction in (
            ("x", mujoco.mjtJoint.mjJNT_SLIDE, [1, 0, 0]),
            ("y", mujoco.mjtJoint.mjJNT_SLIDE, [0, 1, 0]),
            ("yaw", mujoco.mjtJoint.mjJNT_HINGE, [0, 0, 1]),
        ):
            body.add_joint(name=f"{name}_{axis}", type=jtype, axis=direction, armature=0.01)
        body.add_geom(
            name=f"{name}_body",
            type=mujoco.mjtGeom.mjGEOM_BOX,
            size=[hx, hy, hz],
            mass=rc.mass * s["mass"],
            rgba=[*TEAM_RGB[team], 1.0],
            friction=[0.6 * s["friction"], 0.005, 0.0001],
        )
        # The kicker: a plate in front of the body on a slide joint, pushed out by a stiff position servo.
        foot = body.add_body(name=f"{name}_foot", pos=[hx + KICK_PLATE[0], 0, 0])
        foot.add_joint(
            name=f"{name}_kick",
            type=mujoco.mjtJoint.mjJNT_SLIDE,
            axis=[1, 0, 0],
            range=[0, rc.kick_reach],
            limited=mujoco.mjtLimited.mjLIMITED_TRUE,
            armature=0.001,
            damping=0.5,
        )
        foot.add_geom(
            name=f"{name}_foot",
            type=mujoco.mjtGeom.mjGEOM_BOX,
            size=list(KICK_PLATE),
            mass=FOOT_MASS,
            rgba=[0.2, 0.2, 0.2, 1.0],
            friction=[0.4, 0.005, 0.0001],
        )
        head_z = rc.head_height - (hz + gap)
        body.add_geom(
            name=f"{name}_head",
            type=mujoco.mjtGeom.mjGEOM_SPHERE,
            size=[HEAD_RADIUS, 0, 0],
            pos=[0, 0, head_z],
            mass=0.05,
            rgba=[0.9, 0.9, 0.9, 1.0],
            contype=0,
            conaffinity=0,
        )
        body.add_camera(name=f"{name}_head", pos=[HEAD_RADIUS, 0, head_z], xyaxes=[0, -1, 0, 0, 0, 1])
        for axis, kv, limit in (
            ("x", rc.kv, rc.max_force),
            ("y", rc.kv, rc.max_force),
            ("yaw", rc.kv_yaw, rc.max_torque),
        ):
            act = spec.add_actuator(name=f"{name}_{axis}", target=f"{name}_{axis}", trntype=mujoco.mjtTrn.mjTRN_JOINT)
            act.set_to_velocity(kv=kv * s["gain"])
            act.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE
            act.forcerange = [-limit * s["gain"], limit * s["gain"]]
        kick = spec.add_actuator(name=f"{name}_kick", target=f"{name}_kick", trntype=mujoco.mjtTrn.mjTRN_JOINT)
        kick.set_to_position(kp=rc.kick_kp * s["gain"])
        kick.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE
        kick.forcerange = [-rc.kick_force * s["gain"], rc.kick_force * s["gain"]]
    return spec.compile()


def model_variants(cfg: RobotSoccerCfg, rng: np.random.Generator) -> list[mujoco.MjModel]:
    """The nominal model first, then ``randomization.variants - 1`` randomised ones (or just the nominal); each
    scaled by ``model_scale`` (a fixed model change, all 1 in training)."""
    r, fixed = cfg.randomization, asdict(cfg.model_scale)
    models = [build_model(cfg, fixed)]
    if r.enabled:
        for _ in range(r.variants - 1):
            scale = {
                "friction": rng.uniform(*r.friction_scale),
                "mass": rng.uniform(*r.mass_scale),
                "gain": rng.uniform(*r.gain_scale),
            }
            models.append(build_model(cfg, {k: fixed[k] * v for k, v in scale.items()}))
    return models
