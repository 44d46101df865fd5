"""drone_volleyball: multi-drone volleyball on our torch physics (VolleyBots / HCSP).

Bodies: ``D`` quadrotors (``iris``, 1.52 kg) with a hitting disc on top (body +z normal), one ball
(5 g, r 0.1 m, gravity + quadratic drag), a net (the plane x = 0 up to 2.43 m) and the ground. Per
control step (50 Hz) the rate loop and physics run ``decimation`` times (200 Hz): rate PID ->
rotors (first-order lag) -> Newton-Euler; ball flight, then at most one contact per substep (the
nearest paddle, else the net, else the ground). :class:`~sim.tasks.drone_volleyball.rules.RallyRules`
turns the step's contacts into touches, faults and points.

Modes (``cfg.mode``):
- solo skills, one drone of team A (group ``team_a``, 1 agent): ``goto`` (fly to a target point),
  ``serve`` (drop the ball on the own paddle and send it into the opponent court, near a landing
  target), ``pass`` (a ball served from team B's half: send it to the setter point),
  ``set`` (a teammate's pass: send it to the attack point near the net), ``attack`` (a set near the
  net: hit it into the opponent court, near a landing target);
- matches ``1v1``/``2v2``/``3v3``: groups ``team_a`` and ``team_b``, each seeing the court in its own
  frame (team B's observations are rotated 180 deg about z), so one policy plays both sides.

Observation entries per drone: ``skill`` (own state, ball, skill id + target: what a low-level
skill sees, the same layout in every mode), ``policy`` (skills: = ``skill``; matches: ``skill``
+ teammates, opponents and the rally state, for flat policies) and ``state`` (critic).
Matches take skill commands from a strategy through :meth:`DroneVolleyballEnv.set_skill_commands`.

Action per drone (4, in [-1, 1]): ``ctbr``: collective thrust (0 .. max) and body rates; ``rotor``:
normalised rotor speeds (VolleyBots' action).

Shapes: E = num_envs, D = drones (2 n in matches, 1 in skills), R = rotors.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from sim.core.env import MultiAgentEnv, Obs
from sim.core.randomization import uniform
from sim.core.registry import register
from sim.core.spec import EnvSpec, GroupSpec, ObsEntry, ObsTerm
from sim.physics.ball import (
    ball_drone_contact,
    ball_flight_step,
    closest_point_on_rect,
    ground_contact_ball,
    paddle_surface,
    resolve_sphere_contact,
)
from sim.physics.controllers import RatePIDController
from sim.physics.multirotor import MultirotorModel, MultirotorParams
from sim.physics.quaternion import matrix_to_6d, quat_mul, quat_rotate, quat_to_matrix
from sim.physics.rigid_body import GRAVITY, RigidBodyState, rigid_body_step
from sim.tasks.drone_volleyball import rules as R
from sim.tasks.drone_volleyball.config import SKILLS, VolleyballCfg
from sim.tasks.drone_volleyball.court import drones_out_of_play, in_court

ACTION_NAMES = {
    "ctbr": ("thrust", "roll_rate", "pitch_rate", "yaw_rate"),
    "rotor": ("rotor_0", "rotor_1", "rotor_2", "rotor_3"),
}
GROUPS = ("team_a", "team_b")
SKILL_IDS = {name: i for i, name in enumerate(SKILLS)}


def skill_terms() -> tuple[ObsTerm, ...]:
    """The ``skill`` observation frame (team frame: own half x < 0)."""
    return (
        ObsTerm("own_pos", 3, "m", "team", "own position"),
        ObsTerm("own_rot", 6, "", "team", "own rotation matrix, first two columns"),
        ObsTerm("own_vel", 3, "m/s", "team", "own velocity"),
        ObsTerm("own_ang_vel", 3, "rad/s", "body", "own body rates"),
        ObsTerm("ball_rel", 3, "m", "team", "ball minus own paddle centre"),
        ObsTerm("ball_vel", 3, "m/s", "team", "ball velocity"),
        ObsTerm("target_rel", 3, "m", "team", "skill target minus own position"),
        ObsTerm("skill", len(SKILLS), "one-hot", "", "skill: " + ", ".join(SKILLS)),
        ObsTerm("touched", 1, "", "", "1 once this drone hit the ball in the current skill/rally"),
        ObsTerm("last_action", 4, "", "", "previous action in [-1, 1]"),
    )


def match_terms(n: int) -> tuple[ObsTerm, ...]:
    """The extra ``policy`` terms of a match drone."""
    return (
        ObsTerm("teammates_rel", 3 * (n - 1), "m", "team", "teammates minus own position"),
        ObsTerm("opponents_rel", 3 * n, "m", "team", "opponents minus own position"),
        ObsTerm(
            "rally",
            5,
            "",
            "",
            "my team's touches / max, I touched last, my team serves next hit, I serve, ball in my half",
        ),
    )


def mirror(v: Tensor, flip: Tensor) -> Tensor:
    """Rotate world vectors ``[..., 3]`` by 180 deg about z where ``flip [...]`` (team B's frame)."""
    sign = torch.where(flip, -1.0, 1.0).unsqueeze(-1)
    return torch.cat((v[..., :2] * sign, v[..., 2:]), dim=-1)


@register("drone_volleyball", VolleyballCfg)
class DroneVolleyballEnv(MultiAgentEnv):
    """Batched multi-drone volleyball; see the module docstring."""

    def __init__(
        self,
        cfg: VolleyballCfg,
        num_envs: int,
        device: str | torch.device = "cpu",
        seed: int = 0,
        compile: bool = False,
    ) -> None:
        self.n = cfg.drones_per_team
        self.num_drones = 2 * self.n if cfg.is_match else 1
        self.decimation = cfg.decimation
        self.params = MultirotorParams.load(cfg.multirotor)
        super().__init__(cfg, num_envs, device, seed, compile)
        dev, E, D = self.device, num_envs, self.num_drones
        self.model = MultirotorModel(self.params, dev)
        self.phys_dt = cfg.control_dt / cfg.decimation
        self.rate_ctrl = RatePIDController(self.model, (E, D))
        self.rate_scale = torch.tensor((cfg.max_body_rate, cfg.max_body_rate, cfg.max_body_rate / 2), device=dev)
        self.paddle_offset = torch.tensor((0.0, 0.0, cfg.paddle_offset), device=dev)
        zeros = lambda *s: torch.zeros(*s, device=dev)  # noqa: E731
        self.drones = RigidBodyState(zeros(E, D, 3), zeros(E, D, 4), zeros(E, D, 3), zeros(E, D, 3))
        self.rotor_speed = zeros(E, D, self.params.num_rotors)
        self.ball_pos, self.ball_vel = zeros(E, 3), zeros(E, 3)
        self.team_of = (
            (torch.arange(D, device=dev) // max(self.n, 1))
            if cfg.is_match
            else torch.zeros(D, dtype=torch.long, device=dev)
        )
        self.flip = (self.team_of == 1).expand(E, D)  # team B sees the court rotated
        # Per drone: its teammates, then its opponents, in drone order ([D, D - 1] indices).
        others = [
            [j for j in range(D) if self.team_of[j] == self.team_of[i] and j != i]
            + [j for j in range(D) if self.team_of[j] != self.team_of[i]]
            for i in range(D)
        ]
        self.others_idx = torch.tensor(others, dtype=torch.long, device=dev).reshape(D, max(D - 1, 0))
        # Rules run with n drones per team; skill tasks have one drone of team A (B's slot is empty).
        self.rules = R.RallyRules(E, self.n, cfg.court, cfg.rules, dev)
        self.skill_id = torch.zeros(E, D, dtype=torch.long, device=dev)
        self.skill_target = zeros(E, D, 3)  # world frame
        self.touched = torch.zeros(E, D, dtype=torch.bool, device=dev)
        self.last_action = zeros(E, D, 4)
        self.cmd = zeros(E, D, 4)
        # Step contact flags (accumulated over the substeps of one control step).
        self.hits = torch.zeros(E, D, dtype=torch.bool, device=dev)
        self.ball_ground = torch.zeros(E, dtype=torch.bool, device=dev)
        self.ball_net = torch.zeros(E, dtype=torch.bool, device=dev)
        self.drone_crash = torch.zeros(E, D, dtype=torch.bool, device=dev)
        self.ball_prev = zeros(E, 3)
        # Skill bookkeeping: min distance of the ball to the target after the hit, landing point.
        self.miss = torch.full((E,), math.inf, device=dev)
        self.landed_at = zeros(E, 3)
        self.events: R.RallyEvents | None = None
        # The net rectangle (centre, in-plane axes) and team B's parked slot in skill modes: constants.
        net_h = cfg.court.net_height
        self._net_frame = torch.tensor(((0.0, 0.0, net_h / 2), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0)), device=dev)
        self._parked = torch.tensor((3.0, 0.0, 2.0), device=dev).expand(E, 1, 3)
        self.drone_out = torch.zeros(E, D, dtype=torch.bool, device=dev)  # this step's DRONE_OUT flags
        # Result of each env's last finished game (matches): 1 team A won, 0 team B won, 0.5 neither
        # (a timeout or a truncated game); NaN before the first one. Kept across the auto-reset.
        self.game_result = torch.full((E,), math.nan, device=dev)
        self.final_counters = {name: torch.zeros(E, device=dev) for name in R.COUNTER_NAMES}  # last episode's
        self.hover_thrust_action = 2.0 * self.params.mass * GRAVITY / self.params.max_thrust - 1.0
        self.reset()

    # ----------------------------------------------------------------- spec
    def _build_spec(self) -> EnvSpec:
        cfg, n = self.cfg, self.n
        skill = skill_terms()
        skill_entry = ObsEntry((sum(t.size for t in skill),), terms=skill)
        policy_terms = skill + match_terms(n) if cfg.is_match else skill
        policy = ObsEntry((sum(t.size for t in policy_terms),), terms=policy_terms)
        D = self.num_drones
        state_terms = (
            ObsTerm("drones", 13 * D, "", "team", "every drone: pos, rot 6D, vel, own-team flag"),
            ObsTerm("ball", 6, "", "team", "ball position and velocity"),
            ObsTerm("targets", 3 * D, "m", "team", "skill targets"),
            ObsTerm("rally", 5, "", "", "as in the policy"),
            ObsTerm("time_left", 1, "fraction"),
            ObsTerm("agent_id", n, "one-hot"),
        )
        names = ACTION_NAMES[cfg.action]
        units = ("fraction",) + ("rad/s",) * 3 if cfg.action == "ctbr" else ("fraction",) * 4
        group = GroupSpec(
            n_agents=n,
            observations={
                "policy": policy,
                "skill": skill_entry,
                "state": ObsEntry((sum(t.size for t in state_terms),), terms=state_terms),
            },
            action_dim=4,
            action_names=names,
            action_units=units,
            action_scale=(1.0, cfg.max_body_rate, cfg.max_body_rate, cfg.max_body_rate / 2)
            if cfg.action == "ctbr"
            else (1.0,) * 4,
        )
        groups = {g: group for g in GROUPS} if cfg.is_match else {"team_a": group}
        return EnvSpec(
            task="drone_volleyball",
            groups=groups,
            control_dt=cfg.control_dt,
            physics_dt=cfg.control_dt / cfg.decimation,
            max_episode_steps=round(cfg.episode_length_s / cfg.control_dt),
            metadata={"mode": cfg.mode, "multirotor": cfg.multirotor, "controller": f"rate_pid ({cfg.action})"},
        )

    def expert_policy(self):
        """The scripted skills (solo modes) or two rule-based scripted teams (matches), ``obs -> actions``."""
        from sim.tasks.drone_volleyball.scripted import ScriptedSkills, scripted_team

        if not self.cfg.is_match:
            return ScriptedSkills(self)
        teams = [scripted_team(self), scripted_team(self)]
        return lambda obs: {g: teams[i](self, obs, i) for i, g in enumerate(GROUPS)}

    def hover_actions(self) -> dict[str, Tensor]:
        """Every drone at hover thrust with zero body rates (CTBR), ``{group: [E, n, 4]}``: the hover baseline."""
        act = self.zero_actions()
        for a in act.values():
            a[..., 0] = self.hover_thrust_action
        return act

    # ----------------------------------------------------------------- skill commands (matches)
    def set_skill_commands(
        self, skill_id: Tensor, target: Tensor, team_frame: bool = True, team: int | None = None
    ) -> None:
        """A strategy's commands, read by the next observation: ``skill_id`` (index into SKILLS) and
        ``target`` (each drone's team frame when ``team_frame``, else world), ``[E, D]`` / ``[E, D, 3]``
        for every drone, or ``[E, n]`` / ``[E, n, 3]`` for the drones of ``team`` (0 A, 1 B) only."""
        skill_id, target = skill_id.to(self.device).long(), target.to(self.device)
        drones = slice(None) if team is None else slice(team * self.n, (team + 1) * self.n)
        if team_frame:
            target = mirror(target, self.flip[:, drones])
        self.skill_id = self.skill_id.clone()
        self.skill_target = self.skill_target.clone()
        self.skill_id[:, drones] = skill_id
        self.skill_target[:, drones] = target

    # ----------------------------------------------------------------- reset
    def _reset_idx(self, env_ids: Tensor) -> None:
        cfg = self.cfg
        if cfg.is_match:
            # A random serving team per game: with a fixed one, rally-mode training would only
            # ever see one side serve.
            team = torch.randint(0, 2, (env_ids.numel(),), generator=self.rng, device=self.device)
            self.rules.reset(env_ids, serving_team=team, server=team * self.n)
            self._start_rally(env_ids)
        else:
            self._reset_skill(env_ids)
        self._reset_actuators(env_ids)
        self.miss[env_ids] = math.inf
        self.landed_at[env_ids] = 0.0

    def _reset_actuators(self, env_ids: Tensor) -> None:
        """Rotors at hover speed, rate-PID memory and previous actions cleared (episode or rally start)."""
        self.rotor_speed[env_ids] = self.model.hover_speed(self.params.mass * GRAVITY)
        mask = torch.zeros(self.num_envs, self.num_drones, dtype=torch.bool, device=self.device)
        self.rate_ctrl.reset(mask.index_fill(0, env_ids, True))
        self.last_action[env_ids] = 0.0
        self.cmd[env_ids] = 0.0

    def _place_drones(self, env_ids: Tensor, pos: Tensor) -> None:
        """Drones hover, level, at ``pos [k, D, 3]``."""
        self.drones.pos[env_ids] = pos
        quat = torch.zeros_like(pos[..., :1]).expand(*pos.shape[:-1], 4).clone()
        quat[..., 0] = 1.0
        # Team B faces -x (yaw 180 deg): the same body-frame policy plays both sides.
        flip = self.flip[env_ids]
        quat = torch.where(flip.unsqueeze(-1), torch.tensor((0.0, 0.0, 0.0, 1.0), device=self.device), quat)
        self.drones.quat[env_ids] = quat
        self.drones.vel[env_ids] = 0.0
        self.drones.ang_vel[env_ids] = 0.0
        self.touched[env_ids] = False

    def _start_rally(self, env_ids: Tensor) -> None:
        """Match: drones in formation in their halves, the ball above the server's paddle."""
        cfg, n, k, dev = self.cfg, self.n, env_ids.numel(), self.device
        L, W = cfg.court.length, cfg.court.width
        slot = torch.arange(n, device=dev, dtype=torch.float32)
        # Team A in its half (x < 0), spread across y; team B mirrored.
        xa = torch.full((n,), -L / 4, device=dev) - 0.5 * (slot % 2)
        ya = (slot - (n - 1) / 2) * (W / max(n, 1)) * 0.8
        base = torch.stack((xa, ya, torch.full((n,), cfg.serve_height, device=dev)), -1)
        pos = torch.cat((base, mirror(base, torch.ones(n, dtype=torch.bool, device=dev))), 0).expand(k, -1, -1).clone()
        server = self.rules.server[env_ids]
        # The server moves back to the service area of its half.
        serve_pos = torch.tensor((cfg.launch.serve_x, 0.0, cfg.serve_height), device=dev).expand(k, 3)
        serve_pos = mirror(serve_pos, self.rules.serving_team[env_ids] == 1)
        pos[torch.arange(k, device=dev), server] = serve_pos
        self._place_drones(env_ids, pos)
        self._reset_actuators(env_ids)
        drop = uniform(*cfg.launch.serve_height, (k,), self.rng, dev)
        self.ball_pos[env_ids] = serve_pos + torch.stack(
            (torch.zeros_like(drop), torch.zeros_like(drop), cfg.paddle_offset + drop), -1
        )
        self.ball_vel[env_ids] = 0.0
        self.ball_prev[env_ids] = self.ball_pos[env_ids]
        self.skill_id[env_ids] = SKILL_IDS["goto"]
        self.skill_target[env_ids] = pos

    def _reset_skill(self, env_ids: Tensor) -> None:
        cfg, lc, k, dev, rng = self.cfg, self.cfg.launch, env_ids.numel(), self.device, self.rng
        mode = cfg.mode
        self.rules.reset(env_ids)  # team A serves with drone 0
        if mode == "goto":
            box = lc.goto_box
            start = torch.stack([uniform(box[2 * i], box[2 * i + 1], (k,), rng, dev) for i in range(3)], -1)
            target = torch.stack([uniform(box[2 * i], box[2 * i + 1], (k,), rng, dev) for i in range(3)], -1)
            self._place_drones(env_ids, start.unsqueeze(1))
            self.ball_pos[env_ids] = torch.tensor((0.0, 0.0, -10.0), device=dev)  # parked below the floor
            self.ball_vel[env_ids] = 0.0
            self.skill_target[env_ids] = target.unsqueeze(1)
        elif mode == "serve":
            y = uniform(-lc.lateral / 2, lc.lateral / 2, (k,), rng, dev)
            start = torch.stack((torch.full_like(y, lc.serve_x), y, torch.full_like(y, cfg.serve_height)), -1)
            self._place_drones(env_ids, start.unsqueeze(1))
            drop = uniform(*lc.serve_height, (k,), rng, dev)
            self.ball_pos[env_ids] = start + torch.stack(
                (torch.zeros_like(y), torch.zeros_like(y), cfg.paddle_offset + drop), -1
            )
            self.ball_vel[env_ids] = 0.0
            self.skill_target[env_ids] = self._landing_target(k).unsqueeze(1)
        else:
            # pass / set / attack: a ball launched on a ballistic arc towards the drone.
            if mode == "pass":
                x0 = uniform(*lc.incoming_from_x, (k,), rng, dev)
                x1 = uniform(*lc.incoming_to_x, (k,), rng, dev)
                apex = uniform(*lc.incoming_apex, (k,), rng, dev)
                target = torch.tensor(lc.pass_target, device=dev).expand(k, 3)
                # Served by team B: A's first touch comes after the legal crossing.
                self.rules.reset(env_ids, serving_team=1, server=1)
                self.rules.served = self.rules.served.index_fill(0, env_ids, True)
            elif mode == "set":
                x0 = uniform(*lc.set_from, (k,), rng, dev)
                x1 = uniform(-2.0, -1.0, (k,), rng, dev)
                apex = uniform(4.0, 5.0, (k,), rng, dev)
                target = torch.tensor(lc.set_target, device=dev).expand(k, 3)
            else:  # attack
                x0 = uniform(*lc.attack_from, (k,), rng, dev)
                x1 = uniform(-1.5, -0.8, (k,), rng, dev)
                apex = uniform(4.0, 4.8, (k,), rng, dev)
                target = self._landing_target(k)
            y0 = uniform(-lc.lateral / 2, lc.lateral / 2, (k,), rng, dev)
            y1 = uniform(-lc.lateral / 2, lc.lateral / 2, (k,), rng, dev)
            z0 = torch.full_like(x0, 2.5)
            # Drag-free ballistic launch to reach `apex` and come down at (x1, y1) at hitting height 2.5 m.
            vz = torch.sqrt(2 * GRAVITY * (apex - z0))
            t = vz / GRAVITY + torch.sqrt(2 * (apex - 2.5) / GRAVITY)
            self.ball_pos[env_ids] = torch.stack((x0, y0, z0), -1)
            self.ball_vel[env_ids] = torch.stack(((x1 - x0) / t, (y1 - y0) / t, vz), -1)
            start = torch.stack(
                (
                    x1 + uniform(-0.8, 0.8, (k,), rng, dev),
                    y1 + uniform(-0.8, 0.8, (k,), rng, dev),
                    torch.full_like(x1, 1.8),
                ),
                -1,
            )
            self._place_drones(env_ids, start.unsqueeze(1))
            self.skill_target[env_ids] = target.unsqueeze(1)
        self.ball_prev[env_ids] = self.ball_pos[env_ids]
        self.skill_id[env_ids] = SKILL_IDS[mode]

    def _landing_target(self, k: int) -> Tensor:
        lc, dev = self.cfg.launch, self.device
        x = uniform(*lc.landing_x, (k,), self.rng, dev)
        y = uniform(-lc.lateral, lc.lateral, (k,), self.rng, dev)
        return torch.stack((x, y, torch.zeros_like(x)), -1)

    # ----------------------------------------------------------------- step
    def _apply_actions(self, actions: dict[str, Tensor]) -> None:
        act = torch.cat([actions[g] for g in self.spec.groups], dim=1).clamp(-1.0, 1.0)  # [E, D, 4]
        self.last_action = act
        self.cmd = act
        self.ball_prev = self.ball_pos
        self.hits = torch.zeros_like(self.hits)
        self.ball_ground = torch.zeros_like(self.ball_ground)
        self.ball_net = torch.zeros_like(self.ball_net)
        self.drone_crash = torch.zeros_like(self.drone_crash)

    def _control_step(self) -> None:
        cfg, dt, model, d = self.cfg, self.phys_dt, self.model, self.drones
        if cfg.action == "ctbr":
            thrust = (self.cmd[..., 0] + 1.0) * 0.5 * self.params.max_thrust
            speed_cmd = self.rate_ctrl(thrust, self.cmd[..., 1:] * self.rate_scale, d.ang_vel, dt)
        else:
            speed_cmd = (self.cmd + 1.0) * 0.5 * self.params.rotor_speed_max
        self.rotor_speed = model.motor_step(self.rotor_speed, speed_cmd, dt)
        thrust, torque = model.body_wrench(self.rotor_speed)
        e_z = torch.zeros_like(d.vel)
        e_z[..., 2] = thrust
        force = quat_rotate(d.quat, e_z) + model.drag_force(d.quat, d.vel)
        drones = rigid_body_step(d, force, torque, model.mass, model.inertia, dt)
        ground = drones.pos[..., 2] < self.params.collision_radius * 0.5
        court = cfg.court
        at_net = (drones.pos[..., 0].abs() < self.params.collision_radius) & (drones.pos[..., 2] < court.net_height)
        at_net = at_net & (drones.pos[..., 1].abs() < court.antenna_y)
        # Drone-drone collisions: centres closer than one collision radius (both crash).
        gap = torch.cdist(drones.pos, drones.pos)
        eye = torch.eye(self.num_drones, dtype=torch.bool, device=self.device)
        collide = ((gap < self.params.collision_radius) & ~eye).any(-1)
        self.drone_crash = self.drone_crash | ground | at_net | collide
        self.drones = drones
        self._ball_substep(dt)

    def _ball_substep(self, dt: float) -> None:
        cfg, bp = self.cfg, self.cfg.ball
        pos, vel = ball_flight_step(self.ball_pos, self.ball_vel, bp, dt)
        d = self.drones
        center, normal, pvel = paddle_surface(d.pos, d.quat, d.vel, d.ang_vel, self.paddle_offset)
        new_pos, new_vel, hit = ball_drone_contact(
            pos.unsqueeze(1), vel.unsqueeze(1), center, normal, cfg.paddle_radius, pvel, bp
        )  # [E, D, 3], [E, D]
        # At most one paddle per substep: the first drone in contact (contacts of two paddles at once are rare).
        first = hit.long().argmax(-1)
        any_hit = hit.any(-1)
        idx = torch.arange(self.num_envs, device=self.device)
        hit_one = torch.nn.functional.one_hot(first, self.num_drones).bool() & any_hit.unsqueeze(-1)
        pos = torch.where(any_hit.unsqueeze(-1), new_pos[idx, first], pos)
        vel = torch.where(any_hit.unsqueeze(-1), new_vel[idx, first], vel)
        # The net: a rectangle in the plane x = 0.
        court = cfg.court
        net_c, u, v = (x.expand_as(pos) for x in self._net_frame)
        point = closest_point_on_rect(pos, net_c, u, v, court.antenna_y, court.net_height / 2)
        pos, vel, net_hit = resolve_sphere_contact(
            pos, vel, point, torch.zeros_like(vel), bp.radius, bp.restitution_net
        )
        pos, vel, ground_hit = ground_contact_ball(pos, vel, bp)
        self.landed_at = torch.where((ground_hit & ~self.ball_ground).unsqueeze(-1), pos, self.landed_at)
        self.ball_pos, self.ball_vel = pos, vel
        self.hits = self.hits | hit_one
        self.ball_net = self.ball_net | net_hit
        self.ball_ground = self.ball_ground | ground_hit

    # ----------------------------------------------------------------- after the physics
    def _update_observation_buffers(self) -> None:
        cfg = self.cfg
        # Once per step; terminations and rewards read self.drone_out.
        self.drone_out = drones_out_of_play(self._rules_view(self.drones.pos), self.n, cfg.court)[:, : self.num_drones]
        drones_out = self.drone_out
        crash = self.drone_crash
        hits = self.hits
        if not cfg.is_match:  # pad team B's empty slot for the rules
            pad = torch.zeros_like(hits)
            hits, crash, drones_out = (torch.cat((x, pad), 1) for x in (hits, crash, drones_out))
        self.events = self.rules.update(
            self.ball_prev, self.ball_pos, hits, self.ball_ground, self.ball_net, crash, drones_out, cfg.control_dt
        )
        self.touched = self.touched | self.hits
        if cfg.is_match:
            # Game mode: after a point the next rally starts from the serve (the rules picked the server).
            again = (self.events.rally_over & ~self.events.game_over).nonzero().squeeze(-1)
            if again.numel() > 0:
                self.rules.new_rally(again)
                self._start_rally(again)
        if not cfg.is_match and cfg.mode in ("pass", "set"):
            dist = torch.linalg.vector_norm(self.ball_pos - self.skill_target[:, 0], dim=-1)
            self.miss = torch.where(self.touched[:, 0], torch.minimum(self.miss, dist), self.miss)

    def _rules_view(self, pos: Tensor) -> Tensor:
        """Drone positions as the rules see them, ``[E, 2n, 3]`` (skills: team B's slot parked in B's half)."""
        if self.cfg.is_match:
            return pos
        return torch.cat((pos, self._parked), 1)

    def _team_obs(self) -> tuple[Tensor, Tensor]:
        """``(skill [E, D, s], policy [E, D, p])`` in each drone's team frame."""
        d, flip, E, D = self.drones, self.flip, self.num_envs, self.num_drones
        zrot = torch.tensor((0.0, 0.0, 0.0, 1.0), device=self.device)
        quat_t = torch.where(flip.unsqueeze(-1), quat_mul(zrot.expand_as(d.quat), d.quat), d.quat)
        center = d.pos + quat_rotate(d.quat, self.paddle_offset.expand_as(d.pos))
        ball = self.ball_pos.unsqueeze(1)
        skill = torch.cat(
            (
                mirror(d.pos, flip),
                matrix_to_6d(quat_to_matrix(quat_t)),
                mirror(d.vel, flip),
                d.ang_vel,
                mirror(ball - center, flip),
                mirror(self.ball_vel.unsqueeze(1).expand(E, D, 3), flip),
                mirror(self.skill_target - d.pos, flip),
                torch.nn.functional.one_hot(self.skill_id, len(SKILLS)).float(),
                self.touched.float().unsqueeze(-1),
                self.last_action,
            ),
            dim=-1,
        )
        if not self.cfg.is_match:
            return skill, skill
        rel = d.pos.unsqueeze(1) - d.pos.unsqueeze(2)  # [E, i, j, 3]: drone j minus drone i
        rel = mirror(rel, flip.unsqueeze(-1).expand(E, D, D))
        rows = torch.arange(D, device=self.device).unsqueeze(-1)
        others_t = rel[:, rows, self.others_idx].flatten(2)  # teammates then opponents, [E, D, 3 (D - 1)]
        return skill, torch.cat((skill, others_t, self._rally_features()), -1)

    def skill_observation(self) -> Tensor:
        """``[E, D, s]``: every drone's ``skill`` observation (team frame), e.g. for learned skills
        flying under commands a strategy just set."""
        return self._team_obs()[0]

    def _rally_features(self) -> Tensor:
        """``[E, D, 5]``: my team's touches / max, I touched last, my team is to serve, I serve, ball in my half."""
        ru, team = self.rules, self.team_of
        mine = ru.last_team.unsqueeze(-1) == team
        touches = torch.where(mine, ru.touches.unsqueeze(-1).float() / self.cfg.rules.max_touches, 0.0)
        me_last = ru.last_toucher.unsqueeze(-1) == torch.arange(self.num_drones, device=self.device)
        serving = (ru.serving_team.unsqueeze(-1) == team) & ~ru.served.unsqueeze(-1)
        server = ru.server.unsqueeze(-1) == torch.arange(self.num_drones, device=self.device)
        my_half = (self.ball_pos[:, 0:1] >= 0).long() == team
        return torch.stack((touches, me_last.float(), serving.float(), server.float(), my_half.float()), -1)

    def _observations(self) -> Obs:
        skill, policy = self._team_obs()
        state = self._state()
        out = {}
        for g_i, g in enumerate(self.spec.groups):
            sl = slice(g_i * self.n, (g_i + 1) * self.n)
            out[g] = {"policy": policy[:, sl], "skill": skill[:, sl], "state": state[:, sl]}
        return out

    def _state(self) -> Tensor:
        """Critic state per drone ``[E, D, state_dim]``: the whole scene in the drone's team frame."""
        d, E, D, n = self.drones, self.num_envs, self.num_drones, self.n
        parts = []
        for flip_team in (False, True):
            f = torch.full((E, D), flip_team, device=self.device)
            own = (self.team_of == int(flip_team)).float().expand(E, D).unsqueeze(-1)
            drones = torch.cat((mirror(d.pos, f), matrix_to_6d(quat_to_matrix(d.quat)), mirror(d.vel, f), own), -1)
            fb = torch.full((E,), flip_team, device=self.device)
            ball = torch.cat((mirror(self.ball_pos, fb), mirror(self.ball_vel, fb)), -1)
            parts.append(torch.cat((drones.flatten(1), ball, mirror(self.skill_target, f).flatten(1)), -1))
        glob = torch.where(self.flip.unsqueeze(-1), parts[1].unsqueeze(1), parts[0].unsqueeze(1))  # [E, D, g]
        time_left = (1.0 - self.episode_step.float() / self.max_episode_steps).view(E, 1, 1).expand(E, D, 1)
        agent_id = torch.eye(n, device=self.device).repeat(D // n, 1).expand(E, D, n)
        return torch.cat((glob, self._rally_features(), time_left, agent_id), -1)

    # ----------------------------------------------------------------- rewards, terminations
    def _terminations(self) -> tuple[Tensor, dict[str, Tensor]]:
        ev, cfg = self.events, self.cfg
        crash = self.drone_crash.any(-1) | ~torch.isfinite(self.drones.pos).all(-1).all(-1)
        out = self.drone_out.any(-1)
        if cfg.is_match:
            # Drone faults are points for the other team (the rules); only the game's end (or
            # non-finite physics) ends an episode, so a game to N points survives a crash.
            finite = torch.isfinite(self.drones.pos).all(-1).all(-1) & torch.isfinite(self.ball_pos).all(-1)
            reasons = {"crash": self.drone_crash.any(-1), "out": out, "game_over": ev.game_over, "non_finite": ~finite}
            return ev.game_over | ~finite, reasons
        if cfg.mode == "goto":
            return crash | out, {"crash": crash, "out": out}
        # Ball skills end when the ball lands, the rally ends, or the drone touches twice.
        double = self.hits.any(-1) & (self.touched & ~self.hits).any(-1)
        ended = self.ball_ground | ev.rally_over | double
        return crash | out | ended, {"crash": crash, "out": out, "ball_down": ended}

    def _rewards(self, terminated: Tensor) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        return self._match_rewards() if self.cfg.is_match else self._skill_rewards(terminated)

    def _upright(self) -> Tensor:
        q = self.drones.quat
        return 1 - 2 * (q[..., 1].square() + q[..., 2].square())  # R[2, 2], [E, D]

    def _skill_rewards(self, terminated: Tensor) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        rc, d, mode = self.cfg.skill_rewards, self.drones, self.cfg.mode
        crash = (self.drone_crash | self.drone_out).float()
        terms = {
            "upright": rc.upright * self._upright(),
            "ang_vel": rc.ang_vel * d.ang_vel.square().sum(-1),
            "crash": rc.crash * crash,
        }
        if mode == "goto":
            dist = torch.linalg.vector_norm(self.skill_target - d.pos, dim=-1)
            terms["approach"] = torch.exp(-dist)
        else:
            center = d.pos + quat_rotate(d.quat, self.paddle_offset.expand_as(d.pos))
            gap = torch.linalg.vector_norm(self.ball_pos.unsqueeze(1) - center, dim=-1)
            terms["approach"] = rc.approach * torch.exp(-gap) * (~self.touched).float()
            first_hit = self.events.valid_hit[:, :1] & ~(self.touched & ~self.hits)
            terms["hit"] = rc.hit * first_hit.float()
            end = terminated.unsqueeze(-1).float()
            ok, miss = self.skill_outcome()
            terms["delivery"] = rc.delivery * end * torch.exp(-miss / rc.delivery_sigma).unsqueeze(-1)
            if mode in ("serve", "attack"):
                # Pass and set end in the own court by design (no teammate plays on): no fault term there.
                terms["in_court"] = rc.in_court * end * ok.float().unsqueeze(-1)
                fault = self.events.rally_over & (self.events.fault_team == 0)
                terms["fault"] = rc.fault * fault.float().unsqueeze(-1)
        reward = torch.stack(list(terms.values())).sum(0)
        return {"team_a": reward}, {k: v.mean(-1) for k, v in terms.items()}

    def skill_outcome(self) -> tuple[Tensor, Tensor]:
        """``(success [E] bool, miss [E] m)`` of the current ball skill, valid at the end of the flight.

        serve / attack: the ball, hit by the drone, landed in the opponent court; miss = distance of
        the landing point to the landing target. pass / set: miss = closest distance of the ball to
        the target after the hit; success = miss < 1 m.
        """
        mode, E = self.cfg.mode, self.num_envs
        hit = self.touched[:, 0]
        if mode in ("serve", "attack"):
            landed = self.ball_ground | (self.landed_at.abs().sum(-1) > 0)
            xy = self.landed_at
            opp = in_court(xy, self.cfg.court) & (xy[:, 0] > 0)
            miss = torch.linalg.vector_norm((xy - self.skill_target[:, 0])[:, :2], dim=-1)
            miss = torch.where(hit & landed, miss, torch.full((E,), 10.0, device=self.device))
            return hit & landed & opp & ~self.ball_net, miss
        if mode in ("pass", "set"):
            miss = torch.where(hit, self.miss, torch.full((E,), 10.0, device=self.device)).clamp(max=10.0)
            return hit & (miss < 1.0), miss
        return torch.zeros(E, dtype=torch.bool, device=self.device), torch.zeros(E, device=self.device)

    def _match_rewards(self) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        rc, ev, team = self.cfg.match_rewards, self.events, self.team_of
        point = torch.where(
            ev.point_to.unsqueeze(-1) == team, 1.0, torch.where(ev.point_to.unsqueeze(-1) >= 0, -1.0, 0.0)
        )
        crash = (self.drone_crash | self.drone_out).float()
        gap = torch.linalg.vector_norm(self.ball_pos.unsqueeze(1) - self.drones.pos, dim=-1)
        my_half = (self.ball_pos[:, 0:1] >= 0).long() == team
        nearest = gap == torch.where(my_half, gap, math.inf).min(-1, keepdim=True).values
        terms = {
            "point": rc.point * point,
            "hit": rc.hit * ev.valid_hit.float(),
            "approach": rc.approach * torch.exp(-gap) * (nearest & my_half).float(),
            "crash": rc.crash * crash,
        }
        reward = torch.stack(list(terms.values())).sum(0)
        n = self.n
        return {"team_a": reward[:, :n], "team_b": reward[:, n:]}, {k: v.mean(-1) for k, v in terms.items()}

    def _episode_metrics(self, env_ids: Tensor) -> dict[str, Tensor]:
        if self.cfg.is_match:
            score = self.rules.score[env_ids].float()
            result = torch.where(score[:, 0] > score[:, 1], 1.0, torch.where(score[:, 0] < score[:, 1], 0.0, 0.5))
            self.game_result = self.game_result.index_put((env_ids,), result)
        counters = self.rules.pop_counters(env_ids)
        for k, v in counters.items():  # per env, kept across the auto-reset for match statistics
            self.final_counters[k] = self.final_counters[k].index_put((env_ids,), v)
        out = {f"events/{k}": v.mean() for k, v in counters.items()}
        if not self.cfg.is_match and self.cfg.mode != "goto":
            ok, miss = self.skill_outcome()
            out["metrics/success"] = ok[env_ids].float().mean()
            out["metrics/miss_m"] = miss[env_ids].mean()
            out["metrics/hit"] = self.touched[env_ids, 0].float().mean()
        if self.cfg.mode == "goto":
            dist = torch.linalg.vector_norm(self.skill_target - self.drones.pos, dim=-1)
            out["metrics/final_dist_m"] = dist[env_ids].mean()
        if self.cfg.is_match:
            out["metrics/win_a"] = (self.game_result[env_ids] == 1.0).float().mean()
        return out

    def step_metrics(self) -> dict[str, Tensor]:
        """Per-env metrics now: skills ``success``/``miss_m`` (final at the end of the flight), goto distance."""
        if self.cfg.is_match:
            return {"score_a": self.rules.score[:, 0].float(), "score_b": self.rules.score[:, 1].float()}
        if self.cfg.mode == "goto":
            return {"dist_m": torch.linalg.vector_norm(self.skill_target - self.drones.pos, dim=-1)[:, 0]}
        ok, miss = self.skill_outcome()
        return {"success": ok.float(), "miss_m": miss}
