"""drone_volleyball matches (modes ``1v1``, ``2v2``, ``3v3``): two teams of ``n`` drones.

Groups ``team_a`` (drones ``0..n-1``) and ``team_b`` (``n..2n-1``), each seeing the court in its own
frame (team B's observations are rotated 180 deg about z), so one policy plays both sides. The
``policy`` observation adds teammates, opponents and the rally state to the ``skill`` one. A new
game starts with a random serving team; after a point the next rally starts from the serve (the
rules pick the server, rotating it through the team's drones); the episode ends with the game
(``rules.points_to_win``, 0: one rally). ``opening_server`` picks the first rally's server.
Hierarchical teams command their drones' skills with ``set_skill_commands`` before acting.

Levels built on a match (HCSP's skills in matches, :mod:`~sim.tasks.drone_volleyball.coplay`) own
one and hook into its step through :class:`MatchHooks` (:meth:`VolleyballMatchEnv.attach`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from sim.core.env import env_rows
from sim.core.native import attribute, check_kernels
from sim.core.randomization import uniform
from sim.core.snapshot import is_expanded
from sim.core.spec import ObsTerm
from sim.tasks.drone_volleyball import native
from sim.tasks.drone_volleyball import rules as R
from sim.tasks.drone_volleyball.config import SKILL_IDS, VolleyballCfg
from sim.tasks.drone_volleyball.court import mirror
from sim.tasks.drone_volleyball.env import DroneVolleyballEnv


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


class MatchHooks:
    """Where a level built on a match (it owns the match env) joins each step; no-ops here.

    Called by the match: :meth:`after_rules` once per step right after the rules judged it (the
    step's ``events`` are set; skill commands set here are in this step's observation);
    :meth:`after_reset` when games restart (before their first observation); :meth:`reward_terms`
    per-drone reward terms ``[E, D]`` added after the match's own; :meth:`episode_metrics` where
    episodes end (``done [E]``, before their reset), per env ``[E]`` (the match averages them over those envs).
    """

    def after_rules(self, match: VolleyballMatchEnv) -> None:
        pass

    def after_reset(self, match: VolleyballMatchEnv, env_ids: Tensor) -> None:
        pass

    def reward_terms(self, match: VolleyballMatchEnv) -> dict[str, Tensor]:
        return {}

    def episode_metrics(self, match: VolleyballMatchEnv, done: Tensor) -> dict[str, Tensor]:
        return {}


class VolleyballMatchEnv(DroneVolleyballEnv):
    """A match (modes 1v1, 2v2, 3v3); see the module docstring. ``D = 2 n``."""

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
            raise ValueError(f"mode {cfg.mode!r} is a solo skill: VolleyballSkillEnv plays it")
        self.num_drones = D = 2 * cfg.drones_per_team
        self.hooks = MatchHooks()
        super().__init__(cfg, num_envs, device, seed, compile)
        dev = self.device
        # Per drone: its teammates, then its opponents, in drone order ([D, D - 1] indices).
        others = [
            [j for j in range(D) if self.team_of[j] == self.team_of[i] and j != i]
            + [j for j in range(D) if self.team_of[j] != self.team_of[i]]
            for i in range(D)
        ]
        self.others_idx = torch.tensor(others, dtype=torch.long, device=dev).reshape(D, D - 1)
        # Result of each env's last finished game: 1 team A won, 0 team B won, 0.5 neither
        # (a timeout or a truncated game); NaN before the first one. Kept across the auto-reset.
        self.game_result = torch.full((num_envs,), math.nan, device=dev)
        self._ending = torch.zeros(num_envs, dtype=torch.bool, device=dev)  # see _post_physics
        # The skills the expert (expert_policy) commanded in the step it labelled last, [E, D]: imitation strata.
        self.expert_skill = torch.zeros_like(self.skill_id)
        # set_scripted_opponent: (team index, mask [E]) where the rule-based team plays a group, and that team.
        self.scripted: tuple[int, Tensor] | None = None
        self._scripted_team = None
        self._native_observations = self._use_native_kernels(kernels)
        if self._native_observations and compile:
            # The auto-reset's observations of a few envs: the C op alone, not a compiled graph around it (its guards
            # and wrappers cost ~0.2 ms a reset step, more than the op).
            self._observe_some, self._subset_untraced = self._observations_of, False
        self.reset()

    def _use_native_kernels(self, kernels: str) -> bool:
        """Whether the observations come from C (:mod:`sim.tasks.drone_volleyball.native`), as ``kernels``
        (``sim.kernels``, :data:`sim.core.native.KERNELS`) asks: "auto" wherever they can run, "native" always
        (ValueError where they cannot), "torch" never."""
        if check_kernels(kernels) == "torch":
            return False
        reason = native.unsupported(self)
        if reason is not None and kernels == "native":
            raise ValueError(f"drone_volleyball: kernels='native' cannot run here: {reason}")
        return reason is None

    @property
    def kernels(self) -> str:
        """What computes the observations: "native" (C) or "torch"."""
        return "native" if self._native_observations else "torch"

    def attach(self, hooks: MatchHooks) -> None:
        """Let a level built on this match join its steps (see :class:`MatchHooks`); one at a time."""
        self.hooks = hooks

    def expert_policy(self):
        """Two rule-based scripted teams, ``obs -> {"team_a": [E, n, 4], "team_b": [E, n, 4]}``.

        The teams' skill commands are the expert's own: they are kept in ``expert_skill`` (the strata) and
        the env's commands, which every drone observes (``skill``, ``target_rel``), are put back as they
        were. A flat student imitating the expert would otherwise read the expert's decisions in its own
        observation while learning, and miss them when it plays alone (its serve then flew backwards).
        """
        from sim.tasks.drone_volleyball.teams import scripted_team

        teams = [scripted_team(self), scripted_team(self)]

        def act(obs: dict) -> dict[str, Tensor]:
            out, self.expert_skill = self._commands_kept(
                lambda: {g: teams[i](self, obs, i) for i, g in enumerate(self.spec.groups)}
            )
            return out

        return act

    def _commands_kept(self, play: Callable[[], Any]) -> tuple[Any, Tensor]:
        """Run ``play`` (scripted teams, which set skill commands on the env) and put the env's commands, which
        every drone observes, back as they were; returns ``play``'s result and the skills it commanded ``[E, D]``."""
        skill_id, target = self.skill_id, self.skill_target  # set_skill_commands replaces, never writes into
        out = play()
        commanded = self.skill_id
        self.skill_id, self.skill_target = skill_id, target
        return out, commanded

    def set_scripted_opponent(self, group: str, mask: Tensor | None) -> None:
        """Where ``mask [E]`` (bool) is set, ``group`` is played by the rule-based team (``evaluate.py``'s
        ``scripted``), whatever the group's actions say; None: nowhere. The self-play runner sets it where the
        league's ``scripted`` snapshot plays (``league.env_scripted``): a fixed anchor among the learner's own
        snapshots. The team's commands are not left in the drones' observations (see :meth:`expert_policy`)."""
        groups = list(self.spec.groups)
        if group not in groups:
            raise ValueError(f"group must be one of {groups}, got {group!r}")
        if mask is None:
            self.scripted = None
            return
        if self._scripted_team is None:
            from sim.tasks.drone_volleyball.teams import scripted_team

            self._scripted_team = scripted_team(self)
        self.scripted = (groups.index(group), mask.to(device=self.device, dtype=torch.bool))

    def _apply_actions(self, actions: dict[str, Tensor]) -> None:
        if self.scripted is not None:
            team, mask = self.scripted
            group = list(self.spec.groups)[team]
            rule, _ = self._commands_kept(lambda: self._scripted_team(self, None, team))
            actions = {**actions, group: torch.where(mask.view(-1, 1, 1), rule, actions[group])}
        super()._apply_actions(actions)

    def imitation_strata(self) -> dict[str, Tensor]:
        """The skill the expert (:meth:`expert_policy`) commanded each drone in the step it labelled last,
        per group ``[E, n]`` (ids of ``SKILLS``), for ``imitation.balance``: a flat student imitating the
        scripted teams sees a serve in a few percent of its states only (the server's drop), so plain MSE
        would barely fit it."""
        n = self.n
        return {"team_a": self.expert_skill[:, :n], "team_b": self.expert_skill[:, n:]}

    def _extra_policy_terms(self) -> tuple[ObsTerm, ...]:
        return match_terms(self.n)

    # ----------------------------------------------------------------- reset
    def _reset_idx(self, env_ids: Tensor) -> None:
        super()._reset_idx(env_ids)  # the draws, then _reset_envs (compiled with compile)
        self.hooks.after_reset(self, env_ids)

    # The reset split in two (MultiAgentEnv._reset_idx): the draws, eager, then the tensor code, compiled with compile
    # (3v3 at 4096 envs, ~36 envs a reset: ~60 small ops, ~0.9 ms eager).
    def _reset_draws(self, k: int) -> dict[str, Tensor]:
        """The serving team, the opening server's slot (``opening_server="random"`` only, so "first" keeps its
        random stream), the serve's drop height and the game's command delay (``randomization.action_delay_steps``
        only), ``[k]`` each."""
        # A random serving team per game: with a fixed one, rally-mode training would only ever see one side serve.
        draws = {"team": torch.randint(0, 2, (k,), generator=self.rng, device=self.device)}
        if self.cfg.opening_server == "random":
            draws["slot"] = torch.randint(0, self.n, (k,), generator=self.rng, device=self.device)
        draws["drop"] = self._serve_drops(k)
        delay = self._action_delay_draws(k)  # last, and only with a delay configured: the other draws keep their stream
        if delay is not None:
            draws["delay"] = delay
        return draws

    def _reset_envs(self, env_ids: Tensor, draws: dict[str, Tensor]) -> None:
        team = draws["team"]
        self.rules.reset(env_ids, serving_team=team, server=team * self.n + draws.get("slot", 0))
        self._start_rally(env_ids, draws["drop"])  # resets the actuators too
        self.landed_at[env_ids] = 0.0
        self._set_action_delay(env_ids, draws.get("delay"))

    def _serve_drops(self, k: int) -> Tensor:
        """``[k]``: how far above the server's paddle the ball starts (uniform in ``cfg.launch.serve_height``)."""
        return uniform(*self.cfg.launch.serve_height, (k,), self.rng, self.device)

    def _start_rally(self, env_ids: Tensor, drop: Tensor | None = None) -> None:
        """Match: drones in formation in their halves, the ball ``drop [k]`` above the server's paddle (drawn here
        where None: not in compiled code).

        The formation rotates with the serve: each team's drones take the places in its rotation order
        (``RallyRules.rotation_order``, the next server first), so a rally served by any drone starts
        like one served by the first, up to which drone is where.
        """
        cfg, n, k, dev = self.cfg, self.n, env_ids.numel(), self.device
        L, W = cfg.court.length, cfg.court.width
        slot = torch.arange(n, device=dev, dtype=torch.float32)
        # Team A in its half (x < 0), spread across y; team B mirrored.
        xa = torch.full((n,), -L / 4, device=dev) - 0.5 * (slot % 2)
        ya = (slot - (n - 1) / 2) * (W / max(n, 1)) * 0.8
        base = torch.stack((xa, ya, torch.full((n,), cfg.serve_height, device=dev)), -1)
        places = torch.stack((base, mirror(base, torch.ones(n, dtype=torch.bool, device=dev))))  # [2, n, 3]
        order = self.rules.rotation_order(env_ids)  # [k, 2, n]: drone slot in each place
        index = order.unsqueeze(-1).expand(k, 2, n, 3)
        pos = torch.empty(k, 2, n, 3, device=dev).scatter_(2, index, places.expand(k, 2, n, 3)).flatten(1, 2)
        server = self.rules.server[env_ids]
        # The server moves back to the service area of its half.
        serve_pos = torch.tensor((cfg.launch.serve_x, 0.0, cfg.serve_height), device=dev).expand(k, 3)
        serve_pos = mirror(serve_pos, self.rules.serving_team[env_ids] == 1)
        pos[torch.arange(k, device=dev), server] = serve_pos
        self._place_drones(env_ids, pos)
        self._reset_actuators(env_ids)
        if drop is None:
            drop = self._serve_drops(k)
        self.ball_pos[env_ids] = serve_pos + torch.stack(
            (torch.zeros_like(drop), torch.zeros_like(drop), cfg.paddle_offset + drop), -1
        )
        self.ball_vel[env_ids] = 0.0
        self.ball_prev[env_ids] = self.ball_pos[env_ids]
        self.skill_id[env_ids] = SKILL_IDS["goto"]
        self.skill_target[env_ids] = pos

    # ----------------------------------------------------------------- after the physics
    def _after_rules(self) -> None:
        # Game mode: after a point the next rally starts from the serve (the rules picked the server). A game of one
        # rally (points_to_win 0) ends with every rally: no index to take, so no host sync, and the compiled pass
        # stays one graph (the data-dependent branch split it in two, and the rest then ran as several).
        if self.cfg.rules.points_to_win > 0:
            again = self.events.rally_over & ~self.events.game_over
            if self.masked_resets:  # a step that must not wait for the device: by mask
                self._start_rallies_where(again)
            else:
                again = again.nonzero().squeeze(-1)
                if again.numel() > 0:
                    drop = self._serve_drops(again.numel())
                    self.rules.new_rally(again)
                    self._start_rally(again, drop)
        self.hooks.after_rules(self)

    def _start_rallies_where(self, mask: Tensor) -> None:
        """The next rally of the envs where ``mask [E]`` (bool), with no index to wait for: every env's is started
        (from this step's ``_rally_drops``, one per env, as a masked reset draws) and kept where ``mask``, the others'
        state restored (each per-env state tensor merged, in place where the rally start wrote it in place: aliases
        stay aliases)."""
        tensors = [(path, attribute(self, path)) for path in self._rally_state_paths]
        saved = [t.clone() for _, t in tensors]
        ids = torch.arange(self.num_envs, device=self.device)
        self.rules.new_rally(ids)
        self._start_rally(ids, self._rally_drops)
        for (path, was), old in zip(tensors, saved, strict=True):
            now = attribute(self, path)
            merged = torch.where(mask.view(-1, *([1] * (now.dim() - 1))), now, old)
            if now is was:
                now.copy_(merged)
            else:
                parent, _, name = path.rpartition(".")
                setattr(attribute(self, parent) if parent else self, name, merged)

    def _sample_step_noise(self) -> None:
        # A game to N points with masked resets: every env's serve drop of a next rally, drawn each step outside the
        # compiled pass (_start_rallies_where keeps it where a rally ended).
        if self.masked_resets and self.cfg.rules.points_to_win > 0:
            self._rally_drops = self._serve_drops(self.num_envs)

    @property
    def masked_resets(self) -> bool:
        """:attr:`MultiAgentEnv.masked_resets`; in a game to N points the next rallies then start by mask too."""
        return self._masked_resets

    @masked_resets.setter
    def masked_resets(self, on: bool) -> None:
        DroneVolleyballEnv.masked_resets.fset(self, on)
        if not on:
            return
        self._rally_drops = torch.zeros(self.num_envs, device=self.device)  # see _sample_step_noise
        # The per-env state a rally start may write (_start_rallies_where), found once here, not in compiled code:
        # the match's own tensors (not a level's behind hooks), by attribute path.
        snap = self.state_snapshot()
        self._rally_state_paths = tuple(
            path
            for path, value in snap.items()
            if isinstance(value, Tensor)
            and not any(c in path for c in "#[")
            and not path.startswith("hooks.")
            and value.dim() > 0
            and value.shape[0] == self.num_envs
            and not is_expanded(value)
        )

    def _observation_entries(self, ids: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        if not self._native_observations:
            return super()._observation_entries(ids)
        cfg = self.cfg
        return native.observations(
            native.inputs(self),
            ids,
            self.n,
            cfg.paddle_offset,
            float(cfg.rules.max_touches),
            float(self.max_episode_steps),
            check_rows=False,
        )

    def _policy_obs(self, skill: Tensor, ids: Tensor | None = None) -> Tensor:
        """``[E, D, p]``: ``skill`` + teammates and opponents (relative, team frame) + the rally state."""
        take = env_rows(ids)
        pos, flip = take(self.drones.pos), take(self.flip)
        E, D = pos.shape[:2]
        rel = pos.unsqueeze(1) - pos.unsqueeze(2)  # [E, i, j, 3]: drone j minus drone i
        rel = mirror(rel, flip.unsqueeze(-1).expand(E, D, D))
        rows = torch.arange(D, device=self.device).unsqueeze(-1)
        others_t = rel[:, rows, self.others_idx].flatten(2)  # teammates then opponents, [E, D, 3 (D - 1)]
        return torch.cat((skill, others_t, self._rally_features(ids)), -1)

    # ----------------------------------------------------------------- rewards, terminations
    def _terminations(self) -> tuple[Tensor, dict[str, Tensor]]:
        ev = self.events
        out = self.drone_out.any(-1)
        # Drone faults are points for the other team (the rules); only the game's end (or
        # non-finite physics) ends an episode, so a game to N points survives a crash.
        finite = torch.isfinite(self.drones.pos).all(-1).all(-1) & torch.isfinite(self.ball_pos).all(-1)
        reasons = {"crash": self.drone_crash.any(-1), "out": out, "game_over": ev.game_over, "non_finite": ~finite}
        return ev.game_over | ~finite, reasons

    def _rewards(self, terminated: Tensor) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
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
        logged = {k: v.mean(-1) for k, v in terms.items()}
        for k, v in self.hooks.reward_terms(self).items():  # a level's terms, after the match's own
            reward = reward + v
            logged[k] = v.mean(-1)
        n = self.n
        return {"team_a": reward[:, :n], "team_b": reward[:, n:]}, logged

    def _post_physics(self):
        out = super()._post_physics()
        # The envs whose episode ends this step, as step() finds them (terminated, non-finite, out of time):
        # _episode_metrics_per_env records their games by this mask, for indexed and masked resets alike.
        self._ending = out[3] | (self.episode_step >= self.max_episode_steps)
        return out

    def _episode_metrics_per_env(self) -> dict[str, Tensor]:
        """Per env ``[E]``: ``events/<name>`` (the rules' counters), ``metrics/win_a`` and the level's metrics.
        Where an episode ends this step (before its reset) it also records the game: ``game_result``,
        ``final_counters`` (kept across the reset), the counters popped; by mask, with no index to wait for."""
        done = self._ending
        score = self.rules.score.float()
        result = torch.where(score[:, 0] > score[:, 1], 1.0, torch.where(score[:, 0] < score[:, 1], 0.0, 0.5))
        self.game_result = torch.where(done, result, self.game_result)
        table = self.rules.pop_counter_table_where(done)  # [K, E]
        final = torch.where(done, table, torch.stack([self.final_counters[name] for name in R.COUNTER_NAMES]))
        self.final_counters = dict(zip(R.COUNTER_NAMES, final.unbind(0), strict=True))
        out = {f"events/{name}": row for name, row in zip(R.COUNTER_NAMES, table.unbind(0), strict=True)}
        out["metrics/win_a"] = (self.game_result == 1.0).float()
        out.update(self.hooks.episode_metrics(self, done))
        return out

    def step_metrics(self) -> dict[str, Tensor]:
        """Per-env score now: ``score_a``, ``score_b``."""
        return {"score_a": self.rules.score[:, 0].float(), "score_b": self.rules.score[:, 1].float()}
