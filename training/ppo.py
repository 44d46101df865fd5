"""Clipped PPO with GAE over agent groups: MAPPO (centralised critic on ``state``) and IPPO.

One :class:`~policies.ActorCritic` per agent group, one optimizer over all of them. The verbs, in
the order the runner calls them each iteration::

    actions = ppo.act(obs)                                         # T times, under inference_mode
    ppo.process_env_step(reward, terminated, truncated, info)
    ppo.compute_returns(obs)                                       # GAE from V(s_T)
    losses = ppo.update(progress)                                  # epochs x minibatches

Shapes: E envs, A agents of a group, T rollout steps. ``obs[group]["policy"|"state"]`` is
``[E, A, dim]``, ``reward[group]`` ``[E, A]``, ``terminated``/``truncated`` ``[E]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from policies import PolicyCfg
from training.storage import RolloutStorage

CRITIC_INPUTS = ("state", "policy")
SCHEDULES = ("constant", "linear", "adaptive")


@dataclass(frozen=True)
class PPOCfg:
    """PPO settings (hydra node ``algo``); ``policy`` holds the network settings."""

    name: str = "mappo"  # label for logs and checkpoints
    critic_input: str = "state"  # "state": centralised critic (MAPPO); "policy": local (IPPO)
    lr: float = 3e-4
    schedule: str = "adaptive"  # "constant" | "linear" (to 0 at the end) | "adaptive" (KL-driven)
    desired_kl: float = 0.01  # target of the adaptive schedule
    min_lr: float = 1e-5
    max_lr: float = 1e-2
    gamma: float = 0.99
    lam: float = 0.95  # GAE lambda
    clip: float = 0.2  # ratio clip
    value_clip: float = 0.2  # clip of the value change (normalised units); 0 disables
    epochs: int = 5
    minibatches: int = 4
    entropy_coef: float = 0.003
    value_coef: float = 1.0
    max_grad_norm: float = 1.0
    normalize_obs: bool = True  # running mean/std of actor and critic inputs
    normalize_value: bool = True  # running mean/std of value targets (PopArt-lite)
    policy: PolicyCfg = field(default_factory=PolicyCfg)

    def __post_init__(self) -> None:
        if self.critic_input not in CRITIC_INPUTS:
            raise ValueError(f"algo.critic_input must be one of {CRITIC_INPUTS}, got {self.critic_input!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"algo.schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if self.epochs < 1 or self.minibatches < 1:
            raise ValueError("algo.epochs and algo.minibatches must be >= 1")


class PPO:
    """The algorithm: acting, storing, GAE and the clipped update for every agent group."""

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
        self.storage = {
            name: RolloutStorage(
                num_steps,
                num_envs,
                ac.dims.n_agents,
                ac.dims.obs_dim,
                ac.dims.critic_dim,
                ac.dims.action_dim,
                device,
            )
            for name, ac in models.items()
        }
        self._pending: dict[str, tuple[Tensor, ...]] = {}

    @property
    def learning_rate(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def _set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def _critic_input(self, obs_group: dict[str, Tensor]) -> Tensor:
        return obs_group[self.cfg.critic_input]

    # ----------------------------------------------------------------- rollout verbs
    def act(self, obs: dict[str, dict[str, Tensor]]) -> dict[str, Tensor]:
        """Sample actions for every group; returns ``{group: [E, A, act_dim]}`` clamped to [-1, 1]."""
        actions = {}
        for name, ac in self.models.items():
            policy_obs, critic_obs = obs[name]["policy"], self._critic_input(obs[name])
            action, log_prob = ac.act(policy_obs, generator=self.generator)
            value = ac.value(critic_obs)
            self._pending[name] = (policy_obs, critic_obs, action, log_prob, value)
            actions[name] = action.clamp(-1.0, 1.0)
        return actions

    def process_env_step(self, rewards: dict[str, Tensor], terminated: Tensor, truncated: Tensor, info: dict) -> None:
        """Store the transition started by :meth:`act`.

        Truncated envs (time limit, not a terminal state) get ``r += gamma * V(final_obs)``: the
        critic's estimate of the return they would have collected, so GAE can cut the episode there
        like a termination. Terminated envs get no bootstrap.
        """
        done = terminated | truncated
        trunc_ids = truncated.nonzero().squeeze(-1)
        for name, ac in self.models.items():
            policy_obs, critic_obs, action, log_prob, value = self._pending.pop(name)
            reward = rewards[name]
            if trunc_ids.numel() > 0:
                final = self._critic_input(info["final_obs"][name])[trunc_ids]
                reward = reward.index_add(0, trunc_ids, self.cfg.gamma * ac.value(final))
            self.storage[name].add(policy_obs, critic_obs, action, log_prob, value, reward, done)

    def compute_returns(self, last_obs: dict[str, dict[str, Tensor]]) -> None:
        """GAE for every group from ``V(last_obs)``; checks the rollout for NaN/inf."""
        for name, ac in self.models.items():
            store = self.storage[name]
            for buf in ("obs", "critic_obs", "rewards", "values"):
                if not bool(torch.isfinite(getattr(store, buf)).all()):
                    raise FloatingPointError(f"non-finite {buf} in the rollout of group {name!r}")
            store.compute_returns(ac.value(self._critic_input(last_obs[name])), self.cfg.gamma, self.cfg.lam)

    def discard_rollout(self) -> None:
        """Empty the storage without updating (the next :meth:`act` starts a new rollout)."""
        for store in self.storage.values():
            store.clear()

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
            advantages[name] = store.normalized_advantages()
            explained[name] = _explained_variance(store.values, store.returns)

        sums: dict[str, float] = {}
        n_updates = 0
        params = [p for p in self.models.parameters() if p.requires_grad]
        for _ in range(cfg.epochs):
            first = next(iter(self.storage.values()))
            for idx in first.minibatch_indices(cfg.minibatches, self.generator):
                loss, stats = self._minibatch_loss(idx, advantages, value_only)
                if not bool(torch.isfinite(loss)):
                    raise FloatingPointError(f"PPO loss is not finite ({stats}); lower algo.lr or check the task")
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
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
                if self.freeze_obs_normalizers:
                    ac.critic_norm.update(self.storage[name].critic_obs)
                else:
                    ac.update_obs_normalizers(self.storage[name].obs, self.storage[name].critic_obs)
        self.discard_rollout()
        out = {f"losses/{k}": v / n_updates for k, v in sums.items()}
        out["losses/explained_variance"] = sum(explained.values()) / len(explained)
        out["charts/learning_rate"] = self.learning_rate
        with torch.no_grad():
            stds = [ac.log_std.exp().mean() for ac in self.models.values() if not ac.dims.discrete]
            if stds:  # Gaussian groups only (discrete heads report their entropy in losses/entropy)
                out["policy/action_std"] = float(torch.stack(stds).mean())
        return out

    def _minibatch_loss(
        self, idx: Tensor, advantages: dict[str, Tensor], value_only: bool = False
    ) -> tuple[Tensor, dict[str, float]]:
        """Summed loss of every group on minibatch ``idx`` (flat (step, env) indices)."""
        cfg = self.cfg
        total = torch.zeros((), device=self.device)
        stats = {"policy_loss": 0.0, "value_loss": 0.0, "entropy": 0.0, "approx_kl": 0.0, "clipfrac": 0.0}
        for name, ac in self.models.items():
            obs, critic_obs, actions, old_log_prob, old_value, returns, adv = self.storage[name].iter_fields(
                idx, advantages[name]
            )
            log_prob, entropy, value = ac.evaluate(obs, critic_obs, actions)
            # Policy: -min(r A, clip(r, 1 - eps, 1 + eps) A), r = pi / pi_old
            log_ratio = log_prob - old_log_prob
            ratio = log_ratio.exp()
            surrogate = torch.max(-adv * ratio, -adv * ratio.clamp(1.0 - cfg.clip, 1.0 + cfg.clip))
            policy_loss = surrogate.mean()
            # Value, in normalised return units: 0.5 max((V - R)^2, (V_clip - R)^2)
            target = ac.value_norm.normalize(returns.unsqueeze(-1)).squeeze(-1)
            old = ac.value_norm.normalize(old_value.unsqueeze(-1)).squeeze(-1)
            value_err = (value - target).square()
            if cfg.value_clip > 0:
                clipped = old + (value - old).clamp(-cfg.value_clip, cfg.value_clip)
                value_err = torch.max(value_err, (clipped - target).square())
            value_loss = 0.5 * value_err.mean()
            entropy = entropy.mean()
            total = total + cfg.value_coef * value_loss
            if not value_only:
                total = total + policy_loss - cfg.entropy_coef * entropy
            with torch.no_grad():
                # KL(pi_old || pi) ~ E[(r - 1) - log r]  (Schulman's low-variance estimator)
                stats["approx_kl"] += float(((ratio - 1.0) - log_ratio).mean())
                stats["clipfrac"] += float(((ratio - 1.0).abs() > cfg.clip).float().mean())
            stats["policy_loss"] += float(policy_loss.detach())
            stats["value_loss"] += float(value_loss.detach())
            stats["entropy"] += float(entropy.detach())
        n = len(self.models)
        return total, {k: v / n for k, v in stats.items()}

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
