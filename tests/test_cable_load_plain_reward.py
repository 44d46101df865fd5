"""cable_load's reward profiles (RewardCfg.profile): under ``plain`` living is never worse than dying, on the torch
code and the C pass alike; ``residual`` (the default, the shipped policy's) is the paper's weighted sum, unchanged.

The property, per MAV and step: ``r_t = s_t + c * terminated_t`` with ``s_t >= 0`` (tracking, alive and the bounded
penalties) and ``c = rewards.termination <= 0``. Then ending the episode now returns ``s_t + c <= s_t``, while
flying on returns ``s_t`` plus later steps that are each >= 0: at least as much, whatever the policy does later
(discounted or not). The test checks ``s_t >= 0`` on every step of seeded rollouts, and for every termination the
brief's form of it: the terminal step's reward <= ``s_t`` plus the worst step reward seen, for every remaining step.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import sim
from sim.core import native
from sim.tasks.cable_load.config import PENALTY_TERMS, PLAIN_REWARDS, RewardCfg

GROUP = "mavs"
PLAIN = {"rewards": {"profile": "plain"}, "action_prior_kp": 0.0, "action_prior_kd": 0.0, "action_prior_ki": 0.0}
KERNELS = [
    "torch",
    pytest.param("native", marks=pytest.mark.skipif(not native.normal_available(), reason="no C compiler here")),
]


def _rollout(env, actions: str, steps: int, seed: int = 0) -> tuple[list, list, list]:
    """Per step: the reward ``[E, N]``, the terminated flags ``[E]`` and the step index after it ``[E]``."""
    gen = torch.Generator().manual_seed(seed)
    env.reset()
    rewards, ends, at = [], [], []
    for _ in range(steps):
        act = env.sample_actions(gen) if actions == "random" else {GROUP: torch.zeros(env.num_envs, env.n, 5)}
        step_before = env.episode_step.clone() + 1
        _, reward, terminated, _, info = env.step(act)
        assert not info["nonfinite_reset"].any()
        rewards.append(reward[GROUP].clone())
        ends.append(terminated.clone())
        at.append(step_before)
    return rewards, ends, at


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("actions", ["random", "zero"])
def test_under_the_plain_profile_living_is_never_worse_than_dying(kernels: str, actions: str) -> None:
    env = sim.make("cable_load", num_envs=64, seed=5, kernels=kernels, **PLAIN)
    assert env.kernels == kernels
    rc = env.cfg.rewards
    assert rc.termination <= 0
    rewards, ends, at = _rollout(env, actions, steps=250)
    # s_t: the step's reward without the termination term (the same for every MAV of the env)
    shaped = [r - rc.termination * e.float().unsqueeze(-1) for r, e in zip(rewards, ends, strict=True)]
    worst = min(float(s.min()) for s in shaped)
    assert worst >= 0.0, f"a step scored {worst} before its termination term: ending the episode early would pay"
    terminations = 0
    for r, s, e, t in zip(rewards, shaped, ends, at, strict=True):
        if not e.any():
            continue
        terminations += int(e.sum())
        remaining = (env.max_episode_steps - t[e]).float().unsqueeze(-1)  # steps this episode still had
        die_now = r[e]
        fly_on = s[e] + worst * remaining
        assert (die_now <= fly_on).all(), (die_now - fly_on).max()
    if actions == "random":
        assert terminations > 0, "random actions ended no episode: the test saw no death to compare"


def test_the_residual_profile_lets_dying_pay_where_the_plain_one_does_not() -> None:
    """The defect the plain profile fixes, on the same random rollout without an action prior: the residual reward
    has steps below 0 (so a short episode can beat a long fall); the plain one none."""
    no_prior = {k: v for k, v in PLAIN.items() if k != "rewards"}
    lows = {}
    for profile in ("residual", "plain"):
        env = sim.make("cable_load", num_envs=32, seed=5, kernels="torch", rewards={"profile": profile}, **no_prior)
        rewards, ends, _ = _rollout(env, "random", steps=150)
        rc = env.cfg.rewards
        shaped = (r - rc.termination * e.float().unsqueeze(-1) for r, e in zip(rewards, ends, strict=True))
        lows[profile] = min(float(s.min()) for s in shaped)
    assert lows["residual"] < 0 <= lows["plain"], lows


def _residual_reference(env, terminated: torch.Tensor) -> torch.Tensor:
    """The residual reward ``[E, N]`` as the paper's weighted sum of raw terms, from the env's state now."""
    rc = env.cfg.rewards
    pos_err, ori_err = env.errors()
    raw = [
        torch.exp(-pos_err / rc.position_sigma).unsqueeze(-1).expand(-1, env.n),
        torch.exp(-ori_err / rc.orientation_sigma).unsqueeze(-1).expand(-1, env.n),
        (env.last_action - env.prev_action).square().sum(-1),
        env.drones.ang_vel.square().sum(-1),
        ((env.cable_tension - env.hover_tension) / env.hover_tension).square(),
        (env._offsets_in_load_frame() - env.formation_offset).square().sum(-1),
    ]
    names = ("position", "orientation", *PENALTY_TERMS)
    weighted = [getattr(rc, name) * val for name, val in zip(names, raw, strict=True)]
    end = (rc.termination * terminated.float()).unsqueeze(-1).expand(-1, env.n)
    return torch.stack([*weighted, end]).sum(0)


def test_the_residual_profile_is_the_default_and_unchanged() -> None:
    """The default env's rewards, step by step on a seeded rollout: bit for bit those of ``profile=residual``
    given explicitly and of the weighted sum of the paper's terms; no alive term, no bound."""
    assert RewardCfg() == RewardCfg(profile="residual")
    assert RewardCfg().alive == 0 and RewardCfg().penalty_bound == 0
    envs = [
        sim.make("cable_load", num_envs=16, seed=2, kernels="torch"),
        sim.make("cable_load", num_envs=16, seed=2, kernels="torch", rewards={"profile": "residual"}),
    ]
    gens = [torch.Generator().manual_seed(1) for _ in envs]
    for env in envs:
        env.reset()
    for _ in range(60):
        outs = []
        for env, gen in zip(envs, gens, strict=True):
            act = {GROUP: 0.3 * env.sample_actions(gen)[GROUP]}  # on the action prior: no episode ends
            _, reward, terminated, truncated, info = env.step(act)
            assert not (terminated | truncated).any()
            assert torch.equal(reward[GROUP], _residual_reference(env, terminated))
            assert "alive" not in info["reward_terms"] and "penalty_bound" not in info["reward_terms"]
            outs.append(reward[GROUP])
        assert torch.equal(outs[0], outs[1])


@pytest.mark.skipif(not native.normal_available(), reason="no C compiler here")
def test_the_c_pass_computes_the_plain_reward_as_the_torch_code() -> None:
    """Same seed, same random actions: the C pass's plain rewards and terms match the torch code's (float32
    round-off; the chaotic loop drifts slowly, so a short rollout)."""
    envs = [sim.make("cable_load", num_envs=45, seed=3, kernels=k, **PLAIN) for k in ("torch", "native")]
    gens = [torch.Generator().manual_seed(0) for _ in envs]
    for env in envs:
        env.reset()
    bounded = 0.0
    for _ in range(40):
        (_, r_t, e_t, _, i_t), (_, r_n, e_n, _, i_n) = (
            env.step(env.sample_actions(gen)) for env, gen in zip(envs, gens, strict=True)
        )
        torch.testing.assert_close(r_n[GROUP], r_t[GROUP], atol=2e-4, rtol=1e-4)
        assert torch.equal(e_n, e_t)
        assert list(i_n["reward_terms"]) == list(i_t["reward_terms"])
        assert {"alive", "penalty_bound"} <= set(i_t["reward_terms"])
        for r, i in ((r_t, i_t), (r_n, i_n)):  # the terms still add up to the reward (penalty_bound: the bound's share)
            total = torch.stack(list(i["reward_terms"].values())).sum(0)
            torch.testing.assert_close(r[GROUP].mean(-1), total, atol=1e-4, rtol=1e-5)
        for name, val in i_t["reward_terms"].items():
            torch.testing.assert_close(i_n["reward_terms"][name], val, atol=2e-4, rtol=1e-4)
        bounded = max(bounded, float(i_t["reward_terms"]["penalty_bound"].max()))  # >= 0: what it took off
    # the bound acted (random actions' smoothness penalty alone exceeds it): the C path is tested where it matters
    assert bounded > 0.0


def test_the_plain_preset_fills_the_defaults_and_yields_to_explicit_fields() -> None:
    plain = RewardCfg(profile="plain")
    for name, value in PLAIN_REWARDS.items():
        assert getattr(plain, name) == value
    given = dataclasses.replace(RewardCfg(), profile="plain", position_sigma=0.5)
    assert given.position_sigma == 0.5 and given.orientation_sigma == PLAIN_REWARDS["orientation_sigma"]
    with pytest.raises(ValueError, match="alive"):
        RewardCfg(profile="plain", alive=0.5)  # a bound above the alive term: a step could score below 0
    with pytest.raises(ValueError, match="profile"):
        RewardCfg(profile="sparse")
