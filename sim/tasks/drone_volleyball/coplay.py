"""HCSP's stage 3 level: the low-level skills inside matches, commanded by the team strategies.

``sim.make("drone_volleyball_coplay", num_envs=E)`` is a match (3v3 by default; ``VolleyballCfg``
with its ``strategy`` node) in which every drone is an agent of one group, ``drones`` (``2 n``
agents: team A's, then team B's, each seeing the court in its own team frame), acting on the
``skill`` observation: one skill-conditioned low-level policy plays every drone of both teams
(self-play by shared weights). Before each observation the teams' strategies set the skill
commands (which skill, which target): the rule-based choice by default, or a learned strategy
given with :meth:`VolleyballCoplayEnv.set_strategy` (e.g. the stage-2 checkpoint, loaded by
``training.coselfplay``), deciding every ``strategy.decision_steps`` control steps as in stage 2;
``strategy.random_choice_prob`` of the decisions are drawn uniformly instead, so that the skills
learn every command and not only the few a deterministic strategy gives.

Skill outcomes are scored in the match (what a skill is for in a game, :class:`TouchScores`): a
touch made under a ``pass`` or ``set`` command succeeds when the ball then passes within 1 m of
the commanded target before the next touch or the rally's end; under ``serve`` or ``attack`` when
the ball then crosses the net legally and the opponents touch it or it lands in their court. A
flight cut short by the rally's time limit or a drone's crash is not scored.
Episode metrics ``metrics/<skill>_success`` (successes / attempts of the episodes that ended)
and ``metrics/skill_success`` (their mean over the four skills) measure it; the touching drone is
rewarded when its touch resolves (reward term ``delivery``: the solo skills' delivery and in-court
terms) on top of the match rewards.

The env wraps a :class:`~sim.tasks.drone_volleyball.match_env.VolleyballMatchEnv` (``self.match``,
the physics and rules) and joins its steps through the match's public hooks
(:class:`~sim.tasks.drone_volleyball.match_env.MatchHooks`): scoring and commanding after the
rules, the delivery reward term, the success metrics and the new games' first commands. It only
regroups the match's two team groups into one. The expert for imitation (``expert_policy``) is
the scripted skills on the same commands.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from sim.core.env import MultiAgentEnv, Obs
from sim.core.final_obs import FinalObs
from sim.core.spec import EnvSpec, GroupSpec, choices_from_actions
from sim.tasks.drone_volleyball import rules as R
from sim.tasks.drone_volleyball.ballistics import sync_free
from sim.tasks.drone_volleyball.config import GROUPS, SKILLS, VolleyballCfg, evaluation_overrides
from sim.tasks.drone_volleyball.match_env import MatchHooks, VolleyballMatchEnv
from sim.tasks.drone_volleyball.rule_strategy import RuleBasedStrategy
from sim.tasks.drone_volleyball.strategy import choice_sizes, default_choices, plan_from_choices, strategy_observation

GROUP = "drones"
SERVE, PASS, SET, ATTACK = (SKILLS.index(s) for s in ("serve", "pass", "set", "attack"))
BALL_SKILLS = ("serve", "pass", "set", "attack")
DELIVERY_RADIUS = 1.0  # m: a pass or set within this of its target succeeds (the criterion)
# A strategy: its team's observation [E, obs_dim] -> its actor's action [E, 4] in [-1, 1].
Strategy = Callable[[Tensor], Tensor]


class TouchScores:
    """Each env's pending touch (its outcome is decided by what the ball does next) and the
    episode's attempts / successes per skill; ``delivery [E, D]`` is the step's per-drone reward."""

    def __init__(self, match: VolleyballMatchEnv) -> None:
        E, dev, S = match.num_envs, match.device, len(SKILLS)
        self.pend_skill = torch.full((E,), -1, dtype=torch.long, device=dev)
        self.pend_drone = torch.zeros(E, dtype=torch.long, device=dev)
        self.pend_target = torch.zeros(E, 3, device=dev)
        self.pend_miss = torch.full((E,), torch.inf, device=dev)
        self.pend_crossed = torch.zeros(E, dtype=torch.bool, device=dev)
        self.attempts = torch.zeros(E, S, device=dev)  # this episode's, per skill
        self.successes = torch.zeros(E, S, device=dev)
        self.delivery = torch.zeros(E, match.num_drones, device=dev)  # this step's per-drone delivery reward
        self._unscored = torch.tensor((R.TIMEOUT, R.DRONE_CRASH, R.DRONE_OUT), device=dev)

    def reset(self, env_ids: Tensor) -> None:
        """A new episode in ``env_ids``: nothing pending, no attempts."""
        self.pend_skill = self.pend_skill.index_fill(0, env_ids, -1)
        self.attempts = self.attempts.index_fill(0, env_ids, 0.0)
        self.successes = self.successes.index_fill(0, env_ids, 0.0)

    def update(self, match: VolleyballMatchEnv) -> None:
        """Resolve the pending touch on a new touch or the rally's end; start a new pending touch
        (from the match's step ``events`` and the commands its drones flew)."""
        ev, E, dev = match.events, match.num_envs, match.device
        new_touch = ev.valid_hit.any(-1)
        toucher = ev.valid_hit.long().argmax(-1)
        self.delivery = torch.zeros_like(self.delivery)
        # 1) A new touch resolves the pending one (its flight ended at this touch).
        opponent = new_touch & (match.team_of[toucher] != match.team_of[self.pend_drone])
        self._resolve(match, new_touch, opponent_touched=opponent)
        # 2) Record the new touch under the command its drone flew this step.
        idx = torch.arange(E, device=dev)
        skill_now = match.skill_id[idx, toucher]
        ball_skill = (skill_now != SKILLS.index("goto")) & new_touch
        self.pend_skill = torch.where(new_touch, torch.where(ball_skill, skill_now, -1), self.pend_skill)
        self.pend_drone = torch.where(new_touch, toucher, self.pend_drone)
        self.pend_target = torch.where(new_touch.unsqueeze(-1), match.skill_target[idx, toucher], self.pend_target)
        self.pend_miss = torch.where(new_touch, torch.inf, self.pend_miss)
        self.pend_crossed = self.pend_crossed & ~new_touch
        # 3) The flight so far.
        dist = torch.linalg.vector_norm(match.ball_pos - self.pend_target, dim=-1)
        self.pend_miss = torch.minimum(self.pend_miss, dist)
        self.pend_crossed = self.pend_crossed | ev.crossed
        # 4) The rally's end by a ball event resolves what is pending (a touch this step included);
        # a timeout or a drone's crash cuts the flight short: that touch is not scored.
        ball_end = ev.rally_over & ~torch.isin(ev.outcome, self._unscored)
        self._resolve(match, ball_end, opponent_touched=torch.zeros(E, dtype=torch.bool, device=dev))
        self.pend_skill = torch.where(ev.rally_over, -1, self.pend_skill)

    def _resolve(self, match: VolleyballMatchEnv, now: Tensor, opponent_touched: Tensor) -> None:
        """Score the pending touches of envs ``now [E]`` into ``attempts``/``successes`` and ``delivery``."""
        sk = self.pend_skill
        active = now & (sk >= 0)  # every update below adds 0 or keeps the value where not active: no host sync
        ev, rc = match.events, match.cfg.skill_rewards
        team = match.team_of[self.pend_drone]
        delivered = self.pend_miss < DELIVERY_RADIUS
        over = self.pend_crossed & (opponent_touched | (ev.point_to == team))
        ok = torch.where((sk == PASS) | (sk == SET), delivered, over) & active
        onehot = torch.nn.functional.one_hot(sk.clamp(min=0), len(SKILLS)).float() * active.float().unsqueeze(-1)
        self.attempts = self.attempts + onehot
        self.successes = self.successes + onehot * ok.float().unsqueeze(-1)
        reward = torch.where(
            (sk == PASS) | (sk == SET),
            rc.delivery * torch.exp(-self.pend_miss.clamp(max=1e3) / rc.delivery_sigma),
            rc.in_court * ok.float(),
        )
        reward = torch.where(active, reward, 0.0)
        drone = torch.nn.functional.one_hot(self.pend_drone, match.num_drones).float()
        self.delivery = self.delivery + drone * reward.unsqueeze(-1)
        self.pend_skill = torch.where(active, -1, sk)


def success_rates(attempts: Tensor, successes: Tensor, done: Tensor) -> dict[str, Tensor]:
    """``metrics/<skill>_success``, ``metrics/<skill>_attempts`` and ``metrics/skill_success`` of the episodes
    ending where ``done [E]`` (bool), from per-env counts ``[E, S]``, each ``[E]``: the attempts per env, the
    rates (pooled over those episodes) the same in every env (NaN-free: a skill nobody attempted reads 0 with
    ``<skill>_attempts`` 0).

    ``skill_success`` is the mean of the four skills' rates: pooled over touches, serves and
    passes (the most frequent) would hide a failing set or attack."""
    w = done.float().unsqueeze(-1)
    a, s = (attempts * w).sum(0), (successes * w).sum(0)  # sums of counts: exact, by mask (no index)
    E = attempts.shape[0]
    out = {}
    for name in BALL_SKILLS:
        i = SKILLS.index(name)
        out[f"metrics/{name}_success"] = (s[i] / a[i].clamp(min=1.0)).expand(E)
        out[f"metrics/{name}_attempts"] = attempts[:, i]
    out["metrics/skill_success"] = torch.stack([out[f"metrics/{k}_success"][0] for k in BALL_SKILLS]).mean().expand(E)
    return out


class VolleyballCoplayEnv(MultiAgentEnv, MatchHooks):
    """A match whose drones are one group flying the skills; see the module docstring.

    Shapes: ``E`` envs, ``D = 2 n`` drones (the agents of group ``drones``). The match's clock
    (``episode_step``) and generator (``rng``) are this env's.
    """

    task_name = "drone_volleyball_coplay"
    cfg_class = VolleyballCfg
    best_metric = ("metrics/skill_success", "max")  # skills scored in matches
    export_record_steps = 16  # a match step runs the strategy level and its skills
    renderer = "sim.tasks.drone_volleyball.render:MatchLevelRenderer"  # draws self.match

    @classmethod
    def evaluation_overrides(cls) -> dict:
        """Observation noise off."""
        return evaluation_overrides()

    def deployment_profile(self, group: str = GROUP) -> dict:
        """ROS deployment of the skills model, the games team's drones (:mod:`sim.tasks.drone_volleyball.deployment`):
        what export.py writes into the model's metadata."""
        from sim.tasks.drone_volleyball import deployment

        return deployment.deployment_profile(self.match)

    def deployment_constants(self, group: str = GROUP) -> dict:
        """The court's and the rule layer's constants the robot-side builder reads (``deployment``)."""
        from sim.tasks.drone_volleyball import deployment

        return deployment.deployment_constants(self.match)

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
            raise ValueError(f"the coplay level plays matches (1v1, 2v2, 3v3); mode {cfg.mode!r} is a skill")
        if compile:
            raise ValueError("drone_volleyball_coplay runs the strategies in Python each step: use sim.compile=false")
        self.match = VolleyballMatchEnv(cfg, num_envs, device, seed, compile=False, kernels=kernels)
        # This level checks the actions (step) before the match gets them: the match's own check would repeat it
        # with a host sync; deferred, it only counts (check_deferred_actions reads both).
        self.match.defer_action_checks = True
        self.n, self.num_drones = self.match.n, self.match.num_drones
        super().__init__(cfg, num_envs, device, seed, compile=False)
        self.rng = self.match.rng  # one generator: the match's resets and the random choices draw from it
        self._strategies: list[Strategy | None] = [None, None]
        self.scores = TouchScores(self.match)
        self.rules_layer = RuleBasedStrategy(self.match)
        self.choices = default_choices(self.match)
        self.match.attach(self)
        self.reset()

    @property
    def episode_step(self) -> Tensor:
        """``[E]`` long: the match's clock."""
        return self.match.episode_step

    @episode_step.setter
    def episode_step(self, value: Tensor) -> None:
        self.match.episode_step = value

    def _build_spec(self) -> EnvSpec:
        match = self.match.spec
        g = match.groups["team_a"]
        group = GroupSpec(
            n_agents=2 * self.n,
            observations={"policy": g.observations["skill"], "state": g.observations["state"]},
            action_dim=g.action_dim,
            action_names=g.action_names,
            action_units=g.action_units,
            action_scale=g.action_scale,
        )
        return EnvSpec(
            task=self.task_name,
            groups={GROUP: group},
            control_dt=match.control_dt,
            physics_dt=match.physics_dt,
            max_episode_steps=match.max_episode_steps,
            metadata={**match.metadata, "level": "skills in matches", "agents": "team A's drones, then team B's"},
        )

    # ----------------------------------------------------------------- API
    def reset(self, seed: int | None = None) -> Obs:
        return self._drones_obs(self.match.reset(seed))

    def randomize_episode_progress(self) -> Obs:
        return self._drones_obs(self.match.randomize_episode_progress())

    def step(self, actions: dict[str, Tensor]) -> tuple[Obs, dict[str, Tensor], Tensor, Tensor, dict]:
        """One match step with every drone's action ``actions["drones"] [E, 2n, 4]`` (team A's first);
        shapes as in :class:`~sim.core.env.MultiAgentEnv`, the match's episode statistics."""
        act, n = self._check_actions(actions)[GROUP], self.n
        obs, reward, terminated, truncated, info = self.match.step({"team_a": act[:, :n], "team_b": act[:, n:]})
        drones_obs, final = self._drones_obs(obs), info["final_obs"]
        # A match step that reset envs hands a FinalObs: kept lazy (built where read), as the match's own.
        is_lazy = isinstance(final, FinalObs)
        info["final_obs"] = final.map(self._drones_obs, drones_obs) if is_lazy else self._drones_obs(final)
        reward = {GROUP: torch.cat([reward[g] for g in GROUPS], 1)}
        return drones_obs, reward, terminated, truncated, info

    @property
    def masked_resets(self) -> bool:
        """The match's :attr:`~sim.core.env.MultiAgentEnv.masked_resets`: it steps and resets the envs."""
        return self.match.masked_resets

    @masked_resets.setter
    def masked_resets(self, on: bool) -> None:
        self.match.masked_resets = on

    def check_deferred_actions(self) -> None:
        """This level's deferred checks, then the match's (its non-finite resets under masked resets)."""
        super().check_deferred_actions()
        self.match.check_deferred_actions()

    def step_metrics(self) -> dict[str, Tensor]:
        return self.match.step_metrics()

    def hover_actions(self) -> dict[str, Tensor]:
        """Every drone at hover thrust with zero body rates, ``{"drones": [E, 2n, 4]}``."""
        act = self.match.hover_actions()
        return {GROUP: torch.cat([act[g] for g in GROUPS], 1)}

    def set_strategy(self, team: int, strategy: Strategy | None) -> None:
        """Team ``team`` (0 A, 1 B) follows ``strategy`` (None: the rule-based choice)."""
        if team not in (0, 1):
            raise ValueError(f"team must be 0 or 1, got {team}")
        self._strategies[team] = strategy
        self.choices = default_choices(self.match)
        self._command(force=True)

    def expert_policy(self):
        """The scripted skills on the current commands, ``obs -> {"drones": [E, D, 4]}``."""
        from sim.tasks.drone_volleyball.skills import ScriptedSkills

        skills = ScriptedSkills(self.match)
        return lambda obs: {GROUP: torch.cat([a for a in skills(obs).values()], 1)}

    def imitation_strata(self) -> dict[str, Tensor]:
        """The skill each drone is commanded now, ``{"drones": [E, D]}`` (ids of ``SKILLS``), for ``imitation.balance``:
        a match's drone states are mostly flying to places (goto); attacks and sets are a few percent."""
        return {GROUP: self.match.skill_id}

    # ----------------------------------------------------------------- the match's hooks (MatchHooks)
    def after_rules(self, match: VolleyballMatchEnv) -> None:
        self.scores.update(match)
        self._command()

    def after_reset(self, match: VolleyballMatchEnv, env_ids: Tensor) -> None:
        self.scores.reset(env_ids)
        self.choices = self.choices.index_copy(0, env_ids, default_choices(match)[env_ids])
        self._command()  # the new episodes' first commands (episode_step 0: the strategies decide)

    def reward_terms(self, match: VolleyballMatchEnv) -> dict[str, Tensor]:
        return {"delivery": self.scores.delivery}

    def episode_metrics(self, match: VolleyballMatchEnv, done: Tensor) -> dict[str, Tensor]:
        return success_rates(self.scores.attempts, self.scores.successes, done)

    # ----------------------------------------------------------------- commands
    def _command(self, force: bool = False) -> None:
        """Strategies decide where due (every ``decision_steps`` of an episode), the rule layer
        turns the choices into every drone's skill and target."""
        m, sc = self.match, self.cfg.strategy
        due = (m.episode_step % sc.decision_steps == 0) | force
        learned = any(s is not None for s in self._strategies)
        # Choices are drawn for every env and kept where due. Where the step must not wait for the device
        # (sync_free), on every step; else only on steps where some env is due, as the random stream always was.
        if (learned or sc.random_choice_prob > 0) and (sync_free(m) or bool(due.any())):
            obs = strategy_observation(m, self.rules_layer.interception_point()) if learned else None
            nvec = choice_sizes(self.n)
            new = self.choices.clone()
            for t, strategy in enumerate(self._strategies):
                if strategy is None:
                    picked = default_choices(m)[:, t]
                else:
                    picked = choices_from_actions(strategy(obs[:, t]), nvec)
                if sc.random_choice_prob > 0:
                    rand = torch.rand(self.num_envs, 1, generator=m.rng, device=self.device)
                    uniform = torch.rand(self.num_envs, len(nvec), generator=m.rng, device=self.device)
                    drawn = (uniform * torch.tensor(nvec, device=self.device)).long()
                    picked = torch.where(rand < sc.random_choice_prob, drawn, picked)
                new[:, t] = torch.where(due.unsqueeze(-1), picked, new[:, t])
            self.choices = new
        skill, target = self.rules_layer(plan=plan_from_choices(m, self.choices))
        m.set_skill_commands(skill, target, team_frame=False)

    # ----------------------------------------------------------------- observations
    def _drones_obs(self, obs: Obs) -> Obs:
        """The match's per-team observations as this env's one group: ``skill`` -> ``policy``, ``state``."""
        return {
            GROUP: {
                "policy": torch.cat([obs[g]["skill"] for g in GROUPS], 1),
                "state": torch.cat([obs[g]["state"] for g in GROUPS], 1),
            }
        }

    def _observations(self) -> Obs:
        return self._drones_obs(self.match.observe())

    # The match steps and resets (step() and reset() above drive it); these hooks never run.
    def _reset_idx(self, env_ids: Tensor) -> None:
        raise NotImplementedError("the match resets its own envs")

    def _apply_actions(self, actions: dict[str, Tensor]) -> None:
        raise NotImplementedError("step() hands the actions to the match")

    def _control_step(self) -> None:
        raise NotImplementedError("the match runs the control loop")

    def _update_observation_buffers(self) -> None:
        raise NotImplementedError("the match updates its buffers")

    def _rewards(self, terminated: Tensor) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        raise NotImplementedError("the match computes the rewards (with this env's delivery term)")

    def _terminations(self) -> tuple[Tensor, dict[str, Tensor]]:
        raise NotImplementedError("the match decides terminations")
