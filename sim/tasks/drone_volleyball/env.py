"""drone_volleyball: multi-drone volleyball on our torch physics (VolleyBots / HCSP), the shared base.

Bodies: ``D`` quadrotors (``iris``, 1.52 kg) with a hitting disc on top (body +z normal), one ball
(5 g, r 0.1 m, gravity + quadratic drag), a net (the plane x = 0 up to 2.43 m) and the ground. Per
control step (50 Hz) the rate loop and physics run ``decimation`` times (200 Hz): rate PID ->
rotors (first-order lag) -> Newton-Euler; ball flight, then at most one contact per substep (the
nearest paddle, else the net, else the ground). :class:`~sim.tasks.drone_volleyball.rules.RallyRules`
turns the step's contacts into touches, faults and points. That loop runs on ``[..., 3]`` rows or, when
compiled or from 1024 envs (:func:`sim.physics.components.choose_layout`), on one tensor per vector
component (:mod:`sim.physics.components`): the same physics to float32 round-off, faster.

``sim.make("drone_volleyball", mode=...)`` builds :class:`DroneVolleyballEnv`, whose ``cfg.mode``
picks the env (``DroneVolleyballEnv(cfg, ...)`` returns it):

- solo skills (:class:`~sim.tasks.drone_volleyball.skill_env.VolleyballSkillEnv`), one drone of
  team A (group ``team_a``, 1 agent): ``goto``, ``serve``, ``pass``, ``set``, ``attack``;
- matches ``1v1``/``2v2``/``3v3`` (:class:`~sim.tasks.drone_volleyball.match_env.VolleyballMatchEnv`):
  groups ``team_a`` and ``team_b``, each seeing the court in its own frame (team B's observations
  are rotated 180 deg about z), so one policy plays both sides.

This base holds what both share: the bodies and their physics, skill commands, the team-frame
``skill`` observation and the critic ``state``. Observation entries per drone: ``skill`` (own
state, ball, skill id + target: what a low-level skill sees, the same layout in every mode),
``policy`` (the mode's: skills = ``skill``; matches add teammates, opponents and the rally state)
and ``state`` (critic).

Action per drone (4, in [-1, 1]): ``ctbr``: collective thrust (0 .. max) and body rates; ``rotor``:
normalised rotor speeds (VolleyBots' action).

This module holds the env's state, skill commands, actions, the rules' step and the resets' placement; beside it:
``spec.py`` (observation and action layout), ``physics.py`` (the torch control loop, rows or components) and
``observations.py`` (the ``skill``, rally and critic ``state`` entries in torch; ``native.py`` their C twin).

Shapes: E = num_envs, D = drones (2 n in matches, 1 in skills), R = rotors.
"""

from __future__ import annotations

from abc import abstractmethod

import torch
from torch import Tensor

from sim.core.env import MultiAgentEnv, Obs
from sim.core.randomization import DelayBuffer
from sim.core.spec import EnvSpec, ObsTerm
from sim.core.teams import MatchTeams
from sim.physics import components as soa
from sim.physics.controllers import RatePIDController
from sim.physics.multirotor import MultirotorModel, MultirotorParams
from sim.physics.rigid_body import GRAVITY, RigidBodyState
from sim.tasks.drone_volleyball import observations, physics
from sim.tasks.drone_volleyball import rules as R
from sim.tasks.drone_volleyball.config import VolleyballCfg, evaluation_overrides
from sim.tasks.drone_volleyball.court import drones_out_of_play, mirror
from sim.tasks.drone_volleyball.physics import LoopLayout, drones_within
from sim.tasks.drone_volleyball.spec import ACTION_NAMES, build_spec, skill_terms

__all__ = ["ACTION_NAMES", "DroneVolleyballEnv", "LoopLayout", "drones_within", "skill_terms"]


class DroneVolleyballEnv(MultiAgentEnv):
    """Batched multi-drone volleyball; see the module docstring. Abstract: the mode's subclass
    implements the episode start (``_reset_idx``), ``_after_rules``, ``_policy_obs``, rewards,
    terminations and metrics."""

    task_name = "drone_volleyball"
    cfg_class = VolleyballCfg
    fresh_observations = True  # _observations_of makes every entry anew (cat/stack, or the C op; MultiAgentEnv)
    renderer = "sim.tasks.drone_volleyball.render:VolleyballRenderer"
    engines = {"mujoco": "sim.tasks.drone_volleyball.mujoco_engine:MujocoEngine"}  # sim-to-sim (docs/sim_to_sim.md)
    # sim.compile=auto compiles the skills' and the matches' passes on a GPU, as the strategy level's (strategy.py says
    # why; not measured on a GPU yet: benchmarks/gpu_suite.py does). Not on a CPU, where a compile costs minutes.
    auto_compile_min_steps = {"cuda": 0}

    def __new__(cls, cfg: VolleyballCfg | None = None, *args, **kwargs) -> DroneVolleyballEnv:
        if cls is DroneVolleyballEnv and cfg is not None:  # the registered task: the mode picks the env
            from sim.tasks.drone_volleyball.match_env import VolleyballMatchEnv
            from sim.tasks.drone_volleyball.skill_env import VolleyballSkillEnv

            cls = VolleyballMatchEnv if cfg.is_match else VolleyballSkillEnv
        return super().__new__(cls)

    @property
    def layout(self) -> str:
        """The control loop's memory layout, "rows" or "components" (:func:`sim.physics.components.choose_layout`)."""
        return self._loop.name

    def loop_compile_options(self) -> dict[str, bool]:
        """Vectorised where the loop runs component-major (:data:`sim.physics.components.VECTORISED_LOOP`)."""
        return self._loop.compile_options

    @classmethod
    def has_native_kernels(cls, cfg: VolleyballCfg) -> bool:
        """A match's observations in C (:mod:`sim.tasks.drone_volleyball.native`); the solo skills have none."""
        return cfg.is_match

    @classmethod
    def evaluation_overrides(cls) -> dict:
        """Observation noise off."""
        return evaluation_overrides()

    @classmethod
    def match_teams(cls) -> MatchTeams:
        """hover, scripted, rulebased:<skills>, flat and HCSP strategy checkpoints (``teams.py``)."""
        from sim.tasks.drone_volleyball.teams import VolleyballTeams

        return VolleyballTeams()

    def __init__(
        self,
        cfg: VolleyballCfg,
        num_envs: int,
        device: str | torch.device = "cpu",
        seed: int = 0,
        compile: bool = False,
    ) -> None:
        # The subclass sets self.num_drones (D) first; its __init__ ends with self.reset().
        self.n = cfg.drones_per_team
        self.decimation = cfg.decimation
        self.params = MultirotorParams.load(cfg.multirotor)
        super().__init__(cfg, num_envs, device, seed, compile)
        dev, E, D = self.device, num_envs, self.num_drones
        self.model = MultirotorModel(self.params, dev)
        self.hover_thrust_action = 2.0 * self.params.mass * GRAVITY / self.params.max_thrust - 1.0
        self.phys_dt = cfg.control_dt / cfg.decimation
        self.rate_ctrl = RatePIDController(self.model, (E, D))
        self.rate_scale = torch.tensor((cfg.max_body_rate, cfg.max_body_rate, cfg.max_body_rate / 2), device=dev)
        self.paddle_offset = torch.tensor((0.0, 0.0, cfg.paddle_offset), device=dev)
        zeros = lambda *s: torch.zeros(*s, device=dev)  # noqa: E731
        self.drones = RigidBodyState(zeros(E, D, 3), zeros(E, D, 4), zeros(E, D, 3), zeros(E, D, 3))
        self.rotor_speed = zeros(E, D, self.params.num_rotors)
        self.ball_pos, self.ball_vel = zeros(E, 3), zeros(E, 3)
        self.team_of = torch.arange(D, device=dev) // self.n  # drones 0..n-1 team A, n..2n-1 team B
        self.flip = (self.team_of == 1).expand(E, D)  # team B sees the court rotated
        # Rules run with n drones per team; skill tasks have one drone of team A (B's slot is empty).
        self.rules = R.RallyRules(E, self.n, cfg.court, cfg.rules, dev)
        self.skill_id = torch.zeros(E, D, dtype=torch.long, device=dev)
        self.skill_target = zeros(E, D, 3)  # world frame
        self.touched = torch.zeros(E, D, dtype=torch.bool, device=dev)
        self.last_action = zeros(E, D, 4)  # what each drone's policy sent last (observed)
        # The command latency (cfg.randomization): the first `delayed` drones' actions (team A's, or every drone's)
        # reach the rate loop `delay` control steps late, per env; before an episode's or rally's first sent action
        # arrives a drone flies the safe command, hover (as over ROS). A buffer of depth 0 (the default) passes.
        rnd = cfg.randomization
        self.delayed = D if rnd.action_delay_teams == "both" else min(self.n, D)
        self.action_delay = DelayBuffer(rnd.action_delay_steps[1], (E, self.delayed, 4), dev)
        hover = self.hover_thrust_action if cfg.action == "ctbr" else self._hover_rotor_action()
        self._safe_action = torch.tensor((hover, 0.0, 0.0, 0.0) if cfg.action == "ctbr" else (hover,) * 4, device=dev)
        # cmd: what the rate loop flies. Without a delay, the sent action itself (one tensor, as after every
        # _apply_actions: a compiled reset guards on aliasing); with one, a tensor of its own.
        self.cmd = self.last_action if self.action_delay.max_delay == 0 else zeros(E, D, 4)
        # Step contact flags (accumulated over the substeps of one control step).
        self.hits = torch.zeros(E, D, dtype=torch.bool, device=dev)
        self.ball_ground = torch.zeros(E, dtype=torch.bool, device=dev)
        self.ball_net = torch.zeros(E, dtype=torch.bool, device=dev)
        self.drone_crash = torch.zeros(E, D, dtype=torch.bool, device=dev)
        self.ball_prev = zeros(E, 3)
        self.landed_at = zeros(E, 3)  # where the ball first touched the ground this episode
        self.events: R.RallyEvents | None = None
        # The net rectangle (centre, in-plane axes) and the rules' empty slots (skills: team B's
        # drones parked in B's half): constants.
        net_h = cfg.court.net_height
        self._net_frame = torch.tensor(((0.0, 0.0, net_h / 2), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0)), device=dev)
        self._parked = torch.tensor((3.0, 0.0, 2.0), device=dev).expand(E, 2 * self.n - D, 3)
        self.drone_out = torch.zeros(E, D, dtype=torch.bool, device=dev)  # this step's DRONE_OUT flags
        self.final_counters = {name: torch.zeros(E, device=dev) for name in R.COUNTER_NAMES}  # last episode's
        self._loop = LoopLayout(self)  # see _control_loop

    # ----------------------------------------------------------------- spec
    def _build_spec(self) -> EnvSpec:
        return build_spec(self.cfg, self.num_drones, self.task_name, self._extra_policy_terms())

    def _extra_policy_terms(self) -> tuple[ObsTerm, ...]:
        """The ``policy`` terms after the ``skill`` ones (the mode's)."""
        return ()

    def hover_actions(self) -> dict[str, Tensor]:
        """Every drone at hover thrust with zero body rates (CTBR), ``{group: [E, n, 4]}``: the hover baseline."""
        act = self.zero_actions()
        for a in act.values():
            a[..., 0] = self.hover_thrust_action
        return act

    def _hover_rotor_action(self) -> float:
        """The ``rotor`` action that holds every rotor at hover speed."""
        speed = float(torch.as_tensor(self.model.hover_speed(self.params.mass * GRAVITY)).flatten()[0])
        return 2.0 * speed / self.params.rotor_speed_max - 1.0

    def _action_delay_draws(self, k: int) -> Tensor | None:
        """``[k]`` command delays (control steps) of the envs an episode reset starts, uniform in
        ``cfg.randomization.action_delay_steps``; None where no delay is configured. A fixed delay draws nothing."""
        lo, hi = self.cfg.randomization.action_delay_steps
        if hi == 0:
            return None
        if lo == hi:
            return torch.full((k,), lo, dtype=torch.long, device=self.device)
        return torch.randint(lo, hi + 1, (k,), generator=self.rng, device=self.device)

    def _set_action_delay(self, env_ids: Tensor, delay: Tensor | None) -> None:
        """The envs ``env_ids [k]`` fly with the command delays ``delay [k]`` (from :meth:`_action_delay_draws`)."""
        if delay is not None:
            self.action_delay.set_delay(env_ids, delay)

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

    # ----------------------------------------------------------------- reset helpers
    def _reset_actuators(self, env_ids: Tensor) -> None:
        """Rotors at hover speed, rate-PID memory and previous actions cleared (episode or rally start)."""
        self.rotor_speed[env_ids] = self.model.hover_speed(self.params.mass * GRAVITY)
        self.rate_ctrl.reset(env_ids)
        self.last_action[env_ids] = 0.0
        self.cmd[env_ids] = 0.0
        if self.action_delay.max_delay > 0:  # the commands in flight are dropped: hover until the first new one
            self.action_delay.buf[env_ids] = self._safe_action

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

    # ----------------------------------------------------------------- step
    def _apply_actions(self, actions: dict[str, Tensor]) -> None:
        act = torch.cat([actions[g] for g in self.spec.groups], dim=1).clamp(-1.0, 1.0)  # [E, D, 4]
        self.last_action = act
        self.cmd = self._delayed(act)
        self.ball_prev = self.ball_pos
        self.hits = torch.zeros_like(self.hits)
        self.ball_ground = torch.zeros_like(self.ball_ground)
        self.ball_net = torch.zeros_like(self.ball_net)
        self.drone_crash = torch.zeros_like(self.drone_crash)

    def _delayed(self, act: Tensor) -> Tensor:
        """``act [E, D, 4]`` (sent this step) -> what the rate loop flies ``[E, D, 4]``: the delayed drones' actions
        of ``delay`` steps ago (hover before the first), the others' as sent."""
        if self.action_delay.max_delay == 0:
            return act
        k = self.delayed
        late = self.action_delay.push(act[:, :k])
        return late if k == act.shape[1] else torch.cat((late, act[:, k:]), dim=1)

    def _control_step(self) -> None:
        physics.control_step(self)

    def _ball_substep(self, dt: float) -> None:
        physics.ball_substep(self, dt)

    def _control_loop(self) -> None:
        if self.layout == "components":
            physics.control_loop_components(self)
        else:
            super()._control_loop()

    def _ball_substep_components(
        self,
        ball: tuple[soa.Vec3, soa.Vec3, soa.Vec3],
        flags: tuple[Tensor, Tensor, Tensor],
        body: soa.Body,
        rot: soa.Mat3,
        dt: float,
    ) -> tuple[tuple[soa.Vec3, soa.Vec3, soa.Vec3], tuple[Tensor, Tensor, Tensor]]:
        """:func:`~sim.tasks.drone_volleyball.physics.ball_substep_components` (one tick of the ball, components)."""
        return physics.ball_substep_components(self, ball, flags, body, rot, dt)

    # ----------------------------------------------------------------- after the physics
    def _update_observation_buffers(self) -> None:
        cfg = self.cfg
        # Once per step; terminations and rewards read self.drone_out.
        self.drone_out = drones_out_of_play(self._rules_view(self.drones.pos), self.n, cfg.court)[:, : self.num_drones]
        drones_out = self.drone_out
        crash = self.drone_crash
        hits = self.hits
        if self._parked.shape[1] > 0:  # pad the rules' empty slots (skills: team B's)
            pad = torch.zeros_like(hits)
            hits, crash, drones_out = (torch.cat((x, pad), 1) for x in (hits, crash, drones_out))
        self.events = self.rules.update(
            self.ball_prev, self.ball_pos, hits, self.ball_ground, self.ball_net, crash, drones_out, cfg.control_dt
        )
        self.touched = self.touched | self.hits
        self._after_rules()

    @abstractmethod
    def _after_rules(self) -> None:
        """Once per step, right after the rules judged it (``self.events``): the mode's bookkeeping."""

    def _rules_view(self, pos: Tensor) -> Tensor:
        """Drone positions as the rules see them, ``[E, 2n, 3]`` (skills: team B's slot parked in B's half)."""
        return torch.cat((pos, self._parked), 1) if self._parked.shape[1] > 0 else pos

    def _skill_obs(self, ids: Tensor | None = None) -> Tensor:
        """``[E, D, s]``: every drone's ``skill`` observation in its team frame (``[k, D, s]`` of the envs
        ``ids [k]`` only, when given)."""
        return observations.skill_obs(self, ids)

    @abstractmethod
    def _policy_obs(self, skill: Tensor, ids: Tensor | None = None) -> Tensor:
        """``[E, D, p]``: every drone's ``policy`` observation, from its ``skill`` one ``[E, D, s]`` (the envs
        ``ids [k]`` only, when given: ``skill`` is then ``[k, D, s]``)."""

    def skill_observation(self) -> Tensor:
        """``[E, D, s]``: every drone's ``skill`` observation (team frame), e.g. for learned skills
        flying under commands a strategy just set."""
        return self._skill_obs()

    def _rally_features(self, ids: Tensor | None = None) -> Tensor:
        """``[E, D, 5]``: my team's touches / max, I touched last, my team is to serve, I serve, ball in my half
        (``[k, D, 5]`` of the envs ``ids [k]`` only, when given)."""
        return observations.rally_features(self, ids)

    def _observations(self) -> Obs:
        return self._observations_of(None)

    def _observations_of(self, env_ids: Tensor | None) -> Obs:
        """The observations of the envs ``env_ids [k]`` (every env where ``None``); see the core's hook."""
        skill, policy, state = self._observation_entries(env_ids)
        out = {}
        for g_i, g in enumerate(self.spec.groups):
            sl = slice(g_i * self.n, (g_i + 1) * self.n)
            out[g] = {"policy": policy[:, sl], "skill": skill[:, sl], "state": state[:, sl]}
        return out

    def _observation_entries(self, ids: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        """Every drone's ``skill``, ``policy`` and ``state`` entries, ``[E, D, ...]`` each (``[k, D, ...]`` of the
        envs ``ids [k]`` only, when given)."""
        skill = self._skill_obs(ids)
        return skill, self._policy_obs(skill, ids), self._state(ids)

    def _state(self, ids: Tensor | None = None) -> Tensor:
        """Critic state per drone ``[E, D, state_dim]``: the whole scene in the drone's team frame (``[k, D,
        state_dim]`` of the envs ``ids [k]`` only, when given)."""
        return observations.critic_state(self, ids)
