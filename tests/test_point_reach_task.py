"""point_reach: the tiny task the training tests learn. Behaviour of its dynamics, resets and baseline."""

from __future__ import annotations

import torch

import sim
from sim.tasks.point_reach import evaluation_overrides, pd_actions

GROUP = "agents"


def make(num_envs: int = 8, seed: int = 0, **overrides):
    return sim.make("point_reach", num_envs=num_envs, device="cpu", seed=seed, **overrides)


def test_spec_names_the_observation_layout() -> None:
    env = make(num_agents=4, dim=3)
    g = env.spec.groups[GROUP]
    assert g.n_agents == 4 and g.action_dim == 3
    assert list(g.observations["policy"].slices()) == ["goal_rel", "vel"]
    obs = env.reset()
    assert obs[GROUP]["policy"].shape == (8, 4, 6)
    assert obs[GROUP]["state"].shape == (8, 4, 2 * 4 * 3 + 1 + 4)


def test_pd_baseline_reaches_the_goals() -> None:
    env = make(64, **evaluation_overrides())
    obs = env.reset(seed=1)
    start = env.distances().mean()
    for _ in range(env.max_episode_steps - 1):
        obs, *_ = env.step({GROUP: pd_actions(obs[GROUP]["policy"], env.spec.groups[GROUP])})
    assert start > 0.5 and env.distances().mean() < 0.05


def test_same_seed_same_episodes_and_time_limit_truncates() -> None:
    a, b = make(seed=3), make(seed=3)
    oa, ob = a.reset(), b.reset()
    gen = torch.Generator().manual_seed(0)
    for _ in range(a.max_episode_steps):
        act = {GROUP: torch.rand(8, 3, 2, generator=gen) * 2 - 1}
        oa, ra, term_a, trunc_a, info = a.step(act)
        ob, rb, _, _, _ = b.step(act)
        torch.testing.assert_close(oa[GROUP]["policy"], ob[GROUP]["policy"])
        torch.testing.assert_close(ra[GROUP], rb[GROUP])
    assert bool(trunc_a.any()) and "metrics/final_dist_m" in info["episode"]
    # final_obs holds the pre-reset observation; obs is the new episode's.
    assert not torch.equal(info["final_obs"][GROUP]["policy"], oa[GROUP]["policy"])


def test_leaving_the_arena_terminates_with_its_reason() -> None:
    env = make(4, bounds=1.2, drag=0.0)
    env.reset()
    push = {GROUP: torch.ones(4, 3, 2)}
    for _ in range(30):
        _, reward, terminated, _, info = env.step(push)
        if terminated.any():
            break
    assert terminated.any() and info["termination_reasons"]["out_of_bounds"].equal(terminated)
    assert (reward[GROUP][terminated] < -5).all()  # the out_of_bounds term (-10) was paid
