"""TRPL: PPO's loop with differentiable trust-region projection layers in place of the clipped ratio.

Otto, Becker, Vien, Ziesche, Neumann, "Differentiable Trust Region Layers for Deep Reinforcement Learning",
ICLR 2021. Everything but the policy loss is :class:`~training.ppo.PPO`'s (rollouts, GAE, the value loss, the
lr schedule, minibatches, checkpoints). Per state, the network's diagonal Gaussian ``pi = N(mu, diag(sigma^2))``
is projected onto the trust region around the rollout's ``pi_old = N(mu_o, diag(sigma_o^2))``, the mean and the
covariance parts separately (:func:`project`):

    mu~    = mu_o + (mu - mu_o) sqrt(eps_mu / max(d_mu, eps_mu))          every distance's mean part
    w2:    sigma~ = sigma_o + (sigma - sigma_o) sqrt(eps_cov / max(d_cov, eps_cov))
    frob:  Sigma~ = Sigma_o + (Sigma - Sigma_o) sqrt(eps_cov / max(d_cov, eps_cov))
    kl:    Sigma~^-1 = (1 - t) Sigma_o^-1 + t Sigma^-1,   t in (0, 1] with KL_cov(pi~ || pi_old) = eps_cov

with the distances of :func:`distance` (W2 and Frobenius scaled by the old precision on the mean, as the
reference's ``scale_prec``). KL's ``t`` has no closed form: it is found per state by bisection (monotone in
``t``) in float64, and differentiated by the implicit-function theorem, written as one Newton step from the
detached root (``t = t* - (KL(t*) - eps) / dKL/dt(t*)``, the denominator detached): its value is ``t*`` and its
gradient ``-dKL/dtheta / dKL/dt``, what the paper's layer back-propagates.

The loss (per group, mean over the minibatch; :meth:`TRPL._policy_terms`):

    - E[pi~(a|s) / pi_old(a|s) A]          the importance-sampled advantage under the projection, no clipping
    + alpha d(pi, stop_grad(pi~))          the network pulled towards its projection (``trust_region_coeff``)
    - c_H H(pi~)                           PPO's entropy term, of the projected policy

covey's Gaussian policies have a state-independent ``log_std`` parameter: the old std is the rollout's, the
covariance is projected per state all the same (every state then gets the same projected std), and after each
update the parameter is set to its projection, as the reference does for non-contextual stds: the next rollout's
std is inside the bound. The old means are the rollout policy's, computed once at the start of the update.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from policies.distributions import gaussian_entropy, gaussian_log_prob
from training.ppo import PPO
from training.settings import PPOCfg, TRPLCfg

__all__ = ["TRPL", "TRPLCfg", "distance", "project"]

# The rollout policy per (step, env, agent), kept in the storage's observation entries for the update so that its
# minibatches (flat or by env) index them with everything else; removed after the update.
OLD_MEAN_KEY = "trpl_old_mean"
OLD_LOG_STD_KEY = "trpl_old_log_std"
KL_BISECTION_STEPS = 60  # halvings of t in [0, 1] (float64): t to 1e-18, far below float32


def distance(kind: str, mean: Tensor, std: Tensor, ref_mean: Tensor, ref_std: Tensor) -> tuple[Tensor, Tensor]:
    """``(mean part, covariance part)`` ``[...]`` of the distance of ``N(mean, std^2)`` from ``N(ref_mean,
    ref_std^2)`` (all ``[..., act_dim]``, diagonal):

        w2:   sum((mean - ref_mean)^2 / ref_std^2),        sum((std / ref_std - 1)^2)
        frob: sum((mean - ref_mean)^2 / ref_std^2),        sum((std^2 - ref_std^2)^2)
        kl:   0.5 sum((mean - ref_mean)^2 / ref_std^2),    0.5 sum(r - 1 - log r),  r = std^2 / ref_std^2

    (W2 commutative, scaled by the reference's precision; KL(new || ref).)
    """
    maha = ((mean - ref_mean) / ref_std).square().sum(-1)
    if kind == "w2":
        return maha, (std / ref_std - 1.0).square().sum(-1)
    if kind == "frob":
        return maha, (std.square() - ref_std.square()).square().sum(-1)
    if kind == "kl":
        ratio = (std / ref_std).square()
        return 0.5 * maha, 0.5 * (ratio - 1.0 - ratio.log()).sum(-1)
    raise ValueError(f"unknown projection {kind!r} (w2, kl or frob)")


def project(
    kind: str, mean: Tensor, std: Tensor, old_mean: Tensor, old_std: Tensor, mean_bound: float, cov_bound: float
) -> tuple[Tensor, Tensor]:
    """The projection ``(mean~, std~)`` ``[..., act_dim]`` of ``N(mean, std^2)`` onto ``{distance to
    N(old_mean, old_std^2) <= (mean_bound, cov_bound)}``, per state (all leading axes; ``std`` and ``old_std``
    broadcast to ``mean``'s shape). A Gaussian inside a bound keeps that part unchanged; outside, the projected
    part's distance equals the bound. Differentiable in ``mean`` and ``std``."""
    std, old_std = std.expand_as(mean), old_std.expand_as(mean)
    mean_part, cov_part = distance(kind, mean, std, old_mean, old_std)
    # The mean: back along the segment to mu_o until the (quadratic) distance is the bound.
    scale = (mean_bound / mean_part.clamp_min(mean_bound)).sqrt().unsqueeze(-1)
    proj_mean = torch.where((mean_part > mean_bound).unsqueeze(-1), old_mean + (mean - old_mean) * scale, mean)
    outside = (cov_part > cov_bound).unsqueeze(-1)
    if kind == "kl":
        proj_std = _kl_cov_projection(std, old_std, cov_part, cov_bound)
    else:
        scale = (cov_bound / cov_part.clamp_min(cov_bound)).sqrt().unsqueeze(-1)
        if kind == "w2":  # the covariance part is quadratic in std: the same segment rule on std
            proj_std = old_std + (std - old_std) * scale
        else:  # frob: quadratic in the variance
            proj_std = (old_std.square() + (std.square() - old_std.square()) * scale).sqrt()
    return proj_mean, torch.where(outside, proj_std, std)


def _kl_cov_projection(std: Tensor, old_std: Tensor, cov_part: Tensor, bound: float) -> Tensor:
    """``std~ [..., D]``: precisions interpolated, ``1 / std~^2 = (1 - t) / old_std^2 + t / std^2``, with ``t`` per
    state such that ``KL_cov(std~ || old_std) = bound`` (states already inside: meaningless, the caller keeps
    ``std``). In ``c = old_std^2 / std^2 - 1`` the projected variance ratio is ``1 / (1 + t c)`` and

        KL(t) = 0.5 sum(1 / (1 + t c) - 1 + log(1 + t c)),   dKL/dt = 0.5 t sum(c^2 / (1 + t c)^2) >= 0,

    increasing from 0 (t = 0, the old policy) to ``cov_part`` (t = 1, the network's)."""
    c = (old_std / std).square() - 1.0
    with torch.no_grad():  # the root, by bisection in float64 (KL is monotone in t; Newton can overshoot)
        c64, target = c.double(), torch.full_like(cov_part, bound, dtype=torch.float64)
        lo, hi = torch.zeros_like(target), torch.ones_like(target)
        for _ in range(KL_BISECTION_STEPS):
            mid = 0.5 * (lo + hi)
            above = _kl_of_t(mid, c64) > target
            hi, lo = torch.where(above, mid, hi), torch.where(above, lo, mid)
        root = (0.5 * (lo + hi)).to(std.dtype)
        slope = 0.5 * root * (c / (1.0 + root.unsqueeze(-1) * c)).square().sum(-1)
        slope = torch.where(cov_part > bound, slope, torch.ones_like(slope))  # no division by 0 where unprojected
    # Implicit-function gradient: a Newton step at the root, differentiated through KL(t*; c) only.
    t = root - (_kl_of_t(root, c) - bound) / slope
    return old_std / (1.0 + t.unsqueeze(-1) * c).sqrt()


def _kl_of_t(t: Tensor, c: Tensor) -> Tensor:
    """``KL(t) [...]`` of :func:`_kl_cov_projection` for ``t [...]`` and ``c [..., D]``."""
    x = 1.0 + t.unsqueeze(-1) * c
    return 0.5 * (1.0 / x - 1.0 + x.log()).sum(-1)


class TRPL(PPO):
    """:class:`~training.ppo.PPO` whose policy loss is TRPL's (``algo.trpl.projection`` = w2 | kl | frob)."""

    loss_needs_mean = True

    def __init__(
        self,
        models: nn.ModuleDict,
        cfg: PPOCfg,
        num_envs: int,
        num_steps: int,
        device: torch.device,
        generator: torch.Generator,
    ) -> None:
        if cfg.trpl.projection == "none":
            raise ValueError("TRPL needs algo.trpl.projection = w2, kl or frob (none is PPO's clipped ratio)")
        discrete = [name for name, ac in models.items() if ac.dims.discrete]
        if discrete:
            raise ValueError(f"TRPL projects Gaussian policies; groups {discrete} choose discrete actions (algo=ppo)")
        super().__init__(models, cfg, num_envs, num_steps, device, generator)
        self.trpl = cfg.trpl

    def update(self, progress: float = 0.0, value_only: bool = False) -> dict[str, float]:
        """PPO's update with TRPL's policy loss; then each Gaussian's ``log_std`` is set to its projection."""
        old_log_std = self._keep_rollout_policy()
        try:
            out = super().update(progress, value_only)
        finally:
            for store in self.storage.values():
                store.obs.pop(OLD_MEAN_KEY, None)
                store.obs.pop(OLD_LOG_STD_KEY, None)
        if not value_only:
            self._project_log_std(old_log_std)
        return out

    @torch.no_grad()
    def _keep_rollout_policy(self) -> dict[str, Tensor]:
        """The rollout policy's mean and log-std ``[T, E, A, act_dim]`` into the storage (before any update: the
        networks and normalisers are still the ones that acted); returns each group's ``log_std`` as it was."""
        old_log_std = {}
        for name, ac in self.models.items():
            store = self.storage[name]
            if ac.recurrent:
                seq = store.sequence_batch(torch.arange(store.num_envs, device=self.device), store.advantages)
                mean = ac.action_mean_sequence(store.obs, seq["memory0"]["actor"], seq["resets"])
            else:  # feed-forward networks take any leading axes
                mean = ac.action_mean(store.obs)
            old_log_std[name] = ac.action_log_std().detach().clone()
            store.obs[OLD_MEAN_KEY] = mean
            store.obs[OLD_LOG_STD_KEY] = old_log_std[name].expand_as(mean)
        return old_log_std

    def _policy_terms(self, ac: nn.Module, b: dict[str, Any], out: tuple[Tensor, ...]) -> tuple[Tensor, Tensor, dict]:
        tr = self.trpl
        mean, log_std = out[3], ac.action_log_std().expand_as(out[3])
        old_mean, old_log_std = b["obs"][OLD_MEAN_KEY], b["obs"][OLD_LOG_STD_KEY]
        std, old_std = log_std.exp(), old_log_std.exp()
        proj_mean, proj_std = project(tr.projection, mean, std, old_mean, old_std, tr.mean_bound, tr.cov_bound)
        proj_log_std = proj_std.log()
        # - E[pi~ / pi_old A]: the importance-sampled advantage under the projected policy, unclipped
        log_ratio = gaussian_log_prob(proj_mean, proj_log_std, b["actions"]) - b["log_probs"]
        ratio = log_ratio.exp()
        surrogate = -(ratio * b["advantages"]).mean()
        # alpha d(pi, pi~): the network's distance from its (fixed) projection
        mean_dist, cov_dist = distance(tr.projection, mean, std, proj_mean.detach(), proj_std.detach())
        trust_region = (mean_dist + cov_dist).mean()
        with torch.no_grad():
            mean_part, cov_part = distance(tr.projection, mean, std, old_mean, old_std)
            stats = {
                "approx_kl": float(((ratio - 1.0) - log_ratio).mean()),  # of the projection, as PPO's estimator
                "trust_region_loss": float(trust_region),
                "mean_constraint": float(mean_part.mean()),  # the network's distance from the rollout policy
                "cov_constraint": float(cov_part.mean()),
            }
        entropy = gaussian_entropy(proj_log_std).mean()
        return surrogate + tr.trust_region_coeff * trust_region, entropy, stats

    @torch.no_grad()
    def _project_log_std(self, old_log_std: dict[str, Tensor]) -> None:
        """``log_std`` := its projection around the rollout's (state-independent, so one projection per group)."""
        tr = self.trpl
        for name, ac in self.models.items():
            log_std, old = ac.action_log_std(), old_log_std[name]
            zero = torch.zeros_like(log_std)  # the mean plays no part in the covariance projection
            _, proj_std = project(tr.projection, zero, log_std.exp(), zero, old.exp(), tr.mean_bound, tr.cov_bound)
            # A tied log_std (graph actors: one per x/y/z triple) is the first of each repeated group.
            step = log_std.shape[-1] // ac.log_std.shape[-1]
            ac.log_std.copy_(proj_std.log()[..., ::step].reshape(ac.log_std.shape))
