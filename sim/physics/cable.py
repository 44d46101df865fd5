"""Massless, tension-only cables: a stiff spring-damper that pulls only when taut.

For a cable of rest length ``L`` between points ``a`` and ``b`` with length ``l = |b - a|`` and
unit direction ``u = (b - a) / l``:

    T = max(0, k (l - L) + c dl/dt)   if l > L,   else 0
    F_a = +T u   (a is pulled toward b),   F_b = -T u

The clamp at zero makes the damper unable to push, so a slack cable never transmits force.
Stable with semi-implicit Euler while ``dt * sqrt(k / m_eff) < 2``; the task picks substeps so.
"""

from __future__ import annotations

import torch
from torch import Tensor


def cable_tension(
    pos_a: Tensor,
    vel_a: Tensor,
    pos_b: Tensor,
    vel_b: Tensor,
    rest_length: Tensor | float,
    stiffness: float,
    damping: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """Tension of cables from ``a`` to ``b``.

    Args:
        pos_a, vel_a, pos_b, vel_b: ``[..., 3]`` world-frame attachment points and their velocities.
        rest_length: scalar or ``[...]`` (m).
        stiffness: N/m. damping: N s/m.

    Returns:
        ``tension [...]`` (N, >= 0), ``direction [..., 3]`` (unit, a -> b), ``length [...]`` (m).
    """
    delta = pos_b - pos_a
    length = torch.linalg.vector_norm(delta, dim=-1)
    direction = delta / length.clamp(min=1e-6).unsqueeze(-1)
    length_rate = ((vel_b - vel_a) * direction).sum(-1)
    stretch = length - rest_length
    tension = (stiffness * stretch + damping * length_rate).clamp(min=0.0)
    tension = torch.where(stretch > 0, tension, torch.zeros_like(tension))
    return tension, direction, length
