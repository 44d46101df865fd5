"""Hand-written soccer players, acting on the ``state`` observation entry (so they play either team).

Each maps ``state [..., D]`` (the layout of :func:`sim.tasks.robot_soccer.layout.state_terms`, egocentric: body
frame x forward, y left; team frame: own team attacks +x) to actions ``[..., 4]`` = (forward, lateral, turn, kick)
(:data:`.layout.WHEELED_ACTIONS`) in [-1, 1]. They read the state by its terms' names: ``slices`` is the spec's
``observations["state"].slices()`` (by default the wheeled robot's layout, whose leading terms are the same for
any team size):

* :func:`chaser`: the paper-style fixed opponent: turn to the ball and drive into it, whatever the direction; it
  never kicks.
* :func:`attacker`: a better baseline: go to a point behind the ball on the line from the attacked goal through the
  ball, then drive through the ball towards the goal, kicking when the goal is ahead; it walks around the ball when it
  is on the wrong side.
* idle: zeros (``torch.zeros``).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from sim.tasks.robot_soccer.layout import DRIVE, KICK, WHEELED_ACTIONS, state_slices

STATE_SLICES = state_slices(1)  # the wheeled robot's state layout (the terms these players read come first)
TURN_GAIN = 2.5  # turn command per rad of bearing error
DRIVE_GAIN = 2.0  # forward command per m of distance


def _bearing(v: Tensor) -> Tensor:
    return torch.atan2(v[..., 1], v[..., 0])


def drive_to(target: Tensor, slow_radius: float = 0.0) -> Tensor:
    """Actions ``[..., 3]`` that turn towards ``target [..., 2]`` (body frame, m) and drive there, forward speed
    falling with the bearing error (and within ``slow_radius`` of the target) so the robot turns before it runs."""
    bearing = _bearing(target)
    dist = torch.linalg.vector_norm(target, dim=-1)
    align = torch.cos(bearing).clamp(min=0.0) ** 2
    speed = (DRIVE_GAIN * dist).clamp(max=1.0) if slow_radius > 0 else torch.ones_like(dist)
    forward = align * speed
    lateral = (target[..., 1] / dist.clamp(min=1e-6)).clamp(-1, 1) * 0.5 * (dist < 0.5).float()
    turn = (TURN_GAIN * bearing).clamp(-1, 1)
    return torch.stack((forward, lateral, turn, -torch.ones_like(turn)), -1)


def chaser(state: Tensor, slices: Mapping[str, slice] = STATE_SLICES) -> Tensor:
    """Turn to the ball and run at it (see the module docstring)."""
    return drive_to(state[..., slices["ball"]])


def attacker(state: Tensor, slices: Mapping[str, slice] = STATE_SLICES, behind_m: float = 0.25) -> Tensor:
    """Get behind the ball on the goal line, then push it at the goal (see the module docstring)."""
    ball = state[..., slices["ball"]]
    goal = state[..., slices["goal"]]
    to_goal = goal - ball
    aim = to_goal / torch.linalg.vector_norm(to_goal, dim=-1, keepdim=True).clamp(min=1e-6)
    behind = ball - behind_m * aim  # the approach point
    # Where the robot is relative to the ball along the aim line: > 0 means it is between the ball and the goal.
    me_from_ball = -ball
    along = (me_from_ball * aim).sum(-1)
    across = me_from_ball[..., 0] * aim[..., 1] - me_from_ball[..., 1] * aim[..., 0]
    lined_up = (along < -0.05) & (across.abs() < 0.12)
    # On the wrong side: go round the ball, to a point beside it (on the side the robot already is).
    side = torch.where(across >= 0, 1.0, -1.0).unsqueeze(-1)
    perp = torch.stack((-aim[..., 1], aim[..., 0]), -1) * side * -1.0
    around = ball + 0.3 * perp - 0.15 * aim
    wrong_side = along > -0.05
    target = torch.where(
        lined_up.unsqueeze(-1), ball + 0.3 * aim, torch.where(wrong_side.unsqueeze(-1), around, behind)
    )
    action = drive_to(target)
    # Kick when lined up, the ball close in front and the goal ahead.
    dist = torch.linalg.vector_norm(ball, dim=-1)
    kick = lined_up & (dist < 0.22) & (ball[..., 0] > 0) & (torch.atan2(goal[..., 1], goal[..., 0]).abs() < 0.5)
    return torch.cat((action[..., DRIVE], torch.where(kick, 1.0, -1.0).unsqueeze(-1)), -1)


def idle(state: Tensor, slices: Mapping[str, slice] = STATE_SLICES) -> Tensor:
    """Stand still, kicker retracted."""
    out = torch.zeros(*state.shape[:-1], len(WHEELED_ACTIONS), device=state.device)
    out[..., KICK] = -1.0
    return out


SCRIPTED = {"chaser": chaser, "attacker": attacker, "idle": idle}
