"""Recurrent memory for policies: a GRU or LSTM between the encoder and the MLP head.

The state is explicit and batch-first, ``[..., L, S]`` (L layers; S = hidden for a GRU, 2 x hidden
for an LSTM: ``h`` then ``c``), so it can be stored in rollouts, reset per environment, and passed
through ONNX as plain inputs and outputs. Shapes (B = any leading axes, e.g. envs x agents):

    step(x [B, F], state [B, L, S]) -> (y [B, H], state [B, L, S])
    sequence(x [T, B, F], state0 [B, L, S], resets [T, B]) -> y [T, B, H]

``resets[t]`` zeroes the state *before* step ``t`` (an episode started there), which is how
truncated back-propagation through time crosses episode boundaries inside one rollout.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

MEMORY_KINDS = ("none", "gru", "lstm")


def zero_done(state: Tensor, done: Tensor) -> Tensor:
    """``state [*B, ...]`` with the rows of ``done [*B]`` (bool) set to zero (episodes that ended)."""
    keep = (~done).to(state.dtype)
    return state * keep.reshape(*done.shape, *([1] * (state.dim() - done.dim())))


class RecurrentMemory(nn.Module):
    """A GRU/LSTM with an explicit, batch-first state; see the module docstring."""

    def __init__(self, kind: str, in_dim: int, hidden: int, layers: int = 1) -> None:
        super().__init__()
        if kind not in ("gru", "lstm"):
            raise ValueError(f"memory kind must be 'gru' or 'lstm', got {kind!r}")
        self.kind, self.hidden, self.layers = kind, hidden, layers
        cls = nn.GRU if kind == "gru" else nn.LSTM
        self.rnn = cls(in_dim, hidden, num_layers=layers)
        self.out_dim = hidden

    @property
    def state_shape(self) -> tuple[int, int]:
        """``(L, S)``: layers, state width (2 x hidden for an LSTM)."""
        return (self.layers, self.hidden * (2 if self.kind == "lstm" else 1))

    def initial_state(self, *batch: int, device: torch.device | str | None = None) -> Tensor:
        return torch.zeros(*batch, *self.state_shape, device=device)

    def _unpack(self, state: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        s = state.transpose(0, 1).contiguous()  # [L, B, S] as torch's RNNs want
        if self.kind == "gru":
            return s
        return s[..., : self.hidden].contiguous(), s[..., self.hidden :].contiguous()

    def _pack(self, s: Tensor | tuple[Tensor, Tensor]) -> Tensor:
        if self.kind == "lstm":
            s = torch.cat(s, -1)
        return s.transpose(0, 1)

    def step(self, x: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        """One time step: ``x [B, F]``, ``state [B, L, S]`` -> ``(y [B, H], state [B, L, S])``."""
        y, s = self.rnn(x.unsqueeze(0), self._unpack(state))
        return y.squeeze(0), self._pack(s)

    def forward(self, x: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        """:meth:`step` over any leading axes: ``x [..., F]``, ``state [..., L, S]``."""
        lead = x.shape[:-1]
        y, s = self.step(x.reshape(-1, x.shape[-1]), state.reshape(-1, *self.state_shape))
        return y.reshape(*lead, self.out_dim), s.reshape(*lead, *self.state_shape)

    def sequence(self, x: Tensor, state0: Tensor, resets: Tensor) -> Tensor:
        """``x [T, ..., F]``, ``state0 [..., L, S]``, ``resets [T, ...]`` (bool) -> ``y [T, ..., H]``.

        Steps one at a time so the state can be zeroed where an episode starts; gradients flow
        through the whole window (truncated BPTT over the rollout).
        """
        state = state0
        out = []
        for t in range(x.shape[0]):
            y, state = self(x[t], zero_done(state, resets[t]))
            out.append(y)
        return torch.stack(out)
