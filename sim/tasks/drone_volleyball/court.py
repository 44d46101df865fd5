"""Geometry of the drone-volleyball court: halves, lines, arena bounds and the net plane.

The court lies along x, centred on the net (world frame, env origin at the centre of the net's
foot, z up):

    team A's half   x in [-length / 2, 0)        team B's half   x in [0, length / 2]
    sidelines       y = +-width / 2               net             plane x = 0, z in [0, net_height],
                                                                  |y| <= antenna_y (antennas at the sidelines)

Drones ``0 .. n-1`` are team A, ``n .. 2n-1`` team B (``n`` drones per team, ``D = 2 n``). The
arena, where drones may fly, is the court grown by ``arena_margin`` on each side, from the
ground up to ``arena_height``. A point exactly on the net plane (x = 0) counts as team B's half,
so that the half of any point is well defined; lines belong to the court (a ball on the line is in).

Every function is pure, batched over leading dimensions, and runs on any device.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class CourtCfg:
    """Court, net and arena dimensions (m); defaults are an indoor volleyball court, men's net."""

    length: float = 12.0  # along x, both halves
    width: float = 6.0  # along y
    net_height: float = 2.43  # top of the net
    antenna_y: float = 3.0  # the net's crossing space is |y| <= antenna_y (antennas at the sidelines)
    arena_margin: float = 3.0  # drones may fly this far outside the court lines
    arena_height: float = 8.0  # ceiling of the arena

    def __post_init__(self) -> None:
        if min(self.length, self.width, self.net_height, self.antenna_y, self.arena_height) <= 0:
            raise ValueError("court length, width, net_height, antenna_y and arena_height must be > 0")
        if self.arena_margin < 0:
            raise ValueError(f"arena_margin must be >= 0, got {self.arena_margin}")
        if self.arena_height <= self.net_height:
            raise ValueError("arena_height must be above net_height")


def side_of(x: Tensor) -> Tensor:
    """Half of the court at coordinate ``x [...]``: 0 team A's (x < 0), 1 team B's (x >= 0), long."""
    return (x >= 0).long()


def in_court(pos: Tensor, court: CourtCfg) -> Tensor:
    """Whether the xy of ``pos [..., 3]`` lies inside the court lines (lines included), ``[...]`` bool."""
    return (pos[..., 0].abs() <= court.length / 2) & (pos[..., 1].abs() <= court.width / 2)


def in_arena(pos: Tensor, court: CourtCfg) -> Tensor:
    """Whether ``pos [..., 3]`` is inside the arena box (court + margin, ground to ceiling), ``[...]`` bool."""
    m = court.arena_margin
    return (
        (pos[..., 0].abs() <= court.length / 2 + m)
        & (pos[..., 1].abs() <= court.width / 2 + m)
        & (pos[..., 2] >= 0)
        & (pos[..., 2] <= court.arena_height)
    )


def drone_teams(drones_per_team: int, device: torch.device | str = "cpu") -> Tensor:
    """Team of every drone, ``[D]`` long: ``n`` zeros (team A) then ``n`` ones (team B)."""
    return torch.arange(2 * drones_per_team, device=device) // drones_per_team


def drones_out_of_play(drone_pos: Tensor, drones_per_team: int, court: CourtCfg) -> Tensor:
    """DRONE_OUT condition for ``drone_pos [..., D, 3]``: outside the arena or in the opponent's half.

    A drone of team A is in the opponent's half at x >= 0, one of team B at x < 0 (see
    :func:`side_of`). Returns ``[..., D]`` bool; feed it to ``RallyRules.update(drone_out=...)``.
    """
    team = drone_teams(drones_per_team, drone_pos.device)
    return ~in_arena(drone_pos, court) | (side_of(drone_pos[..., 0]) != team)


def net_crossing(pos_prev: Tensor, pos: Tensor, court: CourtCfg) -> tuple[Tensor, Tensor]:
    """Whether the straight segment ``pos_prev -> pos`` (``[..., 3]`` each) crosses the net plane.

    The segment crosses when the two ends lie in different halves (:func:`side_of`); the crossing
    point is the segment's intersection with x = 0. The crossing is legal when that point is above
    the net top (``z > net_height``) and between the antennas (``|y| <= antenna_y``); the centre
    of the ball is tested, the ball radius is left to the physics' net-contact flag.

    Returns:
        ``crossed [...]`` bool and ``legal [...]`` bool (``legal`` implies ``crossed``).
    """
    x0, x1 = pos_prev[..., 0], pos[..., 0]
    crossed = side_of(x0) != side_of(x1)
    dx = torch.where(crossed, x0 - x1, torch.ones_like(x0))  # nonzero wherever it is used
    alpha = torch.where(crossed, x0 / dx, torch.zeros_like(x0)).clamp(0.0, 1.0)
    at = pos_prev + alpha.unsqueeze(-1) * (pos - pos_prev)
    legal = crossed & (at[..., 2] > court.net_height) & (at[..., 1].abs() <= court.antenna_y)
    return crossed, legal


def mirror(v: Tensor, flip: Tensor) -> Tensor:
    """Rotate world vectors ``[..., 3]`` by 180 deg about z where ``flip [...]``: team B's frame
    (its own half at x < 0, like team A's); its own inverse."""
    sign = torch.where(flip, -1.0, 1.0).unsqueeze(-1)
    return torch.cat((v[..., :2] * sign, v[..., 2:]), dim=-1)
