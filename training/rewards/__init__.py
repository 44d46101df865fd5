"""Moved to :mod:`sim.rewards` (the vision-language reward runs inside ``env.step``, so it is simulator code).

Only ``python -m training.rewards.train_image_tower`` stays here, for the commands written before the move.
"""
