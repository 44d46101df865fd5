"""drone_volleyball's C observations (sim/tasks/drone_volleyball/observations.c) against their torch reference
(DroneVolleyballEnv._skill_obs, VolleyballMatchEnv._policy_obs, _state): the same entries, in eager code and inside
compiled graphs, and ``sim.make``'s ``kernels`` (``sim.kernels``) choosing between them."""

from __future__ import annotations

import pytest
import torch

import sim
from sim.tasks.drone_volleyball import native
from sim.tasks.drone_volleyball.config import SKILLS

pytestmark = pytest.mark.skipif(native._lib() is None, reason="no C compiler to build observations.c")


def scrambled(mode: str, num_envs: int = 96, seed: int = 0):
    """A match after random flight, with every input of the observations set at random: attitudes (unit
    quaternions, team B's included), rates, ball, skill commands, touches and the whole rally state, so that each
    entry and each branch of the rally features takes several values."""
    env = sim.make("drone_volleyball", num_envs=num_envs, seed=seed, mode=mode)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(20):
        env.step(env.sample_actions(gen))
    E, D = env.num_envs, env.num_drones
    rnd = lambda *shape: torch.randn(*shape, generator=gen)  # noqa: E731
    ints = lambda lo, hi, *shape: torch.randint(lo, hi, shape, generator=gen)  # noqa: E731
    quat = rnd(E, D, 4)
    env.drones.quat = quat / quat.norm(dim=-1, keepdim=True)
    env.drones.pos, env.drones.vel, env.drones.ang_vel = rnd(E, D, 3) * 3, rnd(E, D, 3), rnd(E, D, 3)
    env.ball_pos, env.ball_vel, env.skill_target = rnd(E, 3) * 3, rnd(E, 3), rnd(E, D, 3) * 3
    env.skill_id = ints(0, len(SKILLS), E, D)
    env.touched = ints(0, 2, E, D).bool()
    env.last_action = rnd(E, D, 4).clamp(-1, 1)
    ru = env.rules
    ru.last_team, ru.touches, ru.last_toucher = ints(-1, 2, E), ints(0, 4, E), ints(-1, D, E)
    ru.serving_team, ru.server, ru.served = ints(0, 2, E), ints(0, D, E), ints(0, 2, E).bool()
    env.episode_step = ints(0, env.max_episode_steps, E)
    return env


def entries(env, ids=None, kernels: str = "native") -> tuple[torch.Tensor, ...]:
    env._native_observations = kernels == "native"
    return env._observation_entries(ids)


@pytest.mark.parametrize("mode", ["1v1", "2v2", "3v3"])
def test_c_observations_equal_the_torch_code(mode: str) -> None:
    """Every entry of every drone, for all envs and for a subset in any order (repeats included, as the auto-reset
    passes them): the torch code's operations in its order, so equal to float32 round-off (measured: 2 ulp at most,
    9.5e-7 of a ball 6.6 m above the paddle; most entries bit for bit)."""
    env = scrambled(mode)
    assert env.kernels == "native"
    ids = torch.tensor([7, 3, 90, 3, 0])
    for rows in (None, ids):
        got, ref = entries(env, rows, "native"), entries(env, rows, "torch")
        for name, a, b in zip(("skill", "policy", "state"), got, ref, strict=True):
            assert a.shape == b.shape, name
            torch.testing.assert_close(a, b, rtol=3e-7, atol=3e-7, msg=name)
    # The features that are flags hold every value in this state: the comparison above covered their branches.
    rally = ref[1][..., -5:]
    assert all(len(rally[..., i].unique()) >= 2 for i in range(5))


def test_a_step_returns_the_c_observations_and_the_torch_ones_without_them() -> None:
    """Stepped with random actions (auto-resets included), a native env's observations are the torch code's of its
    state, and ``kernels="torch"`` steps the same trajectory: the observations only change how they are made."""
    c_env = sim.make("drone_volleyball", num_envs=64, seed=3, mode="2v2")
    t_env = sim.make("drone_volleyball", num_envs=64, seed=3, mode="2v2", kernels="torch")
    assert (c_env.kernels, t_env.kernels) == ("native", "torch")
    gen = torch.Generator().manual_seed(1)
    resets = 0
    for _ in range(60):
        actions = c_env.sample_actions(gen)
        (obs, rew, term, trunc, _), (ref, ref_rew, ref_term, ref_trunc, _) = c_env.step(actions), t_env.step(actions)
        resets += int((term | trunc).sum())
        assert torch.equal(term, ref_term) and torch.equal(trunc, ref_trunc)
        for group, group_entries in ref.items():
            torch.testing.assert_close(rew[group], ref_rew[group], rtol=0, atol=1e-6)
            for key, value in group_entries.items():
                torch.testing.assert_close(obs[group][key], value, rtol=0, atol=1e-5, msg=f"{group}/{key}")
    assert resets >= 5  # the reset rows' observations (_observations_of a subset) were compared too


def test_the_custom_op_stays_inside_a_compiled_graph() -> None:
    """``fullgraph=True`` fails on any graph break: the op is one node of the graph, for every env and for a
    subset whose size the graph keeps dynamic (the auto-reset's compiled ``_observe_some``)."""
    env = scrambled("1v1", num_envs=32)
    ref_all, ref_some = entries(env, None, "torch"), entries(env, torch.tensor([4, 1, 4]), "torch")
    env._native_observations = True

    def policy_plus_one(ids):
        return env._observation_entries(ids)[1] + 1.0

    compiled = torch.compile(policy_plus_one, fullgraph=True, dynamic=True)
    torch.testing.assert_close(compiled(None), ref_all[1] + 1.0, rtol=0, atol=3e-7)
    for ids in (torch.tensor([4, 1, 4]), torch.tensor([0, 31, 2, 5, 9])):
        expected = entries(env, ids, "torch")[1] + 1.0
        env._native_observations = True
        torch.testing.assert_close(compiled(ids), expected, rtol=0, atol=3e-7)
    assert ref_some[1].shape[0] == 3


def test_kernels_choices_and_errors(monkeypatch) -> None:
    assert sim.make("drone_volleyball", num_envs=4, mode="1v1").kernels == "native"  # auto, here
    with pytest.raises(ValueError, match="kernels must be one of"):
        sim.make("drone_volleyball", num_envs=4, mode="1v1", kernels="fast")
    with pytest.raises(ValueError, match="kernels='native' cannot run here: the task, as configured, has no C"):
        sim.make("drone_volleyball", num_envs=4, mode="serve", kernels="native")
    for kernels in ("auto", "torch"):  # a skill has no C observations: its torch code
        assert not hasattr(sim.make("drone_volleyball", num_envs=4, mode="serve", kernels=kernels), "kernels")
    monkeypatch.setattr(native, "_lib", lambda: None)  # a machine without a C compiler
    assert sim.make("drone_volleyball", num_envs=4, mode="1v1").kernels == "torch"
    with pytest.raises(ValueError, match="cannot run here: no C compiler"):
        sim.make("drone_volleyball", num_envs=4, mode="1v1", kernels="native")


def test_the_op_refuses_what_it_cannot_read() -> None:
    """The kernel reads raw memory: rows outside the batch and a team size that does not fit the tensors are errors,
    not reads past their ends."""
    env = scrambled("1v1", num_envs=8)
    tensors = native.inputs(env)
    for bad in (torch.tensor([0, 8]), torch.tensor([-1])):
        with pytest.raises(IndexError, match="rows outside"):
            native.observations(tensors, bad, env.n, 0.08, 3.0, 500.0)
    with pytest.raises(ValueError, match="drones a team"):
        native.observations(tensors, None, 3, 0.08, 3.0, 500.0)
    assert native.observations(tensors, torch.tensor([], dtype=torch.long), env.n, 0.08, 3.0, 500.0)[0].shape[0] == 0
