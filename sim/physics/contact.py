"""Ground contact for free bodies: a non-penetration constraint with friction.

A body whose lowest point (centre minus ``radius``) goes below the ground plane ``z = 0`` is put
back on it; its downward velocity is removed (times ``restitution`` it bounces), tangential
velocity and spin are damped by ``friction`` per step. This is a velocity-level projection, not a
spring, so it is stable at any step size.
"""

from __future__ import annotations

import torch
from torch import Tensor

from sim.physics.rigid_body import RigidBodyState


def ground_contact(
    state: RigidBodyState, radius: float, restitution: float = 0.0, friction: float = 0.5
) -> tuple[RigidBodyState, Tensor]:
    """Project bodies out of the ground.

    Args:
        state: bodies with batch shape ``[...]``.
        radius: distance from the centre to the lowest contact point (m).
        restitution: fraction of the normal velocity kept (bounce).
        friction: fraction of tangential velocity and spin removed per contact step, in [0, 1].

    Returns:
        The corrected state and ``in_contact [...]`` (bool).
    """
    depth = radius - state.pos[..., 2]
    in_contact = depth > 0
    contact = in_contact.unsqueeze(-1)
    pos = torch.where(contact, state.pos + torch.nn.functional.pad(depth.unsqueeze(-1), (2, 0)), state.pos)
    vz = state.vel[..., 2:]
    vz = torch.where(contact & (vz < 0), -restitution * vz, vz)
    vxy = torch.where(contact, (1.0 - friction) * state.vel[..., :2], state.vel[..., :2])
    ang_vel = torch.where(contact, (1.0 - friction) * state.ang_vel, state.ang_vel)
    return RigidBodyState(pos, state.quat, torch.cat((vxy, vz), dim=-1), ang_vel), in_contact
