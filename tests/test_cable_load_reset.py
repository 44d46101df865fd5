"""cable_load's reset: its random draws (eager, from the env's generator) and the tensor code that applies them
(compiled with ``compile=True``, for any number of envs)."""

from __future__ import annotations

import pytest
import torch

import sim
from sim.core.env import _two_or_more_with_draws

# Every random part of a reset on: randomisation (incl. a heterogeneous team), faults, a disturbance, noise.
EVERYTHING = {
    "fault": {"enabled": True, "probability": 0.5},
    "disturbance": {"enabled": True, "period_s": 2.0},
    "randomization": {"mav_mass_scale": (0.85, 1.15), "thrust_limit_scale": (0.85, 1.15)},
}
E = 16


def make(compile: bool = False, seed: int = 0, **overrides):
    return sim.make("cable_load", num_envs=E, device="cpu", seed=seed, compile=compile, **EVERYTHING, **overrides)


def per_env_state(env) -> dict[str, torch.Tensor]:
    snap = env.state_snapshot()
    assert not isinstance(snap, str), snap
    return {p: v.clone() for p, v in snap.items() if isinstance(v, torch.Tensor) and v.dim() and v.shape[0] == E}


def test_the_reset_of_a_repeated_env_equals_its_single_reset():
    """The compiled reset runs one env as that env twice (one graph for every count): same draws, same state."""
    one, twice = make(), make()
    draws = one._reset_draws(1)
    one._reset_envs(torch.tensor([5]), draws)
    ids, repeated = _two_or_more_with_draws(torch.tensor([5]), draws)
    assert ids.tolist() == [5, 5]
    twice._reset_envs(ids, repeated)
    a, b = per_env_state(one), per_env_state(twice)
    assert a.keys() == b.keys()
    for path in a:
        assert torch.equal(a[path], b[path]), path


def test_every_random_draw_of_a_reset_comes_from_its_draws():
    """Two envs seeded differently, reset from the same draws: the reset envs are equal, the others differ."""
    a, b = make(seed=0), make(seed=1)
    ids = torch.tensor([2, 9, 11])
    draws = a._reset_draws(3)
    assert {"load_mass", "delay", "mav_mass_scale", "fault_agent", "disturbance_dir", "obs_noise"} <= draws.keys()
    a._reset_envs(ids, draws)
    b._reset_envs(ids, draws)
    sa, sb = per_env_state(a), per_env_state(b)
    others = torch.ones(E, dtype=torch.bool)
    others[ids] = False
    for path in sa:
        assert torch.equal(sa[path][ids], sb[path][ids]), path
    assert not torch.equal(a.goal_pos[others], b.goal_pos[others])


@pytest.mark.timeout(300)
def test_the_compiled_reset_matches_the_eager_one_for_one_and_several_envs():
    """``compile=True``: the auto-reset's tensor code compiled once for any count (1 runs as a repeated env),
    from the same draws as the eager env (same seed). Equal to float32 round-off (the compiled kernels fuse the
    hover equilibrium's arithmetic), and one graph for every count: the env's first reset compiles it, for all
    envs, and later counts reuse it (~30 s to compile the first time)."""
    # The torch code (with the C kernels a CPU resets in C, never through the compiled graph).
    eager, compiled = make(kernels="torch"), make(compile=True, kernels="torch")
    assert compiled._reset_envs_compiled is not None  # its first reset (every env) compiled the graph
    torch._dynamo.utils.counters.clear()
    for ids in ([3], [0, 15], [1, 4, 7, 8, 12], [6]):
        ids = torch.tensor(ids)
        eager._reset_all_idx(ids)
        compiled._reset_all_idx(ids)
        a, b = per_env_state(eager), per_env_state(compiled)
        assert a.keys() == b.keys()
        for path in a:
            if a[path].is_floating_point():
                torch.testing.assert_close(b[path], a[path], rtol=1e-5, atol=1e-5, msg=path)
            else:
                assert torch.equal(a[path], b[path]), path
        assert torch.equal(eager.rng.get_state(), compiled.rng.get_state())  # the same draws, in the same order
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 0  # nothing compiled after the first reset
