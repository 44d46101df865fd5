"""The robot kinds of robot_soccer as strategy objects: everything that differs between the wheeled robot and the
humanoid lives in one class per kind, chosen once when the env is built (``cfg.robot_kind``, :data:`ROBOT_KINDS`).

* :class:`WheeledRobot`: a box body on planar joints (x, y slides and a yaw hinge) driven by velocity servos, with a
  kicker; action ``[4]`` (:data:`.layout.WHEELED_ACTIONS`); it cannot fall; scripted players can drive it.
* :class:`HumanoidRobot`: the small biped of :mod:`.humanoid` on a free joint with 18 position-servoed joints; action
  ``[18]`` joint target offsets from the standing pose; posture in ``state``; falls; a standing one is its idle.

A kind reads its robots from MuJoCo's state (:meth:`RobotKind.read`), places them at kickoff, turns actions into
servo targets, answers whether a point is inside a robot's head camera view and renders those cameras.

Shapes: E envs, R robots (team_a first), J the humanoid's joints; ``s`` is the env's memoised state read
(``RobotSoccerEnv._read``: the kind's entries plus ``ball``, ``ball_vel [E, 3]``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import mujoco
import torch
from torch import Tensor

from sim.core.randomization import uniform
from sim.core.spec import ObsTerm
from sim.physics.quaternion import quat_from_euler, quat_rotate, quat_rotate_inv
from sim.tasks.robot_soccer.config import RobotSoccerCfg
from sim.tasks.robot_soccer.constants import (
    CAMERA_NEAR_M,
    FREE_ANG_VEL,
    FREE_POS,
    FREE_QPOS,
    FREE_QUAT,
    FREE_QVEL,
    HUMANOID_REACH,
    LYING_START_Z,
    LYING_TILT_JITTER,
    PLANAR_JOINTS,
    STAND_START_CLEARANCE,
)
from sim.tasks.robot_soccer.humanoid import CAMERA_OFFSET as HUMANOID_CAMERA_OFFSET
from sim.tasks.robot_soccer.humanoid import JOINTS as HUMANOID_JOINTS
from sim.tasks.robot_soccer.humanoid import STAND_HEIGHT, default_pose
from sim.tasks.robot_soccer.humanoid import action_scale as humanoid_action_scale
from sim.tasks.robot_soccer.layout import (
    DRIVE,
    HUMANOID_PROPRIO_TERMS,
    KICK,
    MOVE,
    PROPRIO_TERMS,
    TURN,
    WHEELED_ACTION_UNITS,
    WHEELED_ACTIONS,
    seen_terms,
    state_terms,
)
from sim.tasks.robot_soccer.model import robot_names
from sim.tasks.robot_soccer.scripted import SCRIPTED
from sim.tasks.robot_soccer.vision import SoccerCameras, horizontal_fov_deg

XY, YAW = slice(0, 2), PLANAR_JOINTS.index("yaw")  # parts of the wheeled robot's joints; xy of a 3D vector

# An opponent inside the env: (its robots' state [E, P, D], the agents' actions [E, P, n], per-env speed scale
# [E, 1, 1]) -> its actions [E, P, n] in [-1, 1].
Opponent = Callable[[Tensor, Tensor, Tensor], Tensor]


def rotate(v: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """``v [..., 2]`` rotated by the angle whose cos/sin are given (broadcast over the leading dims)."""
    return torch.stack((cos * v[..., 0] - sin * v[..., 1], sin * v[..., 0] + cos * v[..., 1]), -1)


def _joint_addresses(model: mujoco.MjModel, names: list[str], rows: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """``(qpos addresses, qvel addresses)`` of the named joints, each ``[rows, len(names) / rows]``."""
    qpos = torch.tensor([model.jnt_qposadr[model.joint(j).id] for j in names], device=device).view(rows, -1)
    qvel = torch.tensor([model.jnt_dofadr[model.joint(j).id] for j in names], device=device).view(rows, -1)
    return qpos, qvel


class RobotKind:
    """What one kind of robot brings to the task; see the module docstring. Subclasses fill in every method."""

    name = ""
    can_fall = False  # falls are counted, rewarded and may end an episode
    deployable = False  # a robot-side builder of its ``proprio`` entry exists (deploy_ros)
    proprio_terms: tuple[ObsTerm, ...] = ()

    def __init__(self, cfg: RobotSoccerCfg, model: mujoco.MjModel, players_per_team: int, device: torch.device) -> None:
        self.cfg, self.device = cfg, device
        self.R = 2 * players_per_team
        self.qpos_idx, self.qvel_idx = self._joints(model, robot_names(players_per_team))  # [R, per robot]

    @classmethod
    def state_terms(cls, players_per_team: int) -> tuple[ObsTerm, ...]:
        """The ``state`` entry's layout for this kind (:func:`.layout.state_terms`)."""
        return state_terms(players_per_team)

    @classmethod
    def seen_terms(cls, players_per_team: int) -> tuple[ObsTerm, ...]:
        """The ``seen`` entry's layout for this kind (:func:`.layout.seen_terms`)."""
        return seen_terms(players_per_team)

    @classmethod
    def action_spec(cls, cfg: RobotSoccerCfg) -> dict[str, Any]:
        """``GroupSpec`` keywords: ``action_dim``, ``action_names``, ``action_units``, ``action_scale``."""
        raise NotImplementedError

    def _joints(self, model: mujoco.MjModel, names: list[str]) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    @property
    def action_dim(self) -> int:
        return int(self.action_spec(self.cfg)["action_dim"])

    @property
    def touch_reach(self) -> float:
        """m from the body centre to where the robot touches the ball."""
        raise NotImplementedError

    def read(self, qpos: Tensor, qvel: Tensor) -> dict[str, Tensor]:
        """The robots from ``qpos [E, nq]``, ``qvel [E, nv]``: at least ``pos``, ``vel [E, R, 2]`` (world xy),
        ``yaw``, ``yaw_rate [E, R]``."""
        raise NotImplementedError

    def height(self, s: Mapping[str, Tensor]) -> Tensor:
        """``[E, R]`` m: the body centre above the floor."""
        raise NotImplementedError

    def poses(self, s: Mapping[str, Tensor]) -> tuple[Tensor, Tensor]:
        """``(pos [E, R, 3], yaw [E, R])``: body centres (m) and headings (rad), world frame."""
        return torch.cat((s["pos"], self.height(s).unsqueeze(-1)), -1), s["yaw"]

    def posture(self, s: Mapping[str, Tensor]) -> tuple[Tensor, ...]:
        """The ``state`` entry's posture terms (after the yaw rate), ``[E, R, *]`` each; none for a robot that
        cannot fall."""
        return ()

    def proprio(self, s: Mapping[str, Tensor], state: Tensor, slices: Mapping[str, slice], action: Tensor) -> Tensor:
        """The ``proprio`` entry ``[E, R, len(proprio_terms)]`` (layout :attr:`proprio_terms`)."""
        raise NotImplementedError

    def place(self, qpos: Tensor, xy: Tensor, yaw: Tensor, rng: torch.Generator) -> None:
        """Write the kickoff of ``k`` envs into ``qpos [k, nq]`` (float64): robots at ``xy [k, R, 2]`` facing
        ``yaw [k, R]``."""
        raise NotImplementedError

    def control(self, action: Tensor, s: Mapping[str, Tensor]) -> Tensor:
        """``[E, R, n_ctrl]`` servo targets in model order from ``action [E, R, n]`` in [-1, 1]."""
        raise NotImplementedError

    def opponent(self, name: str, state_slices: Mapping[str, slice]) -> Opponent:
        """The scripted team ``name`` (:mod:`.scripted`) playing team_b inside the env."""
        raise NotImplementedError

    def expert_policy(self, state_slices: Mapping[str, slice]) -> Callable[[dict], dict[str, Tensor]]:
        """The hand-written baseline: group observations -> group actions."""
        raise NotImplementedError

    def in_view(self, s: Mapping[str, Tensor], points: Tensor) -> Tensor:
        """``[E, R, K]`` bool: world points ``[E, R, K, 3]`` lie in front of each robot's camera and inside its
        field of view (no occlusion test; the ball-in-view metric's rule)."""
        raise NotImplementedError

    def render(
        self, cameras: SoccerCameras, s: Mapping[str, Tensor], ball: Tensor, cam_ids: Tensor, pitch: Tensor,
        height: Tensor, env_ids: Tensor | None = None,
    ) -> Tensor:  # fmt: skip
        """Head-camera frames ``uint8 [k, A, H, W, 3]`` of robots ``cam_ids [A]`` in envs ``env_ids`` (all when
        None); ``ball [E, 3]``, per-env camera ``pitch``, ``height`` jitter ``[E, A]``."""
        raise NotImplementedError

    def fallen(self, s: Mapping[str, Tensor]) -> Tensor | None:
        """``[E, R]`` bool: on the ground now (None: this kind cannot fall)."""
        return None

    def posture_rewards(self, s: Mapping[str, Tensor], fallen: Tensor) -> dict[str, Tensor]:
        """Raw posture reward terms ``[E, R]`` (:class:`.config.RewardCfg`'s ``upright``, ``height``, ``fallen``)."""
        return {}


class WheeledRobot(RobotKind):
    """The default robot: velocity servos on planar joints (x, y, yaw) and a kicker; it cannot fall."""

    name = "wheeled"
    deployable = True
    proprio_terms = PROPRIO_TERMS

    @classmethod
    def action_spec(cls, cfg: RobotSoccerCfg) -> dict[str, Any]:
        rc = cfg.robot
        return {
            "action_dim": len(WHEELED_ACTIONS),
            "action_names": WHEELED_ACTIONS,
            "action_units": WHEELED_ACTION_UNITS,
            "action_scale": (rc.max_speed, rc.max_speed * rc.lateral_scale, rc.max_yaw_rate, rc.kick_reach),
        }

    def _joints(self, model: mujoco.MjModel, names: list[str]) -> tuple[Tensor, Tensor]:
        joints = [f"{n}_{a}" for n in names for a in PLANAR_JOINTS]
        return _joint_addresses(model, joints, self.R, self.device)

    @property
    def touch_reach(self) -> float:
        return self.cfg.robot.half_size[0]

    def read(self, qpos: Tensor, qvel: Tensor) -> dict[str, Tensor]:
        q = qpos[:, self.qpos_idx]  # [E, R, 3]: x, y, yaw
        v = qvel[:, self.qvel_idx]
        return {"pos": q[..., XY], "yaw": q[..., YAW], "vel": v[..., XY], "yaw_rate": v[..., YAW]}

    def height(self, s: Mapping[str, Tensor]) -> Tensor:
        return torch.full_like(s["yaw"], self.cfg.robot.half_size[2])

    def proprio(self, s: Mapping[str, Tensor], state: Tensor, slices: Mapping[str, slice], action: Tensor) -> Tensor:
        return torch.cat([state[..., slices[t.name]] for t in self.proprio_terms], -1)  # vel, yaw_rate, last_action

    def place(self, qpos: Tensor, xy: Tensor, yaw: Tensor, rng: torch.Generator) -> None:
        q = torch.cat((xy, yaw.unsqueeze(-1)), -1).double()  # [k, R, 3]
        qpos[:, self.qpos_idx.flatten()] = q.flatten(1)

    def control(self, action: Tensor, s: Mapping[str, Tensor]) -> Tensor:
        """World-frame velocity, yaw rate, kicker extension."""
        rc, yaw = self.cfg.robot, s["yaw"]
        body_vel = action[..., MOVE] * torch.tensor([rc.max_speed, rc.max_speed * rc.lateral_scale], device=self.device)
        world_vel = rotate(body_vel, torch.cos(yaw), torch.sin(yaw))
        yaw_rate = action[..., TURN] * rc.max_yaw_rate
        kick = (action[..., KICK] + 1.0) * (0.5 * rc.kick_reach)  # -1 retracted .. 1 fully out
        return torch.cat((world_vel, yaw_rate.unsqueeze(-1), kick.unsqueeze(-1)), -1)

    def opponent(self, name: str, state_slices: Mapping[str, slice]) -> Opponent:
        player = SCRIPTED[name]

        def act(state: Tensor, agents: Tensor, speed: Tensor) -> Tensor:
            b = player(state, state_slices).clamp(-1.0, 1.0)
            return torch.cat((b[..., DRIVE] * speed, b[..., KICK:]), -1)  # slower, same kicks

        return act

    def expert_policy(self, state_slices: Mapping[str, slice]) -> Callable[[dict], dict[str, Tensor]]:
        """The scripted attacker."""
        attacker = SCRIPTED["attacker"]
        return lambda obs: {g: attacker(o["state"], state_slices) for g, o in obs.items()}

    def in_view(self, s: Mapping[str, Tensor], points: Tensor) -> Tensor:
        """The camera only turns with the heading, so the horizontal field of view decides."""
        half = math.radians(horizontal_fov_deg(self.cfg.camera)) / 2
        rel = points[..., :2] - s["pos"].unsqueeze(2)
        yaw = s["yaw"].unsqueeze(-1)
        c, sn = torch.cos(yaw), torch.sin(yaw)
        fwd = c * rel[..., 0] + sn * rel[..., 1]
        left = -sn * rel[..., 0] + c * rel[..., 1]
        return (fwd > CAMERA_NEAR_M) & (torch.atan2(left, fwd).abs() < half)

    def render(
        self, cameras: SoccerCameras, s: Mapping[str, Tensor], ball: Tensor, cam_ids: Tensor, pitch: Tensor,
        height: Tensor, env_ids: Tensor | None = None,
    ) -> Tensor:  # fmt: skip
        pos, yaw = self.poses(s)
        if env_ids is not None:
            pos, yaw, ball, pitch, height = pos[env_ids], yaw[env_ids], ball[env_ids], pitch[env_ids], height[env_ids]
        return cameras.render(pos, yaw, ball, cam_ids, pitch, height)


def humanoid_body(qpos: Tensor, qvel: Tensor, qpos_idx: Tensor, qvel_idx: Tensor, pose0: Tensor) -> dict[str, Tensor]:
    """The humanoids' torso pose and joints from ``qpos [E, nq]``, ``qvel [E, nv]`` (``qpos_idx``, ``qvel_idx``
    ``[R, 1 + J]``: each robot's free joint address, then its joints'): ``pos``, ``vel [E, R, 2]`` (world xy),
    ``yaw``, ``yaw_rate``, ``height``, ``up_z [E, R]``, ``torso_pos [E, R, 3]``, ``quat [E, R, 4]`` (wxyz),
    ``ang_vel [E, R, 3]`` (torso frame), ``gravity [E, R, 3]`` (unit, torso frame), ``joints`` (absolute) and
    ``joint_pos`` (minus ``pose0``), ``joint_vel [E, R, J]``."""
    root_q, root_v = qpos_idx[:, 0], qvel_idx[:, 0]
    p = qpos[:, root_q.unsqueeze(-1) + torch.arange(FREE_QPOS, device=qpos.device)]  # [E, R, 7]
    v = qvel[:, root_v.unsqueeze(-1) + torch.arange(FREE_QVEL, device=qvel.device)]  # [E, R, 6]
    quat, ang_vel = p[..., FREE_QUAT], v[..., FREE_ANG_VEL]
    w, x, y, z = quat.unbind(-1)
    joints = qpos[:, qpos_idx[:, 1:]]
    # The third row of the torso's rotation matrix: the world z axis seen in the torso frame (and what the body's
    # angular velocity contributes to the world yaw rate).
    row3 = torch.stack((2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)), -1)
    return {
        "pos": p[..., XY],
        "torso_pos": p[..., FREE_POS],
        "quat": quat,
        "joints": joints,
        "ang_vel": ang_vel,
        "height": p[..., 2],  # z
        "yaw": torch.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z)),
        "vel": v[..., XY],
        "yaw_rate": (row3 * ang_vel).sum(-1),
        "up_z": row3[..., 2],
        "gravity": -row3,
        "joint_pos": joints - pose0,
        "joint_vel": qvel[:, qvel_idx[:, 1:]],
    }


class HumanoidRobot(RobotKind):
    """The paper's kind of robot: joint position targets around the standing pose; it falls and gets up."""

    name = "humanoid"
    can_fall = True
    proprio_terms = HUMANOID_PROPRIO_TERMS

    def __init__(self, cfg: RobotSoccerCfg, model: mujoco.MjModel, players_per_team: int, device: torch.device) -> None:
        super().__init__(cfg, model, players_per_team, device)
        self.pose0 = torch.tensor(default_pose(), dtype=torch.float32, device=device)
        self.action_scale = torch.tensor(humanoid_action_scale(cfg.humanoid), dtype=torch.float32, device=device)

    @classmethod
    def state_terms(cls, players_per_team: int) -> tuple[ObsTerm, ...]:
        return state_terms(players_per_team, humanoid=True)  # with the posture and joints

    @classmethod
    def seen_terms(cls, players_per_team: int) -> tuple[ObsTerm, ...]:
        return seen_terms(players_per_team, humanoid=True)

    @classmethod
    def action_spec(cls, cfg: RobotSoccerCfg) -> dict[str, Any]:
        """Joint position targets: the standing pose + action * action_scale (per joint)."""
        n = len(HUMANOID_JOINTS)
        return {
            "action_dim": n,
            "action_names": HUMANOID_JOINTS,
            "action_units": ("rad",) * n,
            "action_scale": tuple(float(x) for x in humanoid_action_scale(cfg.humanoid)),
        }

    def _joints(self, model: mujoco.MjModel, names: list[str]) -> tuple[Tensor, Tensor]:
        # qpos: the free joint's 7 (x, y, z, quaternion w x y z) then the joints; qvel: its 6 (world linear,
        # body angular) then the joints.
        joints = [f"{n}_{a}" for n in names for a in ("root", *HUMANOID_JOINTS)]
        return _joint_addresses(model, joints, self.R, self.device)

    @property
    def touch_reach(self) -> float:
        return HUMANOID_REACH  # it reaches the ball with its feet, ahead of the torso centre

    def read(self, qpos: Tensor, qvel: Tensor) -> dict[str, Tensor]:
        return humanoid_body(qpos, qvel, self.qpos_idx, self.qvel_idx, self.pose0)

    def height(self, s: Mapping[str, Tensor]) -> Tensor:
        return s["height"]

    def posture(self, s: Mapping[str, Tensor]) -> tuple[Tensor, ...]:
        return s["height"].unsqueeze(-1), s["gravity"], s["joint_pos"], s["joint_vel"]

    def proprio(self, s: Mapping[str, Tensor], state: Tensor, slices: Mapping[str, slice], action: Tensor) -> Tensor:
        return torch.cat((s["ang_vel"], s["gravity"], s["joint_pos"], s["joint_vel"], action), -1)

    def place(self, qpos: Tensor, xy: Tensor, yaw: Tensor, rng: torch.Generator) -> None:
        """Standing in the default pose, or, for the get-up skill, lying on the back, front or a side (drawn per
        robot, tilted up to ``LYING_TILT_JITTER`` more) a little above the floor, to drop and settle."""
        k, R, dev = yaw.shape[0], self.R, self.device
        zero = torch.zeros(k, R, device=dev)
        if self.cfg.skill == "getup":
            side = torch.randint(0, 4, (k, R), generator=rng, device=dev)
            tilt = (math.pi / 2) * torch.where(side % 2 == 0, 1.0, -1.0)
            jitter = uniform(-LYING_TILT_JITTER, LYING_TILT_JITTER, (k, R), rng, dev)
            roll = torch.where(side < 2, jitter, tilt)  # 0, 1: on the front or back; 2, 3: on a side
            pitch = torch.where(side < 2, tilt, jitter)
            quat, z = quat_from_euler(roll, pitch, yaw), zero + LYING_START_Z
        else:
            quat, z = quat_from_euler(zero, zero, yaw), zero + STAND_HEIGHT + STAND_START_CLEARANCE
        root = torch.cat((xy, z.unsqueeze(-1), quat), -1).double()  # [k, R, 7]
        root_idx = self.qpos_idx[:, :1] + torch.arange(FREE_QPOS, device=dev)  # [R, 7]
        qpos[:, root_idx.flatten()] = root.flatten(1)
        qpos[:, self.qpos_idx[:, 1:].flatten()] = self.pose0.double().repeat(R)

    def control(self, action: Tensor, s: Mapping[str, Tensor]) -> Tensor:
        return self.pose0 + action * self.action_scale  # [E, R, J] joint targets (rad), model order

    def opponent(self, name: str, state_slices: Mapping[str, slice]) -> Opponent:
        """Only ``idle``: the humanoid holds its standing pose (the scripted players drive the wheeled robot)."""
        return lambda state, agents, speed: torch.zeros_like(agents)

    def expert_policy(self, state_slices: Mapping[str, slice]) -> Callable[[dict], dict[str, Tensor]]:
        """Its standing pose held (zero actions): no hand-written gait or get-up here."""
        n, dev = len(HUMANOID_JOINTS), self.device
        return lambda obs: {g: torch.zeros(*o["state"].shape[:2], n, device=dev) for g, o in obs.items()}

    def camera_position(self, s: Mapping[str, Tensor]) -> Tensor:
        """``[E, R, 3]``: each head camera in the world (the mount of :class:`.vision.SoccerCameras`)."""
        offset = s["torso_pos"].new_tensor(HUMANOID_CAMERA_OFFSET).expand_as(s["torso_pos"])
        return s["torso_pos"] + quat_rotate(s["quat"], offset)

    def in_view(self, s: Mapping[str, Tensor], points: Tensor) -> Tensor:
        """The camera turns with the whole torso (lying on its back it sees the sky), so its camera frame and both
        fields of view decide."""
        cam = self.cfg.camera
        half = math.radians(horizontal_fov_deg(cam)) / 2
        quat = s["quat"].unsqueeze(2).expand(*points.shape[:-1], 4)
        rel = quat_rotate_inv(quat, points - self.camera_position(s).unsqueeze(2))  # torso frame
        p = math.radians(cam.pitch_deg)  # the optical axis tilts down by the mount's pitch
        fwd = math.cos(p) * rel[..., 0] - math.sin(p) * rel[..., 2]
        up = math.sin(p) * rel[..., 0] + math.cos(p) * rel[..., 2]
        half_v = math.radians(cam.fov_y_deg) / 2
        vertical = torch.atan2(up, fwd).abs() < half_v
        return (fwd > CAMERA_NEAR_M) & (torch.atan2(rel[..., 1], fwd).abs() < half) & vertical

    def render(
        self, cameras: SoccerCameras, s: Mapping[str, Tensor], ball: Tensor, cam_ids: Tensor, pitch: Tensor,
        height: Tensor, env_ids: Tensor | None = None,
    ) -> Tensor:  # fmt: skip
        body = (s["torso_pos"], s["quat"], s["joints"])
        if env_ids is not None:
            body, ball, pitch, height = tuple(x[env_ids] for x in body), ball[env_ids], pitch[env_ids], height[env_ids]
        return cameras.render_humanoids(*body, ball, cam_ids, pitch, height)

    def fallen(self, s: Mapping[str, Tensor]) -> Tensor:
        h = self.cfg.humanoid
        return (s["up_z"] < h.fallen_up_z) | (s["height"] < h.fallen_height)

    def posture_rewards(self, s: Mapping[str, Tensor], fallen: Tensor) -> dict[str, Tensor]:
        return {
            "upright": s["up_z"],
            "height": (s["height"] / STAND_HEIGHT).clamp(0.0, 1.2),
            "fallen": fallen.float(),
        }


ROBOT_KINDS: dict[str, type[RobotKind]] = {"wheeled": WheeledRobot, "humanoid": HumanoidRobot}
