"""drone_volleyball's component-major control loop (:mod:`sim.physics.components`) against the row-major
reference, each forced with ``force_layout``: the same seeded 3v3 matches flown by the scripted teams, with paddle
hits, a ball into the net, a ball on the ground and drones crashing into each other, the ground and the net,
compared state by state and event by event."""

from __future__ import annotations

import pytest
import torch

import sim
from sim.physics import ball as rows_ball
from sim.physics import components as soa
from sim.physics.controllers import RatePIDController
from sim.physics.multirotor import MultirotorModel, MultirotorParams
from sim.physics.rigid_body import RigidBodyState
from sim.tasks.drone_volleyball.match_env import MatchHooks
from sim.tasks.drone_volleyball.teams import scripted_team

E = 8
FREE_STEPS = 60  # policy steps = 240 rate-PID ticks / physics substeps = 1.2 s: the staged events and every serve
LOCKSTEP_STEPS = 90  # 1.8 s: the serves' first returns too
FLAGS = ("hits", "ball_net", "ball_ground", "drone_crash")
# Bounds on the largest difference over FREE_STEPS free-running steps from the same seeded start (every step's state
# is compared, before the auto-reset of envs whose rally ended). The two layouts round differently (a rotation matrix
# instead of cross products, other summation orders, the paddle normal not renormalised), and float32 round-off
# grows in this closed loop, so the bounds come from the rows path itself: rows vs rows started from drone positions
# perturbed by +-1e-7 relative (about one float32 ulp), over the same 60 steps. Measured (2-core CPU, torch 2.13,
# the staged scenario below, seeds 0, 1, 2, max over them):
#   quantity          rows vs components   rows vs perturbed rows
#   drone pos         2.7e-6 m             3.7e-6 m
#   drone quat        1.0e-6               1.4e-6
#   drone vel         1.1e-5 m/s           1.1e-5 m/s
#   drone ang_vel     2.0e-5 rad/s         2.2e-5 rad/s
#   ball pos          1.0e-5 m             2.9e-5 m
#   ball vel          1.3e-5 m/s           4.1e-5 m/s
#   landed_at         0 m                  0 m   (the scripted drop lands straight down, untouched)
#   rotor speed       2.5e-3 rad/s         5.1e-3 rad/s (of ~500)
#   PID integral      1.4e-6 rad           2.9e-6 rad
#   PID prev_rate     2.0e-5 rad/s         2.2e-5 rad/s
# and every step's contact and crash flags, rally outcomes and dones equal in all of them. Each bound is ~3x the
# larger column (landed_at: 1e-5 m, a landing point moved by round-off). The compiled components loop
# (compile=True, seed 0) against eager rows stays inside them (drone ang_vel 1.3e-5 rad/s, ball pos 3.5e-5 m, vel
# 4.7e-5 m/s, rotor speed 2.7e-3 rad/s; events equal). A real difference in the physics moves
# these by far more and flips events (checked by breaking the code once each: the rate PID without its gyroscopic
# or its kd term, its memory not written back, no drone-drone collisions, the ground's restitution at the net, no
# drag on the ball; the first-paddle test below catches taking the last paddle in contact).
BOUNDS = {
    "drones.pos": 1.1e-5,
    "drones.quat": 5e-6,
    "drones.vel": 3.5e-5,
    "drones.ang_vel": 7e-5,
    "ball_pos": 9e-5,
    "ball_vel": 1.2e-4,
    "landed_at": 1e-5,
    "rotor_speed": 1.5e-2,
    "rate_ctrl.integral": 9e-6,
    "rate_ctrl.prev_rate": 7e-5,
}


class Recorder(MatchHooks):
    """Every step's state, flags and rally outcome, right after the rules (before an auto-reset)."""

    snapshot_constant = True  # not episode state (state_snapshot)

    def __init__(self) -> None:
        self.steps: list[dict[str, torch.Tensor]] = []

    def after_rules(self, match) -> None:
        self.steps.append(state_of(match))


def state_of(env) -> dict[str, torch.Tensor]:
    out = {f"drones.{f}": getattr(env.drones, f).clone() for f in ("pos", "quat", "vel", "ang_vel")}
    for name in ("ball_pos", "ball_vel", "landed_at", "rotor_speed", *FLAGS):
        out[name] = getattr(env, name).clone()
    out["rate_ctrl.integral"] = env.rate_ctrl.integral.clone()
    out["rate_ctrl.prev_rate"] = env.rate_ctrl.prev_rate.clone()
    if env.events is not None:
        out["outcome"] = env.events.outcome.clone()
        out["point_to"] = env.events.point_to.clone()
    return out


def stage(env) -> None:
    """Envs 0-2 play from the serve; 3-7 start with a contact or a crash coming (then their rallies end and they
    restart from a serve)."""
    d = env.drones
    env.ball_pos[3] = torch.tensor((-1.0, 0.5, 1.5))  # into the net
    env.ball_vel[3] = torch.tensor((5.0, 0.0, 1.0))
    env.ball_pos[4] = torch.tensor((-2.0, 3.5, 0.8))  # onto the ground, away from every drone
    env.ball_vel[4] = torch.tensor((0.0, 0.0, -1.0))
    d.pos[5, 1] = d.pos[5, 0] + torch.tensor((0.0, 0.6, 0.0))  # two teammates flying into each other
    d.vel[5, 0, 1], d.vel[5, 1, 1] = 2.0, -2.0
    d.pos[6, 2, 2], d.vel[6, 2, 2] = 0.25, -3.0  # into the ground
    d.pos[7, 3] = torch.tensor((0.6, 0.0, 1.5))  # into the net
    d.vel[7, 3, 0] = -4.0


def make(layout: str, seed: int = 0, num_envs: int = E, **overrides):
    with soa.force_layout(layout):
        return sim.make("drone_volleyball", num_envs=num_envs, mode="3v3", seed=seed, **overrides)


def rollout(*variants: tuple, seed: int = 0) -> list[tuple[list[dict], torch.Tensor]]:
    """``FREE_STEPS`` steps of the staged scenario for each ``(layout, perturbation[, compile])``, each env flown by
    its own scripted teams (closed loop), stepped side by side. Per env, every step's record and the done flags
    ``[FREE_STEPS, E]``."""
    runs = []
    for layout, perturb, *compiled in variants:
        env = make(layout, seed, compile=bool(compiled and compiled[0]))
        assert env.layout == layout
        stage(env)
        if perturb:
            env.drones.pos.mul_(1.0 + perturb)
        rec = Recorder()
        env.attach(rec)
        runs.append({"env": env, "rec": rec, "teams": (scripted_team(env), scripted_team(env)), "dones": []})
    obs = [run["env"].observe() for run in runs]
    for _ in range(FREE_STEPS):
        for i, run in enumerate(runs):
            env, (a, b) = run["env"], run["teams"]
            obs[i], _, terminated, truncated, _ = env.step({"team_a": a(env, obs[i], 0), "team_b": b(env, obs[i], 1)})
            run["dones"].append(terminated | truncated)
    return [(run["rec"].steps, torch.stack(run["dones"])) for run in runs]


def compare(a: list[dict], b: list[dict]) -> tuple[dict[str, float], list[str]]:
    """Largest difference of each state tensor over the steps, and the flags / outcomes that differ (step: name)."""
    worst = dict.fromkeys(BOUNDS, 0.0)
    unequal = []
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        for k in worst:
            worst[k] = max(worst[k], float((x[k] - y[k]).abs().max()))
        unequal += [f"{i}: {k}" for k in (*FLAGS, "outcome", "point_to") if not torch.equal(x[k], y[k])]
    return worst, unequal


@pytest.mark.timeout(60)
def test_components_match_rows_through_hits_net_ground_and_crashes():
    (rows, rows_done), (comps, comps_done) = rollout(("rows", 0.0), ("components", 0.0))
    assert torch.equal(rows_done, comps_done)  # the same envs end (and reset) on the same steps
    worst, unequal = compare(rows, comps)
    assert not unequal, f"events differ: {unequal[:5]}"
    too_far = {k: (v, BOUNDS[k]) for k, v in worst.items() if not v <= BOUNDS[k]}
    assert not too_far, f"components vs rows beyond the round-off bound (difference, bound): {too_far}"
    # The scenario has what it is meant to: paddle hits (serves and returns), the net, the ground, crashes.
    hits = torch.stack([s["hits"] for s in rows]).any(-1)  # [FREE_STEPS, E]
    assert hits.any(0).all(), "every env's serve hits the ball"
    assert torch.stack([s["ball_net"] for s in rows])[:, 3].any()
    ground = torch.stack([s["ball_ground"] for s in rows])
    assert ground[:, 4].any()
    assert max(float(s["landed_at"][4].abs().sum()) for s in rows) > 0  # the landing point was recorded
    crash = torch.stack([s["drone_crash"] for s in rows])  # [FREE_STEPS, E, D]
    assert crash[:, 5, :2].any(0).all() and crash[:, 6, 2].any() and crash[:, 7, 3].any()
    assert rows_done[:, 3:].any(0).all() and not rows_done[:, :3].any()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_compiled_vectorised_components_loop_matches_eager_rows():
    """``compile=True`` compiles the components loop with inductor's CPU tiling heuristics off
    (``VECTORISED_LOOP``): its kernels run on vectors of envs (vectorised ``sqrt``, divisions, sums in another
    order). Through the staged hits, net, ground and crashes it stays inside the round-off bounds of the eager rows
    loop, with the same events (~2-4 min to compile; ``pytest -m slow``)."""
    (rows, rows_done), (comps, comps_done) = rollout(("rows", 0.0), ("components", 0.0, True))
    assert torch.equal(rows_done, comps_done)
    worst, unequal = compare(rows, comps)
    assert not unequal, f"events differ: {unequal[:5]}"
    too_far = {k: (v, BOUNDS[k]) for k, v in worst.items() if not v <= BOUNDS[k]}
    assert not too_far, f"compiled components vs eager rows beyond the round-off bound (difference, bound): {too_far}"
    assert worst["drones.pos"] > 0.0, "the two loops round differently: zero means one of them ran twice"


@pytest.mark.timeout(60)
def test_one_step_of_components_from_the_rows_state_is_round_off_close():
    """Lockstep along a rows trajectory (the staged scenario, 90 steps: the serves and their returns): each step the
    components env restarts from the rows env's exact state, so differences cannot grow and the bounds are tight.
    Measured, max over the steps: drone pos 2.4e-7 m, quat 1.2e-7, vel 2.4e-7 m/s, ang_vel 3.6e-7 rad/s, ball pos
    6.7e-10 m, vel 3.8e-6 m/s, rotor speed 1.1e-4 rad/s, PID integral 3.0e-8 rad, prev_rate 2.4e-7 rad/s; flags and
    outcomes equal. Bounds ~10x (ball pos: a few ulp of 5 m)."""
    rows, comps = make("rows"), make("components")
    stage(rows)
    rec_rows, rec_comps = Recorder(), Recorder()
    rows.attach(rec_rows)
    comps.attach(rec_comps)
    team_a, team_b = scripted_team(rows), scripted_team(rows)
    obs = rows.observe()
    for _ in range(LOCKSTEP_STEPS):
        assert comps.load_state_snapshot(rows.state_snapshot()) is None
        assert comps.layout == "components"  # a snapshot restores state, not the layout
        actions = {"team_a": team_a(rows, obs, 0), "team_b": team_b(rows, obs, 1)}
        obs, *_ = rows.step(actions)
        comps.step(actions)
    worst, unequal = compare(rec_rows.steps, rec_comps.steps)
    assert not unequal, f"events differ: {unequal[:5]}"
    tight = {
        "drones.pos": 2.5e-6,
        "drones.quat": 1.2e-6,
        "drones.vel": 2.5e-6,
        "drones.ang_vel": 4e-6,
        "ball_pos": 2.5e-6,
        "ball_vel": 4e-5,
        "rotor_speed": 1.2e-3,
        "rate_ctrl.integral": 3e-7,
        "rate_ctrl.prev_rate": 2.5e-6,
    }
    too_far = {k: (worst[k], bound) for k, bound in tight.items() if not worst[k] <= bound}
    assert not too_far, too_far
    hits = torch.stack([s["hits"] for s in rec_rows.steps]).any(-1)  # [steps, E]
    assert hits.any(0).all() and hits[60:].any(), "serves and returns hit the ball"


@pytest.mark.timeout(60)
def test_rotor_action_in_a_skill_env_matches_rows():
    """The direct rotor-speed action and a one-drone skill env (team B's slots parked): random rotor commands around
    hover for 40 steps, free-running from the same seed, the serve's ball dropping onto the paddle. Measured, rows vs
    components (rows vs rows with drone positions perturbed by +-1e-7 relative): drone pos 4.8e-7 m (9.5e-7), vel
    4.8e-7 m/s (0), ang_vel 3.0e-8 rad/s (0), rotor speed 0 (0), ball pos 1.5e-6 m (1.2e-5), vel 6.7e-6 m/s
    (5.5e-5); hits and crash flags equal. Bounds ~10x the larger (no controller: the drones' differences stay tiny)."""
    out = {}
    for layout in ("rows", "components"):
        with soa.force_layout(layout):
            env = sim.make("drone_volleyball", num_envs=16, mode="serve", seed=4, action="rotor")
        gen = torch.Generator().manual_seed(5)
        hover = float(env.model.hover_speed(env.params.mass * 9.81)) / env.params.rotor_speed_max * 2 - 1
        steps = []
        for _ in range(40):
            act = (hover + 0.15 * torch.randn(16, 1, 4, generator=gen)).clamp(-1, 1)
            env.step({"team_a": act})
            steps.append(state_of(env))
        out[layout] = steps
    worst = {}
    for x, y in zip(out["rows"], out["components"], strict=True):
        for k in ("drones.pos", "drones.vel", "drones.ang_vel", "rotor_speed", "ball_pos", "ball_vel"):
            worst[k] = max(worst.get(k, 0.0), float((x[k] - y[k]).abs().max()))
        for k in FLAGS:
            assert torch.equal(x[k], y[k]), k
    bounds = {
        "drones.pos": 1e-5,
        "drones.vel": 5e-6,
        "drones.ang_vel": 5e-7,
        "rotor_speed": 1e-3,
        "ball_pos": 1.2e-4,
        "ball_vel": 5.5e-4,
    }
    too_far = {k: (worst[k], b) for k, b in bounds.items() if not worst[k] <= b}
    assert not too_far, too_far
    assert sum(int(s["hits"].sum()) for s in out["rows"]) >= 8  # the serve's ball hits the paddles


def test_the_first_paddle_in_contact_takes_the_ball():
    """A ball falling between two level paddles touches both rims in one substep (rare in play, so the free-running
    episodes above never check it): both layouts bounce it off the first drone's (envs 0-3), or off the only one in
    contact when the first flies away (envs 4-7)."""
    env = make("rows")
    d, off = env.drones, env.cfg.paddle_offset
    d.pos[:, 1] = torch.tensor((-3.0, -0.3, 2.0))  # drones 1 and 2 side by side, rims 0.1 m apart
    d.pos[:, 2] = torch.tensor((-3.0, 0.3, 2.0))
    d.pos[4:, 1, 2] = 1.0  # ... except where drone 1 is far below
    env.ball_pos = torch.tensor((-3.0, 0.0, 2.0 + off + 0.05)).expand(E, 3).clone()
    env.ball_vel = torch.tensor((0.0, 0.0, -3.0)).expand(E, 3).clone()
    before = (env.ball_pos, env.ball_vel, env.landed_at, env.hits, env.ball_net, env.ball_ground)
    env._ball_substep(env.phys_dt)
    body = soa.Body.from_rows(env.drones)
    (pos, vel, _), (hits, net, ground) = env._ball_substep_components(
        tuple(soa.split(x) for x in before[:3]), before[3:], body, soa.quat_to_matrix(body.quat), env.phys_dt
    )
    assert hits[:4, 1].all() and hits[4:, 2].all() and (hits.sum(-1) == 1).all()
    assert torch.equal(hits, env.hits) and torch.equal(net, env.ball_net) and torch.equal(ground, env.ball_ground)
    torch.testing.assert_close(soa.join(pos), env.ball_pos)
    torch.testing.assert_close(soa.join(vel), env.ball_vel)
    assert (env.ball_vel[:4, 1] > 0.5).all() and (env.ball_vel[4:, 1] < -0.5).all()  # off drone 1's rim, or 2's


def random_drones(n: int, gen: torch.Generator) -> RigidBodyState:
    quat = torch.randn(n, 4, generator=gen)
    return RigidBodyState(
        torch.randn(n, 3, generator=gen),
        quat / quat.norm(dim=-1, keepdim=True),
        torch.randn(n, 3, generator=gen),
        torch.randn(n, 3, generator=gen) * 3,
    )


def test_building_blocks_match_the_row_major_functions():
    """One call each from random states, including branches a match rarely takes: the rate PID's integral clipped,
    rim hits, a frictional paddle, a tilted rectangle, a ball centre exactly on the contact point (fallback normal)."""
    gen = torch.Generator().manual_seed(0)
    n = 4096
    model = MultirotorModel(MultirotorParams.load("iris"))
    ctrl = RatePIDController(model, (n,))
    ctrl.integral = torch.randn(n, 3, generator=gen).sign() * (1.95 + 0.1 * torch.rand(n, 3, generator=gen))
    ctrl.prev_rate = torch.randn(n, 3, generator=gen)
    body = random_drones(n, gen)
    comps = soa.Body.from_rows(body)
    pid = soa.RatePID(ctrl)
    mem = soa.RatePID.load(ctrl)
    thrust = torch.rand(n, generator=gen) * 30
    rate_cmd = torch.randn(n, 3, generator=gen) * 6
    got_cmd, got_mem = pid.step(mem, thrust, soa.split(rate_cmd), comps.ang_vel, 0.005)
    want_cmd = ctrl(thrust, rate_cmd, body.ang_vel, 0.005)
    assert 0.2 < (ctrl.integral.abs() == 2.0).float().mean() < 0.8  # the limit clips many
    torch.testing.assert_close(soa.join(got_cmd), want_cmd, rtol=1e-5, atol=0.05)
    torch.testing.assert_close(soa.join(got_mem.integral), ctrl.integral)
    torch.testing.assert_close(soa.join(got_mem.prev_rate), ctrl.prev_rate)
    soa.RatePID.store(ctrl, got_mem)
    torch.testing.assert_close(ctrl.integral, soa.join(got_mem.integral))

    bp = rows_ball.BallParams(drag_coeff=0.47, friction_drone=0.3)
    pos, vel = torch.randn(n, 3, generator=gen), torch.randn(n, 3, generator=gen) * 10
    want = rows_ball.ball_flight_step(pos, vel, bp, 0.005)
    got = soa.ball_flight_step(soa.split(pos), soa.split(vel), bp, 0.005)
    for w, g in zip(want, got, strict=True):
        torch.testing.assert_close(soa.join(g), w)

    # Balls around paddles: about half overlapping, face and rim hits.
    rot = soa.quat_to_matrix(comps.quat)
    offset = (0.0, 0.0, 0.08)
    c_w, n_w, v_w = rows_ball.paddle_surface(body.pos, body.quat, body.vel, body.ang_vel, torch.tensor(offset))
    c_g, n_g, v_g = soa.paddle_surface(comps, rot, offset)
    for w, g in ((c_w, c_g), (n_w, n_g), (v_w, v_g)):
        torch.testing.assert_close(soa.join(g), w)
    ball = c_w + torch.randn(n, 3, generator=gen) * 0.15
    want_p, want_v, want_hit = rows_ball.ball_drone_contact(ball, vel, c_w, n_w, 0.25, v_w, bp)
    got_p, got_v, got_hit = soa.ball_drone_contact(soa.split(ball), soa.split(vel), c_g, n_g, 0.25, v_g, bp)
    off = ball - c_w
    rim = (off - (off * n_w).sum(-1, keepdim=True) * n_w).norm(dim=-1) > 0.25  # beside the disc: a rim contact
    assert 0.15 < want_hit.float().mean() < 0.8 and (want_hit & rim).sum() > 20
    # Where the centre nearly touches the disc the contact normal (centre minus closest point) is ill-conditioned:
    # round-off in the positions turns it by ~ulp / distance (2e-4 m/s at 1 cm measured). Compared from 1 cm.
    dist = (ball - rows_ball.closest_point_on_disc(ball, c_w, n_w, 0.25)).norm(dim=-1)
    clear = dist > 0.01
    assert torch.equal(got_hit[clear], want_hit[clear]) and (want_hit & clear).float().mean() > 0.1
    torch.testing.assert_close(soa.join(got_p)[clear], want_p[clear], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(soa.join(got_v)[clear], want_v[clear], rtol=1e-5, atol=1e-3)

    # A tilted rectangle (tensor axes), and the net's constant one.
    u = torch.nn.functional.normalize(torch.randn(3, generator=gen), dim=0)
    v = torch.nn.functional.normalize(torch.linalg.cross(u, torch.randn(3, generator=gen)), dim=0)
    center = torch.randn(3, generator=gen)
    want_pt = rows_ball.closest_point_on_rect(pos, center.expand_as(pos), u.expand_as(pos), v.expand_as(pos), 1.0, 0.5)
    got_pt = soa.closest_point_on_rect(soa.split(pos), *(tuple(x.tolist()) for x in (center, u, v)), 1.0, 0.5)
    torch.testing.assert_close(soa.join(got_pt), want_pt)
    net = torch.tensor(((0.0, 0.0, 1.215), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0)))
    want_pt = rows_ball.closest_point_on_rect(pos, *(x.expand_as(pos) for x in net), 4.5, 1.215)
    got_pt = soa.closest_point_on_rect(soa.split(pos), *(tuple(x.tolist()) for x in net), 4.5, 1.215)
    assert got_pt[0] == 0.0  # the net's x: a constant
    torch.testing.assert_close(torch.stack(torch.broadcast_tensors(*map(torch.as_tensor, got_pt)), -1), want_pt)

    # Sphere contacts: near the point, some centres exactly on it (the fallback normal), a moving surface.
    point = pos + torch.randn(n, 3, generator=gen) * 0.06
    point[:64] = pos[:64]
    surf = torch.randn(n, 3, generator=gen)
    fallback = torch.nn.functional.normalize(torch.randn(n, 3, generator=gen), dim=-1)
    want = rows_ball.resolve_sphere_contact(pos, vel, point, surf, 0.1, 0.8, 0.3, fallback)
    got = soa.resolve_sphere_contact(
        soa.split(pos), soa.split(vel), soa.split(point), soa.split(surf), 0.1, 0.8, 0.3, soa.split(fallback)
    )
    assert torch.equal(got[2], want[2]) and 0.2 < want[2].float().mean() < 0.8 and want[2][:64].any()
    torch.testing.assert_close(soa.join(got[0]), want[0])
    torch.testing.assert_close(soa.join(got[1]), want[1], rtol=1e-5, atol=1e-5)
    pos[:, 2] = pos[:, 2].abs() * 0.1  # about half below the ball's radius
    want = rows_ball.ground_contact_ball(pos, vel, bp)
    got = soa.ground_contact_ball(soa.split(pos), soa.split(vel), bp)
    assert torch.equal(got[2], want[2]) and 0.2 < want[2].float().mean() < 0.8
    assert torch.equal(soa.join(got[0]), want[0]) and torch.equal(soa.join(got[1]), want[1])


def test_the_layout_is_components_for_large_or_compiled_batches_only():
    """Eager small batches (tests, evaluations) step faster in rows: fewer small ops."""
    assert sim.make("drone_volleyball", num_envs=2, mode="1v1").layout == "rows"
    assert sim.make("drone_volleyball", num_envs=soa.COMPONENTS_MIN_ENVS, mode="1v1").layout == "components"
    assert sim.make("drone_volleyball", num_envs=2, mode="serve").layout == "rows"
    # Compiled, a components loop vectorises over envs; a rows loop keeps inductor's defaults (3.4x slower otherwise).
    assert make("components", num_envs=2).loop_compile_options() == soa.VECTORISED_LOOP
    assert sim.make("drone_volleyball", num_envs=2, mode="1v1").loop_compile_options() == {}


def test_pairwise_drone_collisions_flag_the_same_drones_as_the_distance_matrix():
    """The compiled loop checks drone-drone collisions pair by pair, the eager one by a distance matrix: the same
    flags, drones near the radius included."""
    from sim.tasks.drone_volleyball.env import drones_within

    gen = torch.Generator().manual_seed(0)
    for D in (1, 2, 6):
        pos = tuple(torch.rand(512, D, generator=gen) * 0.8 for _ in range(3))  # crowded: many pairs near 0.3 m
        not_self = ~torch.eye(D, dtype=torch.bool)
        matrix, pairs = (drones_within(pos, 0.3, not_self, pairwise=p) for p in (False, True))
        assert torch.equal(matrix, pairs)
        if D > 1:
            assert 0.1 < matrix.float().mean() < 0.9  # both kinds of drones present
