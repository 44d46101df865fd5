"""Imitation warm start: DAgger from a task's expert, before PPO fine-tunes (hydra node ``imitation``).

    python train.py task=drone_volleyball algo=hcsp stage=skills task.mode=serve imitation.expert=task

Round 0 rolls out the expert; later rounds roll out the student (its deterministic action) while
the expert labels every visited state (DAgger, Ross et al. 2011: the student learns to recover from
its own mistakes, which pure behaviour cloning never sees). After each round the actor's mean is
fitted by MSE to the aggregate of all labels (the observation normaliser first absorbs the data).
The expert is ``env.expert_policy()`` (``obs -> {group: action}``), e.g. drone volleyball's scripted
skills. Afterwards ``critic_warmup`` PPO iterations fit only the value function, so the first
policy updates see sensible advantages instead of a random critic's.

The same loop distils any teacher into a student that observes less (robot soccer's
state-to-vision student later): the expert only has to act on the env's state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from policies import ActorCritic
from sim.core.config import at_least, non_negative, positive

EXPERTS = ("none", "task")


@dataclass(frozen=True)
class ImitationCfg:
    """DAgger settings (hydra node ``imitation``); ``expert: none`` skips it."""

    expert: str = "none"  # none | task (the env's expert_policy())
    rounds: int = at_least(1, 6)  # DAgger rounds; round 0 follows the expert
    steps: int = at_least(1, 64)  # env steps per round (each num_envs samples)
    epochs: int = at_least(1, 10)  # passes over the aggregate per round
    batch_size: int = at_least(1, 4096)
    lr: float = positive(1e-3)
    max_samples: int = at_least(1, 2_000_000)  # the aggregate keeps the newest samples beyond this
    critic_warmup: int = non_negative(5)  # PPO iterations that fit only the value function afterwards

    def __post_init__(self) -> None:
        if self.expert not in EXPERTS:
            raise ValueError(f"imitation.expert must be one of {EXPERTS}, got {self.expert!r}")


def dagger(
    env,
    models: torch.nn.ModuleDict,
    expert: Callable[[dict], dict[str, Tensor]],
    cfg: ImitationCfg,
    generator: torch.Generator,
    log: Callable[[str], None] = print,
) -> list[dict[str, float]]:
    """Fit every group's actor in ``models`` to ``expert`` by DAgger; returns per-round statistics
    (``mse``: the fit on the aggregate, ``agreement``: the mean |student - expert| action gap on the
    round's own states, ``samples``). Groups missing from ``models`` follow the expert throughout."""
    groups = list(models)
    if any(models[g].cfg.sharing != "shared" for g in groups):
        raise ValueError("imitation needs algo.policy.sharing=shared (one actor fitted on every agent's samples)")
    if any(models[g].recurrent for g in groups):
        raise ValueError("imitation fits feed-forward actors only (algo.policy.memory=none)")
    # Per group: every actor entry's samples [n, *shape] (images stay uint8) and the expert's labels.
    data: dict[str, tuple[dict[str, list[Tensor]], list[Tensor]]] = {g: ({}, []) for g in groups}
    params = [p for g in groups for m in (models[g].actor_encoder, models[g].actor) for p in m.parameters()]
    optimizer = torch.optim.Adam(params, lr=cfg.lr)
    stats = []
    obs = env.reset()
    for r in range(cfg.rounds):
        gap = {g: 0.0 for g in groups}
        with torch.no_grad():  # not inference_mode: the env creates buffers the PPO phase writes into
            for _ in range(cfg.steps):
                labels = expert(obs)
                actions = dict(labels)
                for g in groups:
                    student = models[g].act_deterministic(obs[g])
                    gap[g] += float((student - labels[g]).abs().mean()) / cfg.steps
                    for k in env.spec.groups[g].actor_obs:
                        data[g][0].setdefault(k, []).append(obs[g][k].flatten(0, 1).clone())
                    data[g][1].append(labels[g].flatten(0, 1).clone())
                    if r > 0:
                        actions[g] = student
                obs, *_ = env.step(actions)
        row = {"round": float(r)}
        for g in groups:
            x = {k: torch.cat(v)[-cfg.max_samples :] for k, v in data[g][0].items()}
            y = torch.cat(data[g][1])[-cfg.max_samples :]  # the aggregate keeps the newest samples
            data[g] = ({k: [v] for k, v in x.items()}, [y])
            ac: ActorCritic = models[g]
            newest = cfg.steps * env.num_envs * env.spec.groups[g].n_agents
            ac.actor_encoder.update_normalizers([x[i.name][-newest:] for i in ac.dims.actor_inputs])
            mse = _fit(ac, x, y, optimizer, cfg, generator)
            row.update({f"{g}/mse": mse, f"{g}/agreement": gap[g], f"{g}/samples": float(y.shape[0])})
        stats.append(row)
        log("dagger round " + " ".join(f"{k} {v:.4g}" for k, v in row.items()))
    return stats


def _fit(
    ac: ActorCritic,
    x: dict[str, Tensor],
    y: Tensor,
    optimizer: torch.optim.Optimizer,
    cfg: ImitationCfg,
    gen: torch.Generator,
) -> float:
    """Epochs of minibatch MSE between the actor's mean (shared weights: samples of every agent,
    entries ``x[name] [n, *shape]``) and ``y [n, act_dim]``."""
    n = y.shape[0]
    total, count = 0.0, 0
    for _ in range(cfg.epochs):
        perm = torch.randperm(n, generator=gen, device=gen.device).to(y.device)
        for start in range(0, n, cfg.batch_size):
            idx = perm[start : start + cfg.batch_size]
            pred = ac.action_mean({k: v[idx].unsqueeze(1) for k, v in x.items()}).squeeze(1)
            loss = (pred - y[idx]).square().mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total, count = total + float(loss.detach()), count + 1
    return total / max(count, 1)
