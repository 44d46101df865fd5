"""Each drone_volleyball level's step traces as one graph (``torch.compile(..., fullgraph=True)`` fails on any graph
break): the control loop, the post-physics pass (rules, the level's hooks, a masked game's next rallies,
observations, rewards) and a match's reset of the solo skills and matches; the strategy level's skill step (the rule
layer and the scripted skills); the co-play level's hooks inside the match's pass. Traced with the "eager" backend
(dynamo only: no code generation, seconds on a CPU) on the torch code a GPU runs (``kernels="torch"``), with masked
resets (the sync-free step); the traced graph computes what the eager code does."""

from __future__ import annotations

import pytest
import torch

import sim

E = 4


def _pair(task: str, **kw):
    """Two envs built alike (one to run compiled, one eager), masked resets on, one step in."""
    envs = []
    for _ in range(2):
        env = sim.make(task, num_envs=E, seed=0, **kw)
        env.masked_resets = True
        env.reset()
        env.step(env.sample_actions(torch.Generator().manual_seed(0)))
        envs.append(env)
    return envs


def _same(a, b) -> None:
    """Nested outputs (tensors, tuples, dicts) equal bit for bit."""
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, tuple | list):
        for x, y in zip(a, b, strict=True):
            _same(x, y)


def _compiled(fn):
    torch._dynamo.reset()
    return torch.compile(fn, fullgraph=True, backend="eager")


@pytest.mark.parametrize(
    "mode, rules",
    [("serve", {}), ("goto", {}), ("attack", {}), ("1v1", {}), ("2v2", {"points_to_win": 3})],
    ids=["serve", "goto", "attack", "1v1", "2v2_game"],
)
def test_a_volleyball_step_traces_as_one_graph(mode: str, rules: dict) -> None:
    compiled, eager = _pair("drone_volleyball", mode=mode, rules=rules, kernels="torch")
    act = compiled.sample_actions(torch.Generator().manual_seed(1))
    for env in (compiled, eager):
        env._apply_actions(act)
    _compiled(compiled._control_loop)()
    eager._control_loop()
    _same((compiled.drones.pos, compiled.ball_pos), (eager.drones.pos, eager.ball_pos))
    for env in (compiled, eager):
        env.episode_step += 1
        env._sample_step_noise()
    _same(_compiled(compiled._post_physics)(), eager._post_physics())
    if compiled.cfg.is_match:  # the split reset's tensor code (compile=True compiles it)
        ids = torch.arange(E)
        draws = compiled._reset_draws(E)
        _compiled(compiled._reset_envs)(ids, draws)
        eager._reset_envs(ids, {k: v.clone() for k, v in draws.items()})
        _same(compiled.observe(), eager.observe())


def test_the_strategy_level_skill_step_traces_as_one_graph() -> None:
    compiled, eager = _pair("drone_volleyball_strategy", mode="1v1", kernels="torch")
    choices = compiled.choices
    _same(_compiled(compiled.skill_step)(choices), eager.skill_step(choices.clone()))
    _same(_compiled(compiled._observations)(), eager._observations())


def test_the_coplay_level_hooks_trace_inside_the_match_pass() -> None:
    compiled, eager = _pair("drone_volleyball_coplay", mode="1v1")
    for env in (compiled, eager):
        env.match._apply_actions(env.match.hover_actions())
        env.match._control_loop()
        env.match.episode_step += 1
    _same(_compiled(compiled.match._post_physics)(), eager.match._post_physics())
    _same(compiled.scores.delivery, eager.scores.delivery)
