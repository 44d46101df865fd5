"""The fixed linear action prior a task may suggest (``GroupSpec.action_prior``, e.g. cable_load's PID formation
law): the actor's Gaussian mean is ``x0 @ P + mu(features)``, with ``x0`` the first actor input (a vector entry,
raw, before normalisation) and ``P [prior_dim, act_dim]`` fixed, so the network learns the residual ``mu``.

``P`` is a buffer named ``action_prior`` on the module that owns it (saved with the weights, zeros until set, and
inside the exported graph); a first input that is not a vector gives ``prior_dim = 0`` (no prior).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from policies.encoders import InputSpec

BUFFER = "action_prior"


def register_action_prior(module: nn.Module, first_input: InputSpec, action_dim: int) -> int:
    """Register the zero buffer ``module.action_prior [prior_dim, act_dim]``; returns ``prior_dim`` (the first
    input's size when it is a vector, else 0)."""
    prior_dim = first_input.shape[0] if first_input.kind == "vector" else 0
    module.register_buffer(BUFFER, torch.zeros(prior_dim, action_dim))
    return prior_dim


def set_action_prior(buffer: Tensor, prior: Tensor | None) -> None:
    """Copy ``prior [prior_dim, act_dim]`` (from ``GroupSpec.action_prior_matrix()``) into ``buffer``; None keeps
    it."""
    if prior is None:
        return
    if prior.shape != buffer.shape:
        raise ValueError(f"action prior shape {tuple(prior.shape)} != {tuple(buffer.shape)}")
    buffer.copy_(prior)


def prior_term(x0: Tensor, matrix: Tensor, prior_dim: int) -> Tensor | None:
    """``x0 [..., prior_dim] @ P -> [..., act_dim]``, or None without a prior (``prior_dim == 0``)."""
    return x0 @ matrix if prior_dim else None


def residual_mean(out: Tensor, prior: Tensor | None, squash: bool) -> Tensor:
    """The Gaussian mean ``prior + out`` (``out`` alone without a prior); ``tanh`` of it when ``squash`` (SAC)."""
    mean = out if prior is None else prior + out
    return torch.tanh(mean) if squash else mean
