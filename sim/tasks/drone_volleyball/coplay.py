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

Skill outcomes are scored in the match (what a skill is for in a game): a touch made under a
``pass`` or ``set`` command succeeds when the ball then passes within 1 m of the commanded
target before the next touch or the rally's end; under ``serve`` or ``attack`` when the ball
then crosses the net legally and the opponents touch it or it lands in their court. A flight cut
short by the rally's time limit or a drone's crash is not scored.
Episode metrics ``metrics/<skill>_success`` (successes / attempts of the episodes that ended)
and ``metrics/skill_success`` (their mean over the four skills) measure it; the touching drone is rewarded when its
touch resolves (the solo skills' delivery and in-court terms) on top of the match rewards.

The expert for imitation (``expert_policy``) is the scripted skills on the same commands.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from sim.core.config import resolve_device
from sim.core.env import Obs
from sim.core.registry import register
from sim.core.spec import EnvSpec, GroupSpec, choices_from_actions
from sim.tasks.drone_volleyball import rules as R
from sim.tasks.drone_volleyball.config import SKILLS, VolleyballCfg
from sim.tasks.drone_volleyball.env import DroneVolleyballEnv
from sim.tasks.drone_volleyball.scripted import RuleBasedStrategy
from sim.tasks.drone_volleyball.strategy import choice_sizes, default_choices, plan_from_choices, strategy_observation

GROUP = "drones"
SERVE, PASS, SET, ATTACK = (SKILLS.index(s) for s in ("serve", "pass", "set", "attack"))
BALL_SKILLS = ("serve", "pass", "set", "attack")
DELIVERY_RADIUS = 1.0  # m: a pass or set within this of its target succeeds (the criterion)
# A strategy: its team's observation [E, obs_dim] -> its actor's action [E, 4] in [-1, 1].
Strategy = Callable[[Tensor], Tensor]


@register("drone_volleyball_coplay", VolleyballCfg)
class VolleyballCoplayEnv(DroneVolleyballEnv):
    """A match whose drones are one group flying the skills; see the module docstring.

    Shapes: ``E`` envs, ``D = 2 n`` drones (the agents of group ``drones``).
    """

    def __init__(
        self,
        cfg: VolleyballCfg,
        num_envs: int,
        device: str | torch.device = "cpu",
        seed: int = 0,
        compile: bool = False,
    ) -> None:
        if not cfg.is_match:
            raise ValueError(f"the coplay level plays matches (1v1, 2v2, 3v3); mode {cfg.mode!r} is a skill")
        if compile:
            raise ValueError("drone_volleyball_coplay runs the strategies in Python each step: use sim.compile=false")
        dev, E = resolve_device(device), num_envs
        self._strategies: list[Strategy | None] = [None, None]
        S = len(SKILLS)
        # The pending touch per env (its outcome is decided by what the ball does next).
        self.pend_skill = torch.full((E,), -1, dtype=torch.long, device=dev)
        self.pend_drone = torch.zeros(E, dtype=torch.long, device=dev)
        self.pend_target = torch.zeros(E, 3, device=dev)
        self.pend_miss = torch.full((E,), torch.inf, device=dev)
        self.pend_crossed = torch.zeros(E, dtype=torch.bool, device=dev)
        self.attempts = torch.zeros(E, S, device=dev)  # this episode's, per skill
        self.successes = torch.zeros(E, S, device=dev)
        self.delivery = torch.zeros(E, 2 * cfg.drones_per_team, device=dev)  # this step's per-drone delivery reward
        self._ready = False
        super().__init__(cfg, num_envs, device, seed, compile=False)
        self._unscored = torch.tensor((R.TIMEOUT, R.DRONE_CRASH, R.DRONE_OUT), device=self.device)
        self.rules_layer = RuleBasedStrategy(self)
        self.choices = default_choices(self)
        self._ready = True
        self.reset()

    def _build_spec(self) -> EnvSpec:
        match = super()._build_spec()
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
            task="drone_volleyball_coplay",
            groups={GROUP: group},
            control_dt=match.control_dt,
            physics_dt=match.physics_dt,
            max_episode_steps=match.max_episode_steps,
            metadata={**match.metadata, "level": "skills in matches", "agents": "team A's drones, then team B's"},
        )

    # ----------------------------------------------------------------- API
    def set_strategy(self, team: int, strategy: Strategy | None) -> None:
        """Team ``team`` (0 A, 1 B) follows ``strategy`` (None: the rule-based choice)."""
        if team not in (0, 1):
            raise ValueError(f"team must be 0 or 1, got {team}")
        self._strategies[team] = strategy
        self.choices = default_choices(self)
        self._command(force=True)

    def expert_policy(self):
        """The scripted skills on the current commands, ``obs -> {"drones": [E, D, 4]}``."""
        from sim.tasks.drone_volleyball.scripted import ScriptedSkills

        return ScriptedSkills(self)

    def success_rates(self, attempts: Tensor, successes: Tensor) -> dict[str, Tensor]:
        """``metrics/<skill>_success`` and ``metrics/skill_success`` from per-env counts ``[k, S]``
        (NaN-free: a skill nobody attempted reads 0 with ``<skill>_attempts`` 0).

        ``skill_success`` is the mean of the four skills' rates: pooled over touches, serves and
        passes (the most frequent) would hide a failing set or attack."""
        a, s = attempts.sum(0), successes.sum(0)
        out = {}
        for name in BALL_SKILLS:
            i = SKILLS.index(name)
            out[f"metrics/{name}_success"] = s[i] / a[i].clamp(min=1.0)
            out[f"metrics/{name}_attempts"] = a[i] / attempts.shape[0]
        out["metrics/skill_success"] = torch.stack([out[f"metrics/{k}_success"] for k in BALL_SKILLS]).mean()
        return out

    # ----------------------------------------------------------------- commands
    def _command(self, force: bool = False) -> None:
        """Strategies decide where due (every ``decision_steps`` of an episode), the rule layer
        turns the choices into every drone's skill and target."""
        sc = self.cfg.strategy
        due = (self.episode_step % sc.decision_steps == 0) | force
        learned = any(s is not None for s in self._strategies)
        if (learned or sc.random_choice_prob > 0) and bool(due.any()):
            obs = strategy_observation(self, self.rules_layer.interception_point()) if learned else None
            nvec = choice_sizes(self.n)
            new = self.choices.clone()
            for t, strategy in enumerate(self._strategies):
                if strategy is None:
                    picked = default_choices(self)[:, t]
                else:
                    picked = choices_from_actions(strategy(obs[:, t]), nvec)
                if sc.random_choice_prob > 0:
                    rand = torch.rand(self.num_envs, 1, generator=self.rng, device=self.device)
                    uniform = torch.rand(self.num_envs, len(nvec), generator=self.rng, device=self.device)
                    drawn = (uniform * torch.tensor(nvec, device=self.device)).long()
                    picked = torch.where(rand < sc.random_choice_prob, drawn, picked)
                new[:, t] = torch.where(due.unsqueeze(-1), picked, new[:, t])
            self.choices = new
        skill, target = self.rules_layer(plan=plan_from_choices(self, self.choices))
        self.set_skill_commands(skill, target, team_frame=False)

    # ----------------------------------------------------------------- hooks
    def _reset_all_idx(self, env_ids: Tensor) -> None:
        super()._reset_all_idx(env_ids)
        if not self._ready:
            return
        self.pend_skill = self.pend_skill.index_fill(0, env_ids, -1)
        self.attempts = self.attempts.index_fill(0, env_ids, 0.0)
        self.successes = self.successes.index_fill(0, env_ids, 0.0)
        self.choices = self.choices.index_copy(0, env_ids, default_choices(self)[env_ids])
        self._command()  # the new episodes' first commands (episode_step 0: the strategies decide)

    def _update_observation_buffers(self) -> None:
        super()._update_observation_buffers()
        self._score_touches()
        self._command()

    def _score_touches(self) -> None:
        """Resolve the pending touch on a new touch or the rally's end; start a new pending touch."""
        ev, E, dev = self.events, self.num_envs, self.device
        new_touch = ev.valid_hit.any(-1)
        toucher = ev.valid_hit.long().argmax(-1)
        self.delivery = torch.zeros_like(self.delivery)
        # 1) A new touch resolves the pending one (its flight ended at this touch).
        self._resolve(new_touch, opponent_touched=new_touch & (self.team_of[toucher] != self.team_of[self.pend_drone]))
        # 2) Record the new touch under the command its drone flew this step.
        idx = torch.arange(E, device=dev)
        skill_now = self.skill_id[idx, toucher]
        ball_skill = (skill_now != SKILLS.index("goto")) & new_touch
        self.pend_skill = torch.where(new_touch, torch.where(ball_skill, skill_now, -1), self.pend_skill)
        self.pend_drone = torch.where(new_touch, toucher, self.pend_drone)
        self.pend_target = torch.where(new_touch.unsqueeze(-1), self.skill_target[idx, toucher], self.pend_target)
        self.pend_miss = torch.where(new_touch, torch.inf, self.pend_miss)
        self.pend_crossed = self.pend_crossed & ~new_touch
        # 3) The flight so far.
        dist = torch.linalg.vector_norm(self.ball_pos - self.pend_target, dim=-1)
        self.pend_miss = torch.minimum(self.pend_miss, dist)
        self.pend_crossed = self.pend_crossed | ev.crossed
        # 4) The rally's end by a ball event resolves what is pending (a touch this step included);
        # a timeout or a drone's crash cuts the flight short: that touch is not scored.
        ball_end = ev.rally_over & ~torch.isin(ev.outcome, self._unscored)
        self._resolve(ball_end, opponent_touched=torch.zeros(E, dtype=torch.bool, device=dev))
        self.pend_skill = torch.where(ev.rally_over, -1, self.pend_skill)

    def _resolve(self, now: Tensor, opponent_touched: Tensor) -> None:
        """Score the pending touches of envs ``now [E]`` into ``attempts``/``successes`` and ``delivery``."""
        sk = self.pend_skill
        active = now & (sk >= 0)
        if not bool(active.any()):
            return
        ev, rc = self.events, self.cfg.skill_rewards
        team = self.team_of[self.pend_drone]
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
        drone = torch.nn.functional.one_hot(self.pend_drone, self.num_drones).float()
        self.delivery = self.delivery + drone * reward.unsqueeze(-1)
        self.pend_skill = torch.where(active, -1, sk)

    def _observations(self) -> Obs:
        skill, _ = self._team_obs()
        return {GROUP: {"policy": skill, "state": self._state()}}

    def _rewards(self, terminated: Tensor) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        match, terms = self._match_rewards()
        reward = torch.cat((match["team_a"], match["team_b"]), 1) + self.delivery
        return {GROUP: reward}, {**terms, "delivery": self.delivery.mean(-1)}

    def _episode_metrics(self, env_ids: Tensor) -> dict[str, Tensor]:
        out = super()._episode_metrics(env_ids)
        out.update(self.success_rates(self.attempts[env_ids], self.successes[env_ids]))
        return out
