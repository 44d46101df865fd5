"""Behavioural tests of the cable_load task: team sizes, randomisation, latency, faults, rewards, terminations."""

from __future__ import annotations

import math

import pytest
import torch

import sim
from sim.physics.quaternion import quat_from_axis_angle, quat_from_euler, quat_mul, quat_rotate
from sim.tasks.cable_load import evaluation_overrides

GROUP = "mavs"
EVAL = evaluation_overrides()  # randomisation and observation noise off
REASONS = ("crash", "load_ground", "drone_proximity", "cable_proximity", "out_of_bounds")


def rewards(env):
    """``env._rewards`` on the current state, with the terminations it is given inside ``step``."""
    return env._rewards(env._terminations()[0])


def make(num_envs: int = 2, seed: int = 0, **overrides):
    return sim.make("cable_load", num_envs=num_envs, device="cpu", seed=seed, **overrides)


# ===================================================================== team sizes
@pytest.mark.parametrize("num_mavs", [2, 3, 4, 5, 6])
def test_every_team_size_holds_hover_with_zero_actions(num_mavs):
    env = make(2, num_mavs=num_mavs, **EVAL)
    obs = env.reset(0)
    g = env.spec.groups[GROUP]
    assert g.n_agents == num_mavs
    assert obs[GROUP]["policy"].shape == (2, num_mavs, g.observations["policy"].shape[0])
    assert obs[GROUP]["state"].shape == (2, num_mavs, g.observations["state"].shape[0])
    # Nothing is terminal in the start state (e.g. MAVs too close for large teams).
    terminated, reasons = env._terminations()
    assert not terminated.any(), {k: v.tolist() for k, v in reasons.items() if v.any()}
    load0, drones0 = env.load.pos.clone(), env.drones.pos.clone()
    for _ in range(50):
        obs, reward, terminated, truncated, _ = env.step(env.zero_actions())
        assert not terminated.any() and not truncated.any()
        assert torch.isfinite(reward[GROUP]).all()
    assert (env.load.pos - load0).norm(dim=-1).max() < 0.03
    assert (env.drones.pos - drones0).norm(dim=-1).max() < 0.05
    # The cables stay near the hover tension (every MAV carries its share of the load).
    share = env.load_mass * 9.81 / (num_mavs * math.cos(math.radians(env.cfg.cable_angle_deg)))
    assert torch.allclose(env.cable_tension, share.unsqueeze(-1).expand_as(env.cable_tension), rtol=0.05)


# ===================================================================== randomisation
def test_randomisation_on_varies_parameters_within_ranges():
    env = make(64, obs_noise={"enabled": False})
    rnd = env.cfg.randomization
    assert rnd.enabled
    mass = env.load_mass
    assert mass.min() >= rnd.load_mass[0] and mass.max() <= rnd.load_mass[1]
    assert mass.std() > 0.05
    rel_len = env.cable_length / env.cfg.cable_length
    assert rel_len.min() >= rnd.cable_length_scale[0] - 1e-6 and rel_len.max() <= rnd.cable_length_scale[1] + 1e-6
    assert rel_len.std(0).min() > 0.01, "cable length varies across envs"
    assert rel_len.std(1).min() > 0.0, "cable length varies across the MAVs of a team"
    assert env.thrust_scale.std() > 0.01 and env.tau_scale.std() > 0.01
    lo, hi = rnd.action_delay_steps
    assert set(env.delay.delay.unique().tolist()) == set(range(lo, hi + 1))
    # Every episode draws fresh parameters.
    old_mass = mass.clone()
    env.reset()
    assert not torch.equal(env.load_mass, old_mass)
    # The start is still a hover: load level, everything at rest, no termination.
    assert not env._terminations()[0].any()


def test_randomisation_off_uses_nominal_values():
    env = make(16, **EVAL)
    env.step(env.zero_actions())
    env.reset()
    assert torch.equal(env.load_mass, torch.full((16,), env.cfg.load_mass))
    assert torch.equal(env.cable_length, torch.full((16, env.n), env.cfg.cable_length))
    assert torch.equal(env.thrust_scale, torch.ones_like(env.thrust_scale))
    assert torch.equal(env.tau_scale, torch.ones_like(env.tau_scale))
    assert torch.equal(env.delay.delay, torch.zeros(16, dtype=torch.long))


def test_pinned_range_pins_the_parameter():
    env = make(8, **{"randomization.load_mass": (1.1, 1.1), "randomization.cable_length_scale": (1.0, 1.0)})
    assert torch.allclose(env.load_mass, torch.full((8,), 1.1))
    assert torch.allclose(env.cable_length, torch.full((8, env.n), env.cfg.cable_length))


@pytest.mark.parametrize("delay", [0, 2])
def test_action_delay_buffer_lags_the_command(delay):
    env = make(3, obs_noise={"enabled": False}, randomization={"action_delay_steps": (delay, delay)})
    assert torch.equal(env.delay.delay, torch.full((3,), delay))
    scale = torch.tensor(env.spec.groups[GROUP].action_scale)
    gen = torch.Generator().manual_seed(0)
    sent = []
    for step in range(6):
        act = (torch.rand(3, env.n, 5, generator=gen) * 2 - 1) * 0.3
        sent.append(act)
        env.step({GROUP: act})
        expected = sent[step - delay] * scale if step >= delay else torch.zeros_like(act)
        assert torch.allclose(env.cmd, expected), step
        # The policy observes its own latest action, not the delayed one.
        assert torch.equal(env.last_action, act)


def test_delay_buffer_is_cleared_on_reset():
    env = make(2, obs_noise={"enabled": False}, randomization={"action_delay_steps": (2, 2)})
    ones = torch.ones(2, env.n, 5) * 0.5
    env.step({GROUP: ones})
    env.step({GROUP: ones})
    env._reset_all_idx(torch.tensor([0]))
    env.step({GROUP: torch.zeros(2, env.n, 5)})
    scale = torch.tensor(env.spec.groups[GROUP].action_scale)
    assert torch.equal(env.cmd[0], torch.zeros_like(env.cmd[0])), "a fresh episode must not replay old actions"
    assert torch.allclose(env.cmd[1], 0.5 * scale.expand_as(env.cmd[1]))


# ===================================================================== faults
def test_fault_stops_one_mav_and_the_others_keep_spinning():
    fault = {"enabled": True, "probability": 1.0, "time_range": (0.1, 0.1)}
    env = make(4, fault=fault, **EVAL)
    assert torch.allclose(env.fault_time, torch.full((4,), 0.1))
    hover = env.rotor_speed.clone()
    rows = torch.arange(4)
    for _ in range(9):  # 0.09 s: before the fault everybody hovers
        env.step(env.zero_actions())
    assert torch.allclose(env.rotor_speed, hover, rtol=0.05)
    for _ in range(11):  # to 0.2 s
        _, _, terminated, _, _ = env.step(env.zero_actions())
        assert not terminated.any()
    failed = env.rotor_speed[rows, env.fault_agent]  # [4, R]
    assert (failed < 0.1 * hover[rows, env.fault_agent]).all(), failed
    alive = torch.ones(4, env.n, dtype=torch.bool)
    alive[rows, env.fault_agent] = False
    assert (env.rotor_speed[alive] > 0.7 * hover[alive]).all()
    assert env.fault_agent.unique().numel() > 1, "the failing MAV is drawn per episode"


def test_no_fault_when_disabled_or_probability_zero():
    for fault in ({"enabled": False, "time_range": (0.01, 0.01)}, {"enabled": True, "probability": 0.0}):
        env = make(3, fault=fault, **EVAL)
        assert torch.isinf(env.fault_time).all()


# ===================================================================== rewards
TERMS = {"position", "orientation", "action_smoothness", "body_rate", "cable_force", "formation", "termination"}


def test_reward_terms_are_named_and_sum_to_the_reward():
    env = make(3, **EVAL)
    env.reset(0)
    act = torch.full((3, env.n, 5), 0.2)
    _, reward, _, _, info = env.step({GROUP: act})
    terms = info["reward_terms"]
    assert set(terms) == TERMS
    for val in terms.values():
        assert val.shape == (3,)
    total = torch.stack(list(terms.values())).sum(0)
    assert torch.allclose(reward[GROUP].mean(-1), total, atol=1e-5)
    # First step from rest: the action jumped from 0 to 0.2 on 5 channels.
    rc = env.cfg.rewards
    assert torch.allclose(terms["action_smoothness"], torch.full((3,), rc.action_smoothness * 5 * 0.04), rtol=1e-5)
    assert torch.equal(terms["termination"], torch.zeros(3))


def test_formation_term_is_zero_in_hover_and_penalises_a_displaced_mav():
    env = make(2, **EVAL)
    env.reset(0)
    _, terms = rewards(env)
    assert torch.allclose(terms["formation"], torch.zeros(2), atol=1e-9)
    # Rotating the whole team with the load about the load's centre keeps the formation.
    yaw = torch.tensor(0.7)
    rot = quat_from_euler(torch.zeros(()), torch.zeros(()), yaw)
    centre = env.load.pos.unsqueeze(1)
    env.drones.pos = centre + quat_rotate(rot, env.drones.pos - centre)
    env.load.quat = quat_mul(rot.expand(2, 4), env.load.quat)
    _, terms = rewards(env)
    assert torch.allclose(terms["formation"], torch.zeros(2), atol=1e-6)
    # Moving one MAV 0.3 m toward the load costs scale * 0.09 (averaged over the 3 MAVs).
    inward = -(env.drones.pos[0, 0] - env.load.pos[0])
    env.drones.pos[0, 0] += 0.3 * inward / inward.norm()
    _, terms = rewards(env)
    assert torch.allclose(terms["formation"][0], torch.tensor(env.cfg.rewards.formation * 0.09 / 3), rtol=1e-3)
    assert terms["formation"][1].abs() < 1e-6


@pytest.mark.parametrize("scales", [{}, {"position": 2.0, "orientation": 0.7}])
def test_tracking_terms_peak_when_the_load_is_at_the_goal(scales):
    env = make(3, rewards=scales, **EVAL)
    env.reset(0)
    rc = env.cfg.rewards
    _, far = rewards(env)
    env.goal_pos = env.load.pos.clone()
    env.goal_quat = env.load.quat.clone()
    _, at_goal = rewards(env)
    assert torch.allclose(at_goal["position"], torch.full((3,), rc.position))
    assert torch.allclose(at_goal["orientation"], torch.full((3,), rc.orientation), rtol=1e-3)
    assert (far["position"] < 0.9 * rc.position).all()
    # The orientation term falls off with the angle to the goal.
    env.goal_quat = quat_from_euler(torch.zeros(3), torch.zeros(3), torch.tensor([0.1, 0.5, 1.5]))
    _, turned = rewards(env)
    expected = rc.orientation * torch.exp(-torch.tensor([0.1, 0.5, 1.5]) / rc.orientation_sigma)
    assert torch.allclose(turned["orientation"], expected, rtol=1e-3)


def test_hover_at_start_costs_nothing():
    env = make(2, **EVAL)
    env.reset(0)
    _, terms = rewards(env)
    for name in ("action_smoothness", "body_rate", "cable_force", "termination"):
        assert torch.allclose(terms[name], torch.zeros(2), atol=1e-6), name


def test_termination_penalty_on_terminal_step():
    env = make(2, start_height=1.0, **EVAL)  # load at 1 m: the MAV put at 2 cm stays low for the step
    env.reset(0)
    env.drones.pos[1, 0, 2] = 0.02
    _, _, terminated, _, info = env.step(env.zero_actions())
    assert terminated.tolist() == [False, True]
    rc = env.cfg.rewards
    assert torch.allclose(info["reward_terms"]["termination"], torch.tensor([0.0, rc.termination]))
    assert float(info["episode"]["termination/crash"]) == 1.0


# ===================================================================== terminations
def _crash_low(env):
    env.drones.pos[0, 0, 2] = 0.05


def _crash_tilt(env):
    env.drones.quat[0, 1] = quat_from_axis_angle(torch.tensor([1.0, 0.0, 0.0]), torch.tensor(math.radians(85.0)))


def _crash_nan(env):
    env.load.pos[0, 0] = math.nan


def _load_ground(env):
    env.load.pos[0, 2] = env.cfg.load_size[2] / 2  # resting on the ground


def _drone_proximity(env):
    env.drones.pos[0, 1] = env.drones.pos[0, 0] + torch.tensor([0.0, 0.2, 0.0])


def _cable_proximity(env):
    top = env.drones.pos[0, 0] + env.model.cable_attach
    bottom = env.load.pos[0] + env.attach[0]
    env.drones.pos[0, 1] = bottom + 0.5 * (top - bottom)  # MAV 1 sits on the middle of MAV 0's cable


def _out_of_bounds(env):
    shift = torch.tensor([env.cfg.terminations.bounds_xy + 0.5, 0.0, 0.0])
    env.drones.pos[0] += shift
    env.load.pos[0] += shift


def _out_of_bounds_z(env):
    shift = torch.tensor([0.0, 0.0, env.cfg.terminations.bounds_z + 0.5])
    env.drones.pos[0] += shift
    env.load.pos[0] += shift


@pytest.mark.parametrize(
    "build, reason",
    [
        (_crash_low, "crash"),
        (_crash_tilt, "crash"),
        (_crash_nan, "crash"),
        (_load_ground, "load_ground"),
        (_drone_proximity, "drone_proximity"),
        (_cable_proximity, "cable_proximity"),
        (_out_of_bounds, "out_of_bounds"),
        (_out_of_bounds_z, "out_of_bounds"),
    ],
)
def test_each_termination_reason_is_flagged_alone(build, reason):
    env = make(2, **EVAL)
    env.reset(0)
    terminated, reasons = env._terminations()
    assert not terminated.any()
    assert set(reasons) == set(REASONS)
    build(env)
    terminated, reasons = env._terminations()
    assert terminated.tolist() == [True, False]
    flagged = {name for name, flag in reasons.items() if flag[0]}
    assert flagged == {reason}
    assert not any(flag[1] for flag in reasons.values())


def test_thresholds_come_from_the_config():
    """Moving a threshold across the current state flips the flag (the check reads the config)."""
    env = make(1, terminations={"drone_min_distance": 2.0}, **EVAL)
    assert env._terminations()[1]["drone_proximity"].all()
    env = make(1, terminations={"bounds_z": 0.5}, **EVAL)  # MAVs start ~0.97 m above the load
    assert env._terminations()[1]["out_of_bounds"].all()


# ===================================================================== goal slot and action prior
def _newest(env, term: str) -> torch.Tensor:
    """Entry ``term`` of the newest policy-observation frame, ``[E, N, size]``."""
    entry = env.spec.groups[GROUP].observations["policy"]
    frame = env._observations()[GROUP]["policy"][..., -entry.frame_size :]
    return frame[..., entry.slices()[term]]


def test_goal_slot_is_zero_when_the_goal_is_the_nominal_start_pose():
    env = make(3, **EVAL)
    env.reset(0)
    env.goal_pos = env.load.pos.clone()
    env.goal_quat = env.load.quat.clone()
    env._update_observation_buffers()
    assert torch.allclose(_newest(env, "own_slot_rel"), torch.zeros(3, 3, 3), atol=1e-5)


@pytest.mark.parametrize("lead_deg", [30.0, 180.0])
def test_goal_slot_turns_the_formation_with_the_goal_yaw_up_to_the_lead(lead_deg):
    env = make(1, slot_yaw_lead_deg=lead_deg, **EVAL)
    env.reset(0)
    env.goal_pos = env.load.pos.clone()
    env.goal_quat = quat_from_euler(torch.zeros(1), torch.zeros(1), torch.tensor([2 * math.pi / 3]))
    env._update_observation_buffers()
    slot = env.drones.pos + _newest(env, "own_slot_rel")
    if lead_deg >= 120.0:  # turning a 3-MAV formation by 120 deg puts each MAV in its neighbour's place
        assert torch.allclose(slot[0], env.drones.pos[0].roll(-1, dims=0), atol=1e-4)
    else:  # the slot leads the load's heading by the lead only
        turn = quat_from_euler(torch.zeros(1), torch.zeros(1), torch.tensor([math.radians(lead_deg)]))
        expected = env.load.pos + quat_rotate(turn.expand(3, 4), env.drones.pos[0] - env.load.pos)
        assert torch.allclose(slot[0], expected, atol=1e-4)


@pytest.mark.parametrize("kp,kd", [(0.0, 0.0), (2.0, 1.5)])
def test_action_prior_is_a_pd_to_the_goal_slot(kp, kd):
    env = make(4, action_prior_kp=kp, action_prior_kd=kd, action_prior_ki=0.0, **EVAL)
    env.reset(0)
    env.drones.vel[:] = torch.randn(4, 3, 3, generator=torch.Generator().manual_seed(0))
    env._update_observation_buffers()
    obs = env._observations()
    prior = env.spec.groups[GROUP].action_prior_matrix()
    action = obs[GROUP]["policy"] @ prior
    scale = env.cfg.action_acc_scale
    expected = (kp * _newest(env, "own_slot_rel") - kd * env.drones.vel) / scale
    assert torch.allclose(action[..., :3], expected, atol=1e-5)
    assert torch.equal(action[..., 3:], torch.zeros(4, 3, 2))


def test_a_reset_frame_of_a_few_envs_equals_those_envs_of_the_whole_batch():
    """The auto-reset builds the first observation frame of its envs alone (not the whole batch's then indexed):
    it must be the same frame."""
    env = sim.make("cable_load", num_envs=32, seed=4)
    env.reset()
    gen = torch.Generator().manual_seed(0)
    for _ in range(5):
        env.step(env.sample_actions(gen))
    ids = torch.tensor([3, 17, 30])
    torch.testing.assert_close(env._frame(ids), env._frame()[ids], rtol=0, atol=1e-6)
    torch.testing.assert_close(env._goal_slot(ids), env._goal_slot()[ids], rtol=0, atol=1e-6)


def test_observation_noise_has_each_entrys_std_and_spares_the_exact_ones():
    """The newest frame minus the noise-free frame, after a reset and after a step: zero-mean noise with each
    entry's configured std (position, rotation, velocity, angular velocity), independent across entries, and
    none on the entries the MAV knows exactly (its attachment point, its integral, its last action)."""
    env = make(2048, seed=0)
    std = env._frame_noise_std
    exact = std == 0
    assert int(exact.sum()) == 3 + 3 + 5 and float(std.max()) > 0
    for when in ("reset", "step"):
        if when == "step":
            env.step(env.zero_actions())
        noise = (env.history[:, :, -1] - env._frame()).reshape(-1, std.numel())  # [E * N, frame]
        assert (noise[:, exact] == 0).all(), when
        noisy = noise[:, ~exact] / std[~exact]  # standard normal if right
        assert noisy.mean(0).abs().max() < 0.06, when  # ~4 standard errors of a mean of 6144 samples
        torch.testing.assert_close(noisy.std(0), torch.ones(int((~exact).sum())), rtol=0, atol=0.05, msg=when)
        corr = torch.corrcoef(noisy.T) - torch.eye(noisy.shape[1])
        assert corr.abs().max() < 0.07, when
