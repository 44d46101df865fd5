"""cable_load's component-major control loop (:mod:`sim.physics.components`) against the row-major reference, each
forced with ``force_layout``: the same seeded episodes, random actions, a mid-episode MAV loss and a
load disturbance, compared state by state."""

from __future__ import annotations

import pytest
import torch

import sim
from sim.physics import components as soa
from sim.physics.cable import cable_tension
from sim.physics.components import COMPONENTS_MIN_ENVS, VECTORISED_LOOP, force_layout
from sim.physics.contact import ground_contact
from sim.physics.controllers import INDIController
from sim.physics.multirotor import MultirotorModel, MultirotorParams
from sim.physics.quaternion import quat_rotate, quat_rotate_inv
from sim.physics.rigid_body import RigidBodyState, rigid_body_step

GROUP = "mavs"
E, STEPS = 32, 100  # 100 policy steps = 300 INDI ticks / physics steps = 1 s, the fault inside it
FAULT_AND_DISTURBANCE = {
    "fault": {"enabled": True, "probability": 1.0, "time_range": (0.2, 0.6)},
    "disturbance": {"enabled": True, "period_s": 2.0},
}
HETEROGENEOUS = {
    "randomization": {  # the "heterogeneous" scenario's ranges, on top of the default randomisation
        "mav_mass_scale": (0.85, 1.15),
        "thrust_limit_scale": (0.85, 1.15),
        "cable_length_scale": (0.8, 1.2),
        "motor_tau_scale": (0.7, 1.3),
    }
}
# Bounds on the largest difference after STEPS free-running steps from the same seeded start. The two layouts round
# differently (a rotation matrix instead of cross products, other summation orders), and float32 round-off grows in
# this chaotic closed loop, so the bounds come from the rows path itself: rows vs rows started from drone positions
# perturbed by 1e-7 relative (about one float32 ulp), over the same 100 steps. Measured (2-core CPU, torch 2.13,
# 32 envs; the three cases below and 4 more seeds of the first, max over them):
#   quantity        rows vs components   rows vs perturbed rows
#   drone pos       4.2e-5 m             4.2e-5 m
#   drone quat      1.3e-4               2.2e-4
#   drone vel       2.3e-4 m/s           1.0e-4 m/s
#   drone ang_vel   4.2e-3 rad/s         3.8e-3 rad/s
#   load pos        2.3e-5 m             3.6e-5 m
#   load quat       5.3e-5               5.1e-5
#   load vel        1.0e-4 m/s           8.3e-5 m/s
#   load ang_vel    1.3e-3 rad/s         2.1e-3 rad/s
#   rotor speed     1.0e-1 rad/s         1.3e-1 rad/s (of ~1000; INDI differentiates the rates)
#   cable tension   2.2e-2 N             2.6e-2 N (of ~9)
#   INDI thrust_f   1.4e-3 N             7.3e-4 N
#   INDI torque_f   1.5e-5 N m           2.3e-5 N m
# Each bound is ~3x the larger column (drone vel: of 3.4e-4 m/s, measured with 64 envs). The compiled components
# loop (compile=True) against eager rows stays inside them too (drone vel 4.0e-4 m/s, rotor speed 4.1e-2 rad/s).
# A real difference in the physics moves these by far more (checked by breaking the code once each: no gyroscopic
# term, drag with the wrong sign, the disturbance on the wrong side, the released cable kept, the nominal inertia
# for a heterogeneous team; the building-block test below catches a missing tilt cone, yaw wrap or ground contact).
BOUNDS = {
    "drones.pos": 1.5e-4,
    "drones.quat": 7e-4,
    "drones.vel": 1e-3,
    "drones.ang_vel": 1.5e-2,
    "load.pos": 1e-4,
    "load.quat": 2e-4,
    "load.vel": 3e-4,
    "load.ang_vel": 7e-3,
    "rotor_speed": 0.4,
    "cable_tension": 8e-2,
    "indi.thrust_f": 5e-3,
    "indi.torque_f": 7e-5,
}


def make(layout: str, seed: int, **overrides):
    # The torch loops: the C kernels (kernels="auto") would step both layouts (tests/test_cable_load_native.py).
    with force_layout(layout):
        return sim.make("cable_load", num_envs=E, device="cpu", seed=seed, kernels="torch", **overrides)


def rollout(layout: str, seed: int, overrides: dict, perturb: float = 0.0, compile: bool = False):
    """``STEPS`` steps of seeded random actions; returns the env and the done flags ``[STEPS, E]``."""
    env = make(layout, seed, compile=compile, **overrides)
    if perturb:
        env.drones.pos.mul_(1.0 + perturb)
    gen = torch.Generator().manual_seed(seed + 1)
    dones = []
    for _ in range(STEPS):
        actions = torch.rand(E, env.n, 5, generator=gen) * 2 - 1
        _, _, terminated, truncated, _ = env.step({GROUP: actions})
        dones.append(terminated | truncated)
    return env, torch.stack(dones)


def differences(a, b) -> dict[str, float]:
    """Largest absolute difference of each compared state tensor."""
    out = {}
    for body in ("drones", "load"):
        for field in ("pos", "quat", "vel", "ang_vel"):
            out[f"{body}.{field}"] = (getattr(getattr(a, body), field) - getattr(getattr(b, body), field)).abs()
    out["rotor_speed"] = (a.rotor_speed - b.rotor_speed).abs()
    out["cable_tension"] = (a.cable_tension - b.cable_tension).abs()
    out["indi.thrust_f"] = (a.indi.thrust_f - b.indi.thrust_f).abs()
    out["indi.torque_f"] = (a.indi.torque_f - b.indi.torque_f).abs()
    return {k: float(v.max()) for k, v in out.items()}


def assert_same_episode(overrides: dict, seed: int, compile: bool = False):
    rows, rows_done = rollout("rows", seed, overrides)
    comps, comps_done = rollout("components", seed, overrides, compile=compile)
    assert torch.equal(rows_done, comps_done)  # the same envs end (and reset) on the same steps
    assert not rows_done.any(), "an episode ended: the comparison would mix in reset states"
    for name in ("failed", "rotor_alive"):
        assert torch.equal(getattr(rows, name), getattr(comps, name)), name
    assert torch.equal(rows.time, comps.time)
    diff = differences(rows, comps)
    too_far = {k: (v, BOUNDS[k]) for k, v in diff.items() if not v <= BOUNDS[k]}
    assert not too_far, f"components vs rows beyond the round-off bound (difference, bound): {too_far}"
    return rows


@pytest.mark.timeout(60)
@pytest.mark.parametrize("cable", ["attached", "released"])
def test_components_match_rows_through_a_mav_loss_and_a_load_disturbance(cable):
    overrides = {**FAULT_AND_DISTURBANCE, "fault": {**FAULT_AND_DISTURBANCE["fault"], "cable": cable}}
    rows = assert_same_episode(overrides, seed=3)
    assert rows.failed.sum() == E, "every env lost its MAV within the compared second"
    if cable == "released":
        assert (rows.cable_tension[rows.failed] == 0).all()
    assert rows.disturbance_amp.norm(dim=-1).min() > 0


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_compiled_vectorised_components_loop_matches_eager_rows():
    """``compile=True`` compiles the components loop with inductor's CPU tiling heuristics off
    (``VECTORISED_LOOP``): its kernels run on vectors of envs, with vectorised ``sqrt``, divisions and sums
    in another order. Through the MAV loss and the disturbance it stays inside the round-off bounds of the
    eager rows loop (~1-2 min to compile; ``pytest -m slow``)."""
    assert_same_episode(FAULT_AND_DISTURBANCE, seed=3, compile=True)


@pytest.mark.timeout(60)
def test_components_match_rows_for_a_heterogeneous_team():
    rows = assert_same_episode({**HETEROGENEOUS, **FAULT_AND_DISTURBANCE}, seed=11)
    assert rows.mav_mass.std(1).min() > 0 and rows.rotor_speed_max.std(1).min() > 0  # teams are mixed


@pytest.mark.timeout(60)
def test_one_step_of_components_from_the_rows_state_is_round_off_close():
    """Lockstep along a rows trajectory through the fault: each step the components env restarts from the rows
    env's exact state, so differences cannot grow chaotically and the bounds are tight. Measured, max over these 100
    steps: drone pos 2.4e-7 m, vel 6.8e-6 m/s, ang_vel 3.6e-5 rad/s, load vel 4.9e-6 m/s, ang_vel 4.5e-5 rad/s,
    rotor speed 9.0e-3 rad/s (INDI differentiates the rates), tension 1.1e-3 N. Bounds ~10x."""
    rows = make("rows", 5, **FAULT_AND_DISTURBANCE)
    comps = make("components", 5, **FAULT_AND_DISTURBANCE)
    gen = torch.Generator().manual_seed(6)
    worst: dict[str, float] = {}
    for _ in range(STEPS):
        assert comps.load_state_snapshot(rows.state_snapshot()) is None
        assert comps.layout == "components"  # the layout is the env's own: a rows snapshot must not carry it over
        actions = {GROUP: torch.rand(E, rows.n, 5, generator=gen) * 2 - 1}
        rows.step(actions)
        comps.step(actions)
        for k, v in differences(rows, comps).items():
            worst[k] = max(worst.get(k, 0.0), v)
    assert rows.failed.any()
    tight = {
        "drones.pos": 2.5e-6,
        "drones.vel": 7e-5,
        "drones.ang_vel": 4e-4,
        "load.vel": 5e-5,
        "load.ang_vel": 5e-4,
        "rotor_speed": 0.09,
        "cable_tension": 1.1e-2,
    }
    print("lockstep worst", worst)
    too_far = {k: (worst[k], bound) for k, bound in tight.items() if not worst[k] <= bound}
    assert not too_far, too_far
    assert worst["drones.pos"] > 0.0, "two layouts round differently: zero means one layout ran twice"


def random_bodies(n: int, gen: torch.Generator) -> RigidBodyState:
    quat = torch.randn(n, 4, generator=gen)
    return RigidBodyState(
        torch.randn(n, 3, generator=gen) * 0.1,  # about half below a 0.05 m contact radius
        quat / quat.norm(dim=-1, keepdim=True),
        torch.randn(n, 3, generator=gen),
        torch.randn(n, 3, generator=gen) * 3,
    )


def test_building_blocks_match_the_row_major_functions():
    """Branches a flying episode rarely takes, one call each from random states: ground contact, slack cables,
    the INDI tilt cone (large commanded accelerations) and its yaw wrap (references across +-pi)."""
    gen = torch.Generator().manual_seed(0)
    n = 4096
    body = random_bodies(n, gen)
    comps = soa.Body.from_rows(body)
    rot = soa.quat_to_matrix(comps.quat)
    v = torch.randn(n, 3, generator=gen)
    torch.testing.assert_close(soa.join(soa.rotate(rot, soa.split(v))), quat_rotate(body.quat, v))
    torch.testing.assert_close(soa.join(soa.rotate_inv(rot, soa.split(v))), quat_rotate_inv(body.quat, v))

    force, torque = torch.randn(n, 3, generator=gen), torch.randn(n, 3, generator=gen) * 0.01
    mass, inertia = torch.rand(n, 1, generator=gen) + 0.5, torch.rand(n, 3, generator=gen) * 1e-3 + 1e-3
    want, in_contact = ground_contact(rigid_body_step(body, force, torque, mass, inertia, 0.01), radius=0.05)
    got = soa.ground_contact(
        soa.rigid_body_step(comps, soa.split(force), soa.split(torque), mass[:, 0], soa.split(inertia), 0.01), 0.05
    ).to_rows()
    assert 0.2 < in_contact.float().mean() < 0.8
    for field in ("pos", "quat", "vel", "ang_vel"):
        torch.testing.assert_close(getattr(got, field), getattr(want, field), rtol=1e-5, atol=1e-6)

    pos_b, vel_b = torch.randn(n, 3, generator=gen), torch.randn(n, 3, generator=gen)
    rest = torch.rand(n, generator=gen) * 2  # about half the cables slack
    want_t, want_dir, _ = cable_tension(body.pos, body.vel, pos_b, vel_b, rest, 3000.0, 8.0)
    got_t, got_dir, _ = soa.cable_tension(comps.pos, comps.vel, soa.split(pos_b), soa.split(vel_b), rest, 3000.0, 8.0)
    assert 0.2 < (want_t == 0).float().mean() < 0.8
    torch.testing.assert_close(got_t, want_t, rtol=1e-5, atol=1e-3)
    torch.testing.assert_close(soa.join(got_dir), want_dir)

    model = MultirotorModel(MultirotorParams.load("falcon"))
    ctrl = INDIController(model, (n,), 1 / 300)
    ctrl.thrust_f = torch.full((n,), model.mass * 9.81)
    ctrl.yaw_ref = (torch.rand(n, generator=gen) * 2 - 1) * 3.14159  # errors past +-pi wrap
    acc = torch.randn(n, 3, generator=gen) * 20  # steep: the tilt cone clips many
    ff = torch.randn(n, 2, generator=gen)
    speed = torch.rand(n, 4, generator=gen) * 2000
    indi = soa.INDI(ctrl)
    mem = soa.INDI.load(ctrl)
    got_cmd, got_mem = indi.step(mem, soa.split(acc), soa.split(ff), rot, comps.vel, comps.ang_vel, soa.split(speed))
    want_cmd = ctrl(acc, ff, body.quat, body.vel, body.ang_vel, speed)
    torch.testing.assert_close(soa.join(got_cmd), want_cmd, rtol=1e-4, atol=0.05)
    for field in ("spec_force_f", "torque_f", "ang_acc_f"):
        torch.testing.assert_close(soa.join(getattr(got_mem, field)), getattr(ctrl, field))
    torch.testing.assert_close(got_mem.thrust_f, ctrl.thrust_f)


def test_a_forced_layout_is_validated_and_undone():
    with pytest.raises(ValueError, match="layout must be one of"):
        with force_layout("columns"):
            pass
    with force_layout("components"):
        assert sim.make("cable_load", num_envs=2).layout == "components"
    assert sim.make("cable_load", num_envs=2).layout == "rows"


def test_the_layout_is_components_for_large_or_compiled_batches_only():
    """Eager small batches (an evaluation, the one-env ROS bridge) step faster in rows: twice fewer small ops."""
    assert sim.make("cable_load", num_envs=2).layout == "rows"
    assert sim.make("cable_load", num_envs=COMPONENTS_MIN_ENVS - 1).layout == "rows"
    assert sim.make("cable_load", num_envs=COMPONENTS_MIN_ENVS).layout == "components"
    assert soa.choose_layout(2, compiled=True) == "components"
    # Compiled, a components loop vectorises over envs; a rows loop keeps inductor's defaults (3.4x slower otherwise).
    assert make("components", 0).loop_compile_options() == VECTORISED_LOOP
    assert sim.make("cable_load", num_envs=2).loop_compile_options() == {}
