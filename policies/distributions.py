"""Action distributions of the actor's heads: a diagonal Gaussian with a state-independent log-std, and
categorical heads for discrete choices. Pure tensor functions; the parameters (the head's output, the
``log_std`` parameter) live on :class:`policies.actor_critic.ActorCritic`.

Shapes: ``[..., act_dim]`` for Gaussian means and actions, ``[...]`` for log-probabilities and entropies
(summed over action components or over heads); a categorical head ``k`` with ``n_k`` options has
log-probabilities ``[..., n_k]`` and samples indices ``[...]`` (long). Turning an index into the action value the
env gets (and back) is :func:`policies.actor_critic.action_from_choice` / ``choice_from_action``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


# ----------------------------------------------------------------- diagonal Gaussian
def gaussian_sample(mean: Tensor, log_std: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """``mean + eps * exp(log_std)``, ``eps ~ N(0, 1)`` drawn from ``generator`` (``[..., act_dim]``)."""
    noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
    return mean + noise * log_std.exp()


def gaussian_log_prob(mean: Tensor, log_std: Tensor, action: Tensor) -> Tensor:
    """``[...]``: log N(action; mean, exp(log_std)) summed over the action components."""
    # log N(a; mu, sigma) = -((a - mu) / sigma)^2 / 2 - log sigma - log sqrt(2 pi), summed over dims
    z = (action - mean) * torch.exp(-log_std)
    return (-0.5 * z.square() - log_std - LOG_SQRT_2PI).sum(-1)


def gaussian_entropy(log_std: Tensor) -> Tensor:
    """Entropy summed over action components: ``sum(0.5 + log(sqrt(2 pi)) + log_std)`` (independent of the mean)."""
    return (0.5 + LOG_SQRT_2PI + log_std).sum(-1)


# ----------------------------------------------------------------- categorical heads
def categorical_log_probs(out: Tensor, nvec: Sequence[int]) -> list[Tensor]:
    """The head output ``[..., sum(nvec)]`` split per head into log-probabilities ``[..., n_k]``."""
    return [torch.log_softmax(lg, -1) for lg in out.split(tuple(nvec), -1)]


def categorical_mode(log_probs: Sequence[Tensor]) -> list[Tensor]:
    """The most likely index ``[...]`` of each head."""
    return [lg.argmax(-1) for lg in log_probs]


def categorical_sample(
    log_probs: Sequence[Tensor], generator: torch.Generator | None = None
) -> tuple[list[Tensor], Tensor]:
    """``(index [...] per head, log-probability of the draw summed over heads [...])``.

    Gumbel-max: ``argmax(log p + g)``, ``g = -log(-log u)``, ``u ~ U(0, 1)``, is a categorical sample (seeded by
    ``generator``, one uniform draw per head in head order)."""
    indices, log_prob = [], 0.0
    for lg in log_probs:
        u = torch.rand(lg.shape, generator=generator, device=lg.device).clamp(1e-9, 1.0 - 1e-7)
        idx = (lg - torch.log(-torch.log(u))).argmax(-1)
        indices.append(idx)
        log_prob = log_prob + lg.gather(-1, idx.unsqueeze(-1)).squeeze(-1)
    return indices, log_prob


def categorical_log_prob_entropy(log_probs: Sequence[Tensor], indices: Sequence[Tensor]) -> tuple[Tensor, Tensor]:
    """``(log-probability of the indices, entropy)``, each ``[...]`` summed over heads."""
    log_prob, entropy = 0.0, 0.0
    for lg, idx in zip(log_probs, indices, strict=True):
        log_prob = log_prob + lg.gather(-1, idx.unsqueeze(-1)).squeeze(-1)
        entropy = entropy - (lg.exp() * lg).sum(-1)
    return log_prob, entropy
