"""Multi-layer perceptrons over an agent axis, with shared or per-agent weights.

Every layer takes ``x: [..., A, in]`` and returns ``[..., A, out]``. With ``n_agents=None`` the
weights are shared by all agents (an ordinary ``nn.Linear`` broadcast over ``A``); with
``n_agents=A`` each agent has its own weights, stored batched as ``weight [A, in, out]`` and
applied in one ``einsum`` (no Python loop over agents, and the graph is a plain trace for ONNX).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "elu": nn.ELU,
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "silu": nn.SiLU,
    "gelu": nn.GELU,
}


class AgentLinear(nn.Module):
    """Per-agent affine map: ``y[..., a, :] = x[..., a, :] @ weight[a] + bias[a]``.

    ``weight: [A, in, out]``, ``bias: [A, out]``; each agent's slice is initialised like an
    ``nn.Linear`` (orthogonal with ``gain``, zero bias) so shared and per-agent nets start alike.
    """

    def __init__(self, n_agents: int, in_features: int, out_features: int, gain: float = math.sqrt(2)) -> None:
        super().__init__()
        self.n_agents, self.in_features, self.out_features = n_agents, in_features, out_features
        self.weight = nn.Parameter(torch.empty(n_agents, in_features, out_features))
        self.bias = nn.Parameter(torch.zeros(n_agents, out_features))
        for a in range(n_agents):  # init only, not the forward pass
            nn.init.orthogonal_(self.weight.data[a].T, gain=gain)

    def forward(self, x: Tensor) -> Tensor:
        """``[..., A, in] -> [..., A, out]``."""
        return torch.einsum("...ai,aio->...ao", x, self.weight) + self.bias

    def extra_repr(self) -> str:
        return f"n_agents={self.n_agents}, in_features={self.in_features}, out_features={self.out_features}"


class AgentLayerNorm(nn.Module):
    """LayerNorm over the feature axis with a per-agent affine, ``weight, bias: [A, dim]``."""

    def __init__(self, n_agents: int, dim: int) -> None:
        super().__init__()
        self.dim = dim
        self.weight = nn.Parameter(torch.ones(n_agents, dim))
        self.bias = nn.Parameter(torch.zeros(n_agents, dim))

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, (self.dim,)) * self.weight + self.bias


def _linear(n_agents: int | None, fan_in: int, fan_out: int, gain: float) -> nn.Module:
    if n_agents is not None:
        return AgentLinear(n_agents, fan_in, fan_out, gain)
    layer = nn.Linear(fan_in, fan_out)
    nn.init.orthogonal_(layer.weight, gain=gain)
    nn.init.zeros_(layer.bias)
    return layer


def build_mlp(
    in_dim: int,
    hidden: Sequence[int],
    out_dim: int,
    activation: str = "elu",
    layer_norm: bool = False,
    n_agents: int | None = None,
    out_gain: float = 1.0,
) -> nn.Sequential:
    """``[..., A, in_dim] -> [..., A, out_dim]``: Linear (+LayerNorm) + activation per hidden layer.

    Args:
        hidden: hidden widths, e.g. ``(256, 256)``.
        activation: one of :data:`ACTIVATIONS`.
        layer_norm: LayerNorm after each hidden Linear (before the activation).
        n_agents: ``None`` shares weights across agents; an int gives each agent its own.
        out_gain: orthogonal gain of the output layer (0.01 for a policy mean, 1 for a value).
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; choose from {sorted(ACTIVATIONS)}")
    layers: list[nn.Module] = []
    fan_in = in_dim
    for width in hidden:
        layers.append(_linear(n_agents, fan_in, width, math.sqrt(2)))
        if layer_norm:
            layers.append(nn.LayerNorm(width) if n_agents is None else AgentLayerNorm(n_agents, width))
        layers.append(ACTIVATIONS[activation]())
        fan_in = width
    layers.append(_linear(n_agents, fan_in, out_dim, out_gain))
    return nn.Sequential(*layers)
