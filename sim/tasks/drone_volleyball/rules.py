"""Rules of multi-drone volleyball (VolleyBots / HCSP style): a batched rally state machine.

Two teams of ``n`` drones (``n`` = 1, 2 or 3; drones ``0..n-1`` team A, ``n..2n-1`` team B, ``D = 2n``)
play one ball over the net of :mod:`sim.tasks.drone_volleyball.court`. The env detects contacts
and calls :meth:`RallyRules.update` once per control step with what happened during the step
(``[E]`` envs); the rules keep the rally state, decide faults and points, and keep the score.

Rally state (per env, see :class:`RallyRules` for the tensors):

* **Serve.** Each rally starts with the ball at the serving team's designated ``server``. The
  serving team's first contact must be the server's: a hit by a teammate first is a SERVE_FAULT
  of the serving team. The receiving team may not touch the ball before the serve has crossed
  the net legally: doing so is a SERVE_FAULT of the receiving team. The serve counts as the
  serving team's first touch; its teammates may play it on (up to ``max_touches`` in all) unless
  ``RulesCfg.direct_serve``, where any further touch of the serving team before the serve crosses
  is a SERVE_FAULT. A ball event (net, net-plane crossing, landing) before the server's hit is a
  SERVE_FAULT of the serving team (the ball dropped at the serve).
* **Touches.** A hit by a drone of team ``t`` counts ``touches + 1`` if ``t`` touched last, else 1
  (the other team's first touch after a crossing starts their count at 1). A count above
  ``max_touches`` is FOUR_TOUCHES; the same drone hitting twice in a row (no crossing between)
  is DOUBLE_TOUCH; both are faults of the hitter's team. Legal hits update ``last_toucher``,
  ``last_team`` and ``touches``.
* **Crossing.** The ball crosses the net when its segment ``ball_pos_prev -> ball_pos`` changes
  half. A legal crossing (above the net top, between the antennas) resets ``touches`` to 0 and
  passes possession: ``last_team`` keeps the sender (it is at fault if the ball lands out), and the
  receiving team's next hit starts at 1. An illegal crossing is UNDER_OR_OUTSIDE_ANTENNA and any
  ball contact with the net is NET, both faults of the team that touched last.
* **Landing.** The ball touching the ground inside the court lines is LAND_IN: the point goes to
  the team opposite the half it landed in. Outside the lines it is LAND_OUT, a fault of the team
  that touched last.
* **Drones.** A crashed drone (ground, net, another drone; flagged by the env) is DRONE_CRASH, a
  drone out of the arena or in the opponent's half (see ``court.drones_out_of_play``) is
  DRONE_OUT, both faults of the drone's team.
* **Time limit.** A rally still running after ``rally_time_limit_s`` ends as TIMEOUT with no point.

Several events in one step: only the first in this order counts (it ends the rally; the rest of
the step is ignored). The order follows the ball through the step, with drone faults first:

1. DRONE_CRASH, then DRONE_OUT (the lowest drone index decides the team if several drones fault);
2. hits by drones of the half the ball *started* the step in (the sender's touches), in drone
   order: per hit SERVE_FAULT, then DOUBLE_TOUCH, then FOUR_TOUCHES;
3. the flight: NET, then the net-plane crossing (UNDER_OR_OUTSIDE_ANTENNA, or a legal crossing);
4. after a crossing, hits by drones of the half the ball *ended* in (the receivers' touches, so a
   ball received in the step it crosses is not a serve fault), in drone order as in 2;
5. the landing: LAND_IN or LAND_OUT;
6. TIMEOUT.

Two hits by the same team in one step count as two touches, in drone order (a 3rd and a 4th hit
in one step is FOUR_TOUCHES on the higher-index drone).

**Points and the serve.** A rally ending in a fault gives the point to the other team
(``point_to = 1 - fault_team``; for LAND_IN ``fault_team`` is the team whose half the ball landed
in, so ``fault_team`` is always the team that lost the point) and ``score`` increments. With
``points_to_win == 0`` every rally end (TIMEOUT included) is ``game_over``; with ``N > 0`` the
game is over once a team has ``N`` points (no two-point lead). After a point the winner serves
next: if the serving team won, the same drone serves again; if the receiving team won (a
side-out), it rotates, i.e. its serve passes to its next drone, cycling ``0, 1, .., n-1`` within
the team. Each team's rotation starts so that its first serve is by its first drone (or by the
``server`` given to :meth:`reset`). After a TIMEOUT the same server serves again.

A finished rally stays over (``update`` changes nothing in that env) until the env puts the ball
back at ``server`` and calls :meth:`new_rally` (game mode) or :meth:`reset` (new game).

Left out of real volleyball: the ball touching the net is always a fault (no "let"), blocks count
as touches, reaching over the net is not checked (a drone over the centre line is DRONE_OUT
anyway), there are no player positions besides the server, and no two-point lead. ``update`` is
pure batched tensor code (a static loop over the D drones), deterministic and device-agnostic.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from sim.tasks.drone_volleyball.court import CourtCfg, drone_teams, in_court, net_crossing, side_of

# Outcome kinds of a rally (``RallyEvents.outcome``); NONE while the rally goes on.
NONE = 0
LAND_OUT = 1  # ball landed outside the court: fault of the team that touched last
LAND_IN = 2  # ball landed inside a half: point to the other half's team
NET = 3  # ball touched the net: fault of the team that touched last
UNDER_OR_OUTSIDE_ANTENNA = 4  # ball crossed the net plane below the net top or outside the antennas
FOUR_TOUCHES = 5  # a team touched more than max_touches times before the ball crossed
DOUBLE_TOUCH = 6  # the same drone touched twice in a row
DRONE_CRASH = 7  # a drone crashed (ground, net, collision): fault of its team
DRONE_OUT = 8  # a drone left the arena or entered the opponent's half: fault of its team
SERVE_FAULT = 9  # wrong first contact, receiver touching before the serve crossed, ball dropped at serve
TIMEOUT = 10  # rally time limit reached: no point
OUTCOME_NAMES = (
    "none",
    "land_out",
    "land_in",
    "net",
    "under_or_outside_antenna",
    "four_touches",
    "double_touch",
    "drone_crash",
    "drone_out",
    "serve_fault",
    "timeout",
)
# Keys of RallyRules.counters: legal hits per team, rally ends per outcome kind, points per team, rallies,
# and per team the rallies it served and the points it won on its own serve (serve and receive split).
SERVE_COUNTER_NAMES = ("serves_a", "serves_b", "serve_points_a", "serve_points_b")
COUNTER_NAMES = ("hits_a", "hits_b", *OUTCOME_NAMES[1:], "points_a", "points_b", "rallies", *SERVE_COUNTER_NAMES)


@dataclass(frozen=True)
class RulesCfg:
    """Game rules."""

    max_touches: int = 3  # touches per team before the ball must cross
    points_to_win: int = 0  # 0 = the episode is one rally; N > 0 = a game to N points
    rally_time_limit_s: float = 15.0
    direct_serve: bool = False  # True: the serve must cross without another touch of the serving team

    def __post_init__(self) -> None:
        if self.max_touches < 1:
            raise ValueError(f"max_touches must be >= 1, got {self.max_touches}")
        if self.points_to_win < 0:
            raise ValueError(f"points_to_win must be >= 0, got {self.points_to_win}")
        if self.rally_time_limit_s <= 0:
            raise ValueError(f"rally_time_limit_s must be > 0, got {self.rally_time_limit_s}")


@dataclass(frozen=True)
class RallyEvents:
    """What :meth:`RallyRules.update` decided this step (``[E]`` envs, ``D`` drones)."""

    point_to: Tensor  # [E] long: team that scored this step (0 A, 1 B), -1 none
    outcome: Tensor  # [E] long: outcome kind that ended the rally this step, NONE if it goes on
    fault_team: Tensor  # [E] long: team that lost the point (committed the fault / ball landed in its half), -1 none
    crossed: Tensor  # [E] bool: the ball crossed the net legally this step
    valid_hit: Tensor  # [E, D] bool: hits that counted as legal touches
    game_over: Tensor  # [E] bool: points_to_win reached; every rally end when points_to_win == 0
    rally_over: Tensor  # [E] bool: the rally ended this step (a point or TIMEOUT)


def _first(outcome: Tensor, fault_team: Tensor, cond: Tensor, kind: int, team: Tensor | int) -> tuple[Tensor, Tensor]:
    """Record ``kind`` (fault of ``team``) where ``cond`` holds and no earlier event ended the rally."""
    new = cond & (outcome == NONE)
    return torch.where(new, kind, outcome), torch.where(new, team, fault_team)


def _as_long(value: Tensor | int, like: Tensor) -> Tensor:
    """``value`` (int or tensor broadcastable to ``like``) as a long tensor shaped and placed like ``like``."""
    return torch.as_tensor(value, device=like.device).long().expand_as(like)


class RallyRules:
    """Batched rally state machine over E envs (see the module docstring for the rules).

    State, replaced (never written into) by :meth:`update`, :meth:`new_rally` and :meth:`reset`,
    so that tensors handed out earlier (e.g. in observations) keep their values:

    * ``serving_team [E]`` long: team serving this rally (0 A, 1 B); after a point, the next rally's.
    * ``server [E]`` long: drone index (0..D-1) of the designated server, a drone of ``serving_team``.
    * ``rotation [E, 2]`` long: per team, the slot (0..n-1) within the team of its latest server.
    * ``last_toucher [E]`` long: drone that touched the ball last this rally, -1 none.
    * ``last_team [E]`` long: team that touched last, -1 none (kept across a crossing).
    * ``touches [E]`` long: touches of ``last_team`` since the ball last crossed (0 right after a crossing).
    * ``served [E]`` bool: the server has hit the serve.
    * ``serve_crossed [E]`` bool: the ball has crossed the net legally this rally.
    * ``ball_side [E]`` long: half the ball was in after the last update (the serving team's at a rally start).
    * ``score [E, 2]`` long: points of team A and team B this game.
    * ``rally_time [E]`` float: seconds since the rally started.
    * ``in_rally [E]`` bool: a rally is in progress (False from its end to the next ``new_rally``).
    * ``counters``: name -> ``[E]`` float32 cumulative counts (:data:`COUNTER_NAMES`; views of the rows of
      ``counter_table [K, E]``), see :meth:`pop_counters`.
    """

    def __init__(
        self,
        num_envs: int,
        drones_per_team: int,
        court: CourtCfg,
        cfg: RulesCfg,
        device: str | torch.device = "cpu",
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if drones_per_team < 1:
            raise ValueError(f"drones_per_team must be >= 1, got {drones_per_team}")
        self.num_envs = num_envs
        self.drones_per_team = drones_per_team
        self.num_drones = 2 * drones_per_team
        self.court = court
        self.cfg = cfg
        self.device = torch.device(device)
        self.drone_team = drone_teams(drones_per_team, self.device)  # [D]

        def full(value, dtype=torch.long, shape=(num_envs,)) -> Tensor:
            return torch.full(shape, value, dtype=dtype, device=self.device)

        self.serving_team = full(0)
        self.server = full(0)
        self.rotation = full(0, shape=(num_envs, 2))
        self.last_toucher = full(-1)
        self.last_team = full(-1)
        self.touches = full(0)
        self.served = full(False, torch.bool)
        self.serve_crossed = full(False, torch.bool)
        self.ball_side = full(0)
        self.score = full(0, shape=(num_envs, 2))
        self.rally_time = full(0.0, torch.float32)
        self.in_rally = full(False, torch.bool)
        self.counter_table = torch.zeros(len(COUNTER_NAMES), num_envs, device=self.device)  # [K, E], see counters
        self.reset(torch.arange(num_envs, device=self.device))

    # ----------------------------------------------------------------- episode control
    def reset(
        self, env_ids: Tensor, serving_team: Tensor | int | None = None, server: Tensor | int | None = None
    ) -> None:
        """Start a new game at ``env_ids [k]`` (long): score zero, then :meth:`new_rally`.

        ``serving_team [k]`` defaults to team A, ``server [k]`` (drone index) to the serving team's
        first drone. The other team's rotation is set so that its first serve is by its first drone.
        The counters are left alone (pop them at episode end).
        """
        n = self.drones_per_team
        team = _as_long(0 if serving_team is None else serving_team, env_ids)
        drone = team * n if server is None else _as_long(server, env_ids)
        self.score = self.score.index_put((env_ids,), torch.zeros((), dtype=torch.long, device=self.device))
        other = torch.nn.functional.one_hot(1 - team, 2).bool()
        self.rotation = self.rotation.index_put((env_ids,), torch.where(other, n - 1, self.rotation[env_ids]))
        self.new_rally(env_ids, team, drone)

    def new_rally(
        self, env_ids: Tensor, serving_team: Tensor | int | None = None, server: Tensor | int | None = None
    ) -> None:
        """Start a rally at ``env_ids [k]``, keeping the score: the touch state restarts.

        ``serving_team`` and ``server`` (drone index of that team) default to the ones the rules
        chose after the last point (the winner serves, rotating on a side-out); the env must have put
        the ball at the server. Giving them also moves the serving team's rotation to that server.
        """
        n = self.drones_per_team
        team = self.serving_team[env_ids] if serving_team is None else _as_long(serving_team, env_ids)
        drone = self.server[env_ids] if server is None else _as_long(server, env_ids)
        rot = self.rotation[env_ids].scatter(1, team.unsqueeze(-1), (drone - team * n).unsqueeze(-1))

        def put(buf: Tensor, value: Tensor | int | float | bool) -> Tensor:
            return buf.index_put((env_ids,), torch.as_tensor(value, dtype=buf.dtype, device=self.device))

        self.serving_team = put(self.serving_team, team)
        self.server = put(self.server, drone)
        self.rotation = put(self.rotation, rot)
        self.last_toucher = put(self.last_toucher, -1)
        self.last_team = put(self.last_team, -1)
        self.touches = put(self.touches, 0)
        self.served = put(self.served, False)
        self.serve_crossed = put(self.serve_crossed, False)
        self.ball_side = put(self.ball_side, team)
        self.rally_time = put(self.rally_time, 0.0)
        self.in_rally = put(self.in_rally, True)

    def rotation_order(self, env_ids: Tensor | None = None) -> Tensor:
        """``[E, 2, n]`` long: per team, its slots (0..n-1) in serve-rotation order, starting with the
        drone that serves the team's next serve (the server, for the serving team); ``[k, 2, n]`` of the
        envs ``env_ids [k]`` only, when given.

        A team that has just lost the serve already counts from its next server (a side-out rotates
        the team that wins the serve). With each team's first drone to serve, as at the start of a
        game, the order is ``0, 1, .., n-1`` for both.
        """
        n = self.drones_per_team
        serving_team, rotation = self.serving_team, self.rotation
        if env_ids is not None:
            serving_team, rotation = serving_team[env_ids], rotation[env_ids]
        serving = torch.nn.functional.one_hot(serving_team, 2).bool()
        lead = torch.where(serving, rotation, (rotation + 1) % n)  # [E, 2]
        return (lead.unsqueeze(-1) + torch.arange(n, device=self.device)) % n

    @property
    def counters(self) -> dict[str, Tensor]:
        """Cumulative counts, name (:data:`COUNTER_NAMES`) -> ``[E]`` float32: the rows of ``counter_table``
        ``[K, E]`` (views; one table, so that popping the counters of a few envs costs two ops, not two per name)."""
        return dict(zip(COUNTER_NAMES, self.counter_table.unbind(0), strict=True))

    def pop_counter_table(self, env_ids: Tensor) -> Tensor:
        """``[K, k]``: the counters of ``env_ids [k]`` (rows in :data:`COUNTER_NAMES` order), zeroed here afterwards."""
        out = self.counter_table.index_select(1, env_ids)
        self.counter_table = self.counter_table.index_fill(1, env_ids, 0.0)
        return out

    def pop_counter_table_where(self, done: Tensor) -> Tensor:
        """``[K, E]``: every env's counters (rows in :data:`COUNTER_NAMES` order), zeroed here afterwards where
        ``done [E]`` (bool): :meth:`pop_counter_table` by mask, with no index to wait for."""
        out = self.counter_table
        self.counter_table = torch.where(done, 0.0, out)
        return out

    def pop_counters(self, env_ids: Tensor) -> dict[str, Tensor]:
        """The counters of ``env_ids [k]`` (name -> ``[k]`` float32), zeroed here afterwards."""
        return dict(zip(COUNTER_NAMES, self.pop_counter_table(env_ids).unbind(0), strict=True))

    # ----------------------------------------------------------------- the step
    def update(
        self,
        ball_pos_prev: Tensor,
        ball_pos: Tensor,
        hits: Tensor,
        ball_ground: Tensor,
        ball_net: Tensor,
        drone_crash: Tensor,
        drone_out: Tensor,
        dt: float,
    ) -> RallyEvents:
        """Apply one control step of events; only envs with a rally in progress change.

        Args:
            ball_pos_prev: ``[E, 3]`` ball position at the start of the step.
            ball_pos: ``[E, 3]`` ball position at the end of the step.
            hits: ``[E, D]`` bool, drone ``d`` hit the ball during the step.
            ball_ground: ``[E]`` bool, the ball touched the ground (landed at ``ball_pos``).
            ball_net: ``[E]`` bool, the ball touched the net.
            drone_crash: ``[E, D]`` bool, drone ``d`` crashed.
            drone_out: ``[E, D]`` bool, drone ``d`` is out of play (``court.drones_out_of_play``).
            dt: step duration (s).
        """
        active = self.in_rally
        outcome = torch.where(active, NONE, -1)  # -1 blocks every event in envs without a rally
        fault_team = torch.full_like(outcome, -1)

        # 1. Drone faults: the lowest-index faulty drone names the team.
        for kind, flags in ((DRONE_CRASH, drone_crash), (DRONE_OUT, drone_out)):
            team = self.drone_team[flags.long().argmax(-1)]  # argmax returns the first maximum
            outcome, fault_team = _first(outcome, fault_team, flags.any(-1), kind, team)

        state = {
            "last_toucher": self.last_toucher,
            "last_team": self.last_team,
            "touches": self.touches,
            "served": self.served,
            "serve_crossed": self.serve_crossed,
        }
        # Hits by the team whose half the ball ends in, after a crossing, come after the flight.
        crossed_plane, legal = net_crossing(ball_pos_prev, ball_pos, self.court)
        side_now = side_of(ball_pos[..., 0])
        receive = crossed_plane.unsqueeze(-1) & (self.drone_team == side_now.unsqueeze(-1))  # [E, D]

        # 2. The sender's hits.
        outcome, fault_team, valid_send = self._hits(hits & ~receive, state, outcome, fault_team)

        # 3. The flight: net contact, then the crossing; nothing may happen before the serve.
        unserved = ~state["served"]
        outcome, fault_team = _first(outcome, fault_team, ball_net & unserved, SERVE_FAULT, self.serving_team)
        outcome, fault_team = _first(outcome, fault_team, ball_net, NET, state["last_team"])
        outcome, fault_team = _first(outcome, fault_team, crossed_plane & unserved, SERVE_FAULT, self.serving_team)
        outcome, fault_team = _first(
            outcome, fault_team, ~legal & crossed_plane, UNDER_OR_OUTSIDE_ANTENNA, state["last_team"]
        )
        crossed = legal & (outcome == NONE)
        state["touches"] = torch.where(crossed, 0, state["touches"])
        state["serve_crossed"] = state["serve_crossed"] | crossed

        # 4. The receivers' hits.
        outcome, fault_team, valid_receive = self._hits(hits & receive, state, outcome, fault_team)

        # 5. The landing.
        unserved = ~state["served"]
        inside = in_court(ball_pos, self.court)
        outcome, fault_team = _first(outcome, fault_team, ball_ground & unserved, SERVE_FAULT, self.serving_team)
        outcome, fault_team = _first(outcome, fault_team, ball_ground & inside, LAND_IN, side_now)
        outcome, fault_team = _first(outcome, fault_team, ball_ground, LAND_OUT, state["last_team"])

        # 6. The time limit (half a step of slack against float round-off in the accumulated time).
        rally_time = torch.where(active, self.rally_time + dt, self.rally_time)
        timeout = rally_time >= self.cfg.rally_time_limit_s - 0.5 * dt
        outcome, fault_team = _first(outcome, fault_team, timeout, TIMEOUT, -1)

        # Points, score, the next serve.
        outcome = outcome.clamp(min=NONE)
        rally_over = outcome != NONE
        point = rally_over & (outcome != TIMEOUT)
        point_to = torch.where(point, 1 - fault_team, -1)
        won = torch.nn.functional.one_hot(point_to.clamp(min=0), 2) * point.unsqueeze(-1).long()  # [E, 2]
        score = self.score + won
        if self.cfg.points_to_win > 0:
            game_over = rally_over & (score >= self.cfg.points_to_win).any(-1)
        else:
            game_over = rally_over
        served_team = self.serving_team
        side_out = point & (point_to != served_team)
        rotation = (self.rotation + won * side_out.unsqueeze(-1).long()) % self.drones_per_team
        serving_team = torch.where(point, point_to, self.serving_team)
        server = serving_team * self.drones_per_team + rotation.gather(1, serving_team.unsqueeze(-1)).squeeze(-1)

        # Commit (the touch state is only changed in envs with a rally in progress).
        self.last_toucher = state["last_toucher"]
        self.last_team = state["last_team"]
        self.touches = state["touches"]
        self.served = state["served"]
        self.serve_crossed = state["serve_crossed"]
        self.ball_side = torch.where(active, side_now, self.ball_side)
        self.rally_time = rally_time
        self.score = score
        self.rotation = rotation
        self.serving_team = serving_team
        self.server = server
        self.in_rally = active & ~rally_over

        valid_hit = valid_send | valid_receive
        n = self.drones_per_team
        kinds = torch.nn.functional.one_hot(outcome, len(OUTCOME_NAMES)).float()  # [E, K]
        # The serving team of the rally that just ended (``serving_team`` above is the next rally's).
        served_by = torch.nn.functional.one_hot(served_team, 2) * rally_over.unsqueeze(-1).long()  # [E, 2]
        serve_won = served_by * won
        add = {
            "hits_a": valid_hit[:, :n].sum(-1).float(),
            "hits_b": valid_hit[:, n:].sum(-1).float(),
            **{name: kinds[:, k] for k, name in enumerate(OUTCOME_NAMES) if k != NONE},
            "points_a": won[:, 0].float(),
            "points_b": won[:, 1].float(),
            "rallies": rally_over.float(),
            "serves_a": served_by[:, 0].float(),
            "serves_b": served_by[:, 1].float(),
            "serve_points_a": serve_won[:, 0].float(),
            "serve_points_b": serve_won[:, 1].float(),
        }
        self.counter_table = self.counter_table + torch.stack([add[name] for name in COUNTER_NAMES])

        return RallyEvents(
            point_to=point_to,
            outcome=outcome,
            fault_team=fault_team,
            crossed=crossed,
            valid_hit=valid_hit,
            game_over=game_over,
            rally_over=rally_over,
        )

    def _hits(
        self, hits: Tensor, state: dict[str, Tensor], outcome: Tensor, fault_team: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Apply ``hits [E, D]`` in drone order to the touch ``state`` (updated in the dict).

        Returns the updated ``outcome`` and ``fault_team`` and ``valid [E, D]`` (hits that counted).
        A hit is ignored once an earlier event ended the rally (``outcome != NONE``).
        """
        n = self.drones_per_team
        valid = []
        for d in range(self.num_drones):  # a static loop over drones, batched over envs
            t = d // n
            h = hits[:, d] & (outcome == NONE)
            serving = self.serving_team == t
            serve_fault = (~serving & ~state["serve_crossed"]) | (serving & ~state["served"] & (self.server != d))
            if self.cfg.direct_serve:
                serve_fault = serve_fault | (serving & state["served"] & ~state["serve_crossed"])
            double = (state["last_toucher"] == d) & (state["touches"] > 0)
            count = torch.where(state["last_team"] == t, state["touches"] + 1, 1)
            too_many = count > self.cfg.max_touches
            outcome, fault_team = _first(outcome, fault_team, h & serve_fault, SERVE_FAULT, t)
            outcome, fault_team = _first(outcome, fault_team, h & double, DOUBLE_TOUCH, t)
            outcome, fault_team = _first(outcome, fault_team, h & too_many, FOUR_TOUCHES, t)
            ok = h & ~serve_fault & ~double & ~too_many
            state["last_toucher"] = torch.where(ok, d, state["last_toucher"])
            state["last_team"] = torch.where(ok, t, state["last_team"])
            state["touches"] = torch.where(ok, count, state["touches"])
            state["served"] = state["served"] | ok  # before the serve, only the server's hit is ok
            valid.append(ok)
        return outcome, fault_team, torch.stack(valid, -1)
