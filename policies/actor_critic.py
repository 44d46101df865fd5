"""MLP actor-critic for one agent group: a Gaussian head (state-independent log-std), or
categorical heads for groups with discrete choices (``GroupDims.action_nvec``).

Shapes: E = environments (or any batch), A = agents in the group.

    obs          [E, A, obs_dim]      raw policy observation (normalised inside)
    critic_obs   [E, A, critic_dim]   what the critic sees: the env's ``state`` (MAPPO, centralised)
                                      or the policy observation (IPPO)
    action       [E, A, act_dim]      Gaussian sample, unbounded; the env gets ``clamp(-1, 1)``
    value        [E, A]               in return units (the value normaliser is inverted inside)

Discrete choices (e.g. a volleyball strategy picking a player and a target) keep the env contract
of float actions in [-1, 1]: head ``k`` with ``n_k`` options samples an index ``i`` and sends
``-1 + 2 i / (n_k - 1)`` (the env rounds it back, ``sim.core.spec.choice_from_action``); the
log-probability and entropy are the categorical ones, summed over heads.

``sharing="shared"`` gives every agent of the group the same weights; ``"per_agent"`` gives each
agent its own, batched over the agent axis (see :mod:`policies.mlp`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch
from torch import Tensor, nn

from policies.mlp import build_mlp
from policies.normalizer import RunningNorm

SHARING = ("shared", "per_agent")
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


@dataclass(frozen=True)
class GroupDims:
    """Sizes of one agent group, enough to rebuild its networks without the env."""

    n_agents: int
    obs_dim: int
    critic_dim: int
    action_dim: int
    action_nvec: tuple[int, ...] = ()  # options per discrete head; () = continuous (Gaussian)

    def __post_init__(self) -> None:
        object.__setattr__(self, "action_nvec", tuple(int(n) for n in self.action_nvec))
        if self.action_nvec and (len(self.action_nvec) != self.action_dim or min(self.action_nvec) < 1):
            raise ValueError(f"action_nvec {self.action_nvec} needs action_dim={self.action_dim} heads of >= 1 options")

    @property
    def discrete(self) -> bool:
        return bool(self.action_nvec)

    def to_dict(self) -> dict:
        return asdict(self)


def action_from_choice(index: Tensor, n: int) -> Tensor:
    """Choice ``index`` (of ``n``) -> its action value in [-1, 1] (inverse of the env's rounding)."""
    return index.float() * (2.0 / (n - 1)) - 1.0 if n > 1 else torch.zeros_like(index, dtype=torch.float32)


def choice_from_action(action: Tensor, n: int) -> Tensor:
    """Action value in [-1, 1] -> choice index (long) of ``n`` options."""
    return torch.round((action.clamp(-1.0, 1.0) + 1.0) * (0.5 * (n - 1))).long()


@dataclass(frozen=True)
class PolicyCfg:
    """Network settings (hydra node ``algo.policy``)."""

    sharing: str = "shared"  # "shared" | "per_agent" weights within a group
    actor_hidden: tuple[int, ...] = (128, 128)
    critic_hidden: tuple[int, ...] = (128, 128)
    activation: str = "elu"
    layer_norm: bool = False  # LayerNorm after each hidden Linear
    init_log_std: float = -1.0  # initial log std of the Gaussian in action units ([-1, 1])
    obs_clip: float = 10.0  # normalised observations are clipped to +-obs_clip

    def __post_init__(self) -> None:
        if self.sharing not in SHARING:
            raise ValueError(f"policy.sharing must be one of {SHARING}, got {self.sharing!r}")

    @classmethod
    def from_dict(cls, node: Mapping[str, Any] | None) -> PolicyCfg:
        """Build from a plain mapping (e.g. the ``algo.policy`` node); unknown keys are errors."""
        node = dict(node or {})
        valid = {f.name for f in fields(cls)}
        unknown = sorted(set(node) - valid)
        if unknown:
            raise ValueError(f"unknown policy config key(s) {unknown}; valid keys: {sorted(valid)}")
        return cls(**{k: tuple(v) if isinstance(v, list | tuple) else v for k, v in node.items()})


class DeterministicActor(nn.Module):
    """Raw observation -> deterministic action in [-1, 1]: ``clamp(obs @ P + mu(norm(obs)), -1, 1)``.

    ``[..., A, obs_dim] -> [..., A, act_dim]``; pure tensor maths, so ``torch.onnx.export`` traces
    it with the normaliser and the action prior ``P`` baked in. Shares its modules with the
    :class:`ActorCritic` it came from.
    """

    def __init__(self, actor_critic: ActorCritic) -> None:
        super().__init__()
        self.ac = actor_critic

    def forward(self, obs: Tensor) -> Tensor:
        return self.ac.action_mean(obs).clamp(-1.0, 1.0)


class ActorCritic(nn.Module):
    """Actor and critic of one agent group; see the module docstring for shapes."""

    def __init__(self, dims: GroupDims, cfg: PolicyCfg | None = None) -> None:
        super().__init__()
        cfg = cfg or PolicyCfg()
        self.dims, self.cfg = dims, cfg
        per_agent = dims.n_agents if cfg.sharing == "per_agent" else None
        self.obs_norm = RunningNorm(dims.obs_dim, clip=cfg.obs_clip)
        self.critic_norm = RunningNorm(dims.critic_dim, clip=cfg.obs_clip)
        self.value_norm = RunningNorm(1, clip=math.inf)
        # The actor maps a *normalised* observation to the action mean (no value-dependent branches).
        mlp = dict(activation=cfg.activation, layer_norm=cfg.layer_norm, n_agents=per_agent)
        out_dim = sum(dims.action_nvec) if dims.discrete else dims.action_dim
        self.actor = build_mlp(dims.obs_dim, cfg.actor_hidden, out_dim, out_gain=0.01, **mlp)
        self.critic = build_mlp(dims.critic_dim, cfg.critic_hidden, 1, out_gain=1.0, **mlp)
        log_std_shape = (dims.n_agents, dims.action_dim) if per_agent else (dims.action_dim,)
        self.log_std = nn.Parameter(torch.full(log_std_shape, float(cfg.init_log_std)))
        # Fixed linear prior on the raw observation (GroupSpec.action_prior); the MLP learns the residual.
        self.register_buffer("action_prior", torch.zeros(dims.obs_dim, dims.action_dim))

    def set_action_prior(self, prior: Tensor) -> None:
        """Use ``prior [obs_dim, act_dim]`` (from ``GroupSpec.action_prior_matrix()``); saved with the weights."""
        if prior.shape != self.action_prior.shape:
            raise ValueError(f"action prior shape {tuple(prior.shape)} != {tuple(self.action_prior.shape)}")
        self.action_prior.copy_(prior)

    # ----------------------------------------------------------------- actor
    def action_mean(self, obs: Tensor) -> Tensor:
        """``[E, A, obs_dim] -> [E, A, act_dim]``: the Gaussian mean (unclamped; prior plus learned
        residual), or for discrete heads the most likely choice of each head as its action value."""
        if self.dims.discrete:
            heads = zip(self._logits(obs), self.dims.action_nvec, strict=True)
            return torch.stack([action_from_choice(lg.argmax(-1), n) for lg, n in heads], -1)
        return obs @ self.action_prior + self.actor(self.obs_norm(obs))

    def _logits(self, obs: Tensor) -> list[Tensor]:
        """Per discrete head, log-probabilities ``[E, A, n_k]``."""
        raw = self.actor(self.obs_norm(obs)).split(self.dims.action_nvec, -1)
        return [torch.log_softmax(lg, -1) for lg in raw]

    def act(self, obs: Tensor, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """Sample ``(action [E, A, act_dim], log_prob [E, A])`` from the policy."""
        if self.dims.discrete:
            actions, log_prob = [], 0.0
            for lg, n in zip(self._logits(obs), self.dims.action_nvec, strict=True):
                # Gumbel-max: argmax(logits + Gumbel noise) is a categorical sample (seeded by ``generator``).
                u = torch.rand(lg.shape, generator=generator, device=lg.device).clamp(1e-9, 1.0 - 1e-7)
                idx = (lg - torch.log(-torch.log(u))).argmax(-1)
                actions.append(action_from_choice(idx, n))
                log_prob = log_prob + lg.gather(-1, idx.unsqueeze(-1)).squeeze(-1)
            return torch.stack(actions, -1), log_prob
        mean = self.action_mean(obs)
        noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
        action = mean + noise * self.log_std.exp()
        return action, self._log_prob(mean, action)

    def act_deterministic(self, obs: Tensor) -> Tensor:
        """``[E, A, obs_dim] -> [E, A, act_dim]`` in [-1, 1]."""
        return self.action_mean(obs).clamp(-1.0, 1.0)

    def evaluate(self, obs: Tensor, critic_obs: Tensor, action: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(log_prob [E, A], entropy (broadcastable to [E, A]), normalised value [E, A])`` for the PPO loss."""
        if self.dims.discrete:
            log_prob, entropy = 0.0, 0.0
            for k, (lg, n) in enumerate(zip(self._logits(obs), self.dims.action_nvec, strict=True)):
                idx = choice_from_action(action[..., k], n)
                log_prob = log_prob + lg.gather(-1, idx.unsqueeze(-1)).squeeze(-1)
                entropy = entropy - (lg.exp() * lg).sum(-1)
            return log_prob, entropy, self.value_normalized(critic_obs)
        log_prob = self._log_prob(self.action_mean(obs), action)
        return log_prob, self.entropy(), self.value_normalized(critic_obs)

    def entropy(self) -> Tensor:
        """Gaussian entropy summed over action dims: ``sum(0.5 + log(sqrt(2 pi)) + log_std)``
        (discrete heads: see :meth:`evaluate`, it depends on the observation)."""
        return (0.5 + _LOG_SQRT_2PI + self.log_std).sum(-1)

    def _log_prob(self, mean: Tensor, action: Tensor) -> Tensor:
        # log N(a; mu, sigma) = -((a - mu) / sigma)^2 / 2 - log sigma - log sqrt(2 pi), summed over dims
        z = (action - mean) * torch.exp(-self.log_std)
        return (-0.5 * z.square() - self.log_std - _LOG_SQRT_2PI).sum(-1)

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
    def value_normalized(self, critic_obs: Tensor) -> Tensor:
        """``[E, A, critic_dim] -> [E, A]``: critic output in normalised return units."""
        return self.critic(self.critic_norm(critic_obs)).squeeze(-1)

    def value(self, critic_obs: Tensor) -> Tensor:
        """``[E, A, critic_dim] -> [E, A]`` in return units."""
        return self.value_norm.denormalize(self.value_normalized(critic_obs).unsqueeze(-1)).squeeze(-1)

    # ----------------------------------------------------------------- normalisers and export
    @torch.no_grad()
    def update_obs_normalizers(self, obs: Tensor, critic_obs: Tensor) -> None:
        """Merge ``obs [..., obs_dim]`` and ``critic_obs [..., critic_dim]`` into the running stats."""
        self.obs_norm.update(obs)
        self.critic_norm.update(critic_obs)

    def deterministic_actor(self) -> DeterministicActor:
        """The deployable policy: raw observation -> action in [-1, 1] (shares these weights)."""
        return DeterministicActor(self)


def build_actor_critics(groups: Mapping[str, GroupDims], cfg: PolicyCfg) -> nn.ModuleDict:
    """One :class:`ActorCritic` per agent group, keyed by group name."""
    return nn.ModuleDict({name: ActorCritic(dims, cfg) for name, dims in groups.items()})
