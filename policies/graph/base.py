"""What every graph actor shares: its settings, reading the padded graph parts, and the dense
gather/scatter by edge that message passing is built from.

A graph actor maps the parts of ONE padded observation graph (roles of
:data:`policies.encoders.InputSpec`, leading axes ``[...]``: ``[E, A]`` from the env, ``[B, A]`` or
``[T, B, A]`` in PPO, ``[B]`` in the ONNX graph) straight to the Gaussian action mean
``[..., action_dim]``: for each of the last ``n_act`` nodes (the actuators) ``action_vectors`` 3D
vectors, flattened in node order ``[act0_v0, act0_v1, act1_v0, ...]`` with
``n_act = action_dim / (3 * action_vectors)``.

Conventions of the parts (``sim/tasks/hepi/graph.py`` produces them):

    node_vectors  [..., N, V, 3]  channel 0 the node position (world frame), others free vectors
    node_features [..., N, F]     invariant scalars (optional)
    node_types    [..., N]        int64 type index (optional; 0 object, 1 actuator)
    node_mask     [..., N]        bool (optional)
    edge_index    [..., M, 2]     int64 (sender, receiver)
    edge_types    [..., M]        int64 (optional; 0 object-object, 1 object->actuator, 2 actuator<->actuator)
    edge_mask     [..., M]        bool (optional)

An edge counts only when it and both of its nodes are real, so padding content never reaches the
action. Everything is static-shape tensor maths (no loop over envs, nodes or edges), which
``torch.onnx.export`` traces with a dynamic batch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor, nn

from policies.encoders import InputSpec


@dataclass(frozen=True)
class GraphActorCfg:
    """Graph actor settings (built from ``algo.policy`` by ``PolicyCfg.graph_actor_cfg``)."""

    layers: int = 2  # message stages (HEPi: an even number, object-internal then to the actuators) / Transformer blocks
    latent: int = 64  # invariant scalar channels per node (Transformer: token width)
    vector_channels: int = 8  # equivariant 3D vector channels per node (HEPi/EMPN)
    action_vectors: int = 1  # 3D action vectors per actuator node
    node_types: int = 2  # node type indices 0..node_types-1 (larger ones are clamped)
    edge_types: int = 3  # edge type indices 0..edge_types-1
    heads: int = 2  # Transformer attention heads (the paper's baseline: 2 heads, 2 blocks, width 64)
    activation: str = "silu"
    out_gain: float = 0.01  # scale of the initial readout (near-zero initial actions, like the MLP head)


class Graph(NamedTuple):
    """One padded graph with its leading axes flattened into one batch axis B.

    ``pos [B, N, 3]``, ``vectors [B, N, V-1, 3]`` (the free vectors), ``features [B, N, F]``,
    ``types [B, N]`` long, ``node_mask [B, N, 1]`` float, ``senders``/``receivers [B, M]`` long,
    ``edge_types [B, M]`` long, ``edge_mask [B, M, 1]`` float (edge and both nodes real), ``lead``
    the original leading shape.
    """

    pos: Tensor
    vectors: Tensor
    features: Tensor
    types: Tensor
    node_mask: Tensor
    senders: Tensor
    receivers: Tensor
    edge_types: Tensor
    edge_mask: Tensor
    lead: tuple[int, ...]


class GraphActor(nn.Module):
    """Base: checks the parts against the action size and reads them into a :class:`Graph`.

    Subclasses implement ``forward(parts) -> mean [..., action_dim]``.
    """

    needs_edges = True

    def __init__(self, parts: Mapping[str, InputSpec], action_dim: int, cfg: GraphActorCfg) -> None:
        super().__init__()
        required = ("node_vectors", "edge_index") if self.needs_edges else ("node_vectors",)
        missing = [r for r in required if r not in parts]
        if missing:
            raise ValueError(f"a graph actor needs the graph parts {list(required)}; missing {missing}")
        n_nodes, n_vec, _ = parts["node_vectors"].shape
        per_node = 3 * cfg.action_vectors
        if action_dim < per_node or action_dim % per_node:
            raise ValueError(
                f"action_dim {action_dim} is not a multiple of 3 * graph_action_vectors = {per_node} "
                "(one set of 3D vectors per actuator node)"
            )
        self.n_act = action_dim // per_node
        if self.n_act > n_nodes:
            raise ValueError(f"{self.n_act} actuator nodes needed for action_dim {action_dim}, the graph has {n_nodes}")
        self.cfg, self.action_dim = cfg, action_dim
        self.n_free = n_vec - 1  # the node count is not kept: an actor acts on a graph of any size
        self.n_features = parts["node_features"].shape[-1] if "node_features" in parts else 0

    def read(self, parts: Mapping[str, Tensor]) -> Graph:
        """The parts (any leading axes) -> a flattened, masked :class:`Graph`."""
        vec = parts["node_vectors"]
        vec = vec if vec.is_floating_point() else vec.float()  # float32 as shipped; float64 works too
        dtype = vec.dtype
        lead = tuple(vec.shape[:-3])
        n, v = vec.shape[-3], vec.shape[-2]
        vec = vec.reshape(-1, n, v, 3)
        b = vec.shape[0]
        if "node_features" in parts:
            feats = parts["node_features"].to(dtype).reshape(b, n, -1)
        else:
            feats = vec.new_zeros(b, n, 0)
        if "node_types" in parts:
            types = parts["node_types"].long().reshape(b, n).clamp(0, self.cfg.node_types - 1)
        else:
            types = torch.zeros(b, n, dtype=torch.long, device=vec.device)
        if "node_mask" in parts:
            nmask = parts["node_mask"].reshape(b, n).to(dtype)
        else:
            nmask = vec.new_ones(b, n)
        if "edge_index" in parts:
            index = parts["edge_index"].long()
            m = index.shape[-2]
            index = index.reshape(b, m, 2).clamp(0, n - 1)  # padding edges may hold any index
            send, recv = index[..., 0], index[..., 1]
            emask = nmask.gather(1, send) * nmask.gather(1, recv)
            if "edge_mask" in parts:
                emask = emask * parts["edge_mask"].reshape(b, m).to(dtype)
            if "edge_types" in parts:
                etypes = parts["edge_types"].long().reshape(b, m).clamp(0, self.cfg.edge_types - 1)
            else:
                etypes = torch.zeros(b, m, dtype=torch.long, device=vec.device)
        else:
            send = recv = etypes = torch.zeros(b, 0, dtype=torch.long, device=vec.device)
            emask = vec.new_zeros(b, 0)
        # Padding nodes are zeroed so that nothing non-finite in them can leak through a 0 * inf.
        keep = nmask[..., None, None]
        vec = vec * keep
        return Graph(
            pos=vec[:, :, 0],
            vectors=vec[:, :, 1:],
            features=feats * nmask[..., None],
            types=types,
            node_mask=nmask[..., None],
            senders=send,
            receivers=recv,
            edge_types=etypes,
            edge_mask=emask[..., None],
            lead=lead,
        )

    def actuators(self, x: Tensor) -> Tensor:
        """``[B, N, ...]`` per-node rows -> the actuators' ``[B, n_act, ...]``: the last ``n_act`` nodes of the graph
        given, whatever its size (a trained actor acts on a bigger object)."""
        return x[:, x.shape[1] - self.n_act :]

    def action(self, vectors: Tensor, lead: tuple[int, ...]) -> Tensor:
        """``[B, n_act, action_vectors, 3]`` -> the flat action mean ``[*lead, action_dim]``."""
        return vectors.reshape(*lead, self.action_dim)


def gather_nodes(x: Tensor, index: Tensor) -> Tensor:
    """``x [B, N, C]`` rows at ``index [B, M]`` -> ``[B, M, C]`` (one flat ``index_select``)."""
    b, n, c = x.shape
    flat = index + (torch.arange(b, device=index.device) * n)[:, None]
    return x.reshape(b * n, c).index_select(0, flat.reshape(-1)).reshape(b, -1, c)


def scatter_sum(msg: Tensor, index: Tensor, n: int) -> Tensor:
    """Sum of ``msg [B, M, C]`` into the nodes ``index [B, M]`` -> ``[B, n, C]`` (one flat ``index_add``)."""
    b, m, c = msg.shape
    flat = index + (torch.arange(b, device=index.device) * n)[:, None]
    out = msg.new_zeros(b * n, c).index_add(0, flat.reshape(-1), msg.reshape(b * m, c))
    return out.reshape(b, n, c)


def typed_select(x: Tensor, types: Tensor, n_types: int) -> Tensor:
    """Per item one of ``n_types`` blocks: ``x [..., n_types * C]``, ``types [...]`` -> ``[..., C]``.

    Type-specific weights run as one wide matmul for all types followed by this selection (a one-hot
    weighted sum): static shapes, no gather of weight matrices per item.
    """
    if n_types == 1:
        return x
    onehot = nn.functional.one_hot(types, n_types).to(x.dtype)
    return (x.unflatten(-1, (n_types, -1)) * onehot[..., None]).sum(-2)


def linear(fan_in: int, fan_out: int, gain: float = math.sqrt(2), bias: bool = True) -> nn.Linear:
    """An ``nn.Linear`` with orthogonal weights of ``gain`` and zero bias (covey's MLP init)."""
    layer = nn.Linear(fan_in, fan_out, bias=bias)
    nn.init.orthogonal_(layer.weight, gain=gain)
    if bias:
        nn.init.zeros_(layer.bias)
    return layer
