"""Actor-critic for one agent group, assembled from encoders: per observation entry an encoder
(:mod:`policies.encoders`: normalised vectors, a CNN for images, a graph encoder), optionally a
recurrent memory (:mod:`policies.memory`, GRU/LSTM), then an MLP head: a Gaussian (state-independent
log-std) or categorical heads for groups with discrete choices (``GroupDims.action_nvec``). The
critic is built the same way from its own entries (privileged ``state`` for an asymmetric critic).

Shapes: E = environments (or any batch), A = agents in the group.

    obs          the group's observation dict ``{entry: [E, A, *shape]}`` (the actor picks its
                 ``actor_inputs``); a bare tensor ``[E, A, obs_dim]`` when the actor has one input
    critic_obs   the same for the critic's ``critic_inputs``
    action       [E, A, act_dim]      Gaussian sample, unbounded; the env gets ``clamp(-1, 1)``
    value        [E, A]               in return units (the value normaliser is inverted inside)
    memory       [E, A, L, S]         recurrent state of one side (``policy.memory`` = gru | lstm)

Discrete choices (e.g. a volleyball strategy picking a player and a target) keep the env contract
of float actions in [-1, 1]: head ``k`` with ``n_k`` options samples an index ``i`` and sends
``-1 + 2 i / (n_k - 1)`` (the env rounds it back, ``sim.core.spec.choice_from_action``); the
log-probability and entropy are the categorical ones, summed over heads. The distributions are
:mod:`policies.distributions`; the fixed linear action prior (residual learning) is :mod:`policies.action_prior`.

``sharing="shared"`` gives every agent of the group the same weights; ``"per_agent"`` gives each
agent its own, batched over the agent axis (see :mod:`policies.mlp`).

A graph actor (``policy.graph_actor`` = hepi | empn | transformer, :mod:`policies.graph`) replaces the
actor's encoder and MLP: it reads the parts of one observation graph and returns the action mean
directly (3D vectors at the actuator nodes); its Gaussian log-std has one entry per output vector,
tied across x/y/z (``log_std [act_dim / 3]``), so the distribution is rotation invariant too. The
critic keeps the encoder path (a DeepSets graph encoder and an MLP).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch
from torch import Tensor, nn

from covey_common.spec import choice_from_action
from policies.action_prior import prior_term, register_action_prior, residual_mean, set_action_prior
from policies.distributions import (
    categorical_log_prob_entropy,
    categorical_log_probs,
    categorical_mode,
    categorical_sample,
    gaussian_entropy,
    gaussian_log_prob,
    gaussian_sample,
)
from policies.encoders import CNNS, EncoderCfg, InputSpec, ObsEncoder, pick
from policies.graph import GRAPH_ACTORS, GraphActorCfg, build_graph_actor
from policies.memory import MEMORY_KINDS, RecurrentMemory, zero_done
from policies.mlp import ACTIVATIONS, build_mlp
from policies.normalizer import RunningNorm

SHARING = ("shared", "per_agent")


@dataclass(frozen=True)
class GroupDims:
    """Sizes of one agent group, enough to rebuild its networks without the env.

    ``actor_inputs`` / ``critic_inputs`` list the observation entries each side reads; left empty
    (older checkpoints, simple uses) they default to one float vector ``"policy"`` of ``obs_dim``
    and one ``"state"`` of ``critic_dim``. ``obs_dim`` / ``critic_dim`` are then derived as the
    total size of the vector inputs (0 without any).
    """

    n_agents: int
    obs_dim: int = 0
    critic_dim: int = 0
    action_dim: int = 0
    action_nvec: tuple[int, ...] = ()  # options per discrete head; () = continuous (Gaussian)
    actor_inputs: tuple[InputSpec, ...] = ()
    critic_inputs: tuple[InputSpec, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "action_nvec", tuple(int(n) for n in self.action_nvec))
        if self.action_nvec and (len(self.action_nvec) != self.action_dim or min(self.action_nvec) < 1):
            raise ValueError(f"action_nvec {self.action_nvec} needs action_dim={self.action_dim} heads of >= 1 options")
        actor = tuple(InputSpec.from_any(i) for i in self.actor_inputs) or (InputSpec("policy", (self.obs_dim,)),)
        critic = tuple(InputSpec.from_any(i) for i in self.critic_inputs) or (InputSpec("state", (self.critic_dim,)),)
        object.__setattr__(self, "actor_inputs", actor)
        object.__setattr__(self, "critic_inputs", critic)
        object.__setattr__(self, "obs_dim", sum(i.size for i in actor if i.kind == "vector"))
        object.__setattr__(self, "critic_dim", sum(i.size for i in critic if i.kind == "vector"))

    @property
    def discrete(self) -> bool:
        return bool(self.action_nvec)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["actor_inputs"] = [i.to_dict() for i in self.actor_inputs]
        out["critic_inputs"] = [i.to_dict() for i in self.critic_inputs]
        return out


def action_from_choice(index: Tensor, n: int) -> Tensor:
    """Choice ``index`` (of ``n``) -> its action value in [-1, 1] (inverse of the env's rounding)."""
    return index.float() * (2.0 / (n - 1)) - 1.0 if n > 1 else torch.zeros_like(index, dtype=torch.float32)


@dataclass(frozen=True)
class PolicyCfg:
    """Network settings (hydra node ``algo.policy``)."""

    sharing: str = "shared"  # "shared" | "per_agent" weights within a group (MLPs; encoders are shared)
    actor_hidden: tuple[int, ...] = (128, 128)
    critic_hidden: tuple[int, ...] = (128, 128)
    activation: str = "elu"
    layer_norm: bool = False  # LayerNorm after each hidden Linear
    init_log_std: float = -1.0  # initial log std of the Gaussian in action units ([-1, 1])
    # tanh on the action mean (SAC's squashed Gaussian, training/sac.py sets it): the deterministic and
    # exported action is tanh(prior + mlp) instead of clamp(prior + mlp, -1, 1).
    squash: bool = False
    obs_clip: float = 10.0  # normalised observations are clipped to +-obs_clip
    # Image entries: a CNN (channels, kernels, strides per layer) and a Linear to image_features;
    # cnn=resnet: IMPALA-style residual stages (one per channel count; kernels and strides unused); cnn=spatial: the
    # plain convolutions, then a spatial softmax (policies.encoders.SpatialSoftmax).
    cnn: str = "plain"
    cnn_channels: tuple[int, ...] = (16, 32, 32)
    cnn_kernels: tuple[int, ...] = (5, 3, 3)
    cnn_strides: tuple[int, ...] = (2, 2, 2)
    image_features: int = 128
    # Graph entries: an encoder from policies.encoders.GRAPH_ENCODERS.
    graph_encoder: str = "deepsets"
    graph_hidden: tuple[int, ...] = (64, 64)
    graph_features: int = 64
    # Recurrent memory between the encoder and the MLP head: none | gru | lstm.
    memory: str = "none"
    memory_hidden: int = 128
    memory_layers: int = 1
    memory_critic: bool = True  # the critic gets its own memory too (else a feed-forward critic)
    # Graph actor (policies.graph): none | hepi | empn | transformer. It maps the actor's graph
    # straight to the action mean; the encoder/MLP settings above then apply to the critic only.
    graph_actor: str = "none"
    graph_action_vectors: int = 1  # 3D action vectors per actuator node (insertion 2: linear, angular)
    graph_layers: int = 2  # message stages (hepi: even; 2 = the paper's) / Transformer blocks
    graph_latent: int = 64  # invariant channels per node / Transformer width
    graph_vector_channels: int = 8  # equivariant 3D vector channels per node (hepi, empn)

    def __post_init__(self) -> None:
        if self.sharing not in SHARING:
            raise ValueError(f"policy.sharing must be one of {SHARING}, got {self.sharing!r}")
        if self.memory not in MEMORY_KINDS:
            raise ValueError(f"policy.memory must be one of {MEMORY_KINDS}, got {self.memory!r}")
        if self.memory != "none" and self.sharing != "shared":
            raise ValueError("policy.memory needs policy.sharing=shared (no recurrent per-agent weights)")
        if self.memory_hidden < 1 or self.memory_layers < 1:
            raise ValueError("policy.memory_hidden and policy.memory_layers must be >= 1")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"policy.activation must be one of {sorted(ACTIVATIONS)}, got {self.activation!r}")
        for key in ("actor_hidden", "critic_hidden", "cnn_channels", "cnn_kernels", "cnn_strides", "graph_hidden"):
            if any(n < 1 for n in getattr(self, key)):
                raise ValueError(f"policy.{key} needs sizes >= 1, got {getattr(self, key)}")
        for key in ("image_features", "graph_features"):
            if getattr(self, key) < 1:
                raise ValueError(f"policy.{key} must be >= 1, got {getattr(self, key)}")
        if self.cnn not in CNNS:
            raise ValueError(f"policy.cnn must be one of {CNNS}, got {self.cnn!r}")
        if self.cnn != "resnet" and not len(self.cnn_channels) == len(self.cnn_kernels) == len(self.cnn_strides):
            raise ValueError("policy.cnn_channels, cnn_kernels and cnn_strides need one entry per layer each")
        if self.obs_clip <= 0:
            raise ValueError(f"policy.obs_clip must be > 0, got {self.obs_clip}")
        if self.graph_actor != "none":
            if self.graph_actor not in GRAPH_ACTORS:
                raise ValueError(
                    f"policy.graph_actor must be 'none' or one of {sorted(GRAPH_ACTORS)}, got {self.graph_actor!r}"
                )
            if self.memory != "none":
                raise ValueError("policy.graph_actor needs policy.memory=none (graph actors are feed-forward)")
            if self.sharing != "shared":
                raise ValueError("policy.graph_actor needs policy.sharing=shared (one graph network per group)")
            if self.graph_actor == "hepi" and self.graph_layers % 2:
                raise ValueError(f"policy.graph_layers must be even for hepi (stage pairs), got {self.graph_layers}")
        for key in ("graph_action_vectors", "graph_layers", "graph_latent", "graph_vector_channels"):
            if getattr(self, key) < 1:
                raise ValueError(f"policy.{key} must be >= 1, got {getattr(self, key)}")

    @classmethod
    def from_dict(cls, node: Mapping[str, Any] | None) -> PolicyCfg:
        """Build from a plain mapping (e.g. the ``algo.policy`` node); unknown keys are errors."""
        node = dict(node or {})
        valid = {f.name for f in fields(cls)}
        unknown = sorted(set(node) - valid)
        if unknown:
            raise ValueError(f"unknown policy config key(s) {unknown}; valid keys: {sorted(valid)}")
        return cls(**{k: tuple(v) if isinstance(v, list | tuple) else v for k, v in node.items()})

    def encoder_cfg(self) -> EncoderCfg:
        return EncoderCfg(
            cnn=self.cnn,
            cnn_channels=self.cnn_channels,
            cnn_kernels=self.cnn_kernels,
            cnn_strides=self.cnn_strides,
            image_features=self.image_features,
            graph_encoder=self.graph_encoder,
            graph_hidden=self.graph_hidden,
            graph_features=self.graph_features,
            activation=self.activation,
        )

    def graph_actor_cfg(self) -> GraphActorCfg:
        return GraphActorCfg(
            layers=self.graph_layers,
            latent=self.graph_latent,
            vector_channels=self.graph_vector_channels,
            action_vectors=self.graph_action_vectors,
        )


class DeterministicActor(nn.Module):
    """Raw observation -> deterministic action in [-1, 1]: ``clamp(x0 @ P + mu(features), -1, 1)``.

    ``forward(obs, memory=None)``: ``obs`` is the group's observation dict, the list of the actor's
    entries in ``dims.actor_inputs`` order (each ``[..., A, *shape]``), or the only entry's tensor;
    a recurrent policy also takes ``memory [..., A, L, S]`` and returns ``(action, memory)``.
    Pure tensor maths, so ``torch.onnx.export`` traces it with the normaliser and the action prior
    ``P`` baked in. Shares its modules with the :class:`ActorCritic` it came from.
    """

    def __init__(self, actor_critic: ActorCritic) -> None:
        super().__init__()
        self.ac = actor_critic

    def forward(self, obs: Any, memory: Tensor | None = None) -> Tensor | tuple[Tensor, Tensor]:
        return self.ac.act_deterministic(obs, memory)


class StatefulActor:
    """A deterministic actor that keeps its recurrent state between calls (evaluation loops).

    ``actor(obs) -> action`` like a feed-forward actor; call ``reset(done [E])`` after every env
    step so that the state of envs that finished starts again from zeros. Feed-forward policies
    work too (``reset`` does nothing).
    """

    def __init__(self, actor_critic: ActorCritic) -> None:
        self.ac = actor_critic
        self.module = DeterministicActor(actor_critic)
        self.memory: Tensor | None = None

    def __call__(self, obs: Tensor | Mapping[str, Tensor]) -> Tensor:
        if not self.ac.recurrent:
            return self.module(obs)
        x = pick(obs, self.ac.dims.actor_inputs)[0]
        if self.memory is None or self.memory.shape[:-2] != x.shape[:2]:
            self.memory = self.ac.actor_memory.initial_state(*x.shape[:2], device=x.device)
        action, self.memory = self.module(obs, self.memory)
        return action

    def reset(self, done: Tensor | None = None) -> None:
        """Zero the state of envs ``done [E]`` (bool), or of all envs when None."""
        if self.memory is None:
            return
        if done is None:
            self.memory = None
        else:
            self.memory = zero_done(self.memory, done)

    def eval(self) -> StatefulActor:
        return self


def reset_memory(actors: Mapping[str, Any], done: Tensor) -> None:
    """After an env step: restart the recurrent state of the envs ``done [E]`` of every stateful actor."""
    for actor in actors.values():
        if isinstance(actor, StatefulActor):
            actor.reset(done)


class ActorCritic(nn.Module):
    """Actor and critic of one agent group; see the module docstring for shapes."""

    def __init__(self, dims: GroupDims, cfg: PolicyCfg | None = None) -> None:
        super().__init__()
        cfg = cfg or PolicyCfg()
        self.dims, self.cfg = dims, cfg
        per_agent = dims.n_agents if cfg.sharing == "per_agent" else None
        enc = cfg.encoder_cfg()
        self.has_graph_actor = cfg.graph_actor != "none"
        if self.has_graph_actor and dims.discrete:
            raise ValueError("policy.graph_actor needs a continuous action (no discrete heads)")
        # A graph actor reads the raw graph itself: no actor encoder (nothing to normalise).
        self.actor_encoder = _NoEncoder() if self.has_graph_actor else ObsEncoder(dims.actor_inputs, enc, cfg.obs_clip)
        self.critic_encoder = ObsEncoder(dims.critic_inputs, enc, cfg.obs_clip)
        self.value_norm = RunningNorm(1, clip=math.inf)
        self.recurrent = cfg.memory != "none"
        actor_in, critic_in = self.actor_encoder.out_dim, self.critic_encoder.out_dim
        self.actor_memory: RecurrentMemory | None = None
        self.critic_memory: RecurrentMemory | None = None
        if self.recurrent:
            self.actor_memory = RecurrentMemory(cfg.memory, actor_in, cfg.memory_hidden, cfg.memory_layers)
            actor_in = self.actor_memory.out_dim
            if cfg.memory_critic:
                self.critic_memory = RecurrentMemory(cfg.memory, critic_in, cfg.memory_hidden, cfg.memory_layers)
                critic_in = self.critic_memory.out_dim
        # The actor maps encoded features to the action mean (no value-dependent branches).
        mlp = dict(activation=cfg.activation, layer_norm=cfg.layer_norm, n_agents=per_agent)
        out_dim = sum(dims.action_nvec) if dims.discrete else dims.action_dim
        if self.has_graph_actor:
            self.actor = build_graph_actor(cfg.graph_actor, dims.actor_inputs, dims.action_dim, cfg.graph_actor_cfg())
        else:
            self.actor = build_mlp(actor_in, cfg.actor_hidden, out_dim, out_gain=0.01, **mlp)
        self.critic = build_mlp(critic_in, cfg.critic_hidden, 1, out_gain=1.0, **mlp)
        log_std_shape = (dims.n_agents, dims.action_dim) if per_agent else (dims.action_dim,)
        if self.has_graph_actor:  # one per output vector, shared by its x, y, z: a rotation-invariant Gaussian
            log_std_shape = (dims.action_dim // 3,)
        self.log_std = nn.Parameter(torch.full(log_std_shape, float(cfg.init_log_std)))
        # Fixed linear prior on the first actor input when it is a vector (GroupSpec.action_prior);
        # the network learns the residual (policies.action_prior).
        self._prior_dim = register_action_prior(self, dims.actor_inputs[0], dims.action_dim)
        self._register_load_state_dict_pre_hook(self._upgrade_state_dict)

    def _upgrade_state_dict(self, state_dict: dict, prefix: str, *args: Any) -> None:
        """Checkpoints from before the encoders held ``obs_norm.*`` / ``critic_norm.*``: the one
        vector input of each side. Renamed in place so old checkpoints load unchanged."""
        renames = {
            "obs_norm.": ("actor_encoder", self.actor_encoder),
            "critic_norm.": ("critic_encoder", self.critic_encoder),
        }
        for old, (new, encoder) in renames.items():
            keys = [k for k in state_dict if k.startswith(prefix + old)]
            if keys and len(encoder.norms) == 1:
                (name,) = encoder.norms.keys()
                for k in keys:
                    state_dict[f"{prefix}{new}.norms.{name}.{k[len(prefix + old) :]}"] = state_dict.pop(k)

    # ----------------------------------------------------------------- compatibility views
    @property
    def obs_norm(self) -> RunningNorm:
        """The normaliser of the actor's single vector input (policies with one vector entry)."""
        return _single_norm(self.actor_encoder, "actor")

    @property
    def critic_norm(self) -> RunningNorm:
        return _single_norm(self.critic_encoder, "critic")

    def set_action_prior(self, prior: Tensor | None) -> None:
        """Use ``prior [prior_dim, act_dim]`` (from ``GroupSpec.action_prior_matrix()``); saved with the weights."""
        set_action_prior(self.action_prior, prior)

    def initial_memory(self, *batch: int, device: torch.device | str | None = None) -> dict[str, Tensor]:
        """Zero recurrent states ``{"actor": [*batch, L, S], "critic": ...}`` ({} when feed-forward)."""
        out = {}
        if self.actor_memory is not None:
            out["actor"] = self.actor_memory.initial_state(*batch, device=device)
        if self.critic_memory is not None:
            out["critic"] = self.critic_memory.initial_state(*batch, device=device)
        return out

    # ----------------------------------------------------------------- actor
    def _actor_out(self, obs: Any, memory: Tensor | None) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """``(raw head output, prior term or None, new memory)`` of one step."""
        xs = pick(obs, self.dims.actor_inputs)
        if self.has_graph_actor:
            return self.actor({spec.role: x for spec, x in zip(self.dims.actor_inputs, xs, strict=True)}), None, None
        feat = self.actor_encoder(xs)
        if self.actor_memory is not None:
            if memory is None:
                raise ValueError("a recurrent policy needs its memory state (see initial_memory)")
            feat, memory = self.actor_memory(feat, memory)
        else:
            memory = None  # (fx passes a placeholder for the unused argument)
        return self.actor(feat), prior_term(xs[0], self.action_prior, self._prior_dim), memory

    def _mean(self, out: Tensor, prior: Tensor | None) -> Tensor:
        if self.dims.discrete:
            heads = zip(categorical_mode(self._logits_of(out)), self.dims.action_nvec, strict=True)
            return torch.stack([action_from_choice(idx, n) for idx, n in heads], -1)
        return residual_mean(out, prior, self.cfg.squash)

    def logits(self, obs: Any) -> list[Tensor]:
        """Per discrete head, log-probabilities ``[E, A, n_k]`` (feed-forward policies)."""
        return self._logits_of(self._actor_out(obs, None)[0])

    def _logits_of(self, out: Tensor) -> list[Tensor]:
        """Per discrete head, log-probabilities ``[E, A, n_k]``."""
        return categorical_log_probs(out, self.dims.action_nvec)

    def action_mean(self, obs: Any, memory: Tensor | None = None) -> Tensor:
        """``[E, A, act_dim]``: the Gaussian mean (unclamped; prior plus learned residual), or for
        discrete heads the most likely choice of each head as its action value (feed-forward)."""
        out, prior, _ = self._actor_out(obs, memory)
        return self._mean(out, prior)

    def act(
        self, obs: Any, generator: torch.Generator | None = None, memory: Tensor | None = None
    ) -> tuple[Tensor, Tensor] | tuple[Tensor, Tensor, Tensor]:
        """Sample ``(action [E, A, act_dim], log_prob [E, A])`` from the policy; a recurrent policy
        takes its ``memory`` and also returns the next one."""
        out, prior, new_memory = self._actor_out(obs, memory)
        if self.dims.discrete:
            indices, log_prob = categorical_sample(self._logits_of(out), generator)
            heads = zip(indices, self.dims.action_nvec, strict=True)
            action = torch.stack([action_from_choice(idx, n) for idx, n in heads], -1)
        else:
            mean = self._mean(out, prior)
            action = gaussian_sample(mean, self._log_std_full(), generator)
            log_prob = self._log_prob(mean, action)
        return (action, log_prob) if new_memory is None else (action, log_prob, new_memory)

    def act_deterministic(self, obs: Any, memory: Tensor | None = None) -> Tensor | tuple[Tensor, Tensor]:
        """``[E, A, act_dim]`` in [-1, 1] (and the next memory for a recurrent policy)."""
        out, prior, new_memory = self._actor_out(obs, memory)
        action = self._mean(out, prior).clamp(-1.0, 1.0)
        return action if new_memory is None else (action, new_memory)

    def _dist_terms(self, out: Tensor, prior: Tensor | None, action: Tensor) -> tuple[Tensor, Tensor]:
        """``(log_prob, entropy)`` of ``action`` under the head output ``out``."""
        if self.dims.discrete:
            indices = [choice_from_action(action[..., k], n) for k, n in enumerate(self.dims.action_nvec)]
            return categorical_log_prob_entropy(self._logits_of(out), indices)
        return self._log_prob(self._mean(out, prior), action), self.entropy()

    def evaluate(self, obs: Any, critic_obs: Any, action: Tensor, with_mean: bool = False) -> tuple[Tensor, ...]:
        """``(log_prob [E, A], entropy (broadcastable to [E, A]), normalised value [E, A])`` for the PPO loss; with
        ``with_mean`` also the Gaussian mean ``[E, A, act_dim]`` (a teacher term compares it)."""
        out, prior, _ = self._actor_out(obs, None)
        log_prob, entropy = self._dist_terms(out, prior, action)
        value = self.value_normalized(critic_obs)
        return (log_prob, entropy, value, self._mean(out, prior)) if with_mean else (log_prob, entropy, value)

    def evaluate_sequence(
        self,
        obs: Mapping[str, Tensor],
        critic_obs: Mapping[str, Tensor],
        action: Tensor,
        memory0: Mapping[str, Tensor],
        resets: Tensor,
        with_mean: bool = False,
    ) -> tuple[Tensor, ...]:
        """The recurrent counterpart of :meth:`evaluate` over whole rollout windows.

        Args:
            obs, critic_obs: entry -> ``[T, B, A, *shape]``.
            action: ``[T, B, A, act_dim]``.
            memory0: ``{"actor": [B, A, L, S], "critic": ...}`` at the start of the window.
            resets: ``[T, B]`` bool, an episode started at step t (state zeroed before it).

        Returns:
            ``(log_prob [T, B, A], entropy, normalised value [T, B, A])`` (and the mean ``[T, B, A, act_dim]`` with
            ``with_mean``); gradients flow through the window (truncated back-propagation through time).
        """
        xs = pick(obs, self.dims.actor_inputs)
        feat = self.actor_encoder(xs)
        feat = self.actor_memory.sequence(feat, memory0["actor"], resets)
        prior = prior_term(xs[0], self.action_prior, self._prior_dim)
        out = self.actor(feat)
        log_prob, entropy = self._dist_terms(out, prior, action)
        cfeat = self.critic_encoder(pick(critic_obs, self.dims.critic_inputs))
        if self.critic_memory is not None:
            cfeat = self.critic_memory.sequence(cfeat, memory0["critic"], resets)
        value = self.critic(cfeat).squeeze(-1)
        return (log_prob, entropy, value, self._mean(out, prior)) if with_mean else (log_prob, entropy, value)

    def action_mean_sequence(self, obs: Mapping[str, Tensor], memory0: Tensor, resets: Tensor) -> Tensor:
        """The recurrent actor's mean ``[T, B, A, act_dim]`` over a window (``obs`` entry -> ``[T, B, A, *shape]``,
        ``memory0 [B, A, L, S]``, ``resets [T, B]``), gradients through the window (imitation of sequences)."""
        xs = pick(obs, self.dims.actor_inputs)
        feat = self.actor_memory.sequence(self.actor_encoder(xs), memory0, resets)
        prior = prior_term(xs[0], self.action_prior, self._prior_dim)
        return self._mean(self.actor(feat), prior)

    def entropy(self) -> Tensor:
        """Gaussian entropy summed over action dims: ``sum(0.5 + log(sqrt(2 pi)) + log_std)``
        (discrete heads: see :meth:`evaluate`, it depends on the observation)."""
        return gaussian_entropy(self._log_std_full())

    def action_log_std(self) -> Tensor:
        """``[act_dim]`` (or ``[A, act_dim]`` per agent) log std of the Gaussian, per action component."""
        return self._log_std_full()

    def _log_std_full(self) -> Tensor:
        """``[act_dim]`` (``[A, act_dim]`` per agent): a graph actor's tied log-std repeated over x, y, z."""
        return self.log_std.repeat_interleave(3, -1) if self.has_graph_actor else self.log_std

    def _log_prob(self, mean: Tensor, action: Tensor) -> Tensor:
        return gaussian_log_prob(mean, self._log_std_full(), action)

    @torch.no_grad()
    def set_constant_choice(self, choice: Sequence[int], logit: float = 30.0) -> None:
        """Make a discrete policy pick ``choice`` (an index per head) whatever it observes: the
        actor's last layer gets zero weights and biases of ``+logit`` (chosen) / ``-logit``. Puts a
        scripted team that is a constant choice (the rule-based volleyball strategy) into a
        self-play pool as an ordinary snapshot."""
        nvec = self.dims.action_nvec
        if not nvec or len(choice) != len(nvec) or any(not 0 <= c < n for c, n in zip(choice, nvec, strict=True)):
            raise ValueError(f"choice {tuple(choice)} does not fit the discrete heads {nvec}")
        last = self.actor[-1]
        last.weight.zero_()
        bias = torch.full_like(last.bias, -logit)
        offsets = [sum(nvec[:k]) for k in range(len(nvec))]
        for off, c in zip(offsets, choice, strict=True):
            bias[..., off + c] = logit
        last.bias.copy_(bias)

    # ----------------------------------------------------------------- critic
    def _critic_out(self, critic_obs: Any, memory: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """``(value [E, A] in normalised return units, next memory or None)`` of one step."""
        feat = self.critic_encoder(pick(critic_obs, self.dims.critic_inputs))
        if self.critic_memory is not None:
            if memory is None:
                raise ValueError("a recurrent critic needs its memory state (see initial_memory)")
            feat, memory = self.critic_memory(feat, memory)
        return self.critic(feat).squeeze(-1), memory

    def _denormalize(self, value: Tensor) -> Tensor:
        return self.value_norm.denormalize(value.unsqueeze(-1)).squeeze(-1)

    def value_normalized(self, critic_obs: Any, memory: Tensor | None = None) -> Tensor:
        """``[E, A]``: critic output in normalised return units."""
        return self._critic_out(critic_obs, memory)[0]

    def value(self, critic_obs: Any, memory: Tensor | None = None) -> Tensor:
        """``[E, A]`` in return units (a recurrent critic reads ``memory`` without advancing it)."""
        return self._denormalize(self._critic_out(critic_obs, memory)[0])

    def value_step(self, critic_obs: Any, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Recurrent critic: ``(value [E, A] in return units, next memory)``."""
        value, memory = self._critic_out(critic_obs, memory)
        return self._denormalize(value), memory

    # ----------------------------------------------------------------- normalisers and export
    @torch.no_grad()
    def update_obs_normalizers(self, obs: Any, critic_obs: Any) -> None:
        """Merge raw observations (entries with any leading axes) into the running statistics."""
        self.actor_encoder.update_normalizers(pick(obs, self.dims.actor_inputs))
        self.critic_encoder.update_normalizers(pick(critic_obs, self.dims.critic_inputs))

    def deterministic_actor(self) -> DeterministicActor | StatefulActor:
        """The deployable policy: raw observation -> action in [-1, 1] (shares these weights).

        Feed-forward: a traceable :class:`DeterministicActor`. Recurrent: a :class:`StatefulActor`
        carrying the memory between calls (``reset(done)`` after each step); its ``module`` is
        the traceable ``(inputs..., memory) -> (action, memory)`` graph.
        """
        return StatefulActor(self) if self.recurrent else DeterministicActor(self)


class _NoEncoder(nn.Module):
    """The actor's encoder when a graph actor reads the raw graph itself: no inputs to normalise."""

    out_dim = 0

    def __init__(self) -> None:
        super().__init__()
        self.norms = nn.ModuleDict()

    def update_normalizers(self, xs: Sequence[Tensor]) -> None:
        """Nothing to track (graph parts are not normalised)."""


def _single_norm(encoder: ObsEncoder, side: str) -> RunningNorm:
    if len(encoder.norms) != 1:
        raise AttributeError(f"the {side} has {len(encoder.norms)} vector inputs; use its encoder's norms")
    return next(iter(encoder.norms.values()))


def build_actor_critics(groups: Mapping[str, GroupDims], cfg: PolicyCfg) -> nn.ModuleDict:
    """One :class:`ActorCritic` per agent group, keyed by group name."""
    return nn.ModuleDict({name: ActorCritic(dims, cfg) for name, dims in groups.items()})
