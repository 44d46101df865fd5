"""Imitation warm start: DAgger from a task's expert, before PPO fine-tunes (hydra node ``imitation``).

    python train.py task=drone_volleyball algo=hcsp stage=skills task.mode=serve imitation.expert=task

Round 0 rolls out the expert; later rounds roll out the student (its deterministic action) while
the expert labels every visited state (DAgger, Ross et al. 2011: the student learns to recover from
its own mistakes, which pure behaviour cloning never sees). After each round the actor's mean is
fitted by MSE to the aggregate of all labels (the observation normaliser first absorbs the data).
The expert is ``env.expert_policy()`` (``obs -> {group: action}``), e.g. drone volleyball's scripted
skills, or a trained checkpoint (``imitation.expert=<path.pt>``) whose actors read the entries they were
trained on from the same observation dicts: robot soccer's state expert teaching a student that sees
only its head camera (the expert reads ``state``, the student ``image`` + ``proprio``). Afterwards
``critic_warmup`` PPO iterations fit only the value function, so the first policy updates see
sensible advantages instead of a random critic's.

``imitation.balance=true`` draws the fit's samples equally from each of the task's strata
(``env.imitation_strata()``, e.g. the skill each drone of a volleyball match is commanded): where a
rare case (an attack, ~1% of a match's drone states) shares an aggregate with common ones (drones
flying to their places), plain MSE spends almost every gradient step on the common ones.

Recurrent students (``policy.memory=gru|lstm``) are fitted on whole windows of ``steps`` steps by
truncated back-propagation through time, from the memory they had at the window's start and zeroed
where an episode starts, as the recurrent PPO update does.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from policies import ActorCritic
from policies.memory import zero_done
from training.settings import ImitationCfg  # the settings dataclasses live there (a leaf module)


def checkpoint_expert(path: str, groups: list[str], device: torch.device | str) -> Callable[[dict], dict[str, Tensor]]:
    """``obs -> {group: action}`` of a trained checkpoint's deterministic actors (feed-forward or recurrent: a
    recurrent teacher keeps its memory, restarted where ``obs``'s env restarted is not known here, so use
    feed-forward teachers for DAgger; recurrent ones are refused).

    Raises:
        ValueError: the checkpoint has no actor for a group that is imitated, or a recurrent actor.
    """
    from training.checkpoint import load_policy

    loaded = load_policy(path, device=device)
    missing = [g for g in groups if g not in loaded.actors]
    if missing:
        raise ValueError(f"imitation.expert={path}: no actor for groups {missing} (it has {sorted(loaded.actors)})")
    if any(hasattr(loaded.actors[g], "reset") for g in groups):
        raise ValueError(f"imitation.expert={path}: a recurrent teacher; DAgger takes feed-forward teachers")
    actors = {g: loaded.actors[g] for g in groups}
    return lambda obs: {g: a(obs[g]) for g, a in actors.items()}


def dagger(
    env,
    models: torch.nn.ModuleDict,
    expert: Callable[[dict], dict[str, Tensor]],
    cfg: ImitationCfg,
    generator: torch.Generator,
    log: Callable[[str], None] = print,
    dataset: dict | None = None,
    after_round: Callable[[list[dict[str, float]]], bool] | None = None,
) -> list[dict[str, float]]:
    """Fit every group's actor in ``models`` to ``expert`` by DAgger; returns per-round statistics
    (``mse``: the fit on the aggregate, ``agreement``: the mean |student - expert| action gap on the
    round's own states, ``samples``). Groups missing from ``models`` follow the expert throughout.

    ``dataset`` (data reuse): samples of earlier runs to start the aggregate from, as this function leaves them
    (``{"kind": "samples" | "windows", "groups": {group: ...}}``, see :func:`load_datasets`); it is replaced by this
    run's final aggregate on return (``torch.save`` it to reuse it later).

    ``after_round(stats so far)`` runs after every round's fit (checkpoints); returning True ends DAgger there."""
    groups = list(models)
    if any(models[g].cfg.sharing != "shared" for g in groups):
        raise ValueError("imitation needs algo.policy.sharing=shared (one actor fitted on every agent's samples)")
    if any(models[g].recurrent for g in groups):
        if cfg.balance:
            raise ValueError("imitation.balance is for feed-forward students (recurrent ones fit whole windows)")
        return _dagger_recurrent(env, models, expert, cfg, generator, log, dataset, after_round)
    if cfg.balance and not callable(getattr(env, "imitation_strata", None)):
        raise ValueError(f"imitation.balance: task {env.spec.task!r} defines no imitation_strata()")
    # Per group: every actor entry's samples [n, *shape] (images stay uint8) and the expert's labels.
    data: dict[str, tuple[dict[str, list[Tensor]], list[Tensor]]] = {g: ({}, []) for g in groups}
    strata: dict[str, list[Tensor]] = {g: [] for g in groups}  # balance: each sample's stratum [n] long
    for g, prior in _reused(dataset, "samples", groups).items():
        data[g] = ({k: [v.to(env.device)] for k, v in prior["x"].items()}, [prior["y"].to(env.device)])
        if cfg.balance:
            if "strata" not in prior:
                raise ValueError("imitation.balance: the reused data has no strata (saved without balance)")
            strata[g] = [prior["strata"].to(env.device)]
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
                step_strata = env.imitation_strata() if cfg.balance else {}
                for g in groups:
                    student = models[g].act_deterministic(obs[g])
                    gap[g] += float((student - labels[g]).abs().mean()) / cfg.steps
                    for k in env.spec.groups[g].actor_obs:
                        data[g][0].setdefault(k, []).append(obs[g][k].flatten(0, 1).clone())
                    data[g][1].append(labels[g].flatten(0, 1).clone())
                    if cfg.balance:
                        strata[g].append(step_strata[g].flatten(0, 1).clone())
                    if r > 0:
                        actions[g] = student
                obs, *_ = env.step(actions)
        row = {"round": float(r)}
        for g in groups:
            x = {k: torch.cat(v)[-cfg.max_samples :] for k, v in data[g][0].items()}
            y = torch.cat(data[g][1])[-cfg.max_samples :]  # the aggregate keeps the newest samples
            data[g] = ({k: [v] for k, v in x.items()}, [y])
            s = torch.cat(strata[g])[-cfg.max_samples :] if cfg.balance else None
            strata[g] = [s] if s is not None else []
            ac: ActorCritic = models[g]
            newest = cfg.steps * env.num_envs * env.spec.groups[g].n_agents
            ac.actor_encoder.update_normalizers([x[i.name][-newest:] for i in ac.dims.actor_inputs])
            mse = _fit(ac, x, y, optimizer, cfg, generator, s)
            row.update({f"{g}/mse": mse, f"{g}/agreement": gap[g], f"{g}/samples": float(y.shape[0])})
            if s is not None:
                row[f"{g}/strata"] = float(torch.unique(s).numel())
        stats.append(row)
        log("dagger round " + " ".join(f"{k} {v:.4g}" for k, v in row.items()))
        if after_round is not None and after_round(stats):
            break
    if dataset is not None:
        dataset.clear()
        dataset.update(kind="samples", groups={g: {"x": {k: v[0] for k, v in x.items()}, "y": y[0]}
                                               for g, (x, y) in data.items()})  # fmt: skip
        for g in groups:
            if strata[g]:
                dataset["groups"][g]["strata"] = strata[g][0]
    return stats


def _reused(dataset: dict | None, kind: str, groups: list[str]) -> dict:
    """The reused part of ``dataset`` for ``groups`` (empty without one).

    Raises:
        ValueError: data of the other kind (windows for a feed-forward student or the reverse)."""
    if not dataset:
        return {}
    if dataset.get("kind") != kind:
        raise ValueError(
            f"imitation.reuse holds {dataset.get('kind')!r} data; this student needs {kind!r} "
            "(recurrent students reuse windows, feed-forward ones samples)"
        )
    return {g: v for g, v in dataset["groups"].items() if g in groups}


def load_datasets(paths: tuple[str, ...] | list[str], device: torch.device | str = "cpu") -> dict | None:
    """Merge the aggregates saved by earlier runs (``imitation_data.pt``) into one ``dataset`` for :func:`dagger`.

    Raises:
        FileNotFoundError: a path that does not exist. ValueError: files of different kinds or entries."""
    merged: dict | None = None
    for path in paths:
        d = torch.load(path, map_location=device, weights_only=True)
        if merged is None:
            merged = {"kind": d["kind"], "groups": {}}
        if d["kind"] != merged["kind"]:
            raise ValueError(f"imitation.reuse: {path} holds {d['kind']!r} data, earlier files {merged['kind']!r}")
        for g, v in d["groups"].items():
            if g not in merged["groups"]:
                merged["groups"][g] = v
            elif d["kind"] == "windows":
                merged["groups"][g] = merged["groups"][g] + v
            else:
                old = merged["groups"][g]
                if set(old["x"]) != set(v["x"]):
                    raise ValueError(
                        f"imitation.reuse: {path} has entries {sorted(v['x'])}, earlier {sorted(old['x'])}"
                    )
                merged["groups"][g] = {"x": {k: torch.cat((old["x"][k], v["x"][k])) for k in old["x"]},
                                       "y": torch.cat((old["y"], v["y"]))}  # fmt: skip
    return merged


def _fit(
    ac: ActorCritic,
    x: dict[str, Tensor],
    y: Tensor,
    optimizer: torch.optim.Optimizer,
    cfg: ImitationCfg,
    gen: torch.Generator,
    strata: Tensor | None = None,
) -> float:
    """Epochs of minibatch MSE between the actor's mean (shared weights: samples of every agent,
    entries ``x[name] [n, *shape]``) and ``y [n, act_dim]``. With ``strata [n]`` (long) an epoch is ``n``
    samples drawn with replacement, each stratum equally likely (so the loss is the mean of the strata's)."""
    n = y.shape[0]
    total, count = 0.0, 0
    weights = None
    if strata is not None:
        _, index, counts = torch.unique(strata, return_inverse=True, return_counts=True)
        weights = (1.0 / counts.float())[index].to(gen.device)
    for _ in range(cfg.epochs):
        if weights is None:
            perm = torch.randperm(n, generator=gen, device=gen.device).to(y.device)
        else:
            perm = torch.multinomial(weights, n, replacement=True, generator=gen).to(y.device)
        for start in range(0, n, cfg.batch_size):
            idx = perm[start : start + cfg.batch_size]
            pred = ac.action_mean({k: v[idx].unsqueeze(1) for k, v in x.items()}).squeeze(1)
            loss = (pred - y[idx]).square().mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total, count = total + float(loss.detach()), count + 1
    return total / max(count, 1)


def _dagger_recurrent(
    env,
    models: torch.nn.ModuleDict,
    expert: Callable[[dict], dict[str, Tensor]],
    cfg: ImitationCfg,
    generator: torch.Generator,
    log: Callable[[str], None] = print,
    dataset: dict | None = None,
    after_round: Callable[[list[dict[str, float]]], bool] | None = None,
) -> list[dict[str, float]]:
    """:func:`dagger` for recurrent students: each round is one window ``[T = cfg.steps, E]`` per group (entries,
    labels, episode starts, the student's memory at the window start); the aggregate keeps whole windows (the
    newest ``cfg.max_samples`` samples' worth) and the fit unrolls the student over each window."""
    groups = list(models)
    T, E = cfg.steps, env.num_envs
    windows: dict[str, list[dict]] = {g: [] for g in groups}
    for g, prior in _reused(dataset, "windows", groups).items():
        windows[g] = [{k: _to(v, env.device) for k, v in w.items()} for w in prior]
    memory = {g: models[g].initial_memory(E, env.spec.groups[g].n_agents, device=env.device)["actor"] for g in groups}
    params = [p for g in groups for m in (models[g].actor_encoder, models[g].actor_memory, models[g].actor)
              for p in m.parameters()]  # fmt: skip
    optimizer = torch.optim.Adam(params, lr=cfg.lr)
    stats = []
    obs = env.reset()
    starts = torch.ones(E, dtype=torch.bool, device=env.device)
    for r in range(cfg.rounds):
        gap = {g: 0.0 for g in groups}
        win = {g: {"x": {}, "y": [], "resets": [], "memory0": memory[g].clone()} for g in groups}
        with torch.no_grad():
            for _ in range(T):
                labels = expert(obs)
                actions = dict(labels)
                for g in groups:
                    mem = zero_done(memory[g], starts)
                    student, memory[g] = models[g].act_deterministic(obs[g], mem)
                    gap[g] += float((student - labels[g]).abs().mean()) / T
                    for k in env.spec.groups[g].actor_obs:
                        win[g]["x"].setdefault(k, []).append(obs[g][k].clone())
                    win[g]["y"].append(labels[g].clone())
                    win[g]["resets"].append(starts.clone())
                    if r > 0:
                        actions[g] = student
                obs, _, terminated, truncated, _ = env.step(actions)
                starts = terminated | truncated
        row = {"round": float(r)}
        for g in groups:
            w = win[g]
            windows[g].append(
                {"x": {k: torch.stack(v) for k, v in w["x"].items()}, "y": torch.stack(w["y"]),
                 "resets": torch.stack(w["resets"]), "memory0": w["memory0"]}
            )  # fmt: skip
            per_window = T * E * env.spec.groups[g].n_agents
            windows[g] = windows[g][-max(1, cfg.max_samples // per_window) :]
            ac: ActorCritic = models[g]
            newest = windows[g][-1]["x"]
            ac.actor_encoder.update_normalizers([newest[i.name].flatten(0, 2) for i in ac.dims.actor_inputs])
            mse = _fit_sequences(ac, windows[g], optimizer, cfg, generator)
            n = sum(int(w["y"][..., 0].numel()) for w in windows[g])
            row.update({f"{g}/mse": mse, f"{g}/agreement": gap[g], f"{g}/samples": float(n)})
        stats.append(row)
        log("dagger round " + " ".join(f"{k} {v:.4g}" for k, v in row.items()))
        if after_round is not None and after_round(stats):
            break
    if dataset is not None:
        dataset.clear()
        dataset.update(kind="windows", groups=windows)
    return stats


def _to(value, device: torch.device | str):
    """A window's tensors (or dict of tensors) on ``device``."""
    return {k: v.to(device) for k, v in value.items()} if isinstance(value, dict) else value.to(device)


def _fit_sequences(
    ac: ActorCritic, windows: list[dict], optimizer: torch.optim.Optimizer, cfg: ImitationCfg, gen: torch.Generator
) -> float:
    """Epochs of MSE between the unrolled student's mean and the labels, minibatches of envs of one window at a time
    (``cfg.batch_size`` samples: ``batch_size // T`` envs)."""
    total, count = 0.0, 0
    for _ in range(cfg.epochs):
        for w in windows:
            T, E = w["y"].shape[:2]
            per = max(1, cfg.batch_size // T)
            perm = torch.randperm(E, generator=gen, device=gen.device).to(w["y"].device)
            for start in range(0, E, per):
                idx = perm[start : start + per]
                x = {k: v[:, idx] for k, v in w["x"].items()}
                pred = ac.action_mean_sequence(x, w["memory0"][idx], w["resets"][:, idx])
                loss = (pred - w["y"][:, idx]).square().mean()
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                total, count = total + float(loss.detach()), count + 1
    return total / max(count, 1)
