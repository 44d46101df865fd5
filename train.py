"""Train a policy: ``python train.py task=<name> [overrides]``.

    python train.py task=cable_load                                  # defaults from configs/
    python train.py task=cable_load num_envs=1024 device=cpu algo.lr=3e-4 seed=3
    python train.py task=point_reach algo=ippo algo.policy.sharing=per_agent train.total_steps=200000
    python train.py task=cable_load resume=runs/cable_load/2026-11-21_10-00-00
    python train.py task=cable_load wandb.mode=disabled sim.compile=true train.max_minutes=60
    python train.py task=drone_volleyball algo=selfplay task.mode=1v1     # self-play (training/selfplay_runner.py)
    python train.py task=drone_volleyball algo=hcsp stage=skills task.mode=serve   # HCSP stage 1: one skill
    python train.py task=drone_volleyball algo=hcsp stage=strategy                 # HCSP stage 2: team strategy
    python train.py task=drone_volleyball algo=hcsp stage=coselfplay               # HCSP stage 3: both, in matches

A run writes ``runs/<task>/<YYYY-mm-dd_HH-MM-SS>/``: config.yaml (resolved), metrics.csv,
checkpoints/{latest,best}.pt and wandb/ (offline unless ``wandb.mode=online``). Every key of
configs/config.yaml and its groups (task/, algo/, sim/) can be overridden; see training/runner.py.
"""

from __future__ import annotations

import re
import sys

import hydra
from omegaconf import DictConfig, OmegaConf


@hydra.main(config_path="configs", config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    from training.runner import Runner  # after hydra parsed the command line (fast --help)
    from training.selfplay_runner import SelfPlayRunner

    plain = OmegaConf.to_container(cfg, resolve=True)
    kind = "selfplay" if plain["algo"]["name"] == "selfplay" else plain.get("runner", "ppo")
    if kind not in ("ppo", "selfplay", "coselfplay"):
        sys.exit(f"runner must be ppo, selfplay or coselfplay, got {kind!r}")
    if kind == "coselfplay":  # HCSP stage 3: phases of the two runners below (training/coselfplay.py)
        from training.coselfplay import run

        try:
            run_dir = run(plain)
        except KeyboardInterrupt:
            sys.exit(130)
        print(f"done: co-self-play run dir {run_dir} (skills.pt, strategy.pt)")
        return
    runner = SelfPlayRunner(plain) if kind == "selfplay" else Runner(plain)
    try:
        state = runner.learn()
    except KeyboardInterrupt:
        sys.exit(130)
    print(f"done: {state.global_step:,} steps, run dir {runner.run_dir}")


# Overrides of task./algo. fields the yaml does not list (the yaml holds only the usual knobs; the
# dataclasses hold every field). Hydra's struct mode would reject them; ``++`` adds or overrides,
# and the task and algo dataclasses still reject unknown keys with a message naming the key.
_DATACLASS_NODE = re.compile(r"^(task|algo)\.[A-Za-z_][\w.]*=")


def force_dataclass_overrides(argv: list[str]) -> list[str]:
    """``task.x=1`` -> ``++task.x=1`` (and ``algo.``); other arguments unchanged."""
    return [f"++{a}" if _DATACLASS_NODE.match(a) else a for a in argv]


if __name__ == "__main__":
    sys.argv = [sys.argv[0], *force_dataclass_overrides(sys.argv[1:])]
    main()
