"""Observation encoders: one per observation entry, fused into one feature vector per agent.

A policy's inputs are a tuple of :class:`InputSpec` (the policies-side copy of a task's
``ObsEntry``: ``policies`` never imports ``sim``). :class:`ObsEncoder` maps the raw entries of one
agent group to features ``[..., A, out_dim]``:

    vector  float32 [..., A, D]          running mean/std normalisation (inside the exported graph)
    image   uint8   [..., A, H, W, C]    scaled to [0, 1], a small CNN (shared by the group's agents)
    graph   parts of one padded graph    a graph encoder from :data:`GRAPH_ENCODERS` (shared)

The fused feature is the concatenation in input order: vectors first as normalised values (the
trunk MLP after the encoder is their encoder, so an all-vector policy is exactly the old MLP), then
each image's and each graph's features. Everything is pure tensor maths with static shapes, so
``torch.onnx.export`` traces it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor, nn

from policies.mlp import ACTIVATIONS, build_mlp
from policies.normalizer import RunningNorm

KINDS = ("vector", "image", "graph")


@dataclass(frozen=True)
class InputSpec:
    """One observation entry as a policy sees it: name, per-agent shape, dtype name and kind.

    Graph parts also carry ``graph`` (which graph) and ``role`` (``node_features``,
    ``node_vectors``, ``node_types``, ``node_mask``, ``edge_index``, ``edge_types``, ``edge_mask``).
    """

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    kind: str = "vector"
    graph: str = ""
    role: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        if self.kind not in KINDS:
            raise ValueError(f"input {self.name!r}: kind must be one of {KINDS}, got {self.kind!r}")

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_any(cls, value: InputSpec | Mapping[str, Any]) -> InputSpec:
        return value if isinstance(value, InputSpec) else cls(**dict(value))


CNNS = ("plain", "resnet", "spatial")  # image encoders (EncoderCfg.cnn)


@dataclass(frozen=True)
class EncoderCfg:
    """Encoder settings (part of ``algo.policy``)."""

    # plain (strided convolutions, flattened) | resnet (IMPALA-style residual stages) | spatial (the plain convolutions,
    # then a spatial softmax: where each feature map peaks and how strongly, Levine et al. 2016)
    cnn: str = "plain"
    cnn_channels: tuple[int, ...] = (16, 32, 32)
    cnn_kernels: tuple[int, ...] = (5, 3, 3)
    cnn_strides: tuple[int, ...] = (2, 2, 2)
    image_features: int = 128
    graph_encoder: str = "deepsets"  # a key of GRAPH_ENCODERS
    graph_hidden: tuple[int, ...] = (64, 64)
    graph_features: int = 64
    activation: str = "elu"


def pick(obs: Tensor | Sequence[Tensor] | Mapping[str, Tensor], inputs: Sequence[InputSpec]) -> list[Tensor]:
    """The tensors of ``inputs``: from a group's observation dict (by name), a list already in
    input order, or a bare tensor when there is one input."""
    if isinstance(obs, Mapping):
        missing = [i.name for i in inputs if i.name not in obs]
        if missing:
            raise KeyError(f"observation entries {missing} missing (got {sorted(obs)})")
        return [obs[i.name] for i in inputs]
    if isinstance(obs, list | tuple):
        if len(obs) != len(inputs):
            raise ValueError(f"expected {len(inputs)} inputs {[i.name for i in inputs]}, got {len(obs)}")
        return list(obs)
    if len(inputs) != 1:
        raise ValueError(f"this policy reads {[i.name for i in inputs]}; give the group's observation dict")
    return [obs]


class _ResidualBlock(nn.Module):
    """``x + conv(relu(conv(relu(x))))``, 3x3 convolutions keeping the size (IMPALA, Espeholt et al. 2018)."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv0 = nn.Conv2d(c, c, 3, padding=1)
        self.conv1 = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))


def _resnet_stages(c: int, h: int, w: int, channels: tuple[int, ...]) -> tuple[nn.Module, int, int, int]:
    """IMPALA-style stages, one per channel count: conv 3x3, max-pool 3x3 stride 2, two residual blocks;
    returns ``(module, channels, height, width)`` of the output."""
    layers: list[nn.Module] = []
    for out_c in channels:
        layers += [nn.Conv2d(c, out_c, 3, padding=1), nn.MaxPool2d(3, 2, padding=1)]
        layers += [_ResidualBlock(out_c), _ResidualBlock(out_c)]
        c, h, w = out_c, (h - 1) // 2 + 1, (w - 1) // 2 + 1
    return nn.Sequential(*layers, nn.ReLU()), c, h, w


class SpatialSoftmax(nn.Module):
    """``[B, C, h, w] -> [B, 3 C]``: per feature map, the expected image position under a softmax over its pixels
    (x, y in [-1, 1]) and its largest activation (whether the feature is there at all). Keeps where a small object is
    (a ball 1-2 pixels wide), which flattening a coarse grid blurs (Levine et al. 2016, "End-to-end training of
    deep visuomotor policies")."""

    def __init__(self, h: int, w: int) -> None:
        super().__init__()
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, h), torch.linspace(-1, 1, w), indexing="ij")
        self.register_buffer("xs", xs.reshape(-1), persistent=False)
        self.register_buffer("ys", ys.reshape(-1), persistent=False)
        self.log_temperature = nn.Parameter(torch.zeros(()))

    def forward(self, x: Tensor) -> Tensor:
        flat = x.flatten(2)  # [B, C, h w]
        p = torch.softmax(flat * torch.exp(-self.log_temperature), -1)
        return torch.cat(((p * self.xs).sum(-1), (p * self.ys).sum(-1), flat.amax(-1)), -1)


class ImageEncoder(nn.Module):
    """``uint8 [..., H, W, C] -> [..., features]``: x / 255, convolutions, flatten, Linear.

    ``cfg.cnn``: ``plain`` (strided convolutions without padding, ``cnn_channels/kernels/strides``), ``resnet``
    (IMPALA-style residual stages, one per ``cnn_channels`` entry, each halving the size; the robot soccer paper's
    ResNet -> LSTM -> MLP agent) or ``spatial`` (the plain convolutions, then :class:`SpatialSoftmax`). Leading axes
    (envs, agents, time) are merged into one batch for the convolutions.
    """

    def __init__(self, shape: tuple[int, ...], cfg: EncoderCfg) -> None:
        super().__init__()
        h, w, c = shape
        act = ACTIVATIONS[cfg.activation]
        if cfg.cnn not in CNNS:
            raise ValueError(f"policy.cnn must be one of {CNNS}, got {cfg.cnn!r}")
        if cfg.cnn == "resnet":
            self.conv, c, h, w = _resnet_stages(c, h, w, cfg.cnn_channels)
            self._finish(shape, cfg, act, c * h * w)
            return
        layers: list[nn.Module] = []
        for out_c, k, s in zip(cfg.cnn_channels, cfg.cnn_kernels, cfg.cnn_strides, strict=True):
            conv = nn.Conv2d(c, out_c, k, s)
            nn.init.orthogonal_(conv.weight, gain=math.sqrt(2))
            nn.init.zeros_(conv.bias)
            layers += [conv, act()]
            c, h, w = out_c, (h - k) // s + 1, (w - k) // s + 1
            if h < 1 or w < 1:
                raise ValueError(f"image {shape} is too small for the CNN (kernels {cfg.cnn_kernels})")
        if cfg.cnn == "spatial":
            layers.append(SpatialSoftmax(h, w))
            self.conv = nn.Sequential(*layers)
            self._finish(shape, cfg, act, 3 * c)
            return
        self.conv = nn.Sequential(*layers)
        self._finish(shape, cfg, act, c * h * w)

    def _finish(self, shape: tuple[int, ...], cfg: EncoderCfg, act: type[nn.Module], flat_dim: int) -> None:
        self.shape = tuple(shape)
        self.flat_dim = flat_dim
        self.out = nn.Sequential(nn.Linear(self.flat_dim, cfg.image_features), act())
        nn.init.orthogonal_(self.out[0].weight, gain=math.sqrt(2))
        nn.init.zeros_(self.out[0].bias)
        self.out_dim = cfg.image_features

    def forward(self, image: Tensor) -> Tensor:
        lead = image.shape[:-3]
        x = image.reshape(-1, *self.shape).permute(0, 3, 1, 2).float() * (1.0 / 255.0)
        return self.out(self.conv(x).flatten(1)).reshape(*lead, self.out_dim)


class GraphEncoder(nn.Module):
    """Interface: the parts of one padded graph (role -> tensor, leading axes ``[...]``) -> ``[..., out_dim]``.

    Subclasses set ``out_dim`` and implement :meth:`forward`; register them in :data:`GRAPH_ENCODERS`
    (the HEPi equivariant encoder plugs in here).
    """

    out_dim: int

    def __init__(self, parts: Mapping[str, InputSpec], cfg: EncoderCfg) -> None:
        super().__init__()
        if "node_features" not in parts and "node_vectors" not in parts:
            raise ValueError("a graph needs node_features or node_vectors")
        self.parts = dict(parts)

    def forward(self, parts: Mapping[str, Tensor]) -> Tensor:  # pragma: no cover - interface
        raise NotImplementedError


class DeepSetsGraphEncoder(GraphEncoder):
    """A permutation-invariant baseline: per node an MLP on ``[features, |vectors|, one-hot type]``,
    masked mean and max over nodes, concatenated. Edges are not used (a message-passing encoder is
    a drop-in replacement through :data:`GRAPH_ENCODERS`).

    Vector channel 0 is the node position (the graph convention, ``sim/tasks/hepi/graph.py``): it
    enters relative to the masked centroid of the real nodes, so with the norms of the others the
    encoding is invariant to rotations and translations of the whole scene (HEPi's invariant critic).
    """

    def __init__(self, parts: Mapping[str, InputSpec], cfg: EncoderCfg) -> None:
        super().__init__(parts, cfg)
        in_dim = 0
        if "node_features" in parts:
            in_dim += parts["node_features"].shape[-1]
        if "node_vectors" in parts:
            in_dim += parts["node_vectors"].shape[-2]  # the norm of each 3D vector: rotation invariant
        self.n_types = 0
        if "node_types" in parts:
            # Types are indices; their count is not in the shape, so reserve a fixed one-hot width.
            self.n_types = 8
            in_dim += self.n_types
        self.node_mlp = build_mlp(in_dim, cfg.graph_hidden, cfg.graph_features, activation=cfg.activation)
        self.out_dim = 2 * cfg.graph_features

    def forward(self, parts: Mapping[str, Tensor]) -> Tensor:
        feats = []
        if "node_features" in parts:
            feats.append(parts["node_features"].float())
        if "node_vectors" in parts:
            vectors = parts["node_vectors"].float()
            pos = vectors[..., 0, :]
            if "node_mask" in parts:
                real = parts["node_mask"].unsqueeze(-1).float()
                centroid = (pos * real).sum(-2, keepdim=True) / real.sum(-2, keepdim=True).clamp(min=1.0)
            else:
                centroid = pos.mean(-2, keepdim=True)
            vectors = torch.cat([(pos - centroid).unsqueeze(-2), vectors[..., 1:, :]], -2)
            feats.append(vectors.norm(dim=-1))
        if self.n_types:
            types = parts["node_types"].long().clamp(0, self.n_types - 1)
            feats.append(nn.functional.one_hot(types, self.n_types).float())
        h = self.node_mlp(torch.cat(feats, -1))  # [..., N, F]
        if "node_mask" in parts:
            mask = parts["node_mask"].unsqueeze(-1).float()
        else:
            mask = torch.ones_like(h[..., :1])
        mean = (h * mask).sum(-2) / mask.sum(-2).clamp(min=1.0)
        mx = (h + (mask - 1.0) * 1e9).amax(-2)
        return torch.cat([mean, mx], -1)


GRAPH_ENCODERS: dict[str, type[GraphEncoder]] = {"deepsets": DeepSetsGraphEncoder}


class ObsEncoder(nn.Module):
    """The raw observation entries of one side (actor or critic) -> fused features ``[..., A, out_dim]``."""

    def __init__(self, inputs: Sequence[InputSpec], cfg: EncoderCfg, obs_clip: float = 10.0) -> None:
        super().__init__()
        self.inputs = tuple(inputs)
        if not self.inputs:
            raise ValueError("a policy needs at least one observation entry")
        self.norms = nn.ModuleDict()
        self.images = nn.ModuleDict()
        self.graphs = nn.ModuleDict()
        self._graph_parts: dict[str, dict[str, int]] = {}  # graph -> role -> index into inputs
        dim = 0
        for k, spec in enumerate(self.inputs):
            if spec.kind == "vector":
                if len(spec.shape) != 1:
                    raise ValueError(f"vector input {spec.name!r} must be 1-D, got {spec.shape}")
                self.norms[spec.name] = RunningNorm(spec.shape[0], clip=obs_clip)
                dim += spec.shape[0]
            elif spec.kind == "image":
                self.images[spec.name] = ImageEncoder(spec.shape, cfg)
                dim += self.images[spec.name].out_dim
            else:
                self._graph_parts.setdefault(spec.graph, {})[spec.role] = k
        for graph, roles in self._graph_parts.items():
            if cfg.graph_encoder not in GRAPH_ENCODERS:
                raise ValueError(f"unknown graph encoder {cfg.graph_encoder!r}; choose from {sorted(GRAPH_ENCODERS)}")
            enc = GRAPH_ENCODERS[cfg.graph_encoder]({r: self.inputs[k] for r, k in roles.items()}, cfg)
            self.graphs[graph] = enc
            dim += enc.out_dim
        self.out_dim = dim

    @property
    def vector_only(self) -> bool:
        return all(s.kind == "vector" for s in self.inputs)

    def forward(self, xs: Sequence[Tensor]) -> Tensor:
        """``xs``: the raw tensors of ``inputs`` in order -> ``[..., out_dim]``."""
        parts = [self.norms[s.name](x) for s, x in zip(self.inputs, xs, strict=True) if s.kind == "vector"]
        parts += [self.images[s.name](x) for s, x in zip(self.inputs, xs, strict=True) if s.kind == "image"]
        for graph, roles in self._graph_parts.items():
            parts.append(self.graphs[graph]({r: xs[k] for r, k in roles.items()}))
        return parts[0] if len(parts) == 1 else torch.cat(parts, -1)

    @torch.no_grad()
    def update_normalizers(self, xs: Sequence[Tensor]) -> None:
        """Merge raw vector entries (any leading axes) into the running statistics."""
        for spec, x in zip(self.inputs, xs, strict=True):
            if spec.kind == "vector":
                self.norms[spec.name].update(x)
