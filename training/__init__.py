"""Training: rsl_rl-style layers, one job per module.

    storage     RolloutStorage: preallocated (steps, envs, agents, ...) buffers, GAE
    ppo         PPO / PPOCfg: act, process_env_step, compute_returns, update (MAPPO and IPPO)
    runner      Runner: the loop, timing, evaluation, logging, checkpoints (train.py drives it)
    logger      metrics CSV, wandb (lazy, offline by default), tqdm progress bar
    checkpoint  atomic save, validated load, load_policy for evaluation and export
    evaluation  task metrics over N episodes with confidence intervals (evaluate.py)

Submodules are imported explicitly (``from training.checkpoint import load_policy``) so that a
light consumer does not pay for the whole stack.
"""
