"""drone_volleyball env: hover, ball-paddle and ball-net contacts through the rules, team symmetry, game mode."""

from __future__ import annotations

import math

import pytest
import torch

import sim
from sim.tasks.drone_volleyball import rules as R


def test_hover_thrust_holds_altitude() -> None:
    env = sim.make("drone_volleyball", num_envs=4, seed=0, mode="goto")
    env.reset()
    z0 = env.drones.pos[..., 2].clone()
    for _ in range(100):  # 2 s
        env.step(env.hover_actions())
    assert (env.drones.pos[..., 2] - z0).abs().max() < 0.05


def test_serve_toss_bounces_off_the_paddle_with_the_restitution() -> None:
    env = sim.make("drone_volleyball", num_envs=2, seed=0, mode="serve")
    env.reset()
    drop = float(env.ball_pos[0, 2] - env.drones.pos[0, 0, 2] - env.cfg.paddle_offset - env.cfg.ball.radius)
    v_impact = math.sqrt(2 * 9.81 * drop)
    vz_max, hit_step = -1.0, None
    for t in range(30):
        _, _, term, _, _ = env.step(env.hover_actions())
        if env.touched[0, 0] and hit_step is None:
            hit_step = t
            vz_max = float(env.ball_vel[0, 2])
        if term[0]:
            break
    assert hit_step is not None, "the dropped ball never touched the paddle"
    # Rebound ~ e * impact speed (small drag and the hovering paddle's tiny speed aside).
    assert vz_max == pytest.approx(env.cfg.ball.restitution_drone * v_impact, rel=0.1)
    assert env.rules.served[0]  # the server's touch is the serve


def test_ball_into_the_net_is_a_net_fault_and_the_point_goes_to_the_other_team() -> None:
    env = sim.make("drone_volleyball", num_envs=1, seed=0, mode="1v1")
    env.reset()
    # Team A's server has served (touched): then the ball flies low into the net.
    env.rules.served = torch.tensor([True])
    env.rules.last_team = torch.tensor([0])
    env.rules.last_toucher = torch.tensor([0])
    env.rules.touches = torch.tensor([1])
    env.ball_pos = torch.tensor([[-1.0, 0.0, 1.2]])
    env.ball_vel = torch.tensor([[6.0, 0.0, 0.0]])
    for _ in range(20):
        _, rew, term, _, info = env.step(env.hover_actions())
        if term[0]:
            break
    assert term[0]
    assert info["episode"]["events/net"] == 1.0 and info["episode"]["events/points_b"] == 1.0
    assert rew["team_b"][0, 0] > 0 > rew["team_a"][0, 0]


def test_mirrored_scene_gives_both_teams_the_same_observation() -> None:
    env = sim.make("drone_volleyball", num_envs=1, seed=0, mode="1v1")
    env.reset()
    # A symmetric scene: drone B at the mirror image of drone A (rotated 180 deg about z), ball on the net line.
    pa = torch.tensor([-3.0, 1.0, 2.2])
    env.drones.pos[0, 0] = pa
    env.drones.pos[0, 1] = pa * torch.tensor([-1.0, -1.0, 1.0])
    env.drones.vel[0, 0] = torch.tensor([0.5, -0.2, 0.1])
    env.drones.vel[0, 1] = torch.tensor([-0.5, 0.2, 0.1])
    env.ball_pos = torch.tensor([[0.0, 0.0, 4.0]])
    env.ball_vel = torch.tensor([[0.0, 0.0, 1.0]])
    env.skill_target = torch.stack((pa, pa * torch.tensor([-1.0, -1.0, 1.0]))).unsqueeze(0)
    obs = env._observations()
    a, b = obs["team_a"]["skill"][0, 0], obs["team_b"]["skill"][0, 0]
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    assert obs["team_a"]["skill"][0, 0, 0] < 0  # own position in the own half (x < 0) for both


def test_game_mode_starts_a_new_rally_after_a_point() -> None:
    env = sim.make("drone_volleyball", num_envs=1, seed=0, mode="1v1", rules={"points_to_win": 3})
    env.reset()
    for point in range(1, 3):
        # Hovering servers: the tossed ball bounces twice on the server's paddle (a double touch), so the
        # serving team loses each rally; the game goes on with the winner serving from its own half.
        before = env.rules.score[0].clone()
        for _ in range(200):
            _, _, term, _, _ = env.step(env.hover_actions())
            if int(env.rules.score[0].sum()) == point:
                break
        assert not term[0]
        winner = int((env.rules.score[0] - before).argmax())
        assert int(env.rules.score[0].sum()) == point
        assert int(env.rules.serving_team[0]) == winner
        server = int(env.rules.server[0])
        assert server // env.n == winner
        # The ball waits above the new server, in the winner's half.
        assert (float(env.ball_pos[0, 0]) > 0) == (winner == 1)
        assert float((env.ball_pos[0, :2] - env.drones.pos[0, server, :2]).norm()) < 1e-4
        assert env.rules.in_rally[0]


def test_modes_have_the_documented_groups_and_shapes() -> None:
    for mode, groups, n in (("pass", ("team_a",), 1), ("2v2", ("team_a", "team_b"), 2)):
        env = sim.make("drone_volleyball", num_envs=3, seed=0, mode=mode)
        obs = env.reset()
        assert tuple(obs) == groups
        for g in groups:
            assert obs[g]["skill"].shape == (3, n, env.spec.groups[g].observations["skill"].shape[0])
            assert obs[g]["policy"].shape[-1] == env.spec.groups[g].observations["policy"].shape[0]
    with pytest.raises(ValueError, match="mode must be one of"):
        sim.make("drone_volleyball", num_envs=1, mode="4v4")
    # A switch the task does not implement is refused, not ignored (it was declared and never applied).
    with pytest.raises(ValueError, match="adds no observation noise"):
        sim.make("drone_volleyball", num_envs=1, obs_noise={"enabled": True})


def test_outcome_names_cover_the_counters() -> None:
    env = sim.make("drone_volleyball", num_envs=2, seed=0, mode="3v3")
    env.reset()
    counters = env.rules.pop_counters(torch.arange(2))
    assert set(counters) == set(R.COUNTER_NAMES)


def test_the_opening_server_is_any_drone_of_the_serving_team_when_asked() -> None:
    """Issue 21: games rotate the serve through every drone, but one-rally training with the first drone
    always serving never showed the others serving; ``opening_server=random`` draws the opening server."""
    servers = {}
    for choice in ("first", "random"):
        env = sim.make("drone_volleyball", num_envs=256, mode="3v3", seed=0, opening_server=choice)
        env.reset(seed=0)
        ru = env.rules
        assert bool((ru.server // 3 == ru.serving_team).all())
        # The ball waits above the server's paddle.
        server_pos = env.drones.pos[torch.arange(256), ru.server]
        assert torch.allclose(env.ball_pos[:, :2], server_pos[:, :2], atol=1e-5)
        servers[choice] = set((ru.server % 3).tolist())
    assert servers == {"first": {0}, "random": {0, 1, 2}}
    with pytest.raises(ValueError, match="opening_server"):
        sim.make("drone_volleyball", num_envs=2, mode="3v3", opening_server="last")


@pytest.mark.parametrize("mode, overrides", [("3v3", {}), ("3v3", {"rules.points_to_win": 2}), ("attack", {})])
def test_observations_of_the_reset_envs_only_equal_every_env_recomputed(mode, overrides) -> None:
    """After an auto-reset the env recomputes only the reset envs' observations: the step's observations and
    final observations must be those of a twin that recomputes every env, bit for bit, through many resets."""
    subset, every = (sim.make("drone_volleyball", num_envs=48, seed=5, mode=mode, **overrides) for _ in range(2))
    assert subset._observe_some is not None
    every._observe_some = None  # the fallback: every env's observations after the reset
    for env in (subset, every):
        env.reset()
    gen = torch.Generator().manual_seed(1)
    resets = 0
    for _ in range(150):
        actions = subset.sample_actions(gen)
        (obs, _, term, trunc, info), (ref, _, _, _, ref_info) = subset.step(actions), every.step(actions)
        resets += int((term | trunc).sum())
        for group, entries in ref.items():
            for key, value in entries.items():
                assert torch.equal(obs[group][key], value), (group, key)
                assert torch.equal(info["final_obs"][group][key], ref_info["final_obs"][group][key]), (group, key)
    assert resets >= 10  # random actions crash drones: the subset path ran many times


@pytest.mark.slow
def test_compiled_subset_observations_match_a_full_recompute_without_recompiling() -> None:
    """Compiled, the reset envs' observations come from their own graph (dynamic in the number of envs): traced
    after the first step, it must serve every later count (1 included) without compiling again, and agree with
    every env's observations recomputed eagerly."""
    from torch._dynamo.utils import counters

    env = sim.make("drone_volleyball", num_envs=64, seed=2, compile=True)
    env.reset()
    gen = torch.Generator().manual_seed(0)
    env.step(env.sample_actions(gen))  # compiles the step's graphs and the subset's
    graphs, counts = counters["stats"]["unique_graphs"], set()
    for _ in range(120):
        obs, _, term, trunc, _ = env.step(env.sample_actions(gen))
        counts.add(int((term | trunc).sum()))
        for group, entries in env._observations().items():
            for key, value in entries.items():
                torch.testing.assert_close(obs[group][key], value, rtol=1e-5, atol=1e-5)
    assert {1, 2} <= counts or len(counts - {0}) >= 3  # several reset counts went through the subset graph
    assert counters["stats"]["unique_graphs"] == graphs  # nothing compiled after the first step
