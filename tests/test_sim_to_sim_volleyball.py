"""drone_volleyball flown in MuJoCo (``engine=mujoco``) against covey's own physics.

Free flight (drones under the same smooth actions, the ball in the air): with MuJoCo stepping at covey's tick
(``mujoco:1``) the drones agree to float32 round-off; the ball differs by the integration scheme only (covey's
Strang splitting is exact for gravity, MuJoCo's semi-implicit Euler lags by ``g dt t / 2``). The default engine
(10 MuJoCo steps per tick) moves the drones by its smaller step's truncation error. Contacts: the ball's velocity
once MuJoCo's soft contact is over against covey's instantaneous impulse, for a paddle, the ground and the net.
Tolerances are a few times the measured errors quoted at each assertion.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import sim
from sim.physics.quaternion import quat_from_euler, quat_rotate
from sim.physics.rigid_body import RigidBodyState
from sim.tasks.drone_volleyball.mujoco_engine import CONTACT_STEPS, contact_solref

pytest.importorskip("mujoco")

E = 4
ROOT = Path(__file__).resolve().parents[1]


def make(engine: str, mode: str = "1v1"):
    return sim.make("drone_volleyball", mode=mode, num_envs=E, seed=3, engine=engine)


def physics_steps(env, steps: int, actions=None) -> list[tuple[torch.Tensor, ...]]:
    """``steps`` control steps of the physics alone (actions, then the engine's control loop: no rules, so no rally
    restart moves the ball); each step's drone positions, quaternions, ball position, velocity and hit flags."""
    out = []
    for t in range(steps):
        act = env.hover_actions() if actions is None else actions(env, t)
        env._apply_actions(act)
        env._advance()
        out.append((env.drones.pos.clone(), env.drones.quat.clone(), env.ball_pos.clone(), env.ball_vel.clone(),
                    env.hits.clone()))  # fmt: skip
    return out


def smooth_actions(env, t: int) -> dict[str, torch.Tensor]:
    """Hover thrust plus ``0.3 sin`` on every channel, a phase per drone and channel: the drones roll, pitch and
    climb by a few cm."""
    act = env.hover_actions()
    for g_i, a in enumerate(act.values()):
        n, ch = a.shape[1], a.shape[2]
        phase = torch.arange(n * ch, dtype=torch.float32).view(n, ch) + 3 * g_i
        a += 0.3 * torch.sin(2 * math.pi * 1.5 * t * env.cfg.control_dt + phase)
    return act


def place_ball(env, pos, vel) -> None:
    env.ball_pos = torch.tensor(pos, dtype=torch.float32).expand(E, 3).clone()
    env.ball_vel = torch.tensor(vel, dtype=torch.float32).expand(E, 3).clone()


@pytest.mark.parametrize(
    "engine, drone_tol, ball_tol",
    [
        # measured: drones 3.3e-5 m (float32 round-off, grown by the attitude loop), ball 1.25e-2 m (g dt t / 2 =
        # 1.23e-2 m at 5 ms over 0.5 s)
        ("mujoco:1", 1e-4, 2.5e-2),
        # measured: drones 5.9e-3 m (Euler at 0.5 ms against 5 ms, forces held over the tick), ball 1.3e-3 m (the
        # same lag at 0.5 ms, and MuJoCo's drag integrated explicitly)
        ("mujoco", 1.5e-2, 3e-3),
    ],
)
def test_free_flight_matches_covey(engine, drone_tol, ball_tol, check):
    """3v3, 0.5 s of smooth actions, the ball thrown high over the net: worst position difference over every env
    and step."""
    ref, other = make("covey", "3v3"), make(engine, "3v3")
    for env in (ref, other):
        place_ball(env, (0.5, 0.5, 4.0), (1.0, 0.5, 2.0))
    a, b = physics_steps(ref, 25, smooth_actions), physics_steps(other, 25, smooth_actions)
    drone = max((x[0] - y[0]).norm(dim=-1).max().item() for x, y in zip(a, b, strict=True))
    ball = max((x[2] - y[2]).norm(dim=-1).max().item() for x, y in zip(a, b, strict=True))
    moved = (a[-1][0] - a[0][0]).norm(dim=-1).max().item()
    assert moved > 0.02  # the actions moved the drones
    assert not any(x[4].any() for x in a + b)  # no contact
    check("drone position difference (m)", drone, drone_tol)
    check("ball position difference (m)", ball, ball_tol)


def _paddle_ball(env, dx: float, vel) -> None:
    """The ball 5 cm above team A's first paddle (``dx`` off centre), moving at ``vel``."""
    place_ball(env, (0.0, 0.0, 0.0), vel)
    env.ball_pos = env.drones.pos[:, 0] + torch.tensor((dx, 0.0, env.cfg.paddle_offset + env.cfg.ball.radius + 0.05))


CONTACTS = {
    # name: ball placement, steps (20 ms each) until the contact is over in both engines
    "paddle": (lambda env: _paddle_ball(env, 0.0, (0.0, 0.0, -4.0)), 3),
    "paddle_oblique": (lambda env: _paddle_ball(env, 0.1, (1.0, 0.5, -4.0)), 3),
    "ground": (lambda env: place_ball(env, (1.0, 1.0, 0.2), (1.0, 0.0, -4.0)), 3),
    "net": (lambda env: place_ball(env, (-0.2, 0.5, 1.2), (5.0, 0.0, 0.0)), 3),
}


@pytest.mark.parametrize("case", list(CONTACTS))
def test_contact_outgoing_velocity_matches_covey(case, check):
    """The ball's velocity after one contact (MuJoCo's soft contact, restitution from its ``solref``, against
    covey's instantaneous impulse), and the rules see one paddle hit where there is one."""
    place, steps = CONTACTS[case]
    ref, other = make("covey"), make("mujoco")
    for env in (ref, other):
        place(env)
    vel0 = ref.ball_vel.clone()
    v_in = vel0[0].norm().item()
    a, b = physics_steps(ref, steps), physics_steps(other, steps)
    err = (a[-1][3] - b[-1][3]).norm(dim=-1).max().item() / v_in
    # Measured (relative to the 4-5 m/s approach): paddle 1.8e-2, oblique 2.1e-2, ground 1.4e-3, net 4.6e-2. One
    # contact's restitution in MuJoCo depends on where in a step it begins (contact_solref: 0.8 +- 0.02, 0.2 +- 0.05),
    # and MuJoCo's ball keeps falling during the 5 ms contact (g tau = 0.05 m/s, 1%), which an impulse does not see.
    check("|v_out difference| / approach speed", err, 0.1 if case == "net" else 0.05)
    assert (a[-1][3] - vel0).norm(dim=-1).min() > 1.0  # a contact happened
    hits_a = torch.stack([x[4] for x in a]).sum(0)  # [E, D] hits over the steps
    hits_b = torch.stack([x[4] for x in b]).sum(0)
    assert torch.equal(hits_a, hits_b)
    assert int(hits_b[:, 0].min()) == (1 if case.startswith("paddle") else 0)


def test_match_like_hits(check):
    """128 random paddle hits like a match's (paddle tilted up to 25 deg and moving up to 2 m/s, ball approaching at
    3-10 m/s with a tangential part, contact starting anywhere in a step): the ball's outgoing velocity in MuJoCo
    against covey's impulse, relative to the approach speed, and one hit each in both engines."""
    E2 = 128
    gen = torch.Generator().manual_seed(0)
    tilt = (torch.rand(E2, 2, generator=gen) - 0.5) * math.radians(50)
    quat = quat_from_euler(tilt[:, 0], tilt[:, 1], torch.zeros(E2))
    paddle_vel = (torch.rand(E2, 3, generator=gen) - 0.5) * torch.tensor((2.0, 2.0, 4.0))
    speed = 3.0 + 7.0 * torch.rand(E2, 1, generator=gen)
    tangent = (torch.rand(E2, 3, generator=gen) - 0.5) * 2.0
    gap = 0.02 + 0.03 * torch.rand(E2, 1, generator=gen)
    out = []
    for engine in ("covey", "mujoco"):
        env = sim.make("drone_volleyball", mode="1v1", num_envs=E2, seed=3, engine=engine)
        d = env.drones
        quats, vels = d.quat.clone(), d.vel.clone()
        quats[:, 0], vels[:, 0] = quat, paddle_vel
        env.drones = RigidBodyState(d.pos, quats, vels, d.ang_vel)
        normal = quat_rotate(quat, torch.tensor((0.0, 0.0, 1.0)).expand(E2, 3))
        center = d.pos[:, 0] + env.cfg.paddle_offset * normal
        env.ball_pos = center + normal * (env.cfg.ball.radius + gap)
        env.ball_vel = paddle_vel - speed * normal + tangent - (tangent * normal).sum(-1, keepdim=True) * normal
        steps = physics_steps(env, 3)
        out.append((steps[-1][3], torch.stack([x[4] for x in steps]).sum(0)))
    (v_covey, hits_covey), (v_mujoco, hits_mujoco) = out
    assert (hits_covey[:, 0] == 1).all() and (hits_mujoco[:, 0] == 1).all()
    err = (v_covey - v_mujoco).norm(dim=-1) / speed[:, 0]
    # measured: median 1.3e-2, 90th percentile 2.2e-2 (mujoco:40, 40 steps a contact: 4.2e-3, 1.1e-2)
    check("median |v_out difference| / approach speed", err.median(), 0.025)
    check("90th percentile", err.quantile(0.9), 0.04)


@pytest.mark.parametrize("restitution", [0.2, 0.7, 0.8])
def test_contact_solref_gives_the_restitution_in_mujoco(restitution, check):
    """A ball bouncing on a plane in MuJoCo with :func:`contact_solref`'s ``solref``: the mean restitution over where
    in a step the contact begins is the asked one, each bounce within the spread the function's docstring states."""
    import mujoco

    dt = 0.0005
    k, b = contact_solref(restitution, CONTACT_STEPS * dt, dt)
    out = []
    for j in range(12):
        gap = 5.0 * dt * (j + 0.37) / 12  # the ball's gap at the start: where in a step the contact begins
        xml = (
            f'<mujoco><option timestep="{dt}" gravity="0 0 0"/><worldbody>'
            '<geom name="floor" type="plane" size="1 1 .1"/>'
            f'<body pos="0 0 {0.1 + gap!r}"><freejoint/><geom name="ball" type="sphere" size="0.1" mass="0.005"'
            ' contype="0" conaffinity="0"/></body></worldbody><contact><pair geom1="ball" geom2="floor" condim="1"'
            f' solref="{-k!r} {-b!r}" solimp="0.99 0.99 0.001"/></contact></mujoco>'
        )
        model = mujoco.MjModel.from_xml_string(xml)
        data = mujoco.MjData(model)
        data.qvel[2] = -5.0
        mujoco.mj_step(model, data, nstep=4 * CONTACT_STEPS)
        out.append(data.qvel[2] / 5.0)
    # measured: mean within 7e-4 of the target; spread 0.151-0.252 (0.2), 0.674-0.729 (0.7), 0.786-0.828 (0.8)
    check("|mean restitution - target|", abs(sum(out) / len(out) - restitution), 5e-3)
    assert max(abs(e - restitution) for e in out) < 0.06
    with pytest.raises(ValueError, match="restitution"):
        contact_solref(1.0, 0.005, dt)


def test_engine_errors_and_rally_restart():
    """A bad option is an error naming the form; after the task itself moves the bodies (an episode reset) MuJoCo
    steps from the new state."""
    with pytest.raises(ValueError, match="MuJoCo steps per physics tick"):
        make("mujoco:fine")
    ref, other = make("covey"), make("mujoco")
    for env in (ref, other):
        physics_steps(env, 3)
        env.reset(seed=7)
    a, b = physics_steps(ref, 5), physics_steps(other, 5)
    assert (a[-1][2] - b[-1][2]).norm(dim=-1).max() < 2e-3
    assert (a[-1][0] - b[-1][0]).norm(dim=-1).max() < 1e-3


def test_evaluate_plays_a_match_in_mujoco():
    """The entry point, in a subprocess with a tiny budget: a match in MuJoCo (engine= reaches the match env and its
    report), hovering drones against the scripted team for 1 s."""
    args = ["task=drone_volleyball", "match=scripted,hover", "games=2", "engine=mujoco", "task.episode_length_s=1"]
    out = subprocess.run(
        [sys.executable, "evaluate.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=300, check=True
    )
    report = json.loads(out.stdout.splitlines()[-1])
    assert report["engine"] == "mujoco" and report["games"] == 2
    assert "engine mujoco" in out.stdout
