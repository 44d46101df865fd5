"""info["final_obs"] after an auto-reset (sim.core.final_obs.FinalObs): the observation before the reset, built
only where read; and the observations a step returns never change afterwards, though a task's auto-reset may
write its reset rows in place (cable_load does)."""

from __future__ import annotations

from unittest import mock

import pytest
import torch

import sim
from sim.core.final_obs import FinalObs, take_envs


def _obs(num_envs: int = 6) -> dict[str, dict[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    return {
        "a": {
            "policy": torch.randn(num_envs, 2, 5, generator=gen),
            "state": torch.randn(num_envs, 2, 3, generator=gen),
        },
        "b": {"policy": torch.randn(num_envs, 1, 4, generator=gen)},
    }


def test_final_obs_reads_as_the_observation_before_the_reset_and_builds_only_what_is_read() -> None:
    before = _obs()
    ids = torch.tensor([4, 1])
    rows = take_envs(before, ids)
    after = {g: {k: v.clone() for k, v in entries.items()} for g, entries in before.items()}
    for entries in after.values():  # the reset rewrites its envs' rows in place
        for v in entries.values():
            v[ids] = -7.0
    original = torch.Tensor.index_copy
    built = mock.Mock(side_effect=lambda *a: original(*a))
    with mock.patch.object(torch.Tensor, "index_copy", lambda *a: built(*a)):
        final = FinalObs(after, ids, rows)
        assert built.call_count == 0
        assert list(final) == ["a", "b"] and list(final["a"]) == ["policy", "state"] and len(final["a"]) == 2
        state = final["a"]["state"]
        assert built.call_count == 1  # one entry read: one entry built
        assert final["a"]["state"] is state  # and kept
        assert built.call_count == 1
        for g, entries in before.items():
            for k, v in entries.items():
                assert torch.equal(final[g][k], v), (g, k)
        assert built.call_count == 3
    # The returned observation itself is left as it was.
    assert bool((after["a"]["policy"][ids] == -7.0).all())
    assert {g: dict(e) for g, e in final.items()}.keys() == before.keys()

    def regroup(obs):  # env by env: both groups' policies side by side, as a wrapper env might
        return {"all": {"policy": torch.cat((obs["a"]["policy"][..., :4], obs["b"]["policy"]), 1)}}

    mapped = final.map(regroup)
    assert isinstance(mapped, FinalObs)
    assert torch.equal(mapped["all"]["policy"], regroup(before)["all"]["policy"])


def _make(task: str, kernels: str | None):
    if task == "cable_load":
        env = sim.make(task, num_envs=40, seed=2, kernels=kernels, episode_length_s=0.37)
        assert env.kernels == kernels
        return env
    if task == "drone_volleyball":  # its auto-reset writes the rows into the observations in place
        env = sim.make(task, num_envs=12, seed=2, episode_length_s=0.25)
        assert env.fresh_observations and env._observe_some is not None
        return env
    return sim.make(task, num_envs=16, seed=2, episode_length_s=0.3)


@pytest.mark.parametrize(
    ("task", "kernels"),
    [("cable_load", "native"), ("cable_load", "torch"), ("point_reach", None), ("drone_volleyball", None)],
)
def test_final_obs_is_the_pre_reset_observation_and_returned_observations_never_change(task: str, kernels) -> None:
    """Each step's ``final_obs`` equals the observation the step computed before its auto-reset (captured from the
    post-physics pass), and every observation a step or ``reset()`` returned keeps its values to the end, through
    later auto-resets and a full ``reset()``."""
    env = _make(task, kernels)
    evaluate = env._evaluate
    captured: list = []

    def capture():
        out = evaluate()
        captured.append({g: {k: v.clone() for k, v in e.items()} for g, e in out[0].items()})
        return out

    env._evaluate = capture
    gen = torch.Generator().manual_seed(5)
    held = [env.reset()]
    copies = [{g: {k: v.clone() for k, v in e.items()} for g, e in held[0].items()}]
    resets = 0
    for _ in range(120):
        obs, _, terminated, truncated, info = env.step(env.sample_actions(gen))
        done = terminated | truncated
        resets += int(done.sum())
        if bool(done.any()):
            assert isinstance(info["final_obs"], FinalObs)
        for g, entries in captured[-1].items():
            for k, v in entries.items():
                assert torch.equal(info["final_obs"][g][k], v), (g, k)
                if bool(done.any()):
                    assert not torch.equal(obs[g][k][done], v[done]), "the reset envs start a new episode"
        held.append(obs)
        copies.append({g: {k: v.clone() for k, v in e.items()} for g, e in obs.items()})
    held.append(env.reset())
    assert resets > 0, "random actions should end some episodes"
    for obs, copy in zip(held[:-1], copies, strict=True):
        for g, entries in copy.items():
            for k, v in entries.items():
                assert torch.equal(obs[g][k], v), (g, k)


def test_coplay_final_obs_is_the_matchs_regrouped_and_stays_lazy() -> None:
    """drone_volleyball_coplay regroups its match's observations (both teams' drones in one group): on a step that
    resets envs its ``final_obs`` is the match's pre-reset observation regrouped, still a lazy FinalObs."""
    env = sim.make("drone_volleyball_coplay", num_envs=6, seed=0, episode_length_s=0.2)
    evaluate = env.match._evaluate
    captured: list = []

    def capture():
        out = evaluate()
        captured.append({g: {k: v.clone() for k, v in e.items()} for g, e in out[0].items()})
        return out

    env.match._evaluate = capture
    env.reset()
    gen = torch.Generator().manual_seed(1)
    lazy = 0
    for _ in range(40):
        _, _, terminated, truncated, info = env.step(env.sample_actions(gen))
        final = info["final_obs"]
        lazy += isinstance(final, FinalObs)
        expected = env._drones_obs(captured[-1])
        for k, v in expected["drones"].items():
            assert torch.equal(final["drones"][k], v), k
    assert lazy > 0, "some envs should reset (time limit)"
