"""Batched torch rasterisation of simple 2D scenes into uint8 images (camera observations).

Used by tasks that observe pixels, on any device, with no Python loop over environments: every
image of the batch is drawn at once from tensors of shape ``[B, ...]``. Discs are anti-aliased
(coverage falls linearly over one pixel at the edge), so sub-pixel positions show in the image.

Image convention: ``uint8 [B, H, W, C]``, row 0 at the top (+y up in the scene), column 0 on the
left (+x right); the image spans ``[-half_extent, half_extent]`` m on both axes around ``center``.
"""

from __future__ import annotations

import torch
from torch import Tensor


def pixel_centers(height: int, width: int, half_extent: float, device: torch.device | str) -> Tensor:
    """Scene coordinates ``[H, W, 2]`` (m, relative to the image centre) of each pixel's centre."""
    ys = (0.5 - (torch.arange(height, device=device) + 0.5) / height) * 2 * half_extent
    xs = ((torch.arange(width, device=device) + 0.5) / width - 0.5) * 2 * half_extent
    return torch.stack(torch.meshgrid(xs, ys, indexing="xy"), -1)


def disc_coverage(pixels: Tensor, center: Tensor, radius: float | Tensor, pixel_size: float) -> Tensor:
    """Anti-aliased coverage in [0, 1] of a disc, ``[B, H, W]``.

    Args:
        pixels: ``[H, W, 2]`` pixel centres (m), from :func:`pixel_centers`.
        center: ``[B, 2]`` disc centres (m), in the same frame.
        radius: m (a float or ``[B]``).
        pixel_size: m per pixel (the width of the soft edge).
    """
    d = torch.linalg.vector_norm(pixels.unsqueeze(0) - center[:, None, None, :], dim=-1)
    r = radius if isinstance(radius, float) else radius[:, None, None]
    return ((r - d) / pixel_size + 0.5).clamp(0.0, 1.0)


def box_coverage(pixels: Tensor, low: Tensor, high: Tensor) -> Tensor:
    """Coverage (0 or 1) of axis-aligned boxes ``low, high [B, 2]`` (m), ``[B, H, W]``."""
    p = pixels.unsqueeze(0)
    inside = (p >= low[:, None, None, :]) & (p <= high[:, None, None, :])
    return inside.all(-1).float()


def to_uint8(channels: Tensor) -> Tensor:
    """Float intensities in [0, 1], ``[B, H, W, C]`` -> ``uint8`` 0-255."""
    return (channels.clamp(0.0, 1.0) * 255.0).round().to(torch.uint8)
