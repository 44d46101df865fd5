"""DAgger inside a training run (``imitation.expert``): the trained groups' actors imitate an expert
before RL starts (training/imitation.py holds the algorithm; this is how a run uses it).

The rounds' statistics go to ``<run>/imitation.json`` and the imitated policy to
``checkpoints/imitation.pt`` (every ``imitation.checkpoint_every`` rounds and at the end);
``train.max_minutes`` stops DAgger after a round; ``imitation.save_data`` keeps the dataset in
``<run>/imitation_data.pt``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import torch

from training.imitation import checkpoint_expert, dagger, load_datasets


def imitate(runner: Any, log: Callable[[str], None]) -> list[dict[str, float]]:
    """DAgger from the env's expert (``imitation.expert=task``) or a checkpoint's into the groups
    ``runner`` (a :class:`training.runner.Runner`) trains; returns the rounds' statistics."""
    cfg, env = runner.imitation_cfg, runner.env
    trained = torch.nn.ModuleDict({g: runner.models[g] for g in runner.trained_groups()})
    expert = env.expert_policy() if cfg.expert == "task" else checkpoint_expert(cfg.expert, list(trained), env.device)
    dataset = load_datasets(cfg.reuse, env.device) if cfg.reuse else None
    if dataset is None and cfg.save_data:
        dataset = {}
    limit = runner.train_cfg.max_minutes
    saved_rounds = [-1]  # how many rounds the files on disk hold (a last round already saved is not redone)

    def save(stats: list[dict[str, float]]) -> None:
        if len(stats) == saved_rounds[0]:
            return
        (runner.run_dir / "imitation.json").write_text(json.dumps({"cfg": asdict(cfg), "rounds": stats}, indent=2))
        runner.save(runner.ckpt_dir / "imitation.pt")  # the imitation-only policy, whatever RL does next
        saved_rounds[0] = len(stats)

    def after_round(stats: list[dict[str, float]]) -> bool:
        if cfg.checkpoint_every and len(stats) % cfg.checkpoint_every == 0:
            save(stats)
        if limit > 0 and runner._elapsed() > 60.0 * limit:
            log(f"train.max_minutes={limit} reached after DAgger round {len(stats) - 1}")
            return True
        return False

    stats = dagger(env, trained, expert, cfg, runner.generator, log=log, dataset=dataset, after_round=after_round)
    if cfg.save_data:
        torch.save(dataset, runner.run_dir / "imitation_data.pt")
    save(stats)
    return stats
