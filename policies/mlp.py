"""Multi-layer perceptrons over an agent axis, with shared or per-agent weights.

Every layer takes ``x: [..., A, in]`` and returns ``[..., A, out]``. With ``n_agents=None`` the
weights are shared by all agents (an ordinary ``nn.Linear`` broadcast over ``A``); with
``n_agents=A`` each agent has its own weights, stored batched as ``weight [A, in, out]`` and
applied in one ``einsum`` (no Python loop over agents, and the graph is a plain trace for ONNX).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# Inputs of at least this many elements take the compiled ELU (when on): below it, calling compiled code costs more
# than the kernel saves (a one-env ROS policy step, small tests).
COMPILED_ELU_MIN_NUMEL = 65_536
_compiled_elu: Callable[[Tensor], Tensor] | None = None  # made once: each Runner of a process reuses its compiled code
_use_compiled_elu = False


def set_compiled_cpu_elu(on: bool) -> None:
    """Run :class:`ELU` through a compiled kernel on large float32 CPU inputs (process-wide; the training runner
    turns it on where it compiles the env on a CPU). torch's own CPU ``elu`` costs ~2 ns per element on the 2-core
    reference machine, 2.6x the compiled kernel: ~20% of the [128, 128] MLPs' PPO update and a third of a rollout's
    policy step were in it (benchmarks/README.md). The first call compiles (~8 s, then from torch's compile cache)."""
    global _compiled_elu, _use_compiled_elu
    if on and _compiled_elu is None:
        _compiled_elu = torch.compile(_flat_elu, dynamic=True)
    _use_compiled_elu = bool(on)


def compiled_cpu_elu() -> bool:
    """Whether :func:`set_compiled_cpu_elu` is on."""
    return _use_compiled_elu


def _flat_elu(x: Tensor) -> Tensor:
    return F.elu(x)


class _CompiledELU(torch.autograd.Function):
    """ELU forward by the compiled kernel; backward by aten's ``elu_backward`` from the output, as autograd's."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, x: Tensor) -> Tensor:
        y = _compiled_elu(x.reshape(-1)).view(x.shape)  # 1-D: one dynamic-shape kernel for every batch size
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: Tensor) -> Tensor:
        (y,) = ctx.saved_tensors
        return torch.ops.aten.elu_backward(grad, 1.0, 1, 1, True, y)


class ELU(nn.ELU):
    """``nn.ELU`` (alpha 1) that takes the compiled kernel of :func:`set_compiled_cpu_elu` where it pays: large
    float32 CPU inputs (a PPO update's minibatches, a rollout's batch of agents), outside ONNX export, tracing and
    compiled code. The same function to float32 round-off (6e-8); the same module in checkpoints and exports (no
    parameters, ``Elu`` in ONNX)."""

    def forward(self, x: Tensor) -> Tensor:
        if (
            _use_compiled_elu
            and x.device.type == "cpu"
            and x.dtype == torch.float32
            and x.numel() >= COMPILED_ELU_MIN_NUMEL
            and self.alpha == 1.0
            and not self.inplace
            and not (torch.jit.is_tracing() or torch.onnx.is_in_onnx_export() or torch.compiler.is_compiling())
        ):
            return _CompiledELU.apply(x)
        return super().forward(x)


ACTIVATIONS: dict[str, type[nn.Module]] = {
    "elu": ELU,
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
