"""Train a policy: ``python train.py task=<name> [overrides]``.

    python train.py task=cable_load                                  # the task's recipe: configs/recipe/cable_load.yaml
    python train.py task=cable_load num_envs=1024 device=cpu algo.lr=3e-4 seed=3
    python train.py task=point_reach algo=ippo algo.policy.sharing=per_agent train.total_steps=200000
    python train.py task=cable_load task.goal_xy_range=0.5 task.rewards.position=2.0   # any task field
    python train.py task=cable_load resume=runs/cable_load/2026-11-21_10-00-00
    python train.py task=cable_load wandb.mode=disabled sim.compile=true train.max_minutes=60
    python train.py task=drone_volleyball algo=selfplay task.mode=1v1     # self-play (training/selfplay_runner.py)
    python train.py task=point_reach algo=sac sac.batch_size=512         # SAC (training/sac_runner.py)
    python train.py task=drone_volleyball                           # HCSP: its recipe's whole pipeline, stage by stage
    python train.py task=drone_volleyball budget=smoke              # ... a tiny one (budget=smoke|cpu|gpu)
    python train.py task=drone_volleyball algo=hcsp stage=skills task.mode=serve   # HCSP stage 1: one skill
    python train.py task=drone_volleyball algo=hcsp stage=strategy                 # HCSP stage 2: team strategy
    python train.py task=drone_volleyball algo=hcsp stage=coselfplay               # HCSP stage 3: both, in matches
    python train.py task=cable_load --cfg job                        # print every key and value, run nothing
    torchrun --nproc_per_node=2 train.py task=cable_load distributed=true  # data-parallel (training/distributed.py)

Each task brings its training recipe (the algorithm, envs and budget that made its shipped policy:
``configs/recipe/<task>.yaml``); algo=hcsp trains the HCSP tasks in their stage unless ``stage=`` names
another (``configs/stage/hcsp/<task>.yaml``). Anything on the command line wins over the recipe. A recipe
may declare a pipeline (``runner=pipeline``: training/pipeline.py), several runs in turn in one run directory
(``<run>/<stage>/...``, ``<run>/pipeline.json``); ``resume=<run>`` then continues with the stages not done.

A run writes ``runs/<task>/<YYYY-mm-dd_HH-MM-SS>/``: config.yaml (resolved), metrics.csv,
checkpoints/{latest,best}.pt and wandb/ (offline unless ``wandb.mode=online``). Every key is a field
of a config dataclass (training/config.py registers them with hydra): ``--cfg job`` lists them all.
A misspelt key, a value of the wrong type or an impossible value (``train.rollout_steps=0``,
``task.control_dt=-1``) stops before anything runs with one line naming the key (exit code 2).
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig, OmegaConf

import training.config as typed  # registers the structured configs before hydra composes

PROG = "train.py"


@hydra.main(config_path="configs", config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    argv = list(HydraConfig.get().overrides.task)
    typed.exit_on_user_error(PROG, lambda: run(OmegaConf.to_container(cfg, resolve=True), argv))


def run(plain: dict, argv: list[str] | None = None) -> None:
    """Train with a resolved config (plain dicts); returns when the run ends. ``argv``: the command line's
    overrides (a pipeline passes some to its stages)."""
    from training import pipeline

    typed.check_config(plain)
    kind = pipeline.runner_kind(plain)
    if kind == "pipeline":  # several runs in turn (training/pipeline.py)
        try:
            run_dir = pipeline.run(plain, argv or [])
        except KeyboardInterrupt:
            sys.exit(130)
        print(f"done: pipeline run dir {run_dir} (pipeline.json)")
        return
    if kind == "coselfplay":  # HCSP stage 3: phases of the two runners below (training/coselfplay.py)
        from training.coselfplay import run as run_coselfplay

        try:
            run_dir = run_coselfplay(plain)
        except KeyboardInterrupt:
            sys.exit(130)
        print(f"done: co-self-play run dir {run_dir} (skills.pt, strategy.pt)")
        return
    if plain.get("distributed"):
        typed.exit_on_user_error(PROG, lambda: typed.check_distributed(plain, kind))
    # Building the runner checks what the config names (the task, resume=<run>, its checkpoint's fit):
    # a failure there is the user's, one line; errors while training keep their traceback.
    runner_cls = pipeline.runner_class(kind)
    runner = typed.exit_on_user_error(PROG, lambda: runner_cls(plain), errors=(ValueError, FileNotFoundError))
    try:
        state = runner.learn()
    except KeyboardInterrupt:
        sys.exit(130)
    finally:
        if plain.get("distributed"):
            from training.distributed import shutdown

            shutdown()
    if runner.is_main:
        print(f"done: {state.global_step:,} steps, run dir {runner.run_dir}")


def precheck(argv: list[str]) -> None:
    """Compose and check the config once before hydra runs, so that a user error is one line (hydra
    prints several). Skipped when hydra flags (``--cfg``, ``--help``, ``-m`` ...) change what runs."""
    if any(a.startswith("-") for a in argv):
        return
    typed.exit_on_user_error(PROG, lambda: typed.check_config(typed.compose(argv)))


if __name__ == "__main__":
    precheck(sys.argv[1:])
    main()
