"""Drone-volleyball rules on hand-built rallies: every fault, scoring, the serve, game mode, batching.

A rally is a ball trajectory of straight segments plus per-step event flags (hits, net contact,
drone crash / out); the ball lands on the step its path reaches z = 0. Drones 0, 1 are team A
(x < 0), drones 2, 3 team B, drone 0 serves first.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest
import torch

from sim.tasks.drone_volleyball.court import (
    CourtCfg,
    drones_out_of_play,
    in_arena,
    in_court,
    net_crossing,
    side_of,
)
from sim.tasks.drone_volleyball.rules import (
    COUNTER_NAMES,
    DOUBLE_TOUCH,
    DRONE_CRASH,
    DRONE_OUT,
    FOUR_TOUCHES,
    LAND_IN,
    LAND_OUT,
    NET,
    NONE,
    OUTCOME_NAMES,
    SERVE_FAULT,
    TIMEOUT,
    UNDER_OR_OUTSIDE_ANTENNA,
    RallyEvents,
    RallyRules,
    RulesCfg,
)

N = 2  # drones per team
DT = 0.1
COURT = CourtCfg()
CFG = RulesCfg(rally_time_limit_s=3.0)  # 30 steps of DT

SERVE = (-4.0, 0.0, 2.0)  # team A's serve position
OVER = (0.0, 0.0, 4.0)  # above the net
RECV = (3.0, 0.0, 2.5)  # team B receives here
A_RECV = (-3.0, 0.0, 2.5)
IN_B = (4.0, 0.0, 0.0)  # lands in team B's court


# --------------------------------------------------------------------------- rally builders
def path(*points, steps: int = 3) -> torch.Tensor:
    """Ball positions ``[T + 1, 3]`` along straight segments between ``points``, ``steps`` steps each."""
    pts = torch.tensor(points, dtype=torch.float32)
    frac = torch.arange(1, steps + 1, dtype=torch.float32).unsqueeze(-1) / steps
    segs = [pts[:1]] + [a + frac * (b - a) for a, b in zip(pts[:-1], pts[1:], strict=True)]
    return torch.cat(segs)


@dataclass
class Rally:
    """One env's rally: ball path and events as ``{step: drones}`` / step tuples."""

    ball: torch.Tensor
    hits: dict[int, tuple[int, ...]] = field(default_factory=dict)
    net: tuple[int, ...] = ()
    crash: dict[int, tuple[int, ...]] = field(default_factory=dict)
    out: dict[int, tuple[int, ...]] = field(default_factory=dict)


def run(rules: RallyRules, rallies: list[Rally], steps: int | None = None) -> dict[str, torch.Tensor]:
    """Run every rally in its own env, all in one ``update`` per step; events stacked ``[T, E, ...]``."""
    steps = steps or max(r.ball.shape[0] - 1 for r in rallies)
    E, D = len(rallies), rules.num_drones
    balls = [r.ball[: steps + 1] for r in rallies]  # cut or hold the last position to steps + 1
    ball = torch.stack([torch.cat((b, b[-1:].expand(steps + 1 - b.shape[0], 3))) for b in balls], 1)
    hits, crash, out = (torch.zeros(steps, E, D, dtype=torch.bool) for _ in range(3))
    net = torch.zeros(steps, E, dtype=torch.bool)
    for e, r in enumerate(rallies):
        for buf, events in ((hits, r.hits), (crash, r.crash), (out, r.out)):
            for t, drones in events.items():
                if t < steps:
                    buf[t, e, list(drones)] = True
        net[[t for t in r.net if t < steps], e] = True
    ground = ball[1:, :, 2] <= 0
    events = [
        rules.update(ball[t], ball[t + 1], hits[t], ground[t], net[t], crash[t], out[t], DT) for t in range(steps)
    ]
    return {f.name: torch.stack([getattr(ev, f.name) for ev in events]) for f in dataclasses.fields(RallyEvents)}


def ending(ev: dict[str, torch.Tensor], env: int = 0) -> tuple[int, int, int, int] | None:
    """``(step, outcome, point_to, fault_team)`` of the step that ended ``env``'s rally, None if none did."""
    steps = ev["rally_over"][:, env].nonzero().squeeze(-1).tolist()
    if not steps:
        return None
    assert len(steps) == 1, f"rally of env {env} ended more than once: steps {steps}"
    t = steps[0]
    return t, int(ev["outcome"][t, env]), int(ev["point_to"][t, env]), int(ev["fault_team"][t, env])


def make(num_envs: int = 1, cfg: RulesCfg = CFG, n: int = N) -> RallyRules:
    return RallyRules(num_envs, n, COURT, cfg, "cpu")


def serve_in(**events) -> Rally:
    return Rally(path(SERVE, OVER, IN_B), **{"hits": {0: (0,)}, **events})


def to_b(*rest, hits=None, **events) -> Rally:
    """Team A serves to team B at RECV (reached at step 6), then the ball goes on through ``rest``."""
    return Rally(path(SERVE, OVER, RECV, *rest), hits={0: (0,), **(hits or {})}, **events)


# name -> (rally, expected (end step, outcome, point_to, fault_team))
SCENARIOS = {
    "serve_lands_in_opponent_court": (serve_in(), (5, LAND_IN, 0, 1)),
    "serve_lands_out": (Rally(path(SERVE, OVER, (8.0, 0.0, 0.0)), {0: (0,)}), (5, LAND_OUT, 1, 0)),
    "hit_by_b_lands_out": (to_b((3.0, 5.0, 0.0), hits={6: (2,)}), (8, LAND_OUT, 0, 1)),
    "lands_in_own_court": (Rally(path(SERVE, (-3.0, 0.0, 3.0), (-2.0, 0.0, 0.0)), {0: (0,)}), (5, LAND_IN, 1, 0)),
    "net_touch": (Rally(path(SERVE, (-0.1, 0.0, 1.5), (-0.3, 0.0, 0.0)), {0: (0,)}, net=(2,)), (2, NET, 1, 0)),
    "under_the_net": (Rally(path(SERVE, (2.0, 0.0, 1.0), IN_B), {0: (0,)}), (1, UNDER_OR_OUTSIDE_ANTENNA, 1, 0)),
    "outside_the_antenna": (
        Rally(path((-4.0, 2.5, 2.0), (0.0, 4.0, 4.0), (3.0, 5.0, 0.0)), {0: (0,)}),
        (2, UNDER_OR_OUTSIDE_ANTENNA, 1, 0),
    ),
    "four_touches": (to_b(RECV, RECV, hits={6: (2,), 7: (3,), 8: (2,), 9: (3,)}), (9, FOUR_TOUCHES, 0, 1)),
    "double_touch": (to_b(RECV, hits={6: (2,), 7: (2,)}), (7, DOUBLE_TOUCH, 0, 1)),
    "server_double_touch": (Rally(path(SERVE, (-3.0, 0.0, 3.0), OVER), {0: (0,), 1: (0,)}), (1, DOUBLE_TOUCH, 1, 0)),
    # A full rally: serve, B's three touches (alternating drones) and back, A's three and over, lands in B.
    "alternating_drones_full_rally": (
        to_b(OVER, A_RECV, OVER, IN_B, hits={6: (2,), 7: (3,), 8: (2,), 12: (1,), 13: (0,), 14: (1,)}),
        (17, LAND_IN, 0, 1),
    ),
    "drone_crash": (serve_in(crash={2: (3,)}), (2, DRONE_CRASH, 0, 1)),
    "drone_out": (serve_in(out={2: (1,)}), (2, DRONE_OUT, 1, 0)),
    "serve_by_wrong_drone": (serve_in(hits={0: (1,)}), (0, SERVE_FAULT, 1, 0)),
    "ball_dropped_without_serve": (Rally(path(SERVE, (-4.0, 0.0, 0.0))), (2, SERVE_FAULT, 1, 0)),
    "receiver_touches_before_crossing": (serve_in(hits={0: (0,), 1: (2,)}), (1, SERVE_FAULT, 0, 1)),
    "teammate_plays_the_serve_on": (serve_in(hits={0: (0,), 1: (1,)}), (5, LAND_IN, 0, 1)),
    "rally_timeout": (Rally(path(SERVE, SERVE, steps=35), {0: (0,)}), (29, TIMEOUT, -1, -1)),
    # ---- simultaneous events: only the first in the documented order counts
    "crash_beats_landing": (serve_in(crash={5: (0,)}), (5, DRONE_CRASH, 1, 0)),
    "crash_beats_drone_out": (serve_in(crash={2: (2,)}, out={2: (1,)}), (2, DRONE_CRASH, 0, 1)),
    "lowest_drone_decides_between_teams": (serve_in(crash={2: (1, 2)}), (2, DRONE_CRASH, 1, 0)),
    "touch_fault_beats_landing": (
        Rally(path(SERVE, (-3.0, 0.0, 3.0), (-2.0, 0.0, 0.0)), {0: (0,), 3: (1,), 5: (1,)}),
        (5, DOUBLE_TOUCH, 1, 0),
    ),
    "net_beats_illegal_crossing": (Rally(path(SERVE, (2.0, 0.0, 1.0), IN_B), {0: (0,)}, net=(1,)), (1, NET, 1, 0)),
    # The sender's hit comes before the crossing of the same step: a serve hit right at the net.
    "serve_and_cross_in_one_step": (
        Rally(
            torch.cat((path((-1.0, 0.0, 3.0), (1.0, 0.0, 3.5), steps=1), path((1.0, 0.0, 3.5), IN_B)[1:])), {0: (0,)}
        ),
        (3, LAND_IN, 0, 1),
    ),
    # The receiver's hit comes after the crossing of the same step: no serve fault, B touched last.
    "receive_in_the_crossing_step": (to_b((3.0, 5.0, 0.0), hits={2: (2,)}), (8, LAND_OUT, 0, 1)),
    "illegal_crossing_beats_receiver_touch": (
        Rally(path(SERVE, (2.0, 0.0, 1.0), IN_B), {0: (0,), 1: (2,)}),
        (1, UNDER_OR_OUTSIDE_ANTENNA, 1, 0),
    ),
    # Two hits of one team in one step count as two touches in drone order: d2 3rd, d3 4th.
    "two_hits_in_one_step": (to_b(RECV, hits={6: (2,), 7: (3,), 8: (2, 3)}), (8, FOUR_TOUCHES, 0, 1)),
}


# =========================================================================== court
def test_court_geometry():
    assert side_of(torch.tensor([-0.1, 0.0, 0.1])).tolist() == [0, 1, 1]
    pos = torch.tensor([[5.9, 2.9, 0.0], [6.1, 0.0, 0.0], [0.0, -3.0, 1.0], [-8.9, 5.9, 7.9], [-9.1, 0.0, 1.0]])
    assert in_court(pos, COURT).tolist() == [True, False, True, False, False]
    assert in_arena(pos, COURT).tolist() == [True, True, True, True, False]
    assert not in_arena(torch.tensor([0.0, 0.0, 8.1]), COURT)
    # Drone out of play: out of the arena, or over the centre line into the opponent's half.
    drones = torch.tensor([[-3.0, 0.0, 2.0], [0.2, 0.0, 2.0], [3.0, 0.0, 2.0], [3.0, 6.5, 2.0]])
    assert drones_out_of_play(drones, 2, COURT).tolist() == [False, True, False, True]
    # Net crossing: above the net between the antennas, under it, outside an antenna, no crossing.
    prev = torch.tensor([[-1.0, 0.0, 3.0], [-1.0, 0.0, 2.0], [1.0, 3.5, 3.0], [-2.0, 0.0, 3.0]])
    now = torch.tensor([[1.0, 0.0, 3.0], [1.0, 0.0, 2.5], [-1.0, 3.5, 3.0], [-1.0, 0.0, 3.0]])
    crossed, legal = net_crossing(prev, now, COURT)
    assert crossed.tolist() == [True, True, True, False]
    assert legal.tolist() == [True, False, False, False]


def test_constants():
    assert len(OUTCOME_NAMES) == 11 and OUTCOME_NAMES[NONE] == "none" and OUTCOME_NAMES[TIMEOUT] == "timeout"
    assert len(set(COUNTER_NAMES)) == len(COUNTER_NAMES)
    with pytest.raises(ValueError):
        RulesCfg(max_touches=0)


# =========================================================================== one scenario per env
@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario(name):
    rally, expected = SCENARIOS[name]
    rules = make()
    ev = run(rules, [rally])
    assert ending(ev) == expected
    outcome = expected[1]
    assert bool(ev["game_over"][expected[0], 0])  # rally mode: every rally end ends the game
    assert not rules.in_rally[0]
    assert rules.score[0].tolist() == [int(expected[2] == 0), int(expected[2] == 1)]
    assert outcome != TIMEOUT or expected[2] == -1


def test_touch_count_and_possession():
    """Counts reset on a legal crossing; the receivers start at 1; last_team keeps the sender."""
    rally, _ = SCENARIOS["alternating_drones_full_rally"]
    rules = make()
    ev = run(rules, [rally], steps=2)
    assert (rules.touches.item(), rules.last_team.item(), rules.last_toucher.item()) == (1, 0, 0)  # the serve
    rules = make()
    ev = run(rules, [rally], steps=3)  # step 2 crosses
    assert ev["crossed"][:, 0].tolist() == [False, False, True]
    # After the crossing: 0 touches, A still touched last (it is at fault if the ball lands out).
    assert (rules.touches.item(), rules.last_team.item(), rules.last_toucher.item()) == (0, 0, 0)
    rules = make()
    ev = run(rules, [rally])
    assert ev["crossed"][:, 0].nonzero().squeeze(-1).tolist() == [2, 9, 14]
    assert ev["valid_hit"][:, 0].sum().item() == 7
    assert ev["valid_hit"][:, 0].nonzero().tolist() == [[0, 0], [6, 2], [7, 3], [8, 2], [12, 1], [13, 0], [14, 1]]


def test_receive_in_crossing_step_counts_as_first_touch():
    rally, _ = SCENARIOS["receive_in_the_crossing_step"]
    rules = make()
    ev = run(rules, [rally], steps=3)
    assert bool(ev["crossed"][2, 0]) and bool(ev["valid_hit"][2, 0, 2])
    assert (rules.touches.item(), rules.last_team.item(), rules.last_toucher.item()) == (1, 1, 2)
    assert bool(rules.serve_crossed[0]) and bool(rules.served[0])


def test_two_hits_in_one_step_in_drone_order():
    rally, _ = SCENARIOS["two_hits_in_one_step"]
    ev = run(make(), [rally])
    assert ev["valid_hit"][8, 0].tolist() == [False, False, True, False]


def test_direct_serve_forbids_passing_the_serve():
    rally, _ = SCENARIOS["teammate_plays_the_serve_on"]
    ev = run(make(cfg=dataclasses.replace(CFG, direct_serve=True)), [rally])
    assert ending(ev) == (1, SERVE_FAULT, 1, 0)


def test_finished_rally_is_frozen_until_new_rally():
    rules = make()
    run(rules, [SCENARIOS["drone_crash"][0]])  # ends at step 2, runs to step 5
    state = {k: getattr(rules, k).clone() for k in ("score", "touches", "last_toucher", "rally_time", "server")}
    counters = {k: v.clone() for k, v in rules.counters.items()}
    ev = run(rules, [Rally(path(SERVE, (-4.0, 0.0, 0.0)), {0: (1,)}, net=(1,), crash={0: (0, 3)})])
    assert ending(ev) is None and not ev["valid_hit"].any() and not ev["crossed"].any()
    assert (ev["outcome"] == NONE).all() and (ev["point_to"] == -1).all() and (ev["fault_team"] == -1).all()
    for k, v in state.items():
        assert torch.equal(getattr(rules, k), v), k
    for k, v in counters.items():
        assert torch.equal(rules.counters[k], v), k
    rules.new_rally(torch.tensor([0]))
    assert ending(run(rules, [serve_in()])) == SCENARIOS["serve_lands_in_opponent_court"][1]


# =========================================================================== game mode and rotation
def serve_rally(team: int, server: int, wins: bool) -> Rally:
    """A fast serve by ``server`` of ``team`` that lands in (serving team wins) or out (it loses)."""
    sgn = -1.0 if team == 0 else 1.0
    land = (-sgn * (4.0 if wins else 8.0), 0.0, 0.0)
    return Rally(path((sgn * 4.0, 0.0, 2.0), OVER, land, steps=1), {0: (server,)})


def test_game_to_three_points_serve_passes_to_winner():
    rules = make(cfg=dataclasses.replace(CFG, points_to_win=3))
    ids = torch.tensor([0])
    # (serving team, server, serving team wins) -> (score, next serving team, next server, game over)
    plan = [
        ((0, 0, True), ([1, 0], 0, 0, False)),  # A holds the serve: same server
        ((0, 0, False), ([1, 1], 1, 2, False)),  # side-out: B serves, its first drone
        ((1, 2, True), ([1, 2], 1, 2, False)),
        ((1, 2, False), ([2, 2], 0, 1, False)),  # side-out: A rotates to its next drone
        ((0, 1, True), ([3, 2], 0, 1, True)),
    ]
    for (team, server, wins), (score, next_team, next_server, over) in plan:
        assert (rules.serving_team.item(), rules.server.item()) == (team, server)
        ev = run(rules, [serve_rally(team, server, wins)])
        winner = team if wins else 1 - team
        assert ending(ev) == (1, LAND_IN if wins else LAND_OUT, winner, 1 - winner)
        assert bool(ev["game_over"][1, 0]) == over
        assert rules.score[0].tolist() == score
        assert (rules.serving_team.item(), rules.server.item()) == (next_team, next_server)
        rules.new_rally(ids)
        assert rules.score[0].tolist() == score and rules.in_rally[0] and rules.touches[0] == 0
    # Serve and receive split: A served rallies 1, 2 and 5 (won 1 and 5), B rallies 3 and 4 (won 3).
    served = {k: int(rules.counters[k][0]) for k in ("serves_a", "serves_b", "serve_points_a", "serve_points_b")}
    assert served == {"serves_a": 3, "serves_b": 2, "serve_points_a": 2, "serve_points_b": 1}
    rules.reset(ids)
    assert rules.score[0].tolist() == [0, 0] and (rules.serving_team.item(), rules.server.item()) == (0, 0)


def test_timeout_in_game_mode_replays_with_same_server():
    rules = make(cfg=dataclasses.replace(CFG, points_to_win=3))
    ev = run(rules, [SCENARIOS["rally_timeout"][0]])
    assert ending(ev) == (29, TIMEOUT, -1, -1) and not ev["game_over"].any()
    assert rules.score[0].tolist() == [0, 0] and (rules.serving_team.item(), rules.server.item()) == (0, 0)


def test_rotation_cycles_within_team_of_three():
    rules = make(cfg=dataclasses.replace(CFG, points_to_win=100), n=3)
    ids = torch.tensor([0])
    rules.reset(ids, serving_team=torch.tensor([1]), server=torch.tensor([4]))
    servers = []
    for _ in range(7):  # the serving team always serves out: a side-out every rally
        team, server = rules.serving_team.item(), rules.server.item()
        servers.append(server)
        assert ending(run(rules, [serve_rally(team, server, wins=False)]))[2] == 1 - team
        rules.new_rally(ids)
    # B starts with drone 4; A's first serve is its first drone; each side-out moves to the next drone.
    assert servers == [4, 0, 5, 1, 3, 2, 4]


# =========================================================================== batching and counters
BATCH = [
    "serve_lands_in_opponent_court",
    "hit_by_b_lands_out",
    "net_touch",
    "under_the_net",
    "four_touches",
    "double_touch",
    "drone_crash",
    "rally_timeout",
]


def test_batched_envs_each_get_their_own_outcome():
    rules = make(len(BATCH))
    ev = run(rules, [SCENARIOS[name][0] for name in BATCH])
    assert [ending(ev, e) for e in range(len(BATCH))] == [SCENARIOS[name][1] for name in BATCH]
    assert rules.score.tolist() == [[int(SCENARIOS[n][1][2] == 0), int(SCENARIOS[n][1][2] == 1)] for n in BATCH]
    assert not rules.in_rally.any()
    # Each env's hits and crossings are its own: a single-env run of the same rally matches.
    for e in (1, 4):
        single = run(make(), [SCENARIOS[BATCH[e]][0]], steps=ev["crossed"].shape[0])
        for key in ("valid_hit", "crossed", "outcome", "point_to"):
            assert torch.equal(ev[key][:, e], single[key][:, 0]), (BATCH[e], key)


def test_counters_pop_and_zero():
    names = ["serve_lands_in_opponent_court", "alternating_drones_full_rally", "net_touch"]
    rules = make(3)
    run(rules, [SCENARIOS[name][0] for name in names])
    expected = {
        0: {"hits_a": 1, "land_in": 1, "points_a": 1, "rallies": 1, "serves_a": 1, "serve_points_a": 1},
        1: {"hits_a": 4, "hits_b": 3, "land_in": 1, "points_a": 1, "rallies": 1, "serves_a": 1, "serve_points_a": 1},
        2: {"hits_a": 1, "net": 1, "points_b": 1, "rallies": 1, "serves_a": 1},
    }
    popped = rules.pop_counters(torch.tensor([0, 2]))
    assert set(popped) == set(COUNTER_NAMES)
    for name in COUNTER_NAMES:
        assert popped[name].tolist() == [expected[0].get(name, 0), expected[2].get(name, 0)], name
        assert rules.counters[name].tolist() == [0, expected[1].get(name, 0), 0], name
    assert all(v.sum() == 0 for v in rules.pop_counters(torch.tensor([0, 2])).values())


def test_rotation_order_starts_each_team_at_its_next_server():
    """Issue 21: a strategy sees each team in rotation order. At a game's start both teams count from their first
    drone; the serving team counts from its server, the other from the drone that serves its next serve."""
    rules = make(cfg=dataclasses.replace(CFG, points_to_win=100), n=3)
    ids = torch.tensor([0])
    assert rules.rotation_order()[0].tolist() == [[0, 1, 2], [0, 1, 2]]
    rules.reset(ids, serving_team=torch.tensor([1]), server=torch.tensor([4]))  # B serves with its 2nd drone
    assert rules.rotation_order()[0].tolist() == [[0, 1, 2], [1, 2, 0]]
    run(rules, [serve_rally(1, 4, wins=False)])  # side-out: A serves with its first drone, B's next is its 3rd
    rules.new_rally(ids)
    assert rules.server.item() == 0 and rules.rotation_order()[0].tolist() == [[0, 1, 2], [2, 0, 1]]
    run(rules, [serve_rally(0, 0, wins=False)])  # side-out: B serves with its 3rd drone
    rules.new_rally(ids)
    assert rules.server.item() == 5 and rules.rotation_order()[0].tolist() == [[1, 2, 0], [2, 0, 1]]
