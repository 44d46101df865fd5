"""Training: rsl_rl-style layers, one job per module.

    settings    the settings dataclasses of train.py's nodes (TrainCfg, PPOCfg, SACCfg ...): a leaf module
    storage     RolloutStorage: preallocated (steps, envs, agents, ...) buffers, GAE
    ppo         PPO / PPOCfg: act, process_env_step, compute_returns, update (MAPPO and IPPO)
    setup       build_run: a run (device, ranks, threads, env, networks, algorithm, run dir, logger) from its config
    resume      finding a run's checkpoint, restoring weights, optimiser, RNG, env and rollout state
    runner      Runner: the loop, timing, evaluation, logging, checkpoints; receives the run (train.py drives it)
    warm_start  DAgger before RL inside a run (imitation.expert)
    replay      ReplayBuffer: preallocated (capacity, agents, ...) ring of transitions on the env's device
    sac         SAC / SACCfg: act, add, update (twin Q, Polyak targets, entropy temperature, optional gSDE)
    sac_runner  SACRunner: the Runner's loop with SAC (algo=sac)
    rewards/    learned rewards: the vision-language reward of VLM-RL (CLIP or the offline dual encoder)
    logger      metrics CSV, wandb (lazy, offline by default), tqdm progress bar
    checkpoint  atomic save, validated load, load_policy for evaluation and export
    evaluation  task metrics over N episodes with confidence intervals (evaluate.py)

Submodules are imported explicitly (``from training.checkpoint import load_policy``) so that a
light consumer does not pay for the whole stack.
"""
