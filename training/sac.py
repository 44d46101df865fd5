"""Soft actor-critic (Haarnoja et al. 2018), covey's off-policy algorithm family beside PPO.

    sac = SAC(models, SACCfg(lr=1e-4, gamma=0.98))               # models: one ActorCritic per group
    actions = sac.act(obs)                                       # squashed Gaussian samples, inference mode
    sac.add(obs, actions, reward, next_obs, terminated)          # into each group's replay buffer
    losses = sac.update(progress)                                # cfg.gradient_steps updates

The actor is the group's :class:`~policies.ActorCritic` built with ``policy.squash=true``: its
encoder and MLP give the pre-squash mean ``mu``, and its deterministic (evaluated, exported) action
is ``tanh(mu)``, so checkpoints, evaluation and ONNX export are PPO's unchanged. SAC adds, per
group, a state-dependent log-std head on the actor MLP's last hidden layer and twin Q networks
with their own observation encoder (on the critic's entries: privileged ``state`` for MAPPO-style
groups) and Polyak-averaged targets. Every agent of a group is one sample (parameter sharing), as
in covey's PPO.

The maths, per sampled batch (``B`` transitions, ``A`` agents; ``a ~ pi(.|s)`` by reparametrisation):

    u = mu(s) + sigma(s) * eps,   a = tanh(u)
    log pi(a|s) = log N(u; mu, sigma) - sum log(1 - tanh(u)^2)
    y = r + gamma * (1 - terminated) * (min_j Q'_j(s', a') - alpha * log pi(a'|s'))     # soft TD target
    L_Q = 0.5 * sum_j (Q_j(s, a_buffer) - y)^2
    L_pi = alpha * log pi(a|s) - min_j Q_j(s, a)
    L_alpha = -log(alpha) * (log pi(a|s) + target_entropy)          # target_entropy = -act_dim * scale
    theta' <- (1 - tau) theta' + tau theta

Truncated episodes bootstrap (``next_obs`` is the observation before the auto-reset). The learning
rate runs linearly from ``sac.lr`` to ``sac.lr_end`` over the run (``sac.schedule=linear``, VLM-RL's
1e-4 -> 5e-7) or stays at ``sac.lr`` (``constant``). Its settings are all :class:`SACCfg`'s (node ``sac``):
PPO's ``algo.lr``, ``algo.gamma`` and clipping do not apply; from ``algo`` it takes the networks only.

``sac.use_sde`` switches to generalized state-dependent exploration (gSDE, Raffin et al. 2022, as SB3
and VLM-RL use it): the std is ``sigma(s) = sqrt(h(s)^2 @ exp(2 L))`` of the actor's last hidden
features ``h`` (detached) and a learned ``L [hidden, act_dim]``; collection draws the noise as
``h(s) @ theta`` with ``theta ~ N(0, exp(L)^2)`` per env and agent, kept for ``sac.sde_sample_freq``
env steps, so exploration is smooth in time; the updates use the same Gaussian (reparametrised).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from policies import ActorCritic, InputSpec, build_mlp
from policies.encoders import ObsEncoder, pick
from policies.mlp import AgentLinear
from training.replay import ReplayBuffer, Transition
from training.settings import SAC_SCHEDULES, SACCfg  # the settings dataclasses live there (a leaf module)

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


class TwinQ(nn.Module):
    """Two Q heads on one observation encoder: ``(obs {entry: [..., A, *shape]}, action [..., A, act_dim])
    -> (q1, q2)``, each ``[..., A]``."""

    def __init__(self, ac: ActorCritic, inputs: tuple[InputSpec, ...]) -> None:
        super().__init__()
        cfg = ac.cfg
        self.inputs = inputs
        self.encoder = ObsEncoder(inputs, cfg.encoder_cfg(), cfg.obs_clip)
        per_agent = ac.dims.n_agents if cfg.sharing == "per_agent" else None
        mlp = dict(activation=cfg.activation, layer_norm=cfg.layer_norm, n_agents=per_agent, out_gain=1.0)
        in_dim = self.encoder.out_dim + ac.dims.action_dim
        self.q1 = build_mlp(in_dim, cfg.critic_hidden, 1, **mlp)
        self.q2 = build_mlp(in_dim, cfg.critic_hidden, 1, **mlp)

    def forward(self, obs: Mapping[str, Tensor], action: Tensor) -> tuple[Tensor, Tensor]:
        x = torch.cat([self.encoder(pick(obs, self.inputs)), action], -1)
        return self.q1(x).squeeze(-1), self.q2(x).squeeze(-1)


class SDEStd(nn.Module):
    """gSDE's std: ``log sigma(h) = 0.5 log(h^2 @ exp(2 L) + eps)`` of features ``h [..., W]`` (detached, as
    SB3: the exploration does not shape the features), ``L [W, act_dim]`` learned."""

    def __init__(self, width: int, action_dim: int, log_std_init: float) -> None:
        super().__init__()
        self.log_std = nn.Parameter(torch.full((width, action_dim), float(log_std_init)))

    def forward(self, hidden: Tensor) -> Tensor:
        return 0.5 * torch.log(hidden.detach().square() @ torch.exp(2.0 * self.log_std) + 1e-6)

    @torch.no_grad()
    def sample_exploration(self, batch: torch.Size, generator: torch.Generator | None) -> Tensor:
        """Exploration matrices ``theta [*batch, W, act_dim] ~ N(0, exp(L)^2)``."""
        std = self.log_std.exp()
        return torch.randn((*batch, *std.shape), generator=generator, device=std.device) * std


def squashed_log_prob(u: Tensor, mean: Tensor, log_std: Tensor) -> Tensor:
    """``log pi(tanh(u))`` ``[..., A]`` of pre-squash samples ``u [..., A, act_dim]`` under ``N(mean, exp(log_std))``.

    ``log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u))`` (stable for large ``|u|``).
    """
    z = (u - mean) * torch.exp(-log_std)
    gauss = (-0.5 * z.square() - log_std - _LOG_SQRT_2PI).sum(-1)
    return gauss - (2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))).sum(-1)


class SACState:
    """What a checkpoint's ``optimizer`` entry holds for SAC (the runner saves ``alg.optimizer``): the
    optimisers, the twin Q networks and their targets, the log-std heads and the temperatures."""

    def __init__(self, sac: SAC) -> None:
        self.sac = sac

    def state_dict(self) -> dict[str, Any]:
        s = self.sac
        return {
            "kind": "sac",
            "optimizers": {k: opt.state_dict() for k, opt in s.optimizers.items()},
            "critics": s.critics.state_dict(),
            "targets": s.targets.state_dict(),
            "std_heads": s.std_heads.state_dict(),
            "log_alpha": s.log_alpha.detach().clone(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("kind") != "sac":
            raise ValueError("the checkpoint was not written by SAC (its optimizer state is PPO's)")
        s = self.sac
        s.critics.load_state_dict(state["critics"])
        s.targets.load_state_dict(state["targets"])
        s.std_heads.load_state_dict(state["std_heads"])
        with torch.no_grad():
            s.log_alpha.copy_(state["log_alpha"])
        for k, opt in s.optimizers.items():
            opt.load_state_dict(state["optimizers"][k])


class SAC:
    """Acting, replay and the soft actor-critic update for every agent group.

    Shapes: ``obs[group][entry]`` ``[E, A, *shape]``, ``reward[group]`` ``[E, A]``, ``terminated`` ``[E]``.
    """

    def __init__(
        self,
        models: nn.ModuleDict,
        cfg: SACCfg,
        *,
        lr: float | None = None,
        gamma: float | None = None,
        schedule: str | None = None,
        max_grad_norm: float | None = None,
        normalize_obs: bool = True,
        device: torch.device | str = "cpu",
        generator: torch.Generator | None = None,
    ) -> None:
        """``lr``, ``gamma``, ``schedule`` and ``max_grad_norm`` are ``cfg``'s unless given here (library use)."""
        schedule = cfg.schedule if schedule is None else schedule
        if schedule not in SAC_SCHEDULES:
            raise ValueError(f"SAC takes sac.schedule in {SAC_SCHEDULES}, got {schedule!r}")
        self.models, self.cfg, self.device, self.generator = models, cfg, torch.device(device), generator
        self.lr = float(cfg.lr if lr is None else lr)
        self.gamma = float(cfg.gamma if gamma is None else gamma)
        self.schedule = schedule
        self.max_grad_norm = float(cfg.max_grad_norm if max_grad_norm is None else max_grad_norm)
        self.normalize_obs = bool(normalize_obs)
        self.std_heads = nn.ModuleDict()
        self.critics = nn.ModuleDict()
        self.buffers: dict[str, ReplayBuffer] = {}
        for name, ac in models.items():
            self._check_actor(name, ac)
            hidden = ac.cfg.actor_hidden
            width = hidden[-1] if hidden else ac.actor_encoder.out_dim
            per_agent = ac.dims.n_agents if ac.cfg.sharing == "per_agent" else None
            if cfg.use_sde:
                self.std_heads[name] = SDEStd(width, ac.dims.action_dim, cfg.sde_log_std_init)
            elif per_agent:
                self.std_heads[name] = AgentLinear(per_agent, width, ac.dims.action_dim, gain=0.01)
            else:
                self.std_heads[name] = nn.Linear(width, ac.dims.action_dim)
            self.critics[name] = TwinQ(ac, ac.dims.critic_inputs)
            entries = {
                s.name: (s.shape, getattr(torch, s.dtype)) for s in (*ac.dims.actor_inputs, *ac.dims.critic_inputs)
            }
            self.buffers[name] = ReplayBuffer(cfg.buffer_size, ac.dims.n_agents, entries, ac.dims.action_dim, device)
        self.std_heads.to(self.device)
        self.critics.to(self.device)
        self.targets = copy.deepcopy(self.critics).requires_grad_(False)
        # One temperature per group (groups differ in action size, so in their target entropy).
        self.log_alpha = torch.full((len(models),), math.log(cfg.init_alpha), device=self.device, requires_grad=True)
        self.target_entropy = {n: -cfg.target_entropy_scale * ac.dims.action_dim for n, ac in models.items()}
        actor_params = [*models.parameters(), *self.std_heads.parameters()]
        self.optimizers = {
            "actor": torch.optim.Adam(actor_params, lr=self.lr),
            "critic": torch.optim.Adam(self.critics.parameters(), lr=self.lr),
            "alpha": torch.optim.Adam([self.log_alpha], lr=self.lr),
        }
        self.optimizer = SACState(self)  # the runner's checkpoint code saves / loads ``alg.optimizer``
        self.memory: dict[str, dict[str, Tensor]] = {}  # no recurrent state (the runner's checkpoint reads it)
        self.freeze_obs_normalizers = False
        self.env_steps = 0  # env steps collected so far (the runner sets it; decides the warm-up)
        self._exploration: dict[str, Tensor] = {}  # gSDE: group -> theta [E, A, W, act_dim]
        self._sde_steps = 0

    @staticmethod
    def _check_actor(name: str, ac: ActorCritic) -> None:
        if ac.dims.discrete or ac.has_graph_actor or ac.recurrent:
            raise ValueError(f"SAC needs a continuous feed-forward MLP actor; group {name!r} has another kind")
        if not ac.cfg.squash:
            raise ValueError("SAC needs algo.policy.squash=true (its actions are tanh-squashed)")

    # ----------------------------------------------------------------- acting
    @property
    def learning_rate(self) -> float:
        return float(self.optimizers["actor"].param_groups[0]["lr"])

    def _policy(self, name: str, obs: Mapping[str, Tensor], with_hidden: bool = False) -> tuple[Tensor, ...]:
        """``(mu, log_std)`` ``[..., A, act_dim]`` before the squash (and the last hidden features ``[..., A, W]``
        with ``with_hidden``); ``tanh(mu)`` is the deterministic action."""
        ac = self.models[name]
        xs = pick(obs, ac.dims.actor_inputs)
        hidden = ac.actor[:-1](ac.actor_encoder(xs))
        mu = ac.actor[-1](hidden)
        if ac.action_prior.numel():
            mu = mu + xs[0] @ ac.action_prior
        log_std = self.std_heads[name](hidden).clamp(self.cfg.log_std_min, self.cfg.log_std_max)
        return (mu, log_std, hidden) if with_hidden else (mu, log_std)

    def sample(self, name: str, obs: Mapping[str, Tensor]) -> tuple[Tensor, Tensor]:
        """Reparametrised ``(action in (-1, 1) [..., A, act_dim], log_prob [..., A])`` of group ``name``."""
        mu, log_std = self._policy(name, obs)
        noise = torch.randn(mu.shape, generator=self.generator, device=mu.device, dtype=mu.dtype)
        u = mu + noise * log_std.exp()
        return torch.tanh(u), squashed_log_prob(u, mu, log_std)

    @torch.no_grad()
    def act(self, obs: Mapping[str, Mapping[str, Tensor]]) -> dict[str, Tensor]:
        """Stochastic actions ``{group: [E, A, act_dim]}`` for collection (gSDE: the held exploration matrices)."""
        if not self.cfg.use_sde:
            return {name: self.sample(name, obs[name])[0] for name in self.models}
        out = {}
        for name, head in self.std_heads.items():
            mu, _, hidden = self._policy(name, obs[name], with_hidden=True)
            theta = self._exploration.get(name)
            if theta is None or theta.shape[:2] != hidden.shape[:2] or self._sde_steps % self.cfg.sde_sample_freq == 0:
                theta = self._exploration[name] = head.sample_exploration(hidden.shape[:2], self.generator)
            # noise = h @ theta: per env and agent, smooth while the features change smoothly.
            noise = torch.einsum("...w,...wd->...d", hidden, theta)
            out[name] = torch.tanh(mu + noise)
        self._sde_steps += 1
        return out

    @torch.no_grad()
    def add(
        self,
        obs: Mapping[str, Mapping[str, Tensor]],
        actions: Mapping[str, Tensor],
        reward: Mapping[str, Tensor],
        next_obs: Mapping[str, Mapping[str, Tensor]],
        terminated: Tensor,
    ) -> None:
        """Store one env step of every group (``next_obs``: ``info["final_obs"]``, before the auto-reset);
        the observation normalisers take the new observations in."""
        for name, buf in self.buffers.items():
            buf.add(obs[name], actions[name], reward[name], next_obs[name], terminated)
            if self.normalize_obs and not self.freeze_obs_normalizers:
                ac = self.models[name]
                ac.update_obs_normalizers(obs[name], obs[name])
                self.critics[name].encoder.update_normalizers(pick(obs[name], ac.dims.critic_inputs))

    def ready(self) -> bool:
        """Past the warm-up, with a batch in every buffer."""
        full = all(len(b) >= self.cfg.batch_size for b in self.buffers.values())
        return full and self.env_steps >= self.cfg.learning_starts

    # ----------------------------------------------------------------- update
    def _set_lr(self, progress: float) -> None:
        lr = self.lr
        if self.schedule == "linear":
            lr = self.lr + (self.cfg.lr_end - self.lr) * min(max(progress, 0.0), 1.0)
        for opt in self.optimizers.values():
            for group in opt.param_groups:
                group["lr"] = lr

    def _step(self, key: str, loss: Tensor, params: list[Tensor]) -> None:
        opt = self.optimizers[key]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if math.isfinite(self.max_grad_norm):
            nn.utils.clip_grad_norm_(params, self.max_grad_norm)
        opt.step()

    def update(self, progress: float = 0.0, value_only: bool = False) -> dict[str, float]:
        """``cfg.gradient_steps`` SAC updates of every group (none during the warm-up); returns ``losses/*``,
        ``charts/*`` means. ``value_only`` updates the critics alone (the runner's critic warm-up)."""
        if not self.ready():
            return {}
        self._set_lr(progress)
        sums: dict[str, Tensor] = {}
        for _ in range(self.cfg.gradient_steps):
            for k, name in enumerate(self.models):
                batch = self.buffers[name].sample(self.cfg.batch_size, self.generator)
                for key, val in self._update_group(k, name, batch, value_only).items():
                    sums[key] = sums.get(key, 0.0) + val
            self._soft_update()
        n = self.cfg.gradient_steps * len(self.models)
        out = {key: float(val) / n for key, val in sums.items()}
        out["charts/learning_rate"] = self.learning_rate
        return out

    def _update_group(self, k: int, name: str, b: Transition, value_only: bool) -> dict[str, Tensor]:
        alpha = self.log_alpha[k].exp().detach()
        critic = self.critics[name]
        with torch.no_grad():
            next_a, next_logp = self.sample(name, b.next_obs)
            q1t, q2t = self.targets[name](b.next_obs, next_a)
            # Soft TD target: y = r + gamma (1 - terminated) (min Q'(s', a') - alpha log pi(a'|s')), per agent.
            y = b.reward + self.gamma * (1.0 - b.terminated).unsqueeze(-1) * (torch.min(q1t, q2t) - alpha * next_logp)
        q1, q2 = critic(b.obs, b.action)
        critic_loss = 0.5 * ((q1 - y).square().mean() + (q2 - y).square().mean())
        self._step("critic", critic_loss, list(critic.parameters()))
        out = {"losses/critic": critic_loss.detach(), "charts/q": q1.detach().mean()}
        if value_only:
            return out
        action, logp = self.sample(name, b.obs)
        critic.requires_grad_(False)  # the actor loss moves the actor only
        q_pi = torch.min(*critic(b.obs, action))
        critic.requires_grad_(True)
        actor_loss = (alpha * logp - q_pi).mean()
        self._step("actor", actor_loss, [*self.models[name].parameters(), *self.std_heads[name].parameters()])
        out.update(
            {"losses/actor": actor_loss.detach(), "charts/entropy": -logp.detach().mean(), "charts/alpha": alpha}
        )
        if self.cfg.learn_alpha:
            # L_alpha = -log(alpha) (log pi + target entropy): alpha grows while the entropy is below target.
            alpha_loss = -(self.log_alpha[k] * (logp.detach() + self.target_entropy[name])).mean()
            self._step("alpha", alpha_loss, [self.log_alpha])
            out["losses/alpha"] = alpha_loss.detach()
        return out

    @torch.no_grad()
    def _soft_update(self) -> None:
        """Polyak: theta' <- theta' + tau (theta - theta'); the observation statistics are copied as they are."""
        online, target = list(self.critics.parameters()), list(self.targets.parameters())
        torch._foreach_lerp_(target, online, self.cfg.tau)
        for t, o in zip(self.targets.buffers(), self.critics.buffers(), strict=True):
            t.copy_(o)
