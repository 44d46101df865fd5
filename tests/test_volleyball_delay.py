"""drone_volleyball's command delay (``randomization.action_delay_steps``): the rate loop flies the action sent
``d`` control steps earlier (hover before the first), on team A only unless ``action_delay_teams="both"``, with
``d`` drawn per env at the episode's reset; off by default with no random draw, sync-free with masked resets and
traced as one graph."""

from __future__ import annotations

import pytest
import torch
from test_reliability import _SyncCounter  # tests/ is on sys.path (pytest rootdir-relative imports)
from test_volleyball_fullgraph import _compiled, _pair, _same

import sim

E = 8


def _hover(env) -> torch.Tensor:
    return torch.tensor((env.hover_thrust_action, 0.0, 0.0, 0.0))


@pytest.mark.parametrize("teams", ["a", "both"])
def test_the_action_flown_at_step_t_is_the_one_sent_at_t_minus_d(teams: str) -> None:
    env = sim.make(
        "drone_volleyball",
        num_envs=E,
        seed=0,
        mode="1v1",
        episode_length_s=5.0,
        randomization={"action_delay_steps": (0, 3), "action_delay_teams": teams},
    )
    env.reset()
    d = env.action_delay.delay.clone()
    assert set(d.tolist()) == {0, 1, 2, 3}, d  # per env, every value of the range (seed 0 draws them all)
    gen, hover = torch.Generator().manual_seed(0), env.hover_actions()
    sent = []
    for t in range(12):
        act = {g: 0.3 * a + hover[g] for g, a in env.sample_actions(gen).items()}  # no crash: the rally runs on
        sent.append(torch.cat((act["team_a"], act["team_b"]), 1))
        env.step(act)
        assert not (env.events.rally_over.any()), "a rally restart would drop the commands in flight"
        for e in range(E):
            want = sent[t - d[e]][e] if t >= d[e] else _hover(env).expand(2, 4)
            delayed = 2 if teams == "both" else 1
            assert torch.equal(env.cmd[e, :delayed], want[:delayed]), (t, e)
            assert torch.equal(env.cmd[e, delayed:], sent[t][e, delayed:]), (t, e)  # team B as sent ("a")
            assert torch.equal(env.last_action[e], sent[t][e])  # the policy observes what it sent


def test_a_delayed_env_flies_as_an_undelayed_one_given_the_late_actions() -> None:
    """The physics sees only the delayed command: 2 steps of delay give the drones' and ball's trajectories of an
    undelayed env fed hover then the same actions 2 steps late, bit for bit (a fixed delay draws nothing, so both
    envs start alike)."""
    kw = {"mode": "serve", "episode_length_s": 5.0}
    late = sim.make("drone_volleyball", num_envs=E, seed=3, randomization={"action_delay_steps": (2, 2)}, **kw)
    plain = sim.make("drone_volleyball", num_envs=E, seed=3, **kw)
    late.reset(), plain.reset()
    gen = torch.Generator().manual_seed(1)
    hover = plain.hover_actions()
    queue = [hover, hover]
    for _ in range(10):
        act = {"team_a": 0.3 * late.sample_actions(gen)["team_a"] + hover["team_a"]}
        queue.append(act)
        late.step(act), plain.step(queue.pop(0))
        assert torch.equal(late.drones.pos, plain.drones.pos)
        assert torch.equal(late.ball_pos, plain.ball_pos)


def test_a_reset_drops_the_commands_in_flight_and_keeps_the_drawn_delay_per_game() -> None:
    env = sim.make("drone_volleyball", num_envs=E, seed=0, mode="3v3", randomization={"action_delay_steps": (3, 3)})
    env.reset()
    for _ in range(2):
        env.step(env.sample_actions(torch.Generator().manual_seed(2)))
    ids = torch.tensor([1, 5])
    env._start_rally(ids)  # a rally restart in a game: hover until the new rally's first command arrives
    assert torch.equal(env.action_delay.buf[ids], _hover(env).expand(2, 4, 3, 4))
    assert not torch.equal(env.action_delay.buf[0], _hover(env).expand(4, 3, 4))
    assert (env.action_delay.delay == 3).all()


def test_off_by_default_and_a_fixed_delay_draw_nothing() -> None:
    """The default streams: no delay configured, or a fixed one, leave every reset's draws as they were; a range
    draws after a reset's other draws (the first reset's starts are the same, the generator then differs)."""

    def starts(**rand) -> tuple[torch.Tensor, torch.Tensor]:
        env = sim.make("drone_volleyball", num_envs=E, seed=0, mode="3v3", **rand)  # reset once, as built
        return torch.cat((env.ball_pos, env.rules.serving_team.unsqueeze(-1).float()), -1), env.rng.get_state()

    (plain, plain_rng), (fixed, fixed_rng), (drawn, drawn_rng) = (
        starts(),
        starts(randomization={"action_delay_steps": (2, 2)}),
        starts(randomization={"action_delay_steps": (0, 2)}),
    )
    assert torch.equal(plain, fixed) and torch.equal(plain_rng, fixed_rng)
    assert torch.equal(plain, drawn) and not torch.equal(plain_rng, drawn_rng)
    env = sim.make("drone_volleyball", num_envs=E, seed=0, mode="3v3")
    assert env.action_delay.max_delay == 0 and env.cmd is env.last_action


def test_with_masked_resets_a_delayed_game_step_waits_for_no_device() -> None:
    env = sim.make(
        "drone_volleyball",
        num_envs=16,
        seed=0,
        mode="2v2",
        episode_length_s=1.5,
        rules={"points_to_win": 3},
        randomization={"action_delay_steps": (0, 2), "action_delay_teams": "both"},
    )
    env.masked_resets = True
    env.defer_action_checks = True
    env.reset()
    gen = torch.Generator().manual_seed(0)
    env.step(env.sample_actions(gen))  # the first masked reset checks the shared state, once
    ended = 0
    for _ in range(90):
        counter = _SyncCounter()
        with counter:
            _, _, term, trunc, _ = env.step(env.sample_actions(gen))
        assert counter.calls == [], counter.calls
        ended += int((term | trunc).sum())
    assert ended >= 4, "games must end (and reset by mask, drawing their delays) for the test to mean anything"


def test_a_delayed_step_and_reset_trace_as_one_graph() -> None:
    kw = {"mode": "1v1", "kernels": "torch", "randomization": {"action_delay_steps": (0, 2)}}
    compiled, eager = _pair("drone_volleyball", **kw)
    act = compiled.sample_actions(torch.Generator().manual_seed(1))
    _compiled(compiled._apply_actions)(act)
    eager._apply_actions(act)
    _same(compiled.cmd, eager.cmd)
    ids = torch.arange(2)
    draws = compiled._reset_draws(2)
    assert "delay" in draws
    _compiled(compiled._reset_envs)(ids, draws)
    eager._reset_envs(ids, {k: v.clone() for k, v in draws.items()})
    _same((compiled.action_delay.delay, compiled.action_delay.buf), (eager.action_delay.delay, eager.action_delay.buf))
