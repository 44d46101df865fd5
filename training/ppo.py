"""Clipped PPO with GAE over agent groups: MAPPO (centralised critic on ``state``) and IPPO.

One :class:`~policies.ActorCritic` per agent group, one optimizer over all of them. The verbs, in
the order the runner calls them each iteration::

    actions = ppo.act(obs)                                         # T times, under inference_mode
    ppo.process_env_step(reward, terminated, truncated, info)
    ppo.compute_returns(obs)                                       # GAE from V(s_T)
    losses = ppo.update(progress)                                  # epochs x minibatches

Shapes: E envs, A agents of a group, T rollout steps. ``obs[group][entry]`` is
``[E, A, *shape]`` (the actor reads its ``dims.actor_inputs``, the critic its ``critic_inputs``),
``reward[group]`` ``[E, A]``, ``terminated``/``truncated`` ``[E]``.

Recurrent policies (``policy.memory=gru|lstm``) keep their state per env between ``act`` calls
(zeroed where an episode ended), store the state at the start of each rollout, and are updated on
minibatches of whole envs: the rollout window is replayed from that state with the state zeroed at
episode starts, and gradients flow through the window (truncated BPTT, as rsl_rl's recurrent PPO).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from policies.encoders import pick
from policies.memory import zero_done
from training.settings import PPOCfg  # the settings dataclasses live there (a leaf module)
from training.storage import RolloutStorage
from training.teacher import TEACHER_KEY, Teacher


class PPO:
    """The algorithm: acting, storing, GAE and the clipped update for every agent group."""

    loss_needs_mean = False  # whether _policy_terms reads the Gaussian mean (out[3] of ac.evaluate)

    def __init__(
        self,
        models: nn.ModuleDict,
        cfg: PPOCfg,
        num_envs: int,
        num_steps: int,
        device: torch.device,
        generator: torch.Generator,
    ) -> None:
        self.models, self.cfg, self.device, self.generator = models, cfg, device, generator
        self.optimizer = torch.optim.Adam(models.parameters(), lr=cfg.lr)
        # Set after imitation: the actor was fitted on the observation normaliser's current statistics,
        # and PPO's noisier rollouts would shift them under it (a 99% imitated serve fell to 91% in one
        # iteration); the critic's normaliser keeps learning.
        self.freeze_obs_normalizers = False
        # training.distributed.Distributed when data-parallel (set by the runner): gradients and loss
        # statistics (the adaptive schedule's KL) are averaged over ranks after each backward.
        self.dist: Any = None
        self.teacher = None
        if cfg.teacher.checkpoint:
            self.teacher = Teacher(cfg.teacher, {n: ac.dims.action_dim for n, ac in models.items()}, device)
        taught = set(self.teacher.actors) if self.teacher is not None else set()
        self.storage = {
            name: self._make_storage(ac, num_envs, num_steps, name in taught) for name, ac in models.items()
        }
        self._pending: dict[str, tuple[Any, ...]] = {}
        self._strata: dict[str, Tensor] | None = None  # the current step's (stratify), from act()
        # Truncation bootstrap deferred to the end of the rollout (groups whose critic is feed-forward on vector
        # inputs): each step's final critic observations [T, E, ...] and truncation flags [T, E].
        self._final_obs: dict[str, tuple[list[Tensor], Tensor]] = {
            name: self._final_obs_buffers(ac, num_envs, num_steps)
            for name, ac in models.items()
            if ac.critic_memory is None and all(i.kind == "vector" for i in ac.dims.critic_inputs)
        }
        # Recurrent groups: side -> state [E, A, L, S] before the next act (zeroed where episodes ended).
        self.memory: dict[str, dict[str, Tensor]] = {
            name: ac.initial_memory(num_envs, ac.dims.n_agents, device=device)
            for name, ac in models.items()
            if ac.recurrent
        }

    def _make_storage(self, ac: nn.Module, num_envs: int, num_steps: int, taught: bool = False) -> RolloutStorage:
        entries = {}
        for spec in (*ac.dims.actor_inputs, *ac.dims.critic_inputs):
            entries[spec.name] = (spec.shape, getattr(torch, spec.dtype))
        if taught:  # the teacher's action on each step, for the teacher term of the loss
            entries[TEACHER_KEY] = ((ac.dims.action_dim,), torch.float32)
        memory = {}
        if ac.actor_memory is not None:
            memory["actor"] = ac.actor_memory.state_shape
        if ac.critic_memory is not None:
            memory["critic"] = ac.critic_memory.state_shape
        return RolloutStorage(
            num_steps, num_envs, ac.dims.n_agents, entries, ac.dims.action_dim, self.device, memory, self.cfg.stratify
        )

    def _final_obs_buffers(self, ac: nn.Module, num_envs: int, num_steps: int) -> tuple[list[Tensor], Tensor]:
        T, E, A = num_steps, num_envs, ac.dims.n_agents
        obs = [
            torch.zeros(T, E, A, *spec.shape, dtype=getattr(torch, spec.dtype), device=self.device)
            for spec in ac.dims.critic_inputs
        ]
        return obs, torch.zeros(num_steps, num_envs, dtype=torch.bool, device=self.device)

    @property
    def learning_rate(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def _set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    # ----------------------------------------------------------------- rollout verbs
    def act(self, obs: dict[str, dict[str, Tensor]], strata: dict[str, Tensor] | None = None) -> dict[str, Tensor]:
        """Sample actions for every group; returns ``{group: [E, A, act_dim]}`` clamped to [-1, 1].

        ``strata``: each agent's stratum ``{group: [E, A]}`` for these observations (``cfg.stratify``).
        """
        if self.cfg.stratify and strata is None:
            raise ValueError("algo.stratify: act() needs the strata of the agents' states (env.imitation_strata())")
        self._strata = strata
        actions = {}
        for name, ac in self.models.items():
            group_obs = obs[name]
            store = self.storage[name]
            if ac.recurrent:
                memory = self.memory[name]
                if store.step == 0:
                    store.set_initial_memory(memory)
                action, log_prob, actor_mem = ac.act(group_obs, generator=self.generator, memory=memory["actor"])
                new_memory = {"actor": actor_mem}
                if ac.critic_memory is not None:
                    value, new_memory["critic"] = ac.value_step(group_obs, memory["critic"])
                else:
                    value = ac.value(group_obs)
            else:
                action, log_prob = ac.act(group_obs, generator=self.generator)
                value, new_memory = ac.value(group_obs), None
            stored = {k: group_obs[k] for k in store.obs if k != TEACHER_KEY}
            if TEACHER_KEY in store.obs:
                stored[TEACHER_KEY] = self.teacher.action(name, group_obs)
            self._pending[name] = (stored, action, log_prob, value, new_memory)
            actions[name] = action.clamp(-1.0, 1.0)
        return actions

    def process_env_step(self, rewards: dict[str, Tensor], terminated: Tensor, truncated: Tensor, info: dict) -> None:
        """Store the transition started by :meth:`act`.

        Truncated envs (time limit, not a terminal state) get ``r += gamma * V(final_obs)``: the
        critic's estimate of the return they would have collected, so GAE can cut the episode there
        like a termination. Terminated envs get no bootstrap. Recurrent states of finished envs
        restart from zeros.

        A feed-forward critic on vector inputs is the same network all rollout long, so its bootstrap
        waits for :meth:`compute_returns`: the final observations are kept here, and the critic then
        runs once on the truncated envs alone (a few per rollout) instead of on every env at every step.
        """
        done = terminated | truncated
        for name, ac in self.models.items():
            stored, action, log_prob, value, new_memory = self._pending.pop(name)
            reward = rewards[name]
            # (Without info["final_obs"], as from a caller stepping no env, there is nothing to bootstrap from.)
            if "final_obs" in info and name in self._final_obs:
                bufs, flags = self._final_obs[name]
                t = self.storage[name].step
                for buf, x in zip(bufs, pick(info["final_obs"][name], ac.dims.critic_inputs), strict=True):
                    buf[t].copy_(x)
                flags[t].copy_(truncated)
            elif "final_obs" in info:
                # The critic on every env's final observation, kept where truncated: one more critic pass per
                # step instead of a host sync to find the truncated envs (the rollout stays sync-free).
                critic_mem = new_memory.get("critic") if new_memory else None
                final_value = ac.value(info["final_obs"][name], critic_mem)
                trunc = truncated.view(-1, *([1] * (final_value.dim() - 1)))
                reward = reward + torch.where(trunc, self.cfg.gamma * final_value, 0.0)
            strata = self._strata[name] if self.cfg.stratify else None
            self.storage[name].add(stored, action, log_prob, value, reward, done, strata)
            if new_memory is not None:
                self.memory[name] = {side: zero_done(m, done) for side, m in new_memory.items()}

    def compute_returns(self, last_obs: dict[str, dict[str, Tensor]]) -> None:
        """GAE for every group from ``V(last_obs)``; checks the rollout for NaN/inf."""
        for name, ac in self.models.items():
            store = self.storage[name]
            if name in self._final_obs:
                self._bootstrap_truncated(name, ac, store)
            bad = store.check_finite()
            if bad is not None:
                raise FloatingPointError(f"non-finite {bad} in the rollout of group {name!r}")
            critic_mem = self.memory.get(name, {}).get("critic")
            store.compute_returns(ac.value(last_obs[name], critic_mem), self.cfg.gamma, self.cfg.lam)

    def _bootstrap_truncated(self, name: str, ac: nn.Module, store: RolloutStorage) -> None:
        """``r += gamma * V(final_obs)`` at the rollout's truncated (step, env) pairs, in one critic pass."""
        bufs, flags = self._final_obs[name]
        steps, envs = flags[: store.step].nonzero(as_tuple=True)  # the rollout's one host sync for this
        if steps.numel() > 0:
            final_value = ac.value([buf[steps, envs] for buf in bufs])  # [k, A]
            store.rewards[steps, envs] += self.cfg.gamma * final_value
        flags.zero_()

    def discard_rollout(self) -> None:
        """Empty the storage without updating (the next :meth:`act` starts a new rollout)."""
        for store in self.storage.values():
            store.clear()
        for _, flags in self._final_obs.values():
            flags.zero_()

    # ----------------------------------------------------------------- update
    def update(self, progress: float = 0.0, value_only: bool = False) -> dict[str, float]:
        """Clipped PPO epochs over minibatches; returns loss statistics (``losses/*``).

        Args:
            progress: fraction of training done, in [0, 1]; drives the linear lr schedule.
            value_only: fit only the critic (policy and entropy terms dropped, lr not adapted): a
                critic warm-up for a policy that starts from imitation.
        """
        cfg = self.cfg
        if cfg.schedule == "linear":
            self._set_lr(max(cfg.lr * (1.0 - progress), cfg.min_lr))
        advantages, explained = {}, {}
        for name, ac in self.models.items():
            store = self.storage[name]
            if cfg.normalize_value:
                ac.value_norm.update(store.returns.unsqueeze(-1))
            if cfg.stratify:
                advantages[name] = store.stratified_advantages(cfg.stratum_max_weight)
            else:
                advantages[name] = store.normalized_advantages()
            explained[name] = _explained_variance(store.values, store.returns)

        sums: dict[str, float] = {}
        n_updates = 0
        params = [p for p in self.models.parameters() if p.requires_grad]
        recurrent = any(ac.recurrent for ac in self.models.values())
        for _ in range(cfg.epochs):
            first = next(iter(self.storage.values()))
            # Recurrent policies replay whole envs (sequences); feed-forward ones take (step, env) items.
            split = first.env_minibatch_indices if recurrent else first.minibatch_indices
            for idx in split(cfg.minibatches, self.generator):
                loss, stats = self._minibatch_loss(idx, advantages, value_only, by_env=recurrent)
                if not bool(torch.isfinite(loss)):
                    raise FloatingPointError(f"PPO loss is not finite ({stats}); lower algo.lr or check the task")
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if self.dist is not None:  # the same averaged gradient and KL (so the same lr) on every rank
                    stats = self.dist.average_gradients(params, stats)
                stats["grad_norm"] = float(nn.utils.clip_grad_norm_(params, cfg.max_grad_norm))
                self.optimizer.step()
                if cfg.schedule == "adaptive" and not value_only:
                    self._adapt_lr(stats["approx_kl"])
                for key, val in stats.items():
                    sums[key] = sums.get(key, 0.0) + val
                n_updates += 1

        if cfg.normalize_obs:
            # After the update, so the policy that collected this rollout is the one whose
            # log-probs the update compared against; the next rollout uses the new statistics.
            for name, ac in self.models.items():
                obs = self.storage[name].obs
                if self.freeze_obs_normalizers:
                    ac.critic_encoder.update_normalizers(pick(obs, ac.dims.critic_inputs))
                else:
                    ac.update_obs_normalizers(obs, obs)
        self.discard_rollout()
        out = {f"losses/{k}": v / n_updates for k, v in sums.items()}
        if self.teacher is not None and "teacher_kl" in sums:
            self.teacher.adapt(sums["teacher_kl"] / n_updates)
            out["charts/teacher_coef"] = self.teacher.coef
        out["losses/explained_variance"] = sum(explained.values()) / len(explained)
        out["charts/learning_rate"] = self.learning_rate
        with torch.no_grad():
            stds = [ac.log_std.exp().mean() for ac in self.models.values() if not ac.dims.discrete]
            if stds:  # Gaussian groups only (discrete heads report their entropy in losses/entropy)
                out["policy/action_std"] = float(torch.stack(stds).mean())
        return out

    def _minibatch_loss(
        self, idx: Tensor, advantages: dict[str, Tensor], value_only: bool = False, by_env: bool = False
    ) -> tuple[Tensor, dict[str, float]]:
        """Summed loss of every group on minibatch ``idx``: flat (step, env) indices, or env indices
        (``by_env``, when a group is recurrent; feed-forward groups then take the same envs' steps)."""
        cfg = self.cfg
        total = torch.zeros((), device=self.device)
        stats = {"policy_loss": 0.0, "value_loss": 0.0, "entropy": 0.0, "approx_kl": 0.0, "clipfrac": 0.0}
        for name, ac in self.models.items():
            store = self.storage[name]
            taught = TEACHER_KEY in store.obs and not value_only
            with_mean = taught or self.loss_needs_mean
            if by_env:
                b = store.sequence_batch(idx, advantages[name])
                if ac.recurrent:
                    out = ac.evaluate_sequence(
                        b["obs"], b["obs"], b["actions"], b["memory0"], b["resets"], with_mean=with_mean
                    )
                else:  # [T, B, A, ...]: feed-forward networks take any leading axes
                    out = ac.evaluate(b["obs"], b["obs"], b["actions"], with_mean=with_mean)
            else:
                b = store.batch(idx, advantages[name])
                out = ac.evaluate(b["obs"], b["obs"], b["actions"], with_mean=with_mean)
            value = out[2]
            if taught:  # KL towards the teacher's action (training.teacher)
                teacher_kl = self.teacher.kl(out[3], ac.action_log_std(), b["obs"][TEACHER_KEY]).mean()
                total = total + self.teacher.coef * teacher_kl
                stats["teacher_kl"] = stats.get("teacher_kl", 0.0) + float(teacher_kl.detach())
            policy_loss, entropy, policy_stats = self._policy_terms(ac, b, out)
            old_value, returns = b["values"], b["returns"]
            # Value, in normalised return units: 0.5 max((V - R)^2, (V_clip - R)^2)
            target = ac.value_norm.normalize(returns.unsqueeze(-1)).squeeze(-1)
            old = ac.value_norm.normalize(old_value.unsqueeze(-1)).squeeze(-1)
            value_err = (value - target).square()
            if cfg.value_clip > 0:
                clipped = old + (value - old).clamp(-cfg.value_clip, cfg.value_clip)
                value_err = torch.max(value_err, (clipped - target).square())
            value_loss = 0.5 * value_err.mean()
            total = total + cfg.value_coef * value_loss
            if not value_only:
                total = total + policy_loss - cfg.entropy_coef * entropy
            for key, val in policy_stats.items():
                stats[key] = stats.get(key, 0.0) + val
            stats["policy_loss"] += float(policy_loss.detach())
            stats["value_loss"] += float(value_loss.detach())
            stats["entropy"] += float(entropy.detach())
        n = len(self.models)
        return total, {k: v / n for k, v in stats.items()}

    def _policy_terms(self, ac: nn.Module, b: dict[str, Any], out: tuple[Tensor, ...]) -> tuple[Tensor, Tensor, dict]:
        """``(policy loss, mean entropy, statistics)`` of one group's minibatch ``b`` (``out``: ``ac.evaluate``'s):
        the clipped surrogate, with ``approx_kl`` and ``clipfrac``. The hook training/trpl.py overrides."""
        cfg = self.cfg
        log_prob, entropy, adv = out[0], out[1], b["advantages"]
        # Policy: -min(r A, clip(r, 1 - eps, 1 + eps) A), r = pi / pi_old
        log_ratio = log_prob - b["log_probs"]
        ratio = log_ratio.exp()
        surrogate = torch.max(-adv * ratio, -adv * ratio.clamp(1.0 - cfg.clip, 1.0 + cfg.clip))
        with torch.no_grad():
            stats = {
                # KL(pi_old || pi) ~ E[(r - 1) - log r]  (Schulman's low-variance estimator)
                "approx_kl": float(((ratio - 1.0) - log_ratio).mean()),
                "clipfrac": float(((ratio - 1.0).abs() > cfg.clip).float().mean()),
            }
        return surrogate.mean(), entropy.mean(), stats

    def _adapt_lr(self, kl: float) -> None:
        """rsl_rl's rule: shrink the step when KL overshoots the target, grow it when far below."""
        cfg, lr = self.cfg, self.learning_rate
        if kl > 2.0 * cfg.desired_kl:
            lr = max(cfg.min_lr, lr / 1.5)
        elif 0.0 < kl < 0.5 * cfg.desired_kl:
            lr = min(cfg.max_lr, lr * 1.5)
        self._set_lr(lr)


def _explained_variance(values: Tensor, returns: Tensor) -> float:
    """``1 - Var(R - V) / Var(R)``: 1 = perfect critic, 0 = no better than a constant."""
    var = returns.var()
    return float("nan") if float(var) == 0.0 else float(1.0 - (returns - values).var() / var)
