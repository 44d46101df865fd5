"""Oriented rectangles in the plane: corners, point tests and overlap by the separating axis theorem.

Batched: every argument broadcasts over leading dimensions (e.g. one box ``[E, 1]`` against
``[E, V]`` others -> ``[E, V]``). ``half_extents [..., 2]`` = (half length along the heading, half width).
"""

from __future__ import annotations

import torch
from torch import Tensor


def _axes(yaw: Tensor) -> tuple[Tensor, Tensor]:
    c, s = torch.cos(yaw), torch.sin(yaw)
    return torch.stack((c, s), -1), torch.stack((-s, c), -1)


def box_corners(center: Tensor, yaw: Tensor, half_extents: Tensor) -> Tensor:
    """Corners ``[..., 4, 2]`` (front-left, front-right, rear-right, rear-left)."""
    fwd, left = _axes(yaw)
    hl, hw = half_extents[..., 0:1], half_extents[..., 1:2]
    a, b = fwd * hl, left * hw
    return torch.stack((center + a + b, center + a - b, center - a - b, center - a + b), -2)


def point_in_box(points: Tensor, center: Tensor, yaw: Tensor, half_extents: Tensor) -> Tensor:
    """``[...]`` bool: each point inside (or on the edge of) its box."""
    fwd, left = _axes(yaw)
    d = points - center
    return ((d * fwd).sum(-1).abs() <= half_extents[..., 0]) & ((d * left).sum(-1).abs() <= half_extents[..., 1])


def boxes_overlap(
    center_a: Tensor, yaw_a: Tensor, half_a: Tensor, center_b: Tensor, yaw_b: Tensor, half_b: Tensor
) -> Tensor:
    """``[...]`` bool: the boxes intersect (touching counts). Two rectangles are disjoint iff one of
    their four edge normals separates their projections."""
    fa, la = _axes(yaw_a)
    fb, lb = _axes(yaw_b)
    d = center_b - center_a
    separated = torch.zeros(
        torch.broadcast_shapes(d.shape[:-1], fa.shape[:-1], fb.shape[:-1]), dtype=torch.bool, device=d.device
    )
    for axis in (fa, la, fb, lb):
        ra = half_a[..., 0] * (fa * axis).sum(-1).abs() + half_a[..., 1] * (la * axis).sum(-1).abs()
        rb = half_b[..., 0] * (fb * axis).sum(-1).abs() + half_b[..., 1] * (lb * axis).sum(-1).abs()
        separated = separated | ((d * axis).sum(-1).abs() > ra + rb)
    return ~separated
