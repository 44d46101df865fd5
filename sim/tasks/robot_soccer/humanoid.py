"""robot_soccer's small humanoid: a ~0.5 m, ~3 kg biped with a head camera and position-controlled joints.

Written by us in MJCF terms (through ``mujoco.MjSpec``), on the scale of the paper's Robotis OP3 (0.51 m, 3.5 kg,
20 servos): a box torso on a free joint, a head sphere holding the camera, two legs of six joints (hip yaw, roll,
pitch; knee; ankle pitch, roll) ending in flat box feet, and two arms of three joints (shoulder pitch, roll; elbow)
that it can push itself up with. Every joint has a position servo (``kp`` and a torque limit like a small
hobby servo's, plus armature for the gearbox's reflected inertia and joint damping), so an action is a target
angle for each joint: ``default pose + action * action_scale * ACTION_RANGE[joint]`` (the paper's joint position
control), clipped by the joint's range.

Joint order (actions, ``joint_pos`` and ``joint_vel`` observation terms): :data:`JOINTS`. Body frame: x forward,
y left, z up; standing, the torso centre is :data:`STAND_HEIGHT` m above the floor and the camera
:data:`HEAD_HEIGHT` m.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mujoco
import numpy as np
import torch
from torch import Tensor

from sim.core.config import positive
from sim.physics.quaternion import quat_from_axis_angle, quat_mul, quat_rotate

LEG_JOINTS = ("hip_yaw", "hip_roll", "hip_pitch", "knee", "ankle_pitch", "ankle_roll")
ARM_JOINTS = ("shoulder_pitch", "shoulder_roll", "elbow")
JOINTS = tuple(f"{side}_{j}" for side in ("left", "right") for j in LEG_JOINTS) + tuple(
    f"{side}_{j}" for side in ("left", "right") for j in ARM_JOINTS
)
# The standing pose (rad), slightly crouched so that the knees can both push and give: hip pitch and ankle pitch
# share the knee's bend, which keeps the torso upright over the feet.
_KNEE = 0.5
DEFAULT_POSE = {"hip_pitch": -_KNEE / 2, "knee": _KNEE, "ankle_pitch": -_KNEE / 2, "shoulder_roll": 0.15, "elbow": -0.4}

TORSO_HALF = (0.045, 0.07, 0.075)  # m
THIGH, SHIN = 0.11, 0.11  # m: segment lengths
FOOT_HALF = (0.055, 0.032, 0.01)  # m
UPPER_ARM, FOREARM = 0.09, 0.09  # m
HEAD_R = 0.05  # m
NECK = 0.04  # m: torso top to head centre
HIP_Y = 0.04  # m: hip joints either side of the torso's midline
SHOULDER_Y = TORSO_HALF[1] + 0.02  # m
CAMERA_OFFSET = (HEAD_R, 0.0, TORSO_HALF[2] + NECK)  # m: the head camera in the torso frame
SEGMENTS = ("thigh", "shin", "upper_arm", "forearm")  # capsule limbs
SEGMENT_RADIUS = {"thigh": 0.022, "shin": 0.02, "upper_arm": 0.018, "forearm": 0.016}  # m


def leg_height() -> float:
    """Hip joint to the sole in the default pose (m)."""
    k = DEFAULT_POSE["knee"]
    return THIGH * math.cos(k / 2) + SHIN * math.cos(k / 2) + 2 * FOOT_HALF[2]


STAND_HEIGHT = leg_height() + TORSO_HALF[2]  # m: torso centre above the floor, standing in the default pose
HEAD_HEIGHT = STAND_HEIGHT + TORSO_HALF[2] + NECK  # m: the camera's height, standing


@dataclass(frozen=True)
class HumanoidCfg:
    """The humanoid's servos and masses (``task.humanoid.*``)."""

    torso_mass: float = positive(1.4)  # kg (with the battery and the controller)
    limb_mass: float = positive(0.12)  # kg per leg or arm segment; feet 0.08, head 0.15
    kp: float = positive(12.0)  # N m per rad: position servo gain
    max_torque: float = positive(3.5)  # N m: the servos' limit (an XM430-class servo stalls near 4)
    damping: float = positive(0.08)  # N m s per rad: joint damping (servo back-EMF)
    armature: float = positive(0.01)  # kg m^2: the gearbox's reflected inertia
    action_scale: float = positive(1.0)  # multiplies ACTION_RANGE: the target offsets at |action| = 1
    fallen_up_z: float = 0.5  # fallen when the torso's z axis points up by less than this (cos of ~60 deg)
    fallen_height: float = positive(0.18)  # or when the torso centre is lower than this (m)


def action_scale(cfg: HumanoidCfg) -> np.ndarray:
    """``[len(JOINTS)]`` rad of target offset per unit action."""
    return cfg.action_scale * np.array([ACTION_RANGE[j.split("_", 1)[1]] for j in JOINTS])


def default_pose() -> np.ndarray:
    """``[len(JOINTS)]`` target angles (rad) of the standing pose."""
    return np.array([DEFAULT_POSE.get(j.split("_", 1)[1], 0.0) for j in JOINTS])


# Joint ranges (rad) by joint kind; left and right mirror roll and yaw through the joint axes.
_RANGES = {
    "hip_yaw": (-0.6, 0.6),
    "hip_roll": (-0.5, 0.5),
    "hip_pitch": (-1.9, 0.6),
    "knee": (0.0, 2.4),
    "ankle_pitch": (-1.2, 1.0),
    "ankle_roll": (-0.5, 0.5),
    "shoulder_pitch": (-3.1, 3.1),
    "shoulder_roll": (-0.3, 1.6),
    "elbow": (-2.4, 0.0),
}
# Target offset from the standing pose at |action| = 1 (rad), by joint kind: wide enough for the pitch joints to
# fold the legs and swing the arms over the head (getting up needs both), narrow for the rolls and yaws.
ACTION_RANGE = {
    "hip_yaw": 0.4,
    "hip_roll": 0.4,
    "hip_pitch": 1.2,
    "knee": 1.2,
    "ankle_pitch": 0.8,
    "ankle_roll": 0.4,
    "shoulder_pitch": 2.0,
    "shoulder_roll": 0.8,
    "elbow": 1.2,
}
_AXES = {"yaw": (0, 0, 1), "roll": (1, 0, 0), "pitch": (0, 1, 0), "knee": (0, 1, 0), "elbow": (0, 1, 0)}


def _axis(joint: str, side: str) -> list[float]:
    kind = joint.rsplit("_", 1)[-1]
    axis = list(_AXES[kind])
    if side == "right" and kind in ("roll", "yaw"):
        axis = [-a for a in axis]  # mirrored: a positive roll opens both legs (arms) outwards
    return axis


def add_humanoid(
    spec: mujoco.MjSpec, name: str, rgb: tuple[float, float, float], cfg: HumanoidCfg, scale: dict[str, float]
) -> None:
    """Add humanoid ``name`` (bodies ``<name>``, ``<name>_<part>``; joints and actuators ``<name>_<joint>``, free
    joint ``<name>_root``; camera ``<name>_head``) standing at the origin to ``spec``. ``scale`` multiplies
    ``friction``, ``mass`` and ``gain`` (servo gain and torque limit) for a randomised variant."""
    m, g, f = scale["mass"], scale["gain"], scale["friction"]
    torso = spec.worldbody.add_body(name=name, pos=[0, 0, STAND_HEIGHT])
    torso.add_freejoint(name=f"{name}_root")
    torso.add_geom(
        name=f"{name}_body", type=mujoco.mjtGeom.mjGEOM_BOX, size=list(TORSO_HALF), mass=cfg.torso_mass * m,
        rgba=[*rgb, 1.0], friction=[0.8 * f, 0.005, 0.0001],
    )  # fmt: skip
    head_z = TORSO_HALF[2] + NECK
    torso.add_geom(
        name=f"{name}_head", type=mujoco.mjtGeom.mjGEOM_SPHERE, size=[HEAD_R, 0, 0], pos=[0, 0, head_z],
        mass=0.15 * m, rgba=[0.9, 0.9, 0.9, 1.0], friction=[0.8 * f, 0.005, 0.0001],
    )  # fmt: skip
    torso.add_camera(name=f"{name}_head", pos=list(CAMERA_OFFSET), xyaxes=[0, -1, 0, 0, 0, 1])
    unit = 180.0 / math.pi if spec.compiler.degree else 1.0  # joint ranges are in the spec's angle unit

    def joint(body, jname: str, side: str) -> None:
        kind = jname.split("_", 1)[1]
        body.add_joint(
            name=f"{name}_{jname}", type=mujoco.mjtJoint.mjJNT_HINGE, axis=_axis(kind, side),
            range=[r * unit for r in _RANGES[kind]], limited=mujoco.mjtLimited.mjLIMITED_TRUE,
            damping=cfg.damping, armature=cfg.armature,
        )  # fmt: skip

    def segment(parent, side: str, part: str, pos: list[float], length: float, joints: tuple[str, ...]):
        """A limb body at ``pos`` in ``parent`` on ``joints``, a capsule ``length`` m down its z axis."""
        body = parent.add_body(name=f"{name}_{side}_{part}", pos=pos)
        for j in joints:
            joint(body, f"{side}_{j}", side)
        body.add_geom(
            name=f"{name}_{side}_{part}", type=mujoco.mjtGeom.mjGEOM_CAPSULE, fromto=[0, 0, 0, 0, 0, -length],
            size=[SEGMENT_RADIUS[part], 0, 0], mass=cfg.limb_mass * m, friction=[0.8 * f, 0.005, 0.0001],
            rgba=[*rgb, 1.0],
        )  # fmt: skip
        return body

    for side, sy in (("left", 1.0), ("right", -1.0)):
        thigh = segment(torso, side, "thigh", [0, sy * HIP_Y, -TORSO_HALF[2]], THIGH, LEG_JOINTS[:3])
        shin = segment(thigh, side, "shin", [0, 0, -THIGH], SHIN, ("knee",))
        foot = shin.add_body(name=f"{name}_{side}_foot", pos=[0, 0, -SHIN])
        for j in LEG_JOINTS[4:]:
            joint(foot, f"{side}_{j}", side)
        foot.add_geom(
            name=f"{name}_{side}_foot", type=mujoco.mjtGeom.mjGEOM_BOX, size=list(FOOT_HALF),
            pos=[0.01, 0, -FOOT_HALF[2]], mass=0.08 * m, rgba=[0.2, 0.2, 0.2, 1.0], friction=[1.0 * f, 0.005, 0.0001],
        )  # fmt: skip
        upper = segment(
            torso, side, "upper_arm", [0, sy * SHOULDER_Y, TORSO_HALF[2] - 0.015], UPPER_ARM, ARM_JOINTS[:2]
        )
        segment(upper, side, "forearm", [0, 0, -UPPER_ARM], FOREARM, ARM_JOINTS[2:])
    for j in JOINTS:
        act = spec.add_actuator(name=f"{name}_{j}", target=f"{name}_{j}", trntype=mujoco.mjtTrn.mjTRN_JOINT)
        act.set_to_position(kp=cfg.kp * g)
        act.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE
        act.forcerange = [-cfg.max_torque * g, cfg.max_torque * g]
        act.ctrllimited = mujoco.mjtLimited.mjLIMITED_FALSE  # the joint ranges bound the motion


def _turn(q: Tensor, axis: list[float], angle: Tensor) -> Tensor:
    """``q`` followed by a turn of ``angle [...]`` about ``axis`` in q's frame (a hinge joint in a MuJoCo body)."""
    a = torch.tensor(axis, dtype=angle.dtype, device=angle.device).expand(*angle.shape, 3)
    return quat_mul(q, quat_from_axis_angle(a, angle))


def forward_kinematics(torso_pos: Tensor, torso_quat: Tensor, joints: Tensor) -> dict[str, Tensor]:
    """Where the humanoid's limbs are, from its torso pose ``pos [..., 3]``, ``quat [..., 4]`` (wxyz) and joint
    angles ``joints [..., len(JOINTS)]`` (rad, absolute): the same chain as :func:`add_humanoid` builds, in torch.

    Returns ``a``, ``b [..., 8, 3]`` (the ends of each capsule segment: for the left then the right side, thigh, shin,
    upper arm, forearm; ``radius [8]``), ``foot_pos [..., 2, 3]`` (foot box centres), ``foot_quat [..., 2, 4]``."""
    q = dict(zip(JOINTS, joints.unbind(-1), strict=True))
    a, b, foot_pos, foot_quat, radius = [], [], [], [], []
    for side, sy in (("left", 1.0), ("right", -1.0)):

        def at(origin: Tensor, quat: Tensor, offset: tuple[float, float, float]) -> Tensor:
            return origin + quat_rotate(quat, torso_pos.new_tensor(offset).expand_as(origin))

        hip = at(torso_pos, torso_quat, (0.0, sy * HIP_Y, -TORSO_HALF[2]))
        q_hip = torso_quat
        for j in ("hip_yaw", "hip_roll", "hip_pitch"):
            q_hip = _turn(q_hip, _axis(j, side), q[f"{side}_{j}"])
        knee = at(hip, q_hip, (0.0, 0.0, -THIGH))
        q_shin = _turn(q_hip, _axis("knee", side), q[f"{side}_knee"])
        ankle = at(knee, q_shin, (0.0, 0.0, -SHIN))
        q_foot = q_shin
        for j in ("ankle_pitch", "ankle_roll"):
            q_foot = _turn(q_foot, _axis(j, side), q[f"{side}_{j}"])
        foot_pos.append(at(ankle, q_foot, (0.01, 0.0, -FOOT_HALF[2])))
        foot_quat.append(q_foot)
        shoulder = at(torso_pos, torso_quat, (0.0, sy * SHOULDER_Y, TORSO_HALF[2] - 0.015))
        q_arm = torso_quat
        for j in ("shoulder_pitch", "shoulder_roll"):
            q_arm = _turn(q_arm, _axis(j, side), q[f"{side}_{j}"])
        elbow = at(shoulder, q_arm, (0.0, 0.0, -UPPER_ARM))
        q_fore = _turn(q_arm, _axis("elbow", side), q[f"{side}_elbow"])
        hand = at(elbow, q_fore, (0.0, 0.0, -FOREARM))
        a += [hip, knee, shoulder, elbow]
        b += [knee, ankle, elbow, hand]
        radius += [SEGMENT_RADIUS[s] for s in SEGMENTS]
    return {
        "a": torch.stack(a, -2),
        "b": torch.stack(b, -2),
        "radius": torch.tensor(radius, device=joints.device),
        "foot_pos": torch.stack(foot_pos, -2),
        "foot_quat": torch.stack(foot_quat, -2),
    }
