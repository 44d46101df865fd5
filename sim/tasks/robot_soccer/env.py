"""robot_soccer: 1v1 (2v2 by config) soccer of small wheeled robots on a walled pitch, physics in MuJoCo.

Following Tirumala et al. (CoRL 2024, "Learning Robot Soccer from Egocentric Vision with Deep RL") on a robot that
trains on a CPU: the pitch, goals and boards of ``assets/scenes/soccer_arena.xml`` (the scene the radiance field was
captured from), a ball, and box robots with a head camera driven by velocity servos (:mod:`.model`), batched over envs
by :class:`sim.mujoco.world.BatchedMjWorld` (one ``mujoco.rollout`` per control step, no Python loop over envs).

This module is the task (spaces, the step and reset hooks, rewards, terminations, metrics); its parts are the robot
kind (:mod:`.robots`: one strategy class per kind), the rules (:mod:`.rules`), the observations and cameras
(:mod:`.perception`), the layouts of the entries and actions (:mod:`.layout`) and the fixed numbers
(:mod:`.constants`).

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

import numpy as np
import torch
from torch import Tensor

from sim.core.env import MultiAgentEnv, Obs, Scenario
from sim.core.randomization import uniform
from sim.core.spec import EnvSpec, GroupSpec, ObsEntry
from sim.core.teams import GROUPS
from sim.mujoco.world import BatchedMjWorld
from sim.tasks.robot_soccer import scenarios
from sim.tasks.robot_soccer.config import RobotSoccerCfg
from sim.tasks.robot_soccer.constants import (
    APPROACH_MIN_DIST,
    COUNTERS,
    FREE_LIN_VEL,
    FREE_POS,
    FREE_QVEL,
    SEEN_AGE_CAP_S,
    at,
)
from sim.tasks.robot_soccer.layout import HUMANOID_PROPRIO_TERMS, PROPRIO_TERMS, seen_terms, state_terms
from sim.tasks.robot_soccer.model import PITCH_HALF, model_variants
from sim.tasks.robot_soccer.perception import SEES, SoccerPerception
from sim.tasks.robot_soccer.robots import ROBOT_KINDS, HumanoidRobot, RobotKind
from sim.tasks.robot_soccer.rules import SoccerRules, kickoff, place_ball
from sim.tasks.robot_soccer.vision import FrameDelay, horizontal_fov_deg

__all__ = [  # the layouts and counters as this module has always offered them (tests, docs)
    "COUNTERS",
    "HUMANOID_PROPRIO_TERMS",
    "PROPRIO_TERMS",
    "SEEN_AGE_CAP_S",
    "RobotSoccerEnv",
    "seen_terms",
    "state_terms",
]


def others_index(players_per_team: int) -> Tensor:
    """``[R, R-1]`` long: for robot r, the other robots in observation order (teammates, then opponents)."""
    P, R = players_per_team, 2 * players_per_team
    others = []
    for r in range(R):
        mates = [q for q in range(R) if q != r and (q < P) == (r < P)]
        opps = [q for q in range(R) if (q < P) != (r < P)]
        others.append(mates + opps)
    return torch.tensor(others, dtype=torch.long).view(R, R - 1)


class RobotSoccerEnv(MultiAgentEnv):
    """Batched MuJoCo soccer; see the module docstring. The robot kind (:mod:`.robots`), the rules
    (:mod:`.rules`) and the observations (:mod:`.perception`) are parts this class assembles."""

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
        self.robot: RobotKind = ROBOT_KINDS[cfg.robot_kind](cfg, m, self.P, dev)
        self.humanoid = isinstance(self.robot, HumanoidRobot)  # (read by the renderer and the match teams)
        self._qpos_idx, self._qvel_idx = self.robot.qpos_idx, self.robot.qvel_idx
        # The ball's free joint: position (x, y, z) then orientation in qpos; linear then angular velocity in qvel.
        self._ball_q = int(m.jnt_qposadr[m.joint("ball").id])
        self._ball_v = int(m.jnt_dofadr[m.joint("ball").id])
        self._ball_pos, self._ball_vel = at(self._ball_q, FREE_POS), at(self._ball_v, FREE_LIN_VEL)
        self._nq, self._nv = m.nq, m.nv
        # Team of each robot as the sign of its attack direction (+1 team_a, -1 team_b).
        self._side = torch.tensor([1.0] * self.P + [-1.0] * self.P, device=dev)
        self._others = others_index(self.P).to(dev)  # [R, R-1]
        self.action = torch.zeros(E, R, self.robot.action_dim, device=dev)
        self.prev_action = torch.zeros_like(self.action)
        state_slices = self.spec.groups[GROUPS[0]].observations["state"].slices()
        self._opponent = self.robot.opponent(cfg.opponent, state_slices) if cfg.opponent != "none" else None
        self._expert = self.robot.expert_policy(state_slices)
        self._opponent_speed = torch.ones(E, 1, 1, device=dev)  # per-episode scale of the scripted commands
        self.rules = SoccerRules(cfg, E, self.P, self.robot.touch_reach, dev)
        self.counters = self.rules.counters  # the game's counters (the same dict: matches, the ROS bridge read it)
        self._last_ctrl = torch.zeros(E, self.robot.action_dim * R, device=dev)
        self._fallen = torch.zeros(E, R, dtype=torch.bool, device=dev)
        self._cache: dict[str, Tensor] = {}
        self.perception = SoccerPerception(cfg, self.robot, E, state_slices, self._side, self._others, dev)
        self.cameras = self.perception.cameras  # None unless observation=vision (the renderer reuses them)
        self.reset()

    @property
    def game_result(self) -> Tensor:
        """``[E]``: the last finished game of each env, 1 team_a won, 0 lost, 0.5 draw, NaN none yet."""
        return self.rules.game_result

    @property
    def final_counters(self) -> dict[str, Tensor]:
        """The last finished game's counters (:data:`.constants.COUNTERS`), ``[E]`` each."""
        return self.rules.final_counters

    # ----------------------------------------------------------------- spec
    def _build_spec(self) -> EnvSpec:
        cfg, P = self.cfg, self.cfg.players_per_team
        kind = ROBOT_KINDS[cfg.robot_kind]
        terms = kind.state_terms(P)
        state = ObsEntry((sum(t.size for t in terms),), terms=terms)
        observations = {"state": state}
        actor = ("state",)
        if cfg.observation in SEES:
            seen = kind.seen_terms(P)
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
            proprio = kind.proprio_terms
            observations["proprio"] = ObsEntry((sum(t.size for t in proprio),), terms=proprio)
            actor = ("image", "proprio")
        action = kind.action_spec(cfg)
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
        """Positions and velocities of robots and ball, memoised until the state changes: ``ball [E, 3]``,
        ``ball_vel [E, 3]`` and the robot kind's entries (:meth:`.robots.RobotKind.read`: ``pos [E, R, 2]``,
        ``yaw [E, R]``, ``vel [E, R, 2]``, ``yaw_rate [E, R]``, ...)."""
        if not self._cache:
            qpos, qvel = self.world.qpos, self.world.qvel
            self._cache.update(ball=qpos[:, self._ball_pos], ball_vel=qvel[:, self._ball_vel])
            self._cache.update(self.robot.read(qpos, qvel))
        return self._cache

    def robot_poses(self) -> tuple[Tensor, Tensor]:
        """``(pos [E, R, 3], yaw [E, R])``: body centres (m) and headings (rad), world frame."""
        return self.robot.poses(self._read())

    def ball_position(self) -> Tensor:
        """``[E, 3]`` m, world frame."""
        return self._read()["ball"]

    def _state_obs(self) -> Tensor:
        """``state [E, R, D]`` of every robot (:meth:`.perception.SoccerPerception.state`), memoised."""
        return self.perception.state(self._read(), self.action)

    # ----------------------------------------------------------------- reset and step
    def _reset_idx(self, env_ids: Tensor) -> None:
        self._kickoff(env_ids)
        self.rules.reset(env_ids)
        self.action[env_ids] = 0.0
        self.prev_action[env_ids] = 0.0
        r = self.cfg.randomization
        if r.enabled:
            lo, hi = r.opponent_speed
            self._opponent_speed[env_ids] = uniform(lo, hi, (env_ids.numel(), 1, 1), self.rng, self.device)
        self.perception.reset(self._read(), env_ids, self.rng)

    def _kickoff(self, env_ids: Tensor) -> None:
        """Place robots (own half, facing the other goal) and ball (near the centre spot) for ``env_ids``."""
        k = env_ids.numel()
        xy, yaw, ball = kickoff(self.cfg, k, self._side, self.rng, self.device)
        qpos = torch.zeros(k, self._nq, device=self.device, dtype=torch.float64)
        place_ball(qpos, self._ball_q, ball, self.cfg.ball.radius)
        self.robot.place(qpos, xy, yaw, self.rng)
        self.world.set_state(env_ids, qpos=qpos.cpu().numpy())
        self._cache.clear()
        self._fallen[env_ids] = self.cfg.skill == "getup"

    def _apply_actions(self, actions: dict[str, Tensor]) -> None:
        self.prev_action = self.action
        a = actions[GROUPS[0]].clamp(-1.0, 1.0)
        if self._opponent is None:
            b = actions[GROUPS[1]].clamp(-1.0, 1.0)
        else:  # team_b played inside the env, at this episode's speed
            b = self._opponent(self._state_obs()[:, self.P :], a, self._opponent_speed)
        self.action = torch.cat((a, b), 1)

    def _control_step(self) -> None:
        ctrl = self.robot.control(self.action, self._read())  # [E, R, n_ctrl] in model order
        self._last_ctrl = ctrl.flatten(1)
        self.world.step(self._last_ctrl, self.cfg.decimation)
        self._cache.clear()
        self._apply_rules()

    def _apply_rules(self) -> None:
        """Goals, touches and ball-out of this step (:class:`.rules.SoccerRules`), the ball-in-view and fall
        counters; kickoff after a goal when the game goes on (``end_on_goal`` off), restarts of a ball out of play
        or stalled."""
        s, c, P = self._read(), self.counters, self.P
        out = self.rules.detect(s, (self.episode_step + 1).float() * self.spec.control_dt)
        c["ball_in_view_a"] += self.perception.ball_in_view(s)[:, :P].float().mean(-1)
        fallen = self.robot.fallen(s)
        if fallen is not None:
            fell = (fallen & ~self._fallen).float()  # counted when it goes down, not while it lies
            c["falls_a"] += fell[:, :P].sum(-1)
            c["falls_b"] += fell[:, P:].sum(-1)
            self._fallen = fallen
        if not self.cfg.end_on_goal:
            ids = self.rules.scored().nonzero().squeeze(-1)
            if ids.numel():
                self._kickoff(ids)
        s = self._read()  # read again: a kickoff above moved the ball
        restart = self.rules.restart(out, s["ball"], s["ball_vel"], self.spec.control_dt, self.rng)
        if restart is not None:
            self._put_ball(*restart)

    def _put_ball(self, ids: Tensor, xy: Tensor) -> None:
        """The ball of envs ``ids`` at rest at ``xy [k, 2]``; robots keep their state."""
        qpos, qvel = self.world.qpos[ids].double(), self.world.qvel[ids].double()
        place_ball(qpos, self._ball_q, xy, self.cfg.ball.radius)
        qvel[:, self._ball_v : self._ball_v + FREE_QVEL] = 0.0  # linear and angular
        self.world.set_state(ids, qpos=qpos.cpu().numpy(), qvel=qvel.cpu().numpy(), ctrl=self._last_ctrl[ids])
        self._cache.clear()

    # ----------------------------------------------------------------- observations
    def render_cameras(self, env_ids: Tensor | None = None) -> Tensor:
        """The agent robots' current head-camera frames (no latency) of ``env_ids`` (all when None),
        ``uint8 [k, A, H, W, 3]``."""
        return self.perception.render(self._read(), env_ids)

    def _ball_in_view(self) -> Tensor:
        """``[E, R]`` bool: the ball's centre lies inside each robot's camera field of view (no occlusion test)."""
        return self.perception.ball_in_view(self._read())

    def _look(self, env_ids: Tensor | None = None) -> None:
        """What each camera last saw, updated (or, for ``env_ids``, set to the truth; :meth:`.perception.
        SoccerPerception.look`)."""
        self.perception.look(self._read(), env_ids)

    @property
    def _frames(self) -> FrameDelay:
        """The vision frames' latency buffer (observation=vision)."""
        return self.perception.frames

    def _update_observation_buffers(self) -> None:
        self.perception.update(self._read())

    def _observations(self) -> Obs:
        groups = {GROUPS[0]: slice(0, self.P), GROUPS[1]: slice(self.P, self.R)}
        agents = {g: sl for g, sl in groups.items() if g in self.spec.groups}
        return self.perception.observations(self._read(), self.action, agents)

    # ----------------------------------------------------------------- rewards, terminations, metrics
    def _rewards(self, terminated: Tensor) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        rc = self.cfg.getup_rewards if self.cfg.skill == "getup" else self.cfg.rewards
        s, ev = self._read(), self.rules.events
        goal_x = PITCH_HALF[0] * self._side  # [R]
        to_goal = torch.stack(
            (goal_x.expand(self.num_envs, -1), torch.zeros(self.num_envs, self.R, device=self.device)), -1
        )
        to_goal = to_goal - s["ball"][:, None, :2]
        to_goal = to_goal / torch.linalg.vector_norm(to_goal, dim=-1, keepdim=True).clamp(min=1e-6)
        ball_to_goal = (s["ball_vel"][:, None, :2] * to_goal).sum(-1)  # [E, R]
        to_ball = s["ball"][:, None, :2] - s["pos"]
        dist = torch.linalg.vector_norm(to_ball, dim=-1)
        approach = (s["vel"] * to_ball).sum(-1) / dist.clamp(min=1e-6) * (dist > APPROACH_MIN_DIST).float()
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
            **self.robot.posture_rewards(s, self._fallen),  # the humanoid's upright, height, fallen
        }
        per_agent = {name: getattr(rc, name) * val for name, val in raw.items()}  # [E, R]
        total = torch.stack(list(per_agent.values())).sum(0)
        reward = {GROUPS[0]: total[:, : self.P]}
        if GROUPS[1] in self.spec.groups:
            reward[GROUPS[1]] = total[:, self.P :]
        terms = {name: v[:, : self.P].mean(-1) for name, v in per_agent.items()}  # logged for team_a
        return reward, terms

    def _terminations(self) -> tuple[Tensor, dict[str, Tensor]]:
        ev = self.rules.events
        unstable = self.world.diverged().to(self.device)
        reasons = {"unstable": unstable}
        if self.cfg.end_on_goal:
            reasons["goal_a"] = ev["goal_a"] > 0
            reasons["goal_b"] = ev["goal_b"] > 0
        if self.cfg.end_on_fall and self.robot.can_fall:
            reasons["fallen"] = self._fallen.any(-1)
        terminated = torch.stack(list(reasons.values())).any(0)
        return terminated, reasons

    def step_metrics(self) -> dict[str, Tensor]:
        """The goal difference; for robots that fall (humanoids) also the share of team_a on its feet, its falls
        so far and its mean torso height (the get-up skill's measures at an episode's end)."""
        metrics = {"goal_diff_a": self.counters["points_a"] - self.counters["points_b"]}
        if self.robot.can_fall:
            metrics["standing_a"] = (~self._fallen[:, : self.P]).float().mean(-1)
            metrics["falls_a"] = self.counters["falls_a"].clone()
            metrics["torso_height_a_m"] = self._read()["height"][:, : self.P].mean(-1)
        return metrics

    def _episode_metrics(self, env_ids: Tensor) -> dict[str, Tensor]:
        steps = self.episode_step[env_ids].float().clamp(min=1)
        metrics = self.rules.end_games(env_ids, steps)
        if self.robot.can_fall:  # on their feet at the episode's end (the get-up skill's success), falls per game
            metrics["metrics/standing_a"] = (~self._fallen[env_ids, : self.P]).float().mean()
            metrics["metrics/falls_a"] = self.counters["falls_a"][env_ids].mean()
        return metrics

    def deployment_profile(self, group: str = GROUPS[0]) -> dict:
        """ROS deployment of the vision agent (:mod:`deploy_ros.profile`): ``image`` straight from the head camera
        (``sensor_msgs/Image``, rgb8 of the trained 40x30), ``proprio`` from the robot's wheel odometry
        (:class:`sim.tasks.robot_soccer.robot_observation.ProprioObservation`); the command is the action times its
        scale: forward, lateral (m/s), turn (rad/s) and the kicker in [-reach, reach] m (-reach retracted, +reach
        fully out: extension = (command + reach) / 2); safe = stand still with the kicker retracted. State agents
        read the privileged game state, which a robot does not have: ``{}`` (not deployable). Nor is a humanoid yet:
        its proprioception would come from joint states and an IMU, for which no robot-side builder exists."""
        if self.cfg.observation != "vision" or not self.robot.deployable:
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
            # Both streams: in lockstep the node answers a state once both carry its stamp (with the camera alone it
            # could answer with the previous state's odometry: games over ROS then differed from launch to launch).
            "step_inputs": ["camera", "odom"],
            "bridge": "sim.tasks.robot_soccer.ros_bridge:SoccerBridge",
        }

    def expert_policy(self):
        """The hand-written baseline of the robot kind (:meth:`.robots.RobotKind.expert_policy`): the scripted
        attacker for team_a (and team_b when it is an agent group); the humanoid's standing pose held (zero
        actions): no hand-written gait or get-up here."""
        return self._expert

    @classmethod
    def evaluation_overrides(cls) -> dict:
        return {"randomization": {"enabled": False}}

    @classmethod
    def scenarios(cls) -> dict[str, Scenario]:
        """Model variants a real robot would bring, beyond the training randomisation (:mod:`.scenarios`)."""
        return scenarios.scenarios()

    @classmethod
    def match_teams(cls):
        from sim.tasks.robot_soccer.teams import SoccerTeams

        return SoccerTeams()
