"""robot_soccer: 1v1 (2v2 by config) soccer of small wheeled robots on a walled pitch, physics in MuJoCo.

Following Tirumala et al. (CoRL 2024, "Learning Robot Soccer from Egocentric Vision with Deep RL") on a robot that
trains on a CPU: the pitch, goals and boards of ``assets/scenes/soccer_arena.xml`` (the scene the radiance field was
captured from), a ball, and box robots with a head camera driven by velocity servos (:mod:`.model`), batched over envs
by :class:`sim.mujoco.world.BatchedMjWorld` (one ``mujoco.rollout`` per control step, no Python loop over envs).

* **Groups**: ``team_a`` (home, attacks +x) and ``team_b`` (away), ``players_per_team`` agents each. With
  ``opponent`` a scripted team (``chaser``, ``attacker``, ``idle``; :mod:`.scripted`) team_b is played inside the env
  and only ``team_a`` is an agent group: the state experts train that way, against an opponent whose speed is drawn
  per episode from ``randomization.opponent_speed`` (full speed in evaluation). ``opponent=none`` exposes both
  groups (matches, self-play leagues).
* **Humanoid** (``robot_kind=humanoid``, :mod:`.humanoid`): the paper's kind of robot, a small biped on a free joint
  with 18 position-servoed joints. Its action ``[18]`` is a target offset per joint from the standing pose; ``state``
  and ``seen`` add its torso height, gravity direction, joint angles and velocities; ``proprio`` is gyro, IMU
  gravity, joint encoders and velocities, last action; falls are events (counted, ``end_on_fall`` optional), and
  ``skill=getup`` starts every robot lying down with the get-up reward (``getup_rewards``). Opponents: ``idle``
  (standing) or ``none``.
* **Action** per agent ``[4]`` in [-1, 1] (the wheeled robot): forward and lateral velocity (body frame; lateral
  limited to ``lateral_scale``), yaw rate, scaled by ``robot.max_speed`` / ``robot.max_yaw_rate``, and the kicker's
  extension (-1 retracted, 1 out by ``robot.kick_reach``); the servos track them with force limits (so a robot
  accelerates at ~12 m/s^2, not at once).
* **Observations** (each agent in its team's frame: its team attacks +x; vectors egocentric in the body frame):
  ``state`` (:func:`state_terms`: own pose and velocity, the ball, both goals, every other robot, the last action)
  is the privileged true state: the critic's input always, and the actor's with ``observation=state``. With
  ``observation=vision`` the actor sees ``image`` (the head camera's 40x30 RGB: the baked radiance field of the
  arena with robots and ball composited on top, :mod:`sim.render.composite`) and ``proprio`` (own body-frame
  velocity, yaw rate, last action): the paper's egocentric setting. ``seen`` (:func:`seen_terms`, with
  ``observation=seen``, and beside the image with ``observation=vision``) is the state as the head camera can know
  it: the ball and every other robot where each was last inside the camera's field of view (re-expressed in the
  robot's current frame, as odometry lets a robot do), their velocities only while in view, and the seconds since
  each was seen. A state expert on ``seen`` is a teacher whose every decision a vision student can in principle
  copy; the all-seeing expert turns towards a ball behind it that no camera shows (the imitation gap).
* **Events**: goals (the ball wholly over a goal line inside the mouth), touches (a robot within touching distance
  of the ball, or the nearest one when the ball was hit between control steps), ball out (over a touch or goal line
  outside the mouth): the ball is put back at rest 0.3 m inside the line (``ball_out_restart``); a ball that has not
  moved for ``stall_s`` (pinned in a corner or between two pushing robots) is dropped near the centre spot. Without
  these restarts most games against a chaser ended 0-0 with the ball pinned in a corner. The default wheeled robot
  cannot fall (planar joints); a humanoid's falls are counted (``falls_a``, ``falls_b``).
* **Game**: an episode is a game of ``episode_length_s``; with ``end_on_goal`` the first goal ends it (training and
  the default evaluation), else play restarts from kickoff after each goal. ``game_result`` (1 team_a won, 0 lost,
  0.5 draw) and ``final_counters`` (goals, touches, ball out, time to first touch, ball in view) keep the last game's
  values for :mod:`training.matches`.
* **Rewards** per agent (:class:`.config.RewardCfg`): scored / conceded (team), ball velocity towards the attacked
  goal (team), own approach velocity towards the ball (while farther than 0.3 m), action rate.

Shapes: E envs, R = 2 * players_per_team robots (team_a first), P = players_per_team.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from sim.core.env import MultiAgentEnv, Obs
from sim.core.randomization import uniform
from sim.core.spec import EnvSpec, GroupSpec, ObsEntry, ObsTerm
from sim.core.teams import GROUPS
from sim.mujoco.world import BatchedMjWorld
from sim.physics.quaternion import quat_from_euler, quat_rotate, quat_rotate_inv
from sim.tasks.robot_soccer.config import RobotSoccerCfg
from sim.tasks.robot_soccer.humanoid import CAMERA_OFFSET as HUMANOID_CAMERA_OFFSET
from sim.tasks.robot_soccer.humanoid import JOINTS as HUMANOID_JOINTS
from sim.tasks.robot_soccer.humanoid import STAND_HEIGHT, default_pose
from sim.tasks.robot_soccer.humanoid import action_scale as humanoid_action_scale
from sim.tasks.robot_soccer.model import GOAL_HALF_WIDTH, PITCH_HALF, model_variants, robot_names
from sim.tasks.robot_soccer.scripted import SCRIPTED
from sim.tasks.robot_soccer.vision import FrameDelay, SoccerCameras, horizontal_fov_deg

TOUCH_MARGIN = 0.03  # m beyond contact that still counts as a touch
HIT_DV = 0.3  # m/s: a ball velocity change within one control step that counts as a hit (not rolling friction)
HIT_REACH = 0.35  # m: the nearest robot within this distance of the ball made that hit
STILL_SPEED = 0.05  # m/s: slower than this, the ball counts as not moving (for the stall rule)
HUMANOID_REACH = 0.1  # m: the humanoid's feet ahead of its torso centre
LYING_START_Z = 0.12  # m: a fallen humanoid's torso starts this high and drops onto the floor
COUNTERS = (
    "points_a", "points_b", "hits_a", "hits_b", "ball_out", "restarts", "first_touch_s_a", "ball_in_view_a", "falls_a",
    "falls_b",
)  # fmt: skip


def state_terms(players_per_team: int, humanoid: bool = False) -> tuple[ObsTerm, ...]:
    """The ``state`` entry's layout (team frame: own team attacks +x; "body": the robot's frame, x forward); the
    humanoid's posture and joints follow the yaw rate."""
    terms = [
        ObsTerm("pos", 2, "m", "team", "own position"),
        ObsTerm("heading", 2, "", "team", "cos, sin of own yaw"),
        ObsTerm("vel", 2, "m/s", "body", "own velocity"),
        ObsTerm("yaw_rate", 1, "rad/s"),
    ]
    if humanoid:
        n = len(HUMANOID_JOINTS)
        terms += [
            ObsTerm("height", 1, "m", "", "torso centre above the floor"),
            ObsTerm("gravity", 3, "", "torso", "unit gravity direction in the torso frame"),
            ObsTerm("joint_pos", n, "rad", "", "joint angles minus the standing pose (humanoid.JOINTS order)"),
            ObsTerm("joint_vel", n, "rad/s", "", "joint velocities"),
        ]
    terms += [
        ObsTerm("ball", 2, "m", "body", "ball minus own position"),
        ObsTerm("ball_vel", 2, "m/s", "body", "ball velocity"),
        ObsTerm("goal", 2, "m", "body", "centre of the attacked goal mouth minus own position"),
        ObsTerm("own_goal", 2, "m", "body", "centre of the defended goal mouth minus own position"),
    ]
    others = [f"mate{i}" for i in range(players_per_team - 1)] + [f"opponent{i}" for i in range(players_per_team)]
    for name in others:
        terms.append(ObsTerm(f"{name}_pos", 2, "m", "body", f"{name} minus own position"))
        terms.append(ObsTerm(f"{name}_vel", 2, "m/s", "body", f"{name}'s velocity"))
    if humanoid:
        terms.append(ObsTerm("last_action", len(HUMANOID_JOINTS), "", "", "previous action (joint targets)"))
    else:
        terms.append(ObsTerm("last_action", 4, "", "", "previous action (forward, lateral, turn, kick)"))
    return tuple(terms)


SEEN_AGE_CAP_S = 3.0  # s: "not seen for this long or longer" (keeps the age input bounded)


def seen_terms(players_per_team: int, humanoid: bool = False) -> tuple[ObsTerm, ...]:
    """The ``seen`` entry's layout: :func:`state_terms` with the ball and the other robots as last seen by the head
    camera (velocities zero while out of view), then the seconds since the ball and each other robot were in view."""
    state = state_terms(players_per_team, humanoid)
    others = [t.name[: -len("_pos")] for t in state if t.name.endswith("_pos")]
    ages = [ObsTerm("ball_unseen", 1, "s", "", f"seconds since the ball was in view (capped at {SEEN_AGE_CAP_S:g})")]
    ages += [ObsTerm(f"{n}_unseen", 1, "s", "", f"seconds since {n} was in view") for n in others]
    return state + tuple(ages)


PROPRIO_TERMS = (
    ObsTerm("vel", 2, "m/s", "body", "own velocity (wheel odometry)"),
    ObsTerm("yaw_rate", 1, "rad/s", "", "gyro"),
    ObsTerm("last_action", 4, "", "", "previous action"),
)
HUMANOID_PROPRIO_TERMS = (  # the paper's OP3 proprioception: servo encoders, IMU, last action
    ObsTerm("ang_vel", 3, "rad/s", "torso", "gyro"),
    ObsTerm("gravity", 3, "", "torso", "unit gravity direction (IMU orientation)"),
    ObsTerm("joint_pos", len(HUMANOID_JOINTS), "rad", "", "joint angles minus the standing pose"),
    ObsTerm("joint_vel", len(HUMANOID_JOINTS), "rad/s", "", "joint velocities"),
    ObsTerm("last_action", len(HUMANOID_JOINTS), "", "", "previous action"),
)


def _rotate(v: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """``v [..., 2]`` rotated by the angle whose cos/sin are given (broadcast over the leading dims)."""
    return torch.stack((cos * v[..., 0] - sin * v[..., 1], sin * v[..., 0] + cos * v[..., 1]), -1)


def _humanoid_body(qpos: Tensor, qvel: Tensor, qpos_idx: Tensor, qvel_idx: Tensor, pose0: Tensor) -> dict[str, Tensor]:
    """The humanoids' torso pose and joints from ``qpos [E, nq]``, ``qvel [E, nv]`` (``qpos_idx``, ``qvel_idx``
    ``[R, 1 + J]``: each robot's free joint address, then its joints'): ``pos``, ``vel [E, R, 2]`` (world xy),
    ``yaw``, ``yaw_rate``, ``height``, ``up_z [E, R]``, ``torso_pos [E, R, 3]``, ``quat [E, R, 4]`` (wxyz),
    ``ang_vel [E, R, 3]`` (torso frame), ``gravity [E, R, 3]`` (unit, torso frame), ``joints`` (absolute) and
    ``joint_pos`` (minus ``pose0``), ``joint_vel [E, R, J]``."""
    root_q, root_v = qpos_idx[:, 0], qvel_idx[:, 0]
    p = qpos[:, root_q.unsqueeze(-1) + torch.arange(7, device=qpos.device)]  # [E, R, 7]
    v = qvel[:, root_v.unsqueeze(-1) + torch.arange(6, device=qvel.device)]  # [E, R, 6]
    w, x, y, z = p[..., 3], p[..., 4], p[..., 5], p[..., 6]
    joints = qpos[:, qpos_idx[:, 1:]]
    # The third row of the torso's rotation matrix: the world z axis seen in the torso frame (and what the body's
    # angular velocity contributes to the world yaw rate).
    row3 = torch.stack((2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)), -1)
    return {
        "pos": p[..., :2],
        "torso_pos": p[..., :3],
        "quat": p[..., 3:7],
        "joints": joints,
        "ang_vel": v[..., 3:6],
        "height": p[..., 2],
        "yaw": torch.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z)),
        "vel": v[..., :2],
        "yaw_rate": (row3 * v[..., 3:6]).sum(-1),
        "up_z": row3[..., 2],
        "gravity": -row3,
        "joint_pos": joints - pose0,
        "joint_vel": qvel[:, qvel_idx[:, 1:]],
    }


class RobotSoccerEnv(MultiAgentEnv):
    """Batched MuJoCo soccer; see the module docstring."""

    task_name = "robot_soccer"
    cfg_class = RobotSoccerCfg
    best_metric = ("metrics/win_a", "max")
    evaluation_window_s = 0.05  # the game's end: who scored is what counts
    renderer = "sim.tasks.robot_soccer.render:SoccerRenderer"

    def __init__(
        self,
        cfg: RobotSoccerCfg,
        num_envs: int,
        device: str | torch.device = "cpu",
        seed: int = 0,
        compile: bool = False,
    ) -> None:
        self.P = cfg.players_per_team
        self.R = 2 * self.P
        super().__init__(cfg, num_envs, device, seed, compile)
        E, R, dev = num_envs, self.R, self.device
        models = model_variants(cfg, np.random.default_rng(seed))
        index = np.arange(E) % len(models)
        self.world = BatchedMjWorld(models, E, model_index=index, control=("ctrl",), cfg=cfg.mujoco, device=dev)
        m = models[0]
        self.humanoid = cfg.robot_kind == "humanoid"
        if self.humanoid:
            # qpos: the free joint's 7 (x, y, z, quaternion w x y z) then the joints; qvel: its 6 (world linear,
            # body angular) then the joints.
            names = [f"{n}_{a}" for n in robot_names(self.P) for a in ("root", *HUMANOID_JOINTS)]
            width = 1 + len(HUMANOID_JOINTS)
            self._qpos_idx = torch.tensor([m.jnt_qposadr[m.joint(j).id] for j in names], device=dev).view(R, width)
            self._qvel_idx = torch.tensor([m.jnt_dofadr[m.joint(j).id] for j in names], device=dev).view(R, width)
            self._pose0 = torch.tensor(default_pose(), dtype=torch.float32, device=dev)
            self._action_scale = torch.tensor(humanoid_action_scale(cfg.humanoid), dtype=torch.float32, device=dev)
            self._n_act = len(HUMANOID_JOINTS)
        else:
            self._qpos_idx = torch.tensor(
                [m.jnt_qposadr[m.joint(f"{n}_{a}").id] for n in robot_names(self.P) for a in ("x", "y", "yaw")],
                device=dev,
            ).view(R, 3)
            self._qvel_idx = torch.tensor(
                [m.jnt_dofadr[m.joint(f"{n}_{a}").id] for n in robot_names(self.P) for a in ("x", "y", "yaw")],
                device=dev,
            ).view(R, 3)
            self._n_act = 4
        self._ball_q = int(m.jnt_qposadr[m.joint("ball").id])
        self._ball_v = int(m.jnt_dofadr[m.joint("ball").id])
        self._nq, self._nv = m.nq, m.nv
        # Team of each robot as the sign of its attack direction (+1 team_a, -1 team_b).
        self._side = torch.tensor([1.0] * self.P + [-1.0] * self.P, device=dev)
        # For robot r, the other robots in observation order: teammates, then opponents.
        others = []
        for r in range(R):
            mates = [q for q in range(R) if q != r and (q < self.P) == (r < self.P)]
            opps = [q for q in range(R) if (q < self.P) != (r < self.P)]
            others.append(mates + opps)
        self._others = torch.tensor(others, device=dev, dtype=torch.long).view(R, R - 1)
        # The humanoid reaches the ball with its feet, ~0.1 m ahead of the torso centre.
        reach = HUMANOID_REACH if self.humanoid else cfg.robot.half_size[0]
        self._touch_dist = reach + cfg.ball.radius + TOUCH_MARGIN
        self.action = torch.zeros(E, R, self._n_act, device=dev)
        self.prev_action = torch.zeros_like(self.action)
        self._scripted = SCRIPTED[cfg.opponent] if cfg.opponent != "none" else None
        self._opponent_speed = torch.ones(E, 1, 1, device=dev)  # per-episode scale of the scripted commands
        self._events = {k: torch.zeros(E, device=dev) for k in ("goal_a", "goal_b", "touch_a", "touch_b")}
        self.counters = {k: torch.zeros(E, device=dev) for k in COUNTERS}
        self._first_touch = torch.full((E,), math.nan, device=dev)
        self._was_out = torch.zeros(E, dtype=torch.bool, device=dev)
        self._prev_ball_vel = torch.zeros(E, 2, device=dev)
        self._still_s = torch.zeros(E, device=dev)
        self._last_ctrl = torch.zeros(E, self._n_act * R, device=dev)
        self._fallen = torch.zeros(E, R, dtype=torch.bool, device=dev)
        self.game_result = torch.full((E,), math.nan, device=dev)
        self.final_counters = {k: torch.zeros(E, device=dev) for k in COUNTERS}
        self._cache: dict[str, Tensor] = {}
        # What each robot's camera last saw (observation=seen|vision): world positions and seconds since.
        self._seen_ball = torch.zeros(E, R, 2, device=dev)
        self._seen_others = torch.zeros(E, R, R - 1, 2, device=dev)
        self._unseen_s = torch.zeros(E, R, R, device=dev)  # [.., 0] the ball, [.., 1:] the others in obs order
        self._state_slices = self.spec.groups[GROUPS[0]].observations["state"].slices()  # seen edits these parts
        self._others_start = self._state_slices["mate0_pos" if self.P > 1 else "opponent0_pos"].start
        if cfg.observation == "vision":
            # Cameras of the agent robots only (a scripted opponent needs no images).
            self._cam_ids = torch.arange(R if cfg.opponent == "none" else self.P, device=dev)
            A = self._cam_ids.numel()
            self.cameras = SoccerCameras(cfg, dev)
            self._pitch_jitter = torch.zeros(E, A, device=dev)
            self._height_jitter = torch.zeros(E, A, device=dev)
            self._frames = FrameDelay(cfg.randomization.max_latency_steps, E, dev)
            self._image = torch.zeros(E, A, cfg.camera.height, cfg.camera.width, 3, dtype=torch.uint8, device=dev)
        self.reset()

    # ----------------------------------------------------------------- spec
    def _build_spec(self) -> EnvSpec:
        cfg, P = self.cfg, self.cfg.players_per_team
        humanoid = cfg.robot_kind == "humanoid"
        terms = state_terms(P, humanoid)
        state = ObsEntry((sum(t.size for t in terms),), terms=terms)
        observations = {"state": state}
        actor = ("state",)
        if cfg.observation in ("seen", "vision"):
            seen = seen_terms(P, humanoid)
            observations["seen"] = ObsEntry((sum(t.size for t in seen),), terms=seen)
            actor = ("seen",)
        if cfg.observation == "vision":
            c = cfg.camera
            observations["image"] = ObsEntry(
                (c.height, c.width, 3),
                torch.uint8,
                kind="image",
                units="RGB 0-255",
                description=f"head camera, {horizontal_fov_deg(c):.0f} deg horizontal field of view, "
                f"pitched {c.pitch_deg:g} deg down",
            )
            proprio = HUMANOID_PROPRIO_TERMS if humanoid else PROPRIO_TERMS
            observations["proprio"] = ObsEntry((sum(t.size for t in proprio),), terms=proprio)
            actor = ("image", "proprio")
        rc = cfg.robot
        if humanoid:  # joint position targets: the standing pose + action * action_scale (per joint)
            n = len(HUMANOID_JOINTS)
            action = {
                "action_dim": n,
                "action_names": HUMANOID_JOINTS,
                "action_units": ("rad",) * n,
                "action_scale": tuple(float(x) for x in humanoid_action_scale(cfg.humanoid)),
            }
        else:
            action = {
                "action_dim": 4,
                "action_names": ("forward", "lateral", "turn", "kick"),
                "action_units": ("m/s", "m/s", "rad/s", "m"),
                "action_scale": (rc.max_speed, rc.max_speed * rc.lateral_scale, rc.max_yaw_rate, rc.kick_reach),
            }
        group = GroupSpec(n_agents=P, observations=observations, actor_obs=actor, critic_obs=("state",), **action)
        groups = {GROUPS[0]: group} if cfg.opponent != "none" else {GROUPS[0]: group, GROUPS[1]: group}
        control_dt = cfg.physics_dt * cfg.decimation
        return EnvSpec(
            task=self.task_name,
            groups=groups,
            control_dt=control_dt,
            physics_dt=cfg.physics_dt,
            max_episode_steps=round(cfg.episode_length_s / control_dt),
            metadata={
                "players_per_team": P,
                "opponent": cfg.opponent,
                "robot_kind": cfg.robot_kind,
                "skill": cfg.skill,
                "teams": {"team_a": "home", "team_b": "away"},
            },
        )

    # ----------------------------------------------------------------- state readers
    def _read(self) -> dict[str, Tensor]:
        """Positions and velocities of robots and ball, memoised until the state changes: ``pos [E, R, 2]``,
        ``yaw [E, R]``, ``vel [E, R, 2]``, ``yaw_rate [E, R]``, ``ball [E, 3]``, ``ball_vel [E, 3]``."""
        if not self._cache:
            qpos, qvel = self.world.qpos, self.world.qvel
            self._cache.update(
                ball=qpos[:, self._ball_q : self._ball_q + 3], ball_vel=qvel[:, self._ball_v : self._ball_v + 3]
            )
            if self.humanoid:
                self._cache.update(_humanoid_body(qpos, qvel, self._qpos_idx, self._qvel_idx, self._pose0))
            else:
                q = qpos[:, self._qpos_idx]  # [E, R, 3]
                v = qvel[:, self._qvel_idx]
                self._cache.update(pos=q[..., :2], yaw=q[..., 2], vel=v[..., :2], yaw_rate=v[..., 2])
        return self._cache

    def robot_poses(self) -> tuple[Tensor, Tensor]:
        """``(pos [E, R, 3], yaw [E, R])``: body centres (m) and headings (rad), world frame."""
        s = self._read()
        z = s["height"] if self.humanoid else torch.full_like(s["yaw"], self.cfg.robot.half_size[2])
        return torch.cat((s["pos"], z.unsqueeze(-1)), -1), s["yaw"]

    def ball_position(self) -> Tensor:
        """``[E, 3]`` m, world frame."""
        return self._read()["ball"]

    def _state_obs(self) -> Tensor:
        """``state [E, R, D]`` for every robot (team_a first), layout :func:`state_terms`; memoised with the state
        (the scripted opponent reads the observation the step before computed)."""
        s = self._read()
        if "state" in s:
            return s["state"]
        pos, yaw, vel = s["pos"], s["yaw"], s["vel"]
        side = self._side.view(1, -1, 1)
        c, sn = torch.cos(yaw), torch.sin(yaw)

        def body(v: Tensor) -> Tensor:  # world vectors [E, R, 2] or [E, R, K, 2] into each robot's body frame
            if v.dim() == 4:
                return _rotate(v, c.unsqueeze(-1), -sn.unsqueeze(-1))
            return _rotate(v, c, -sn)

        goal_x = torch.tensor(PITCH_HALF[0], device=self.device)
        goal = torch.stack((goal_x * self._side, torch.zeros_like(self._side)), -1)  # [R, 2] attacked goal, world
        ball = s["ball"][:, None, :2]
        ball_vel = s["ball_vel"][:, None, :2].expand(-1, self.R, -1)
        others_pos = pos[:, self._others] - pos.unsqueeze(2)  # [E, R, R-1, 2]
        others_vel = vel[:, self._others]
        others = torch.cat((body(others_pos), body(others_vel)), -1).flatten(2)  # [E, R, (R-1) * 4]
        heading_team = torch.stack((c, sn), -1) * side  # yaw + pi for team_b
        posture = (s["height"].unsqueeze(-1), s["gravity"], s["joint_pos"], s["joint_vel"]) if self.humanoid else ()
        parts = (
            pos * side,
            heading_team,
            body(vel),
            s["yaw_rate"].unsqueeze(-1),
            *posture,
            body(ball - pos),
            body(ball_vel),
            body(goal - pos),
            body(-goal - pos),
            others,
            self.action,
        )
        s["state"] = torch.cat(parts, -1)
        return s["state"]

    def _seen_obs(self) -> Tensor:
        """``seen [E, R, D]`` (layout :func:`seen_terms`) from the state and what each camera last saw."""
        s, state = self._read(), self._state_obs()
        c, sn = torch.cos(s["yaw"]), torch.sin(s["yaw"])
        sl, others_start = self._state_slices, self._others_start
        ball_in = self._unseen_s[..., :1] == 0  # [E, R, 1]
        others_in = self._unseen_s[..., 1:].unsqueeze(-1) == 0  # [E, R, R-1, 1]
        ball = _rotate(self._seen_ball - s["pos"], c, -sn)
        others_pos = _rotate(self._seen_others - s["pos"].unsqueeze(2), c.unsqueeze(-1), -sn.unsqueeze(-1))
        others = state[..., others_start : sl["last_action"].start].unflatten(-1, (self.R - 1, 4))
        others = torch.cat((others_pos, torch.where(others_in, others[..., 2:], 0.0)), -1).flatten(2)
        ball_vel = torch.where(ball_in, state[..., sl["ball_vel"]], 0.0)
        parts = (
            state[..., : sl["ball"].start],
            ball,
            ball_vel,
            state[..., sl["ball_vel"].stop : others_start],
            others,
            state[..., sl["last_action"]],
            self._unseen_s,
        )
        return torch.cat(parts, -1)

    def _in_view(self, points: Tensor) -> Tensor:
        """``[E, R, K]`` bool: world points ``[E, R, K, 3]`` lie in front of each robot's camera and inside its field
        of view (no occlusion test; the ball-in-view metric's rule). The wheeled robot's camera only turns with its
        heading, so the horizontal field of view decides; a humanoid's turns with its whole torso (lying on its back
        it sees the sky), so its camera frame and both fields of view do."""
        s = self._read()
        half = math.radians(horizontal_fov_deg(self.cfg.camera)) / 2
        if self.humanoid:
            quat = s["quat"].unsqueeze(2).expand(*points.shape[:-1], 4)
            rel = quat_rotate_inv(quat, points - self._camera_position().unsqueeze(2))  # torso frame
            p = math.radians(self.cfg.camera.pitch_deg)  # the optical axis tilts down by the mount's pitch
            fwd = math.cos(p) * rel[..., 0] - math.sin(p) * rel[..., 2]
            up = math.sin(p) * rel[..., 0] + math.cos(p) * rel[..., 2]
            half_v = math.radians(self.cfg.camera.fov_y_deg) / 2
            vertical = torch.atan2(up, fwd).abs() < half_v
            return (fwd > 0.05) & (torch.atan2(rel[..., 1], fwd).abs() < half) & vertical
        rel = points[..., :2] - s["pos"].unsqueeze(2)
        yaw = s["yaw"].unsqueeze(-1)
        c, sn = torch.cos(yaw), torch.sin(yaw)
        fwd = c * rel[..., 0] + sn * rel[..., 1]
        left = -sn * rel[..., 0] + c * rel[..., 1]
        return (fwd > 0.05) & (torch.atan2(left, fwd).abs() < half)

    def _camera_position(self) -> Tensor:
        """``[E, R, 3]``: each humanoid's head camera in the world (the mount of :class:`.vision.SoccerCameras`)."""
        s = self._read()
        offset = s["torso_pos"].new_tensor(HUMANOID_CAMERA_OFFSET).expand_as(s["torso_pos"])
        return s["torso_pos"] + quat_rotate(s["quat"], offset)

    def _look(self, env_ids: Tensor | None = None) -> None:
        """Update what each robot's camera last saw (all envs), or, for ``env_ids`` (a kickoff), set it to the true
        positions: at kickoff every robot knows where everything is placed."""
        s = self._read()
        pos3 = self.robot_poses()[0]
        ball3 = s["ball"][:, None, :].expand(-1, self.R, -1)
        ball, others = ball3[..., :2], pos3[:, self._others, :2]  # [E, R, 2], [E, R, R-1, 2]
        if env_ids is not None:
            self._seen_ball[env_ids] = ball[env_ids]
            self._seen_others[env_ids] = others[env_ids]
            self._unseen_s[env_ids] = 0.0
            return
        visible = self._in_view(torch.cat((ball3.unsqueeze(2), pos3[:, self._others]), 2))  # [E, R, R]
        dt = self.cfg.physics_dt * self.cfg.decimation
        self._unseen_s = torch.where(visible, 0.0, (self._unseen_s + dt).clamp(max=SEEN_AGE_CAP_S))
        self._seen_ball = torch.where(visible[..., :1], ball, self._seen_ball)
        self._seen_others = torch.where(visible[..., 1:].unsqueeze(-1), others, self._seen_others)

    # ----------------------------------------------------------------- reset and step
    def _reset_idx(self, env_ids: Tensor) -> None:
        self._kickoff(env_ids)
        for buf in self.counters.values():
            buf[env_ids] = 0.0
        self._first_touch[env_ids] = math.nan
        self.action[env_ids] = 0.0
        self.prev_action[env_ids] = 0.0
        self._was_out[env_ids] = False
        self._prev_ball_vel[env_ids] = 0.0
        self._still_s[env_ids] = 0.0
        r = self.cfg.randomization
        if r.enabled:
            lo, hi = r.opponent_speed
            self._opponent_speed[env_ids] = uniform(lo, hi, (env_ids.numel(), 1, 1), self.rng, self.device)
        if self.cfg.observation in ("seen", "vision"):
            self._look(env_ids)
        if self.cfg.observation == "vision":
            self._reset_cameras(env_ids)

    def _kickoff(self, env_ids: Tensor) -> None:
        """Place robots (own half, facing the other goal) and ball (near the centre spot) for ``env_ids``."""
        cfg, k, dev, P = self.cfg, env_ids.numel(), self.device, self.P
        j = cfg.kickoff_jitter_m
        base_y = torch.linspace(-0.6, 0.6, P, device=dev) if P > 1 else torch.zeros(1, device=dev)
        x = torch.cat((torch.full((P,), -1.2, device=dev), torch.full((P,), 1.2, device=dev)))
        xy = torch.stack((x, torch.cat((base_y, base_y))), -1).expand(k, -1, -1)
        xy = xy + uniform(-j, j, (k, self.R, 2), self.rng, dev)
        xy = xy.clamp(torch.tensor([-PITCH_HALF[0], -PITCH_HALF[1]], device=dev), torch.tensor(PITCH_HALF, device=dev))
        yaw = torch.where(self._side > 0, 0.0, math.pi).expand(k, -1) + uniform(-0.6, 0.6, (k, self.R), self.rng, dev)
        b = cfg.ball_start_jitter_m
        ball = torch.stack((uniform(-b, b, (k,), self.rng, dev), uniform(-0.6 * b, 0.6 * b, (k,), self.rng, dev)), -1)
        qpos = torch.zeros(k, self._nq, device=dev, dtype=torch.float64)
        qpos[:, self._ball_q : self._ball_q + 2] = ball.double()
        qpos[:, self._ball_q + 2] = cfg.ball.radius
        qpos[:, self._ball_q + 3] = 1.0
        if self.humanoid:
            self._place_humanoids(qpos, xy, yaw)
        else:
            q = torch.cat((xy, yaw.unsqueeze(-1)), -1).double()  # [k, R, 3]
            qpos[:, self._qpos_idx.flatten()] = q.flatten(1)
        self.world.set_state(env_ids, qpos=qpos.cpu().numpy())
        self._cache.clear()
        self._fallen[env_ids] = self.cfg.skill == "getup"

    def _place_humanoids(self, qpos: Tensor, xy: Tensor, yaw: Tensor) -> None:
        """Write the humanoids' kickoff into ``qpos [k, nq]`` (float64): standing in the default pose at ``xy
        [k, R, 2]`` facing ``yaw [k, R]``, or, for the get-up skill, lying on the back, front or a side (drawn per
        robot, tilted up to 0.3 rad more) a little above the floor, to drop and settle."""
        k, R, dev = yaw.shape[0], self.R, self.device
        zero = torch.zeros(k, R, device=dev)
        if self.cfg.skill == "getup":
            side = torch.randint(0, 4, (k, R), generator=self.rng, device=dev)
            tilt = (math.pi / 2) * torch.where(side % 2 == 0, 1.0, -1.0)
            jitter = uniform(-0.3, 0.3, (k, R), self.rng, dev)
            roll = torch.where(side < 2, jitter, tilt)  # 0, 1: on the front or back; 2, 3: on a side
            pitch = torch.where(side < 2, tilt, jitter)
            quat, z = quat_from_euler(roll, pitch, yaw), zero + LYING_START_Z
        else:
            quat, z = quat_from_euler(zero, zero, yaw), zero + STAND_HEIGHT + 0.01
        root = torch.cat((xy, z.unsqueeze(-1), quat), -1).double()  # [k, R, 7]
        root_idx = self._qpos_idx[:, :1] + torch.arange(7, device=dev)  # [R, 7]
        qpos[:, root_idx.flatten()] = root.flatten(1)
        qpos[:, self._qpos_idx[:, 1:].flatten()] = self._pose0.double().repeat(R)

    def _apply_actions(self, actions: dict[str, Tensor]) -> None:
        self.prev_action = self.action
        a = actions[GROUPS[0]].clamp(-1.0, 1.0)
        if self._scripted is None:
            b = actions[GROUPS[1]].clamp(-1.0, 1.0)
        elif self.humanoid:  # the idle humanoid holds its standing pose
            b = torch.zeros_like(a)
        else:
            b = self._scripted(self._state_obs()[:, self.P :]).clamp(-1.0, 1.0)
            b = torch.cat((b[..., :3] * self._opponent_speed, b[..., 3:]), -1)  # slower, same kicks
        self.action = torch.cat((a, b), 1)

    def _control_step(self) -> None:
        if self.humanoid:
            ctrl = self._pose0 + self.action * self._action_scale  # [E, R, J] joint targets (rad), model order
        else:
            ctrl = self._wheeled_ctrl()
        self._last_ctrl = ctrl.flatten(1)
        self.world.step(self._last_ctrl, self.cfg.decimation)
        self._cache.clear()
        self._detect_events()

    def _wheeled_ctrl(self) -> Tensor:
        """``[E, R, 4]`` servo targets in model order: world-frame velocity, yaw rate, kicker extension."""
        rc, yaw = self.cfg.robot, self._read()["yaw"]
        body_vel = self.action[..., :2] * torch.tensor(
            [rc.max_speed, rc.max_speed * rc.lateral_scale], device=self.device
        )
        world_vel = _rotate(body_vel, torch.cos(yaw), torch.sin(yaw))
        yaw_rate = self.action[..., 2] * rc.max_yaw_rate
        kick = (self.action[..., 3] + 1.0) * (0.5 * rc.kick_reach)  # -1 retracted .. 1 fully out
        return torch.cat((world_vel, yaw_rate.unsqueeze(-1), kick.unsqueeze(-1)), -1)

    def _detect_events(self) -> None:
        """Goals, touches and ball-out of this step into ``_events`` and the game counters; restarts play after a
        goal when the game goes on (``end_on_goal`` off)."""
        s, r = self._read(), self.cfg.ball.radius
        bx, by = s["ball"][:, 0], s["ball"][:, 1]
        in_mouth = by.abs() < GOAL_HALF_WIDTH
        goal_a = (bx > PITCH_HALF[0] + r) & in_mouth
        goal_b = (bx < -PITCH_HALF[0] - r) & in_mouth
        dist = torch.linalg.vector_norm(s["ball"][:, None, :2] - s["pos"], dim=-1)  # [E, R]
        # A touch: the ball is in contact now, or it was hit during the step (a contact between control steps:
        # a bounce or kick) with this robot the nearest one within reach.
        hit = torch.linalg.vector_norm(s["ball_vel"][:, :2] - self._prev_ball_vel, dim=-1) > HIT_DV
        nearest = dist <= dist.min(-1, keepdim=True).values
        touch = (dist < self._touch_dist) | (hit.unsqueeze(-1) & nearest & (dist < HIT_REACH))
        self._prev_ball_vel = s["ball_vel"][:, :2]
        touch_a, touch_b = touch[:, : self.P].any(-1), touch[:, self.P :].any(-1)
        out = ((by.abs() > PITCH_HALF[1] + r) | (bx.abs() > PITCH_HALF[0] + r)) & ~(goal_a | goal_b)
        self._events = {
            "goal_a": goal_a.float(),
            "goal_b": goal_b.float(),
            "touch_a": touch_a.float(),
            "touch_b": touch_b.float(),
        }
        c = self.counters
        c["points_a"] += goal_a.float()
        c["points_b"] += goal_b.float()
        c["hits_a"] += touch_a.float()
        c["hits_b"] += touch_b.float()
        c["ball_out"] += (out & ~self._was_out).float()  # counted when it crosses a line, not while it stays out
        self._was_out = out
        t = (self.episode_step + 1).float() * self.spec.control_dt
        self._first_touch = torch.where(self._first_touch.isnan() & touch_a, t, self._first_touch)
        c["ball_in_view_a"] += self._ball_in_view()[:, : self.P].float().mean(-1)
        if self.humanoid:
            h = self.cfg.humanoid
            fallen = (s["up_z"] < h.fallen_up_z) | (s["height"] < h.fallen_height)
            fell = (fallen & ~self._fallen).float()  # counted when it goes down, not while it lies
            c["falls_a"] += fell[:, : self.P].sum(-1)
            c["falls_b"] += fell[:, self.P :].sum(-1)
            self._fallen = fallen
        if not self.cfg.end_on_goal:
            scored = goal_a | goal_b
            ids = scored.nonzero().squeeze(-1)
            if ids.numel():
                self._kickoff(ids)
        self._restart_ball(out, s["ball"], s["ball_vel"])

    def _restart_ball(self, out: Tensor, ball: Tensor, ball_vel: Tensor) -> None:
        """Ball out of play -> back at rest just inside the line it crossed; stalled ball -> dropped near the centre
        (see :class:`.config.RobotSoccerCfg`). Robots keep their state."""
        cfg, dt = self.cfg, self.spec.control_dt
        still = torch.linalg.vector_norm(ball_vel[:, :2], dim=-1) < STILL_SPEED
        self._still_s = torch.where(still, self._still_s + dt, torch.zeros_like(self._still_s))
        stalled = self._still_s >= cfg.stall_s if cfg.stall_s > 0 else torch.zeros_like(still)
        moved = (out if cfg.ball_out_restart else torch.zeros_like(out)) | stalled
        ids = moved.nonzero().squeeze(-1)
        if ids.numel() == 0:
            return
        lim = torch.tensor([PITCH_HALF[0] - cfg.ball_in_m, PITCH_HALF[1] - cfg.ball_in_m], device=self.device)
        place = ball[ids, :2].clamp(-lim, lim)
        j = cfg.ball_start_jitter_m * 0.5
        dropped = uniform(-j, j, (ids.numel(), 2), self.rng, self.device)
        place = torch.where(stalled[ids].unsqueeze(-1), dropped, place)
        qpos, qvel = self.world.qpos[ids].double(), self.world.qvel[ids].double()
        qpos[:, self._ball_q : self._ball_q + 2] = place.double()
        qpos[:, self._ball_q + 2] = cfg.ball.radius
        qpos[:, self._ball_q + 3 : self._ball_q + 7] = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float64)
        qvel[:, self._ball_v : self._ball_v + 6] = 0.0
        self.world.set_state(ids, qpos=qpos.cpu().numpy(), qvel=qvel.cpu().numpy(), ctrl=self._last_ctrl[ids])
        self._still_s[ids] = 0.0
        self._prev_ball_vel[ids] = 0.0
        self.counters["restarts"] += moved.float()
        self._cache.clear()

    def _ball_in_view(self) -> Tensor:
        """``[E, R]`` bool: the ball's centre lies inside each robot's camera field of view (no occlusion test)."""
        ball = self._read()["ball"][:, None, None, :].expand(-1, self.R, 1, -1)
        return self._in_view(ball).squeeze(2)

    # ----------------------------------------------------------------- observations
    def render_cameras(self, env_ids: Tensor | None = None) -> Tensor:
        """The agent robots' current head-camera frames (no latency) of ``env_ids`` (all when None),
        ``uint8 [k, A, H, W, 3]``."""
        ball, pj, hj = self.ball_position(), self._pitch_jitter, self._height_jitter
        if self.humanoid:
            s = self._read()
            body = (s["torso_pos"], s["quat"], s["joints"])
            if env_ids is not None:
                body, ball, pj, hj = tuple(x[env_ids] for x in body), ball[env_ids], pj[env_ids], hj[env_ids]
            return self.cameras.render_humanoids(*body, ball, self._cam_ids, pj, hj)
        pos, yaw = self.robot_poses()
        if env_ids is not None:
            pos, yaw, ball, pj, hj = pos[env_ids], yaw[env_ids], ball[env_ids], pj[env_ids], hj[env_ids]
        return self.cameras.render(pos, yaw, ball, self._cam_ids, pj, hj)

    def _reset_cameras(self, env_ids: Tensor) -> None:
        """Per-episode camera randomisation (pitch, height, latency) and a fresh frame history."""
        r, k, dev = self.cfg.randomization, env_ids.numel(), self.device
        A = self._cam_ids.numel()
        on = float(r.enabled)
        pitch = math.radians(r.camera_pitch_deg) * on
        self._pitch_jitter[env_ids] = uniform(-pitch, pitch, (k, A), self.rng, dev)
        self._height_jitter[env_ids] = uniform(-r.camera_height_m * on, r.camera_height_m * on, (k, A), self.rng, dev)
        delay = torch.randint(0, r.max_latency_steps + 1, (k,), generator=self.rng, device=dev) if r.enabled else 0
        frames = self.render_cameras(env_ids)
        self._frames.reset(env_ids, frames, torch.as_tensor(delay, device=dev).expand(k))
        self._image = self._image.index_copy(
            0, env_ids, frames if self._frames.buffer is None else self._frames.read()[env_ids]
        )

    def _update_observation_buffers(self) -> None:
        if self.cfg.observation in ("seen", "vision"):
            self._look()
        if self.cfg.observation == "vision":
            self._image = self._frames.push(self.render_cameras())

    def _observations(self) -> Obs:
        state = self._state_obs()
        groups = {GROUPS[0]: slice(0, self.P), GROUPS[1]: slice(self.P, self.R)}
        obs = {g: {"state": state[:, sl]} for g, sl in groups.items() if g in self.spec.groups}
        if self.cfg.observation in ("seen", "vision"):
            seen = self._seen_obs()
            for g, o in obs.items():
                o["seen"] = seen[:, groups[g]]
        if self.cfg.observation == "vision":
            if self.humanoid:
                s = self._read()
                proprio = torch.cat((s["ang_vel"], s["gravity"], s["joint_pos"], s["joint_vel"], self.action), -1)
            else:
                proprio = torch.cat((state[..., 4:7], state[..., -4:]), -1)  # vel, yaw_rate, last_action
            for i, g in enumerate(obs):
                sl = groups[g]
                obs[g]["image"] = self._image[:, i * self.P : (i + 1) * self.P]
                obs[g]["proprio"] = proprio[:, sl]
        return obs

    # ----------------------------------------------------------------- rewards, terminations, metrics
    def _rewards(self, terminated: Tensor) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        rc = self.cfg.getup_rewards if self.cfg.skill == "getup" else self.cfg.rewards
        s, ev = self._read(), self._events
        goal_x = PITCH_HALF[0] * self._side  # [R]
        to_goal = torch.stack(
            (goal_x.expand(self.num_envs, -1), torch.zeros(self.num_envs, self.R, device=self.device)), -1
        )
        to_goal = to_goal - s["ball"][:, None, :2]
        to_goal = to_goal / torch.linalg.vector_norm(to_goal, dim=-1, keepdim=True).clamp(min=1e-6)
        ball_to_goal = (s["ball_vel"][:, None, :2] * to_goal).sum(-1)  # [E, R]
        to_ball = s["ball"][:, None, :2] - s["pos"]
        dist = torch.linalg.vector_norm(to_ball, dim=-1)
        approach = (s["vel"] * to_ball).sum(-1) / dist.clamp(min=1e-6) * (dist > 0.3).float()
        team_a = (self._side > 0).unsqueeze(0)
        scored = torch.where(team_a, ev["goal_a"].unsqueeze(-1), ev["goal_b"].unsqueeze(-1))
        conceded = torch.where(team_a, ev["goal_b"].unsqueeze(-1), ev["goal_a"].unsqueeze(-1))
        action_rate = (self.action - self.prev_action).square().sum(-1)
        raw = {
            "scored": scored,
            "conceded": conceded,
            "ball_to_goal": ball_to_goal,
            "approach_ball": approach,
            "action_rate": action_rate,
        }
        if self.humanoid:
            raw["upright"] = s["up_z"]
            raw["height"] = (s["height"] / STAND_HEIGHT).clamp(0.0, 1.2)
            raw["fallen"] = self._fallen.float()
        per_agent = {name: getattr(rc, name) * val for name, val in raw.items()}  # [E, R]
        total = torch.stack(list(per_agent.values())).sum(0)
        reward = {GROUPS[0]: total[:, : self.P]}
        if GROUPS[1] in self.spec.groups:
            reward[GROUPS[1]] = total[:, self.P :]
        terms = {name: v[:, : self.P].mean(-1) for name, v in per_agent.items()}  # logged for team_a
        return reward, terms

    def _terminations(self) -> tuple[Tensor, dict[str, Tensor]]:
        ev = self._events
        unstable = self.world.diverged().to(self.device)
        reasons = {"unstable": unstable}
        if self.cfg.end_on_goal:
            reasons["goal_a"] = ev["goal_a"] > 0
            reasons["goal_b"] = ev["goal_b"] > 0
        if self.cfg.end_on_fall and self.humanoid:
            reasons["fallen"] = self._fallen.any(-1)
        terminated = torch.stack(list(reasons.values())).any(0)
        return terminated, reasons

    def step_metrics(self) -> dict[str, Tensor]:
        """The goal difference; for humanoids also the share of team_a on its feet, its falls so far and its mean
        torso height (the get-up skill's measures at an episode's end)."""
        metrics = {"goal_diff_a": self.counters["points_a"] - self.counters["points_b"]}
        if self.humanoid:
            metrics["standing_a"] = (~self._fallen[:, : self.P]).float().mean(-1)
            metrics["falls_a"] = self.counters["falls_a"].clone()
            metrics["torso_height_a_m"] = self._read()["height"][:, : self.P].mean(-1)
        return metrics

    def _episode_metrics(self, env_ids: Tensor) -> dict[str, Tensor]:
        c = self.counters
        steps = self.episode_step[env_ids].float().clamp(min=1)
        diff = c["points_a"][env_ids] - c["points_b"][env_ids]
        result = torch.where(diff > 0, 1.0, torch.where(diff < 0, 0.0, 0.5))
        self.game_result = self.game_result.index_put((env_ids,), result)
        horizon = torch.tensor(self.cfg.episode_length_s, device=self.device)
        first = self._first_touch[env_ids]
        c["first_touch_s_a"] = c["first_touch_s_a"].index_put((env_ids,), torch.where(first.isnan(), horizon, first))
        in_view = c["ball_in_view_a"][env_ids] / steps
        for k in COUNTERS:
            v = in_view if k == "ball_in_view_a" else c[k][env_ids]
            self.final_counters[k] = self.final_counters[k].index_put((env_ids,), v)
        metrics = {
            "metrics/win_a": (result == 1.0).float().mean(),
            "metrics/loss_a": (result == 0.0).float().mean(),
            "metrics/goal_diff_a": diff.mean(),
            "metrics/first_touch_s_a": c["first_touch_s_a"][env_ids].mean(),
            "metrics/ball_in_view_a": in_view.mean(),
        }
        if self.humanoid:  # on their feet at the episode's end (the get-up skill's success), falls per game
            metrics["metrics/standing_a"] = (~self._fallen[env_ids, : self.P]).float().mean()
            metrics["metrics/falls_a"] = c["falls_a"][env_ids].mean()
        return metrics

    def deployment_profile(self, group: str = GROUPS[0]) -> dict:
        """ROS deployment of the vision agent (:mod:`deploy_ros.profile`): ``image`` straight from the head camera
        (``sensor_msgs/Image``, rgb8 of the trained 40x30), ``proprio`` from the robot's wheel odometry
        (:class:`sim.tasks.robot_soccer.robot_observation.ProprioObservation`); the command is the action times its
        scale: forward, lateral (m/s), turn (rad/s) and the kicker in [-reach, reach] m (-reach retracted, +reach
        fully out: extension = (command + reach) / 2); safe = stand still with the kicker retracted. State agents
        read the privileged game state, which a robot does not have: ``{}`` (not deployable). Nor is a humanoid yet:
        its proprioception would come from joint states and an IMU, for which no robot-side builder exists."""
        if self.cfg.observation != "vision" or self.humanoid:
            return {}
        return {
            "inputs": {
                "camera": {"msg": "sensor_msgs/Image", "topic": "camera/image", "qos": "sensor", "stale": True},
                "odom": {"msg": "nav_msgs/Odometry", "topic": "odom", "qos": "sensor", "stale": True},
            },
            "observations": {
                "image": {"builder": "image", "from": ["camera"]},
                "proprio": {"builder": "sim.tasks.robot_soccer.robot_observation:ProprioObservation", "from": ["odom"]},
            },
            "command": {
                "msg": "std_msgs/Float32MultiArray",
                "topic": "command",
                # float32-exact: the command message is Float32MultiArray, so the node's safe command is compared
                # and sent in float32.
                "safe": [0.0, 0.0, 0.0, float(np.float32(-self.cfg.robot.kick_reach))],
            },
            "step_inputs": ["camera"],
            "bridge": "sim.tasks.robot_soccer.ros_bridge:SoccerBridge",
        }

    def expert_policy(self):
        """The scripted attacker for team_a (and team_b when it is an agent group): the hand-written baseline. The
        humanoid's is its standing pose held (zero actions): no hand-written gait or get-up here."""
        if self.humanoid:
            n, dev = self._n_act, self.device
            return lambda obs: {g: torch.zeros(*o["state"].shape[:2], n, device=dev) for g, o in obs.items()}
        attacker = SCRIPTED["attacker"]
        return lambda obs: {g: attacker(o["state"]) for g, o in obs.items()}

    @classmethod
    def evaluation_overrides(cls) -> dict:
        return {"randomization": {"enabled": False}}

    @classmethod
    def match_teams(cls):
        from sim.tasks.robot_soccer.teams import SoccerTeams

        return SoccerTeams()
