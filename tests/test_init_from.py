"""``init_from=<checkpoint>``: a new run starts from another run's weights (fine-tuning), group by group."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from training.runner import Runner

ROOT = Path(__file__).resolve().parents[1]


def _cfg(tmp_path: Path, extra: list[str]) -> dict:
    over = ["device=cpu", "torch_threads=1", "wandb.mode=disabled", "train.progress=false", "num_envs=8"]
    over += ["train.rollout_steps=8", "train.total_steps=64", "train.eval_every=0", f"runs_dir={tmp_path}"]
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
        return OmegaConf.to_container(compose(config_name="config", overrides=over + extra), resolve=True)


def test_init_from_copies_the_weights_and_refuses_another_task(tmp_path: Path) -> None:
    first = Runner(_cfg(tmp_path, ["task=point_reach"]))
    first.learn()
    ckpt = first.run_dir / "checkpoints" / "latest.pt"
    second = Runner(_cfg(tmp_path, ["task=point_reach", f"init_from={ckpt}", "seed=5"]))
    for (k, a), b in zip(first.models.state_dict().items(), second.models.state_dict().values(), strict=True):
        assert torch.equal(a, b), k  # weights and normaliser statistics
    assert second.state.global_step == 0 and second.run_dir != first.run_dir  # a new run, not a resume
    fresh = Runner(_cfg(tmp_path, ["task=point_reach", "seed=5"]))
    assert not all(torch.equal(a, b) for a, b in zip(fresh.models.state_dict().values(),
                                                     second.models.state_dict().values(), strict=True))  # fmt: skip
    with pytest.raises(ValueError, match="trained on task"):
        Runner(_cfg(tmp_path, ["task=memory_reach", f"init_from={ckpt}"]))
