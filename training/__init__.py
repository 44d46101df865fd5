"""Training: rsl_rl-style layers, one job per module.

    config      compose/check train.py's config: the settings as hydra structured configs, the sim switches
    settings    the settings dataclasses of train.py's nodes (TrainCfg, PPOCfg, SACCfg ...): a leaf module
    storage     RolloutStorage: preallocated (steps, envs, agents, ...) buffers, GAE
    ppo         PPO / PPOCfg: act, process_env_step, compute_returns, update (MAPPO and IPPO)
    setup       build_run: a run (device, ranks, threads, env, networks, algorithm, run dir, logger) from its config
    resume      finding a run's checkpoint, restoring weights, optimiser, RNG, env and rollout state
    runner      Runner: the loop, timing, evaluation, logging, checkpoints; receives the run (train.py drives it)
    rollout     the one loop that drives an env with a policy outside training (evaluation, matches, export)
    warm_start  DAgger before RL inside a run (imitation.expert); imitation: the DAgger itself
    replay      ReplayBuffer: preallocated (capacity, agents, ...) ring of transitions on the env's device
    sac         SAC / SACCfg: act, add, update (twin Q, Polyak targets, entropy temperature, optional gSDE)
    sac_runner  SACRunner: the Runner's loop with SAC (algo=sac)
    selfplay    the league (snapshots, Elo, payoff matrix, meta-solver); selfplay_runner trains against it
    coselfplay  HCSP stage 3: skills and strategy fine-tuned together in matches
    pipeline    a recipe's stages run in turn in one run directory (HCSP's three stages)
    matches     two-team matches: play games, report win rates
    logger      metrics CSV, wandb (lazy, offline by default), tqdm progress bar
    checkpoint  atomic save, validated load, load_policy for evaluation and export
    evaluation  task metrics over N episodes with confidence intervals (evaluate.py; eval_* its other parts)
    distributed data-parallel PPO over processes (torchrun); threads, allocator: the process's settings

Submodules are imported explicitly (``from training.checkpoint import load_policy``) so that a
light consumer does not pay for the whole stack.
"""
