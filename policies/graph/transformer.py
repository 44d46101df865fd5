"""The Transformer baseline of HEPi: self-attention over the graph's nodes, edges unused.

Token per node: ``[one-hot type, node features, its 3D vectors flattened]`` with the position
(vector channel 0) taken relative to the masked centroid of the real nodes (translation invariant;
not rotation equivariant: the coordinates are fed as numbers, so the test shows the difference),
a Linear to ``latent``, then ``layers`` pre-LayerNorm blocks (multi-head attention with the node
mask as key padding, a feed-forward of 2 x latent), a LayerNorm and a Linear from each actuator
token (the last ``n_act``) to its ``action_vectors`` 3D vectors. Attention is written out
(softmax of masked scores) so that the ONNX export is a plain trace.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch import Tensor, nn

from policies.encoders import InputSpec
from policies.graph.base import GraphActor, GraphActorCfg, linear
from policies.mlp import ACTIVATIONS


class Block(nn.Module):
    """Pre-LN Transformer block: ``x [B, N, D]``, ``mask [B, 1, 1, N]`` (0 real, -1e9 padding) -> ``[B, N, D]``."""

    def __init__(self, dim: int, heads: int, activation: str) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"graph_latent {dim} must be a multiple of the {heads} attention heads")
        self.heads, self.head_dim = heads, dim // heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = linear(dim, 3 * dim, gain=1.0)
        self.proj = linear(dim, dim, gain=1.0)
        self.ff = nn.Sequential(linear(dim, 2 * dim), ACTIVATIONS[activation](), linear(2 * dim, dim, gain=1.0))

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(b, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) * (1.0 / math.sqrt(self.head_dim)) + mask  # [B, H, N, N]
        att = torch.softmax(scores, -1) @ v  # [B, H, N, head_dim]
        x = x + self.proj(att.transpose(1, 2).reshape(b, n, d))
        return x + self.ff(self.norm2(x))


class TransformerGraphActor(GraphActor):
    """Graph parts -> action vectors at the actuator tokens (not equivariant); see the module docstring."""

    needs_edges = False

    def __init__(self, parts: Mapping[str, InputSpec], action_dim: int, cfg: GraphActorCfg) -> None:
        super().__init__(parts, action_dim, cfg)
        dim = cfg.latent
        token = cfg.node_types + self.n_features + 3 * (self.n_free + 1)
        self.embed = linear(token, dim)
        self.blocks = nn.ModuleList(Block(dim, cfg.heads, cfg.activation) for _ in range(cfg.layers))
        self.norm = nn.LayerNorm(dim)
        self.head = linear(dim, 3 * cfg.action_vectors, gain=cfg.out_gain)

    def forward(self, parts: Mapping[str, Tensor]) -> Tensor:
        g = self.read(parts)
        centroid = (g.pos * g.node_mask).sum(1, keepdim=True) / g.node_mask.sum(1, keepdim=True).clamp(min=1.0)
        pos = (g.pos - centroid) * g.node_mask
        onehot = nn.functional.one_hot(g.types, self.cfg.node_types).to(pos.dtype)
        x = self.embed(torch.cat([onehot, g.features, pos, g.vectors.flatten(-2)], -1))
        mask = ((g.node_mask[..., 0] - 1.0) * 1e9)[:, None, None, :]  # padding keys get -1e9
        for block in self.blocks:
            x = block(x, mask)
        out = self.head(self.norm(self.actuators(x)))  # [B, n_act, 3 * action_vectors]
        return self.action(out, g.lead)
