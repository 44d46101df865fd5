"""HCSP's high level: a team strategy choosing, every decision step, what its drones' skills do.

``sim.make("drone_volleyball_strategy", num_envs=E)`` is a match (3v3 by default) seen from above
(same config as ``drone_volleyball``, ``VolleyballCfg``, with its ``strategy`` node):
groups ``team_a`` and ``team_b`` hold one agent each, the team's centralised strategy. One
``env.step`` lasts ``strategy.decision_steps`` control steps of the match, during which the skills fly the
drones: the rule layer (:class:`~sim.tasks.drone_volleyball.rule_strategy.RuleBasedStrategy`) turns the
team's choices into each drone's skill and target, and the skill controllers
(:class:`~sim.tasks.drone_volleyball.skills.ScriptedSkills`, or learned ones given with
:meth:`VolleyballStrategyEnv.set_skills`) act. The skills are frozen here, as in HCSP's stage 2.

Choices per team (discrete, ``GroupSpec.action_nvec``; REFERENCES.md: HCSP's high level is a
multi-discrete head per team):

    player      n + 1   who plays the ball: 0 = the nearest eligible drone, i = drone i - 1
    play        2       0 = build up (pass, set, attack by touch count), 1 = attack with the next touch
    hit_target  9       landing point of serves and attacks, a 3 x 3 grid of the opponent court
    formation   3       where the others wait: default, deep, wide

The constant choice :data:`RULE_BASED_CHOICE` reproduces the rule-based team in a game's opening rally.
After a side-out it does not: its formation goes by place in the rotation order, as the strategy
observes the drones, while the rule-based team's drones keep their own homes. So the scripted opponent
of training and evaluation is set per env with :meth:`VolleyballStrategyEnv.set_scripted_opponent`.

Observation per team (own frame, own half x < 0; ``strategy_terms``): ball position and velocity,
its predicted interception point (where it comes down through the hitting height), own and
opponent drones' positions and velocities, and the rally state. Reward: +-``win_reward`` per point
to the team that wins / loses it (a rally without a point, e.g. at the rally time limit, is 0). An
episode is one rally (``rules.points_to_win = 0``: the reward is the rally's result) or one game
(every point of it is rewarded when it is scored).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from sim.core.env import MultiAgentEnv, Obs
from sim.core.spec import EnvSpec, GroupSpec, ObsEntry, ObsTerm, choices_from_actions
from sim.core.teams import MatchTeams
from sim.tasks.drone_volleyball.config import GROUPS, VolleyballCfg, evaluation_overrides
from sim.tasks.drone_volleyball.court import mirror
from sim.tasks.drone_volleyball.env import DroneVolleyballEnv
from sim.tasks.drone_volleyball.match_env import VolleyballMatchEnv
from sim.tasks.drone_volleyball.rule_strategy import RuleBasedStrategy, TeamPlan
from sim.tasks.drone_volleyball.skills import ScriptedSkills

CHOICE_NAMES = ("player", "play", "hit_target", "formation")
# Landing points (team frame, opponent half x > 0): depth-major 3 x 3 grid; index 4 = (3.5, 0) is
# the rule-based team's target.
HIT_TARGETS = tuple((x, y, 0.0) for x in (1.5, 3.5, 5.3) for y in (-2.3, 0.0, 2.3))
# Waiting positions (team frame) of up to three drones; a team of n uses the first n.
FORMATIONS = (
    ((-4.0, -1.0, 2.0), (-2.6, 1.0, 2.0), (-1.6, -0.6, 2.2)),  # default (the rule-based team's)
    ((-4.6, -1.5, 2.0), (-4.6, 1.5, 2.0), (-2.8, 0.0, 2.2)),  # deep
    ((-3.5, -2.2, 2.0), (-3.5, 2.2, 2.0), (-1.8, 0.0, 2.2)),  # wide
)


def choice_sizes(n: int) -> tuple[int, ...]:
    """Options per choice (``action_nvec``) for teams of ``n`` drones."""
    return (n + 1, 2, len(HIT_TARGETS), len(FORMATIONS))


RULE_BASED_CHOICE = (0, 0, 4, 0)  # nearest player, build up, (3.5, 0), default formation


def strategy_terms(n: int) -> tuple[ObsTerm, ...]:
    """The team strategy's observation (own team frame)."""
    return (
        ObsTerm("ball_pos", 3, "m", "team", "ball position"),
        ObsTerm("ball_vel", 3, "m/s", "team", "ball velocity"),
        ObsTerm("interception", 3, "m", "team", "where the ball comes down through the hitting height"),
        ObsTerm("interception_valid", 1, "", "", "1 when the prediction found a descent"),
        ObsTerm("ball_to_my_half", 1, "", "", "1 when the interception point is in my half"),
        ObsTerm("own_pos", 3 * n, "m", "team", "own drones' positions, in rotation order (next server first)"),
        ObsTerm("own_vel", 3 * n, "m/s", "team", "own drones' velocities, in rotation order"),
        ObsTerm("opp_pos", 3 * n, "m", "team", "opponents' positions, in their rotation order"),
        ObsTerm("opp_vel", 3 * n, "m/s", "team", "opponents' velocities, in their rotation order"),
        ObsTerm("rally", 4, "", "", "served, my team serves, my touches / max, my team touched last"),
        ObsTerm("last_toucher", n, "one-hot", "", "own drone that touched last, in rotation order (zeros: none)"),
        ObsTerm("time_left", 1, "", "", "fraction of the rally's time limit left"),
    )


def plan_from_choices(env: DroneVolleyballEnv, choices: Tensor) -> TeamPlan:
    """``choices [E, 2, 4]`` long (per team, :data:`CHOICE_NAMES`) -> the rule layer's :class:`TeamPlan`.

    A strategy names drones by their place in the team's rotation order (as it observes them), so
    ``player`` i and the i-th formation place go to the drone in that place."""
    dev, n = env.device, env.n
    order = env.rules.rotation_order()  # [E, 2, n]
    targets = torch.tensor(HIT_TARGETS, device=dev)
    homes = torch.tensor(FORMATIONS, device=dev)[:, :n][choices[..., 3]]  # [E, 2, n, 3], by place
    pick = choices[..., 0] - 1
    player = torch.where(pick >= 0, order.gather(2, pick.clamp(min=0).unsqueeze(-1)).squeeze(-1), -1)
    return TeamPlan(
        player=player,
        attack_now=choices[..., 1] == 1,
        hit_target=targets[choices[..., 2]],
        home=torch.empty_like(homes).scatter_(2, order.unsqueeze(-1).expand_as(homes), homes),
    )


def default_choices(env: DroneVolleyballEnv) -> Tensor:
    """``[E, 2, 4]`` long: :data:`RULE_BASED_CHOICE` for both teams."""
    return torch.tensor(RULE_BASED_CHOICE, device=env.device).expand(env.num_envs, 2, 4).clone()


def strategy_observation(env: DroneVolleyballEnv, interception: tuple[Tensor, Tensor]) -> Tensor:
    """``[E, 2, obs_dim]``: each team's strategy observation in its own frame.

    ``interception = (valid [E], point [E, 3])`` from ``RuleBasedStrategy.interception_point``.
    """
    E, n, dev = env.num_envs, env.n, env.device
    ru, d = env.rules, env.drones
    valid, point = interception
    # Each team's drones in its rotation order (drone indices [E, 2, n]): a rally served by any drone
    # looks like one served by the first, so a strategy trained on first-drone serves plays them all.
    drone = ru.rotation_order() + torch.tensor((0, n), device=dev).view(1, 2, 1)
    out = []
    for t in (0, 1):
        flip = torch.full((E,), t == 1, device=dev)
        flip_d = torch.full((E, 2 * n), t == 1, device=dev)
        pos, vel = mirror(d.pos, flip_d), mirror(d.vel, flip_d)
        own, opp = drone[:, t].unsqueeze(-1).expand(E, n, 3), drone[:, 1 - t].unsqueeze(-1).expand(E, n, 3)
        p_team = mirror(point, flip)
        mine_last = ru.last_team == t
        last = (drone[:, t] == ru.last_toucher.unsqueeze(-1)).float()  # [E, n], zeros unless mine
        rally = torch.stack(
            (
                ru.served.float(),
                (ru.serving_team == t).float(),
                torch.where(mine_last, ru.touches.float() / env.cfg.rules.max_touches, 0.0),
                mine_last.float(),
            ),
            -1,
        )
        out.append(
            torch.cat(
                (
                    mirror(env.ball_pos, flip),
                    mirror(env.ball_vel, flip),
                    p_team,
                    valid.float().unsqueeze(-1),
                    (valid & (p_team[:, 0] < 0)).float().unsqueeze(-1),
                    pos.gather(1, own).flatten(1),
                    vel.gather(1, own).flatten(1),
                    pos.gather(1, opp).flatten(1),
                    vel.gather(1, opp).flatten(1),
                    rally,
                    last,
                    # The rally's clock, not the episode's: in a game to N points the episode is many rallies
                    # long, and its clock told the strategy (trained on one-rally episodes, where the two agree)
                    # that every rally was just starting. With the episode's, the shipped stage-3 team won 35% of
                    # opening rallies in 90 s episodes against 80% in 10 s ones.
                    (1.0 - ru.rally_time / env.cfg.rules.rally_time_limit_s).clamp(0.0, 1.0).unsqueeze(-1),
                ),
                -1,
            )
        )
    return torch.stack(out, 1)


class VolleyballStrategyEnv(MultiAgentEnv):
    """Team strategies over frozen skills; see the module docstring. Shapes: ``E`` envs, 1 agent per group."""

    task_name = "drone_volleyball_strategy"
    cfg_class = VolleyballCfg
    best_metric = ("metrics/win_a", "max")  # against the league's first (scripted) snapshot
    export_record_steps = 16  # a decision flies decision_steps control steps of a match
    renderer = "sim.tasks.drone_volleyball.render:MatchLevelRenderer"  # draws self.match
    skills_task = "drone_volleyball_coplay"  # HCSP: the task whose checkpoints are this level's learned skills
    # sim.compile=auto compiles the match's passes on a GPU (the skills and the rule layer stay eager). Not measured
    # for this level (no GPU lent yet; benchmarks/gpu_suite.py measures it): set as cable_load's, whose compiled step
    # an H200 runs 6.7x (4096 envs) to 4.1x (65,536) faster, a match step being, like it, many small launch-bound
    # kernels eagerly. Not on a CPU: unmeasured there.
    auto_compile_min_steps = {"cuda": 0}

    @classmethod
    def evaluation_overrides(cls) -> dict:
        """Observation noise off."""
        return evaluation_overrides()

    @classmethod
    def match_teams(cls) -> MatchTeams:
        """Its checkpoints play on the match env (``teams.VolleyballTeams.match_task``)."""
        return DroneVolleyballEnv.match_teams()

    @classmethod
    def has_native_kernels(cls, cfg: VolleyballCfg) -> bool:
        """Its match's observations in C (``kernels`` reaches the match)."""
        return cfg.is_match

    def __init__(
        self,
        cfg: VolleyballCfg,
        num_envs: int,
        device: str | torch.device = "cpu",
        seed: int = 0,
        compile: bool = False,
        kernels: str = "auto",
    ) -> None:
        if not cfg.is_match:
            raise ValueError(f"the strategy level plays matches (1v1, 2v2, 3v3); mode {cfg.mode!r} is a skill")
        # The match runs the physics (compiled if asked); this level is Python bookkeeping around it.
        self.match = VolleyballMatchEnv(cfg, num_envs, device, seed, compile, kernels)
        # The skills' actions are checked by count, not by a host sync every match step (check_deferred_actions).
        self.match.defer_action_checks = True
        self.rules_layer = RuleBasedStrategy(self.match)
        self.skills = ScriptedSkills(self.match)
        self.skill_policy: Callable[[Tensor], Tensor] | None = None  # learned skills (set_skills)
        self.scripted: tuple[int, Tensor] | None = None  # (team, [E] bool): that team is the rule-based team there
        super().__init__(cfg, num_envs, device, seed, compile=False)
        E = num_envs
        self.choices = default_choices(self.match)
        self._done = torch.zeros(E, dtype=torch.bool, device=self.device)
        self._result = torch.full((E,), 0.5, device=self.device)
        self._points = torch.zeros(E, device=self.device)  # team A's points minus team B's this decision
        self.game_result = torch.full((E,), 0.5, device=self.device)
        self._ending = torch.zeros(E, dtype=torch.bool, device=self.device)  # see _post_physics
        self.final_counters = {k: v.clone() for k, v in self.match.final_counters.items()}

    def _build_spec(self) -> EnvSpec:
        n = self.match.n
        terms = strategy_terms(n)
        entry = ObsEntry(shape=(sum(t.size for t in terms),), terms=terms)
        nvec = choice_sizes(n)
        group = GroupSpec(
            n_agents=1,
            observations={"policy": entry, "state": entry},
            action_dim=len(nvec),
            action_names=CHOICE_NAMES,
            action_units=("choice",) * len(nvec),
            action_scale=(1.0,) * len(nvec),  # choice values; metadata "choices" gives the options
            action_nvec=nvec,
        )
        K, inner = self.cfg.strategy.decision_steps, self.match.spec
        return EnvSpec(
            task=self.task_name,
            groups={g: group for g in GROUPS},
            control_dt=inner.control_dt * K,
            physics_dt=inner.physics_dt,
            max_episode_steps=-(-inner.max_episode_steps // K) + 1,  # the match ends its episodes first
            metadata={**inner.metadata, "level": "strategy", "decision_steps": K},
        )

    # ----------------------------------------------------------------- API
    def reset(self, seed: int | None = None) -> Obs:
        self.match.reset(seed=seed)
        self.choices = default_choices(self.match)
        return super().reset(seed)

    def randomize_episode_progress(self) -> Obs:
        """No-op: rallies end at different times by themselves, and the match's clock is the one
        that matters (randomising this level's step counter alone would only cut episodes early)."""
        return self._observations()

    def check_deferred_actions(self) -> None:
        """This level's deferred checks, then the match's (the skills' actions; its non-finite resets)."""
        super().check_deferred_actions()
        self.match.check_deferred_actions()

    @property
    def masked_resets(self) -> bool:
        """:attr:`MultiAgentEnv.masked_resets`, of this level and of the match it steps (set together)."""
        return self._masked_resets

    @masked_resets.setter
    def masked_resets(self, on: bool) -> None:
        self.match.masked_resets = on
        MultiAgentEnv.masked_resets.fset(self, on)

    def interception(self) -> tuple[Tensor, Tensor]:
        return self.rules_layer.interception_point()

    def set_skills(self, skill_policy: Callable[[Tensor], Tensor] | None) -> None:
        """Fly learned skills: ``skill_policy(skill obs [E, D, s]) -> actions [E, D, 4]`` for every
        drone of both teams (e.g. HCSP stage 3's skills, ``training.coselfplay``), or team A's only with
        ``strategy.team_b_skills=scripted``; None: the scripted ones."""
        self.skill_policy = skill_policy

    def set_scripted_opponent(self, group: str, mask: Tensor | None) -> None:
        """Where ``mask [E]`` (bool) is set, ``group`` is the rule-based team of ``evaluate.py``'s ``scripted``
        (its strategy, each drone at its own home, on the skills it flies here), whatever the group's actions
        say; None: nowhere. The self-play runner sets it where the league's scripted snapshot plays
        (``league.scripted_choice``): :data:`RULE_BASED_CHOICE` is that team only until the serve rotates
        (a strategy won 79% of games to 5 against the constant choice, 41% against the scripted team)."""
        if group not in GROUPS:
            raise ValueError(f"group must be one of {GROUPS}, got {group!r}")
        self.scripted = None if mask is None else (GROUPS.index(group), mask.to(device=self.device, dtype=torch.bool))

    def skill_step(self, choices: Tensor) -> dict[str, Tensor]:
        """Commands from ``choices [E, 2, 4]`` set on the match; returns every drone's skill action."""
        skill, target = self.rules_layer(plan=plan_from_choices(self.match, choices))
        if self.scripted is not None:
            team, mask = self.scripted
            rule_skill, rule_target = self.rules_layer()
            b = mask.unsqueeze(-1) & (self.match.team_of == team)  # [E, D]
            skill = torch.where(b, rule_skill, skill)
            target = torch.where(b.unsqueeze(-1), rule_target, target)
        self.match.set_skill_commands(skill, target, team_frame=False)
        if self.skill_policy is None:
            return self.skills()
        act = self.skill_policy(self.match.skill_observation())
        n = self.match.n
        if self.cfg.strategy.team_b_skills == "scripted":
            return {"team_a": act[:, :n], "team_b": self.skills()["team_b"]}
        return {"team_a": act[:, :n], "team_b": act[:, n:]}

    # ----------------------------------------------------------------- hooks
    def _reset_idx(self, env_ids: Tensor) -> None:
        pass  # the match resets its own envs when their rally (or game) ends

    def _apply_actions(self, actions: dict[str, Tensor]) -> None:
        nvec = self.spec.groups["team_a"].action_nvec
        per_team = torch.stack([actions[g][:, 0] for g in GROUPS], 1)  # [E, 2, 4]
        self.choices = choices_from_actions(per_team, nvec)
        self._done = torch.zeros_like(self._done)
        self._result = torch.full_like(self._result, 0.5)
        self._points = torch.zeros_like(self._points)

    def _control_step(self) -> None:
        for _ in range(self.cfg.strategy.decision_steps):
            _, _, terminated, truncated, _ = self.match.step(self.skill_step(self.choices))
            # Points of this episode only: after its end the env's next game has begun.
            point_to = self.match.events.point_to
            net = (point_to == 0).float() - (point_to == 1).float()
            self._points = self._points + torch.where(self._done, 0.0, net)
            # Kept where an episode ended now (no test of whether any did: that was a host sync each match step).
            new = (terminated | truncated) & ~self._done
            self._result = torch.where(new, self.match.game_result, self._result)
            for k, v in self.match.final_counters.items():
                self.final_counters[k] = torch.where(new, v, self.final_counters[k])
            self._done = self._done | new
            # Until the next decision the new rally is played by the rule-based choices.
            self.choices = torch.where(new.view(-1, 1, 1), default_choices(self.match), self.choices)

    def _update_observation_buffers(self) -> None:
        pass

    def _observations(self) -> Obs:
        obs = strategy_observation(self.match, self.interception())
        return {g: {"policy": obs[:, t : t + 1], "state": obs[:, t : t + 1]} for t, g in enumerate(GROUPS)}

    def _terminations(self) -> tuple[Tensor, dict[str, Tensor]]:
        return self._done, {"rally_over": self._done}

    def _rewards(self, terminated: Tensor) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        win = self._points * self.cfg.strategy.win_reward  # team A's
        return {"team_a": win.unsqueeze(-1), "team_b": -win.unsqueeze(-1)}, {"win_a": win}

    def _post_physics(self):
        out = super()._post_physics()
        # The envs whose episode ends this step, as step() finds them: _episode_metrics_per_env records their games.
        self._ending = out[3] | (self.episode_step >= self.max_episode_steps)
        return out

    def _episode_metrics_per_env(self) -> dict[str, Tensor]:
        """Per env ``[E]``: ``metrics/win_a``, ``metrics/draw`` and ``events/<name>`` of the rally (or game) this
        decision ended; where an episode ends this step it also records ``game_result`` (by mask, no index)."""
        self.game_result = torch.where(self._ending, self._result, self.game_result)
        res = self._result
        out = {"metrics/win_a": (res == 1.0).float(), "metrics/draw": (res == 0.5).float()}
        for k, v in self.final_counters.items():
            out[f"events/{k}"] = v.float()
        return out
