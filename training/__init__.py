"""PPO core, MAPPO/IPPO, self-play, logging and checkpoints (training issue)."""
