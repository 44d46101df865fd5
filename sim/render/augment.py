"""Image augmentations for camera observations: colour jitter, sensor noise, blur, latency. Batched and seeded.

Real cameras differ from the renderer in colour response, noise, focus and delay; a policy trained on images with
these varied transfers better. Each augmentation is a config switch, off by default (evaluation and deployment run
with the default config), applied to ``uint8 [E, A, H, W, 3]`` observations of ``E`` envs and ``A`` cameras:

    aug = ImageAugment(AugmentConfig(brightness=0.2, noise_std=0.02, latency_frames=1), num_envs=E, n_agents=A, seed=0)
    obs = aug(frames)          # every step; uint8 [E, A, H, W, 3]
    aug.reset(env_ids)         # new episodes: new colour response, latency buffer refilled with the next frame

Colour jitter (brightness, contrast, saturation, per-channel gain) is drawn per camera per episode (a camera's
response does not change from frame to frame); noise is drawn per pixel per frame; blur is a fixed Gaussian; latency
returns the frame from ``latency_frames`` steps ago (a ring buffer per env; after a reset the first frame repeats).
All randomness comes from one ``torch.Generator`` seeded at construction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from torch import Tensor


@dataclass(frozen=True)
class AugmentConfig:
    """Which augmentations run and how strong they are; the defaults turn every one off."""

    brightness: float = 0.0
    """Per camera per episode, intensity scaled by ``1 + U(-brightness, brightness)``."""
    contrast: float = 0.0
    """Per camera per episode, deviation from the image mean scaled by ``1 + U(-contrast, contrast)``."""
    saturation: float = 0.0
    """Per camera per episode, deviation from the grey value scaled by ``1 + U(-saturation, saturation)``."""
    channel_gain: float = 0.0
    """Per camera per episode and colour channel, white balance ``1 + U(-channel_gain, channel_gain)``."""
    noise_std: float = 0.0
    """Per pixel per frame Gaussian noise (std, intensities in [0, 1])."""
    blur_sigma: float = 0.0
    """Gaussian blur (std in pixels); 0 = sharp."""
    latency_frames: int = 0
    """Frames of delay: the observation at step k shows the frame rendered at step k - latency_frames."""

    @classmethod
    def from_dict(cls, values: dict) -> AugmentConfig:
        """Build from a plain dict; an unknown key fails and names the known ones."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise KeyError(f"unknown augmentation {unknown[0]!r}; known: {sorted(known)}")
        return cls(**values)

    @property
    def jitter(self) -> bool:
        return any(v > 0 for v in (self.brightness, self.contrast, self.saturation, self.channel_gain))


def gaussian_blur(images: Tensor, sigma: float) -> Tensor:
    """Separable Gaussian blur of float images ``[B, H, W, C]`` (std ``sigma`` pixels, reflected borders)."""
    radius = max(1, math.ceil(2 * sigma))
    x = torch.arange(-radius, radius + 1, device=images.device, dtype=images.dtype)
    k = torch.exp(-0.5 * (x / sigma) ** 2)
    k = k / k.sum()
    b, h, w, c = images.shape
    img = images.permute(0, 3, 1, 2).reshape(b * c, 1, h, w)
    img = F.pad(img, (radius, radius, 0, 0), mode="replicate" if w <= radius else "reflect")
    img = F.conv2d(img, k.view(1, 1, 1, -1))
    img = F.pad(img, (0, 0, radius, radius), mode="replicate" if h <= radius else "reflect")
    img = F.conv2d(img, k.view(1, 1, -1, 1))
    return img.reshape(b, c, h, w).permute(0, 2, 3, 1)


class ImageAugment:
    """Applies an :class:`AugmentConfig` to ``uint8 [E, A, H, W, 3]`` frames, step after step.

    Args:
        cfg: the switches; all off gives back the input unchanged.
        num_envs, n_agents: ``E`` and ``A``.
        seed: seeds the generator of every random draw (same seed, same calls -> same images).
        device: where the per-camera factors and the latency buffer live.
    """

    def __init__(
        self, cfg: AugmentConfig, num_envs: int, n_agents: int = 1, seed: int = 0, device: torch.device | str = "cpu"
    ):
        if cfg.latency_frames < 0:
            raise ValueError(f"latency_frames must be >= 0, got {cfg.latency_frames}")
        self.cfg = cfg
        self.num_envs, self.n_agents = num_envs, n_agents
        self.device = torch.device(device)
        self.gen = torch.Generator(device=self.device).manual_seed(seed)
        self.factors = torch.ones(num_envs, n_agents, 6, device=self.device)  # brightness, contrast, saturation, gains
        self.buffer: Tensor | None = None  # [L + 1, E, A, H, W, 3] uint8 ring of past frames
        self.head = 0
        self.fresh = torch.ones(num_envs, dtype=torch.bool, device=self.device)  # envs whose buffer needs refilling
        self.reset()

    def _uniform(self, shape: tuple[int, ...], amount: float) -> Tensor:
        return 1.0 + amount * (2 * torch.rand(shape, generator=self.gen, device=self.device) - 1)

    def reset(self, env_ids: Tensor | None = None) -> None:
        """New episodes for ``env_ids`` (None: all): new colour response, latency buffer refilled on the next frame."""
        ids = torch.arange(self.num_envs, device=self.device) if env_ids is None else env_ids.to(self.device)
        cfg = self.cfg
        if cfg.jitter:
            shape = (len(ids), self.n_agents)
            self.factors[ids, :, 0] = self._uniform(shape, cfg.brightness)
            self.factors[ids, :, 1] = self._uniform(shape, cfg.contrast)
            self.factors[ids, :, 2] = self._uniform(shape, cfg.saturation)
            self.factors[ids, :, 3:] = self._uniform((*shape, 3), cfg.channel_gain)
        self.fresh[ids] = True

    def _delay(self, frames: Tensor) -> Tensor:
        """Push ``frames`` into the ring and return the frames ``latency_frames`` steps old."""
        lag = self.cfg.latency_frames
        if self.buffer is None or self.buffer.shape[2:] != frames.shape[1:]:
            self.buffer = frames.unsqueeze(0).repeat(lag + 1, *([1] * frames.dim())).contiguous()
            self.fresh.zero_()
        if self.fresh.any():
            # A new episode has no past: its first frame stands in for the frames before it.
            self.buffer[:, self.fresh] = frames[self.fresh].unsqueeze(0)
            self.fresh.zero_()
        self.head = (self.head + 1) % (lag + 1)
        self.buffer[self.head] = frames
        return self.buffer[(self.head - lag) % (lag + 1)].clone()

    @torch.no_grad()
    def __call__(self, frames: Tensor) -> Tensor:
        """Augment ``uint8 [E, A, H, W, 3]`` (this step's render) -> ``uint8 [E, A, H, W, 3]``."""
        cfg = self.cfg
        if cfg.latency_frames > 0:
            frames = self._delay(frames)
        if not (cfg.jitter or cfg.noise_std > 0 or cfg.blur_sigma > 0):
            return frames
        e, a, h, w, _ = frames.shape
        x = frames.float() / 255.0
        if cfg.jitter:
            f = self.factors[:, :, None, None, :]  # [E, A, 1, 1, 6]
            x = x * f[..., 0:1] * f[..., 3:]
            mean = x.mean(dim=(2, 3, 4), keepdim=True)
            x = mean + (x - mean) * f[..., 1:2]
            grey = x.mean(-1, keepdim=True)
            x = grey + (x - grey) * f[..., 2:3]
        if cfg.blur_sigma > 0:
            x = gaussian_blur(x.reshape(e * a, h, w, 3), cfg.blur_sigma).reshape(e, a, h, w, 3)
        if cfg.noise_std > 0:
            x = x + cfg.noise_std * torch.randn(x.shape, generator=self.gen, device=self.device)
        return (x.clamp(0.0, 1.0) * 255.0).round().to(torch.uint8)
