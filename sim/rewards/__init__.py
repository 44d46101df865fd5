"""Learned rewards. ``vision_language``: VLM-RL's contrasting-language-goal reward (a frame scored against a
positive and a negative goal text, synthesised with vehicle-state terms), on real CLIP weights from a local
directory (``clip_backend``) or on the offline default dual encoder (``dual_encoder``: a frozen sentence
encoder and an image tower trained by ``python -m sim.rewards.train_image_tower``).

Submodules are imported explicitly; the backends import ``transformers`` only when built (the ``vlm`` extra).
"""
