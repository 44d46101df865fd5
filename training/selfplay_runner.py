"""Self-play training: the learner plays one group of a two-team task against frozen snapshots.

    python train.py task=drone_volleyball algo=selfplay                  # flat MAPPO self-play, 3v3
    python train.py task=drone_volleyball algo=selfplay task.mode=1v1 league.meta_solver=pfsp

The learner is the ``league.learner_group`` (``team_a``); the other group is played, env block by
env block, by ``league.opponents_per_iteration`` snapshots drawn each iteration from the league
(:class:`training.selfplay.League`: pool, Elo, payoff matrix, meta-solver). Observations of team
tasks are in each team's own frame, so a snapshot of the learner plays the other side unchanged.
Every finished game is recorded (``env.game_result``: 1 learner won, 0 lost, 0.5 neither) and a
snapshot of the learner joins the pool every ``league.snapshot_every`` iterations. The league
(pool files and ratings) is saved next to the checkpoints, in ``<run>/league/``.

With ``imitation.expert`` set, DAgger fits the learner first (team_b follows the expert meanwhile) and
the imitated policy joins the pool as the protected snapshot ``imitation``.

Evaluation plays the deterministic learner against a protected snapshot (the scripted team of
``league.scripted_choice`` or ``league.env_scripted``, else ``imitation``, else the initial policy) and logs
``eval/metrics/win_a``;
``checkpoints/best.pt`` keeps the best of it. A task whose env offers ``set_scripted_opponent
(group, mask [E])`` plays its own scripted team where that snapshot is drawn (the constant choice only stands in).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from covey_common.files import atomic_path
from policies.memory import zero_done
from sim.core.config import build_config
from training.runner import Runner
from training.selfplay import League, OpponentPool
from training.settings import SelfPlayCfg  # the settings dataclasses live there (a leaf module)


class SelfPlayRunner(Runner):
    """:class:`~training.runner.Runner` that trains one group against league opponents."""

    def __init__(self, cfg: Mapping[str, Any]) -> None:
        self.sp_cfg = build_config(SelfPlayCfg, cfg.get("league", {}), where="league")
        super().__init__(cfg)
        groups = list(self.env.spec.groups)
        if len(groups) != 2 or self.sp_cfg.learner_group not in groups:
            raise ValueError(
                f"self-play needs a two-group task with {self.sp_cfg.learner_group!r}; got groups {groups}"
            )
        self.learner = self.sp_cfg.learner_group
        self.opponent_group = next(g for g in groups if g != self.learner)
        a, b = (self.env.spec.groups[g] for g in groups)
        same_obs = {k: e.shape for k, e in a.observations.items()} == {k: e.shape for k, e in b.observations.items()}
        if not same_obs or a.action_dim != b.action_dim:
            raise ValueError("self-play needs both groups to share observation and action shapes")
        league_dir = self.run_dir / "league"
        pool = OpponentPool.load(league_dir) if (league_dir / "index.json").exists() else None
        # A CPU generator of its own: opponent sampling is host-side bookkeeping on any device.
        self.league = League(self.sp_cfg.league, torch.Generator().manual_seed(self.seed + 2), pool)
        state_file = league_dir / "league_state.pt"
        if pool is not None and state_file.exists():
            self.league.load_state_dict(torch.load(state_file, weights_only=True))
        if len(self.league.pool) == 0:  # a fresh league (the pool stores deep CPU copies of the weights)
            if self.sp_cfg.scripted_choice:
                scripted = copy.deepcopy(self.models[self.learner])
                scripted.set_constant_choice(self.sp_cfg.scripted_choice)
                self._seed_league("scripted", scripted)
            elif self.sp_cfg.env_scripted:
                if not callable(getattr(self.env, "set_scripted_opponent", None)):
                    raise ValueError(f"league.env_scripted: task {self.env.spec.task!r} has no set_scripted_opponent")
                # The weights only fill the slot: where this snapshot is drawn the env's scripted team plays.
                self._seed_league("scripted")
            if self.imitation_cfg.expert == "none":  # else the imitated policy seeds it (after_imitation)
                self._seed_league("initial")
        k = self.sp_cfg.opponents_per_iteration
        self.opponents = [copy.deepcopy(self.models[self.learner]).eval().requires_grad_(False) for _ in range(k)]
        self.opp_ids = torch.zeros(self.env.num_envs, dtype=torch.long, device=self.device)
        # Recurrent opponents: their memory per env [E, A, L, S], zeroed where a game ends and when redrawn.
        learner = self.models[self.learner]
        self.opp_memory = (
            learner.initial_memory(self.env.num_envs, learner.dims.n_agents, device=self.device)["actor"]
            if learner.recurrent
            else None
        )
        self.blocks: list[tuple[slice, int]] = []
        names = self.league.pool.names
        self._scripted_id = next((i for i in self.league.pool.ids if names[i] == "scripted"), None)
        self._results: list[tuple[Tensor, Tensor]] = []
        if len(self.league.pool) > 0:
            self._draw_opponents()

    def _seed_league(self, name: str, model: torch.nn.Module | None = None) -> None:
        """A protected snapshot ``name`` of ``model`` (default: the learner as it is now) joins the pool, rated from
        scratch (evaluation may play it: :meth:`_eval_opponent`)."""
        weights = (self.models[self.learner] if model is None else model).state_dict()
        self.league.add_snapshot(weights, 0, name=name, protected=True, from_learner=None)

    def after_imitation(self) -> None:
        # The policy PPO starts from is the imitated one: it joins the league (as the opponent evaluation plays
        # where no scripted snapshot leads the pool), so self-play measures progress from it, not from random weights.
        self._seed_league("imitation")
        self._draw_opponents()

    def trained_groups(self) -> list[str]:
        return [self.sp_cfg.learner_group]

    def _draw_opponents(self) -> None:
        """Sample this iteration's opponents and give each a contiguous block of envs."""
        E, k = self.env.num_envs, len(self.opponents)
        ids = self.league.sample_opponents(k)
        ids = [int(i) for i in ids]
        bounds = [round(i * E / k) for i in range(k + 1)]
        self.blocks = []
        for slot, (lo, hi, snap) in enumerate(zip(bounds[:-1], bounds[1:], ids, strict=True)):
            self.opponents[slot].load_state_dict(self.league.pool.get(snap))
            self.opp_ids[lo:hi] = snap
            self.blocks.append((slice(lo, hi), slot))
        if self.opp_memory is not None:
            self.opp_memory = torch.zeros_like(self.opp_memory)
        self._play_scripted(self.env, self.opp_ids == self._scripted_id if self._scripted_id is not None else None)

    def _play_scripted(self, env, mask: Tensor | None) -> None:
        """Where ``mask [E]`` is set, the env's own scripted team plays the opponent group (if it offers one)."""
        if self._scripted_id is not None and hasattr(env, "set_scripted_opponent"):
            env.set_scripted_opponent(self.opponent_group, mask)

    # ----------------------------------------------------------------- runner hooks
    def other_actions(self, obs: dict) -> dict[str, Tensor]:
        group_obs = obs[self.opponent_group]  # every entry; each opponent reads the ones it was built for
        g = self.env.spec.groups[self.opponent_group]
        out = torch.empty(self.env.num_envs, g.n_agents, g.action_dim, device=self.device)
        for block, slot in self.blocks:
            block_obs = {k: v[block] for k, v in group_obs.items()}
            if self.opp_memory is None:
                action, _ = self.opponents[slot].act(block_obs, generator=self.generator)
            else:
                action, _, memory = self.opponents[slot].act(
                    block_obs, generator=self.generator, memory=self.opp_memory[block]
                )
                self.opp_memory[block] = memory
            out[block] = action.clamp(-1.0, 1.0)
        return {self.opponent_group: out}

    def after_env_step(self, terminated: Tensor, truncated: Tensor, info: dict) -> None:
        done = terminated | truncated
        if self.opp_memory is not None:
            self.opp_memory = zero_done(self.opp_memory, done)
        # Whole-batch copies, no nonzero(): selecting the finished games here would sync with the device
        # every step; end_iteration selects them once (opponents stay fixed within an iteration).
        score = self.env.game_result.clone() if self.learner == "team_a" else 1.0 - self.env.game_result
        self._results.append((done, score))

    def end_iteration(self) -> dict[str, Any]:
        row: dict[str, Any] = {}
        done = torch.stack([r[0] for r in self._results]).cpu() if self._results else torch.zeros(0, dtype=torch.bool)
        if done.any():
            scores = torch.stack([r[1] for r in self._results]).cpu()[done]
            ids = self.opp_ids.cpu().expand_as(done)[done]
            keep = ~torch.isnan(scores)
            self.league.record_results("learner", ids[keep].numpy(), scores[keep].numpy())
            row["selfplay/score_vs_pool"] = float(scores[keep].mean()) if keep.any() else float("nan")
            row["selfplay/games"] = int(keep.sum())
        self._results = []
        row["selfplay/elo_learner"] = self.league.elo.rating("learner")
        row["selfplay/pool_size"] = len(self.league.pool)
        if self.league.snapshot_due(self.state.iteration):
            self.league.add_snapshot(self.models[self.learner].state_dict(), self.state.global_step)
            self._save_league()
        self._draw_opponents()
        return row

    def _eval_opponent(self) -> int:
        """The snapshot evaluation plays: the scripted one, else the imitated policy, else the initial one."""
        ids, names = self.league.pool.ids, self.league.pool.names
        if self._scripted_id is not None:
            return self._scripted_id
        return next((i for i in ids if names[i] == "imitation"), ids[0])

    def eval_other_actions(self, env) -> Any:
        first = self._eval_opponent()
        scripted = first == self._scripted_id
        self._play_scripted(env, torch.full((env.num_envs,), scripted, dtype=torch.bool, device=env.device))
        actor = copy.deepcopy(self.models[self.learner]).eval().requires_grad_(False)
        actor.load_state_dict(self.league.pool.get(first))
        det = actor.deterministic_actor()
        group = self.opponent_group

        def act(obs: dict) -> dict[str, Tensor]:
            if actor.recurrent:  # a stateful actor: its memory restarts with each evaluation episode
                det.reset(env.episode_step == 0)
            return {group: det(obs[group])}

        return act

    def save(self, path, resumable: bool = False) -> None:
        super().save(path, resumable)
        self._save_league()

    def _save_league(self) -> None:
        league_dir = self.run_dir / "league"
        self.league.pool.save(league_dir)
        with atomic_path(league_dir / "league_state.pt") as tmp:
            torch.save(self.league.state_dict(), tmp)
