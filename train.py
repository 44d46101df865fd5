"""Train a policy: ``python train.py task=<name> [overrides]``.

    python train.py task=cable_load                                  # defaults from configs/
    python train.py task=cable_load num_envs=1024 device=cpu algo.lr=3e-4 seed=3
    python train.py task=point_reach algo=ippo algo.policy.sharing=per_agent train.total_steps=200000
    python train.py task=cable_load resume=runs/cable_load/2026-11-21_10-00-00
    python train.py task=cable_load wandb.mode=disabled sim.compile=true train.max_minutes=60

A run writes ``runs/<task>/<YYYY-mm-dd_HH-MM-SS>/``: config.yaml (resolved), metrics.csv,
checkpoints/{latest,best}.pt and wandb/ (offline unless ``wandb.mode=online``). Every key of
configs/config.yaml and its groups (task/, algo/, sim/) can be overridden; see training/runner.py.
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig, OmegaConf


@hydra.main(config_path="configs", config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    from training.runner import Runner  # after hydra parsed the command line (fast --help)

    runner = Runner(OmegaConf.to_container(cfg, resolve=True))
    try:
        state = runner.learn()
    except KeyboardInterrupt:
        sys.exit(130)
    print(f"done: {state.global_step:,} steps, run dir {runner.run_dir}")


if __name__ == "__main__":
    main()
