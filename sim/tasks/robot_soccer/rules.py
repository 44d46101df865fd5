"""The rules of robot_soccer: kickoff, goals, touches, the ball out of play and stalled, the score of a game.

* **Kickoff**: robots in their own half around the kickoff spots, facing the other goal; the ball near the centre
  spot (:func:`kickoff`).
* **Goals**: the ball wholly over a goal line inside the mouth. **Touches**: a robot within touching distance of
  the ball, or the nearest one when the ball was hit between control steps. **Ball out**: over a touch or goal line
  outside the mouth (:meth:`SoccerRules.detect`).
* **Restarts** (:meth:`SoccerRules.restart`): a ball out of play is put back at rest ``ball_in_m`` inside the line
  it crossed (``ball_out_restart``); a ball that has not moved for ``stall_s`` is dropped near the centre spot.
* **Score** (:meth:`SoccerRules.end_games`): ``game_result`` (1 team_a won, 0 lost, 0.5 draw) and
  ``final_counters`` keep the last game's values for :mod:`training.matches`.

Shapes: E envs, R robots (team_a first), P players per team, k envs being reset.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch import Tensor

from sim.core.randomization import uniform
from sim.tasks.robot_soccer.config import RobotSoccerCfg
from sim.tasks.robot_soccer.constants import (
    BALL_START_Y_SHARE,
    COUNTERS,
    EVENTS,
    FREE_POS,
    FREE_QUAT,
    HIT_DV,
    HIT_REACH,
    KICKOFF_X,
    KICKOFF_Y_SPREAD,
    KICKOFF_YAW_JITTER,
    STALL_DROP_SHARE,
    STILL_SPEED,
    TOUCH_MARGIN,
    at,
)
from sim.tasks.robot_soccer.model import GOAL_HALF_WIDTH, PITCH_HALF


def kickoff(
    cfg: RobotSoccerCfg, k: int, side: Tensor, rng: torch.Generator, device: torch.device
) -> tuple[Tensor, Tensor, Tensor]:
    """Kickoff spots of ``k`` envs: ``(robots xy [k, R, 2], yaw [k, R], ball xy [k, 2])`` (world frame), robots in
    their own half (``side [R]``: +1 team_a, -1 team_b) facing the other goal, each jittered."""
    P = side.numel() // 2
    j = cfg.kickoff_jitter_m
    spread = KICKOFF_Y_SPREAD
    base_y = torch.linspace(-spread, spread, P, device=device) if P > 1 else torch.zeros(1, device=device)
    x = torch.cat((torch.full((P,), -KICKOFF_X, device=device), torch.full((P,), KICKOFF_X, device=device)))
    xy = torch.stack((x, torch.cat((base_y, base_y))), -1).expand(k, -1, -1)
    xy = xy + uniform(-j, j, (k, 2 * P, 2), rng, device)
    lo, hi = torch.tensor([-PITCH_HALF[0], -PITCH_HALF[1]], device=device), torch.tensor(PITCH_HALF, device=device)
    xy = xy.clamp(lo, hi)
    yaw_jitter = uniform(-KICKOFF_YAW_JITTER, KICKOFF_YAW_JITTER, (k, 2 * P), rng, device)
    yaw = torch.where(side > 0, 0.0, math.pi).expand(k, -1) + yaw_jitter
    b = cfg.ball_start_jitter_m
    ball_x = uniform(-b, b, (k,), rng, device)
    ball_y = uniform(-BALL_START_Y_SHARE * b, BALL_START_Y_SHARE * b, (k,), rng, device)
    return xy, yaw, torch.stack((ball_x, ball_y), -1)


def place_ball(qpos: Tensor, ball_q: int, xy: Tensor, radius: float) -> None:
    """Write the ball at rest on the floor at ``xy [k, 2]`` into ``qpos [k, nq]`` (float64; its free joint at
    ``ball_q``: position x, y, z = radius, then the identity quaternion w x y z)."""
    pos = at(ball_q, FREE_POS)
    qpos[:, pos.start : pos.start + 2] = xy.double()
    qpos[:, pos.start + 2] = radius  # z
    qpos[:, at(ball_q, FREE_QUAT)] = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float64)


class SoccerRules:
    """The referee of E games: this step's events, the game counters, restarts, and the last games' results."""

    def __init__(
        self, cfg: RobotSoccerCfg, num_envs: int, players_per_team: int, touch_reach: float, device: torch.device
    ) -> None:
        E, dev = num_envs, device
        self.cfg, self.P, self.device = cfg, players_per_team, device
        self.touch_dist = touch_reach + cfg.ball.radius + TOUCH_MARGIN  # m from a robot's centre to the ball's
        self.events = {k: torch.zeros(E, device=dev) for k in EVENTS}
        self.counters = {k: torch.zeros(E, device=dev) for k in COUNTERS}
        self.first_touch = torch.full((E,), math.nan, device=dev)  # s into the game of team_a's first touch
        self.was_out = torch.zeros(E, dtype=torch.bool, device=dev)
        self.prev_ball_vel = torch.zeros(E, 2, device=dev)
        self.still_s = torch.zeros(E, device=dev)  # how long the ball has not moved
        self.game_result = torch.full((E,), math.nan, device=dev)
        self.final_counters = {k: torch.zeros(E, device=dev) for k in COUNTERS}

    def reset(self, env_ids: Tensor) -> None:
        """A new game in ``env_ids``: counters zero, nothing touched yet."""
        for buf in self.counters.values():
            buf[env_ids] = 0.0
        self.first_touch[env_ids] = math.nan
        self.was_out[env_ids] = False
        self.prev_ball_vel[env_ids] = 0.0
        self.still_s[env_ids] = 0.0

    def detect(self, s: Mapping[str, Tensor], t: Tensor) -> Tensor:
        """Goals, touches and ball-out of this step (the state ``s``: ``ball``, ``ball_vel [E, 3]``, robots'
        ``pos [E, R, 2]``; ``t [E]`` s into the game at the step's end) into :attr:`events` and the counters;
        returns ``out [E]`` bool (the ball is out of play)."""
        r = self.cfg.ball.radius
        bx, by = s["ball"][:, 0], s["ball"][:, 1]
        in_mouth = by.abs() < GOAL_HALF_WIDTH
        goal_a = (bx > PITCH_HALF[0] + r) & in_mouth
        goal_b = (bx < -PITCH_HALF[0] - r) & in_mouth
        dist = torch.linalg.vector_norm(s["ball"][:, None, :2] - s["pos"], dim=-1)  # [E, R]
        # A touch: the ball is in contact now, or it was hit during the step (a contact between control steps:
        # a bounce or kick) with this robot the nearest one within reach.
        hit = torch.linalg.vector_norm(s["ball_vel"][:, :2] - self.prev_ball_vel, dim=-1) > HIT_DV
        nearest = dist <= dist.min(-1, keepdim=True).values
        touch = (dist < self.touch_dist) | (hit.unsqueeze(-1) & nearest & (dist < HIT_REACH))
        self.prev_ball_vel = s["ball_vel"][:, :2]
        touch_a, touch_b = touch[:, : self.P].any(-1), touch[:, self.P :].any(-1)
        out = ((by.abs() > PITCH_HALF[1] + r) | (bx.abs() > PITCH_HALF[0] + r)) & ~(goal_a | goal_b)
        self.events = {
            "goal_a": goal_a.float(),
            "goal_b": goal_b.float(),
            "touch_a": touch_a.float(),
            "touch_b": touch_b.float(),
        }
        c = self.counters
        c["points_a"] += goal_a.float()
        c["points_b"] += goal_b.float()
        c["hits_a"] += touch_a.float()
        c["hits_b"] += touch_b.float()
        c["ball_out"] += (out & ~self.was_out).float()  # counted when it crosses a line, not while it stays out
        self.was_out = out
        self.first_touch = torch.where(self.first_touch.isnan() & touch_a, t, self.first_touch)
        return out

    def scored(self) -> Tensor:
        """``[E]`` bool: a goal this step."""
        return (self.events["goal_a"] > 0) | (self.events["goal_b"] > 0)

    def restart(
        self, out: Tensor, ball: Tensor, ball_vel: Tensor, dt: float, rng: torch.Generator
    ) -> tuple[Tensor, Tensor] | None:
        """Ball out of play -> back at rest just inside the line it crossed; stalled ball (not moving for
        ``stall_s``, ``dt`` s per call) -> dropped near the centre. Returns ``(env ids, ball xy [k, 2])`` where the
        ball is to be put (robots keep their state), or None; counts the restarts."""
        cfg = self.cfg
        still = torch.linalg.vector_norm(ball_vel[:, :2], dim=-1) < STILL_SPEED
        self.still_s = torch.where(still, self.still_s + dt, torch.zeros_like(self.still_s))
        stalled = self.still_s >= cfg.stall_s if cfg.stall_s > 0 else torch.zeros_like(still)
        moved = (out if cfg.ball_out_restart else torch.zeros_like(out)) | stalled
        ids = moved.nonzero().squeeze(-1)
        if ids.numel() == 0:
            return None
        lim = torch.tensor([PITCH_HALF[0] - cfg.ball_in_m, PITCH_HALF[1] - cfg.ball_in_m], device=self.device)
        place = ball[ids, :2].clamp(-lim, lim)
        j = cfg.ball_start_jitter_m * STALL_DROP_SHARE
        dropped = uniform(-j, j, (ids.numel(), 2), rng, self.device)
        place = torch.where(stalled[ids].unsqueeze(-1), dropped, place)
        self.still_s[ids] = 0.0
        self.prev_ball_vel[ids] = 0.0
        self.counters["restarts"] += moved.float()
        return ids, place

    def end_games(self, env_ids: Tensor, steps: Tensor) -> dict[str, Tensor]:
        """The games of ``env_ids`` end after ``steps [k]`` control steps: their results and counters kept
        (:attr:`game_result`, :attr:`final_counters`); returns team_a's win/loss, goal difference, time to first
        touch and ball-in-view share over these games."""
        c = self.counters
        diff = c["points_a"][env_ids] - c["points_b"][env_ids]
        result = torch.where(diff > 0, 1.0, torch.where(diff < 0, 0.0, 0.5))
        self.game_result = self.game_result.index_put((env_ids,), result)
        horizon = torch.tensor(self.cfg.episode_length_s, device=self.device)
        first = self.first_touch[env_ids]
        c["first_touch_s_a"] = c["first_touch_s_a"].index_put((env_ids,), torch.where(first.isnan(), horizon, first))
        in_view = c["ball_in_view_a"][env_ids] / steps
        for k in COUNTERS:
            v = in_view if k == "ball_in_view_a" else c[k][env_ids]
            self.final_counters[k] = self.final_counters[k].index_put((env_ids,), v)
        return {
            "metrics/win_a": (result == 1.0).float().mean(),
            "metrics/loss_a": (result == 0.0).float().mean(),
            "metrics/goal_diff_a": diff.mean(),
            "metrics/first_touch_s_a": c["first_touch_s_a"][env_ids].mean(),
            "metrics/ball_in_view_a": in_view.mean(),
        }
