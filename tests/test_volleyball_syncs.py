"""drone_volleyball steps without host syncs: with masked resets (what a CUDA graph capture or a compiled step needs)
no level waits for the device inside a step (solo skills, matches, games to N points, the strategy and co-play
levels, the scripted and strategy teams), and a training rollout of the self-play runner and of the co-self-play
phases waits only at its end. Syncs are counted as tests/test_reliability.py counts them (a TorchFunctionMode
catching item, tolist, bool(), int(), nonzero, equal, ...), which works on a CPU."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf
from test_reliability import _SyncCounter  # tests/ is on sys.path (pytest rootdir-relative imports)

import sim
from sim.tasks.drone_volleyball.skills import ScriptedSkills
from sim.tasks.drone_volleyball.teams import scripted_team, strategy_team

# (task, overrides, env steps): short episodes, so that several end (and reset by mask) inside the steps counted.
LEVELS = {
    **{m: ("drone_volleyball", {"mode": m, "episode_length_s": 0.3}, 30) for m in ("goto", "serve", "pass")},
    **{m: ("drone_volleyball", {"mode": m, "episode_length_s": 0.3}, 30) for m in ("set", "attack")},
    "1v1": ("drone_volleyball", {"mode": "1v1", "episode_length_s": 0.3}, 30),
    "3v3": ("drone_volleyball", {"mode": "3v3", "episode_length_s": 0.3}, 30),
    "2v2 game": ("drone_volleyball", {"mode": "2v2", "episode_length_s": 1.5, "rules": {"points_to_win": 3}}, 90),
    "strategy": ("drone_volleyball_strategy", {"mode": "2v2", "episode_length_s": 0.4}, 6),
    "coplay": (
        "drone_volleyball_coplay",
        {"mode": "2v2", "episode_length_s": 0.3, "strategy": {"random_choice_prob": 0.5}},
        30,
    ),
}


def _teams(env):
    """The actions of a step: the env's expert, on a match the scripted team against a strategy team."""
    if env.task_name == "drone_volleyball" and env.cfg.is_match:
        actor = lambda obs: torch.tanh(obs[..., :4].sum(-2))  # noqa: E731 - any deterministic strategy actor
        a, b = scripted_team(env), strategy_team(env, actor, decision_steps=3)
        return lambda obs: {"team_a": a(env, obs, 0), "team_b": b(env, obs, 1)}
    if env.task_name == "drone_volleyball_strategy":  # no expert: random choices (the skills fly them)
        return lambda obs: env.sample_actions()
    return env.expert_policy()


@pytest.mark.parametrize("level", list(LEVELS))
def test_with_masked_resets_no_volleyball_step_waits_for_the_device(level: str) -> None:
    task, overrides, steps = LEVELS[level]
    env = sim.make(task, num_envs=16, seed=0, **overrides)
    env.masked_resets = True
    env.defer_action_checks = True  # as a training rollout steps it
    policy = _teams(env)
    env.reset()
    gen = torch.Generator().manual_seed(0)
    obs = env.step(env.sample_actions(gen))[0]  # the first masked reset checks the shared state, once
    ended = rallies = 0
    for t in range(steps):
        counter = _SyncCounter()
        with counter:
            # (A game's rallies end sooner on random actions: its teams fly the teams' actions less often.)
            actions = policy(obs) if t % (2 if level != "2v2 game" else 5) == 1 else env.sample_actions(gen)
            obs, _, term, trunc, info = env.step(actions)
        assert counter.calls == [], (t, counter.calls)
        ended += int((term | trunc).sum())
        if level == "2v2 game":  # rallies that ended without ending the game: the next one started by mask
            rallies += int((env.events.rally_over & ~env.events.game_over).sum())
    assert ended >= 4, "episodes must end (and reset by mask) for the test to mean anything"
    assert level != "2v2 game" or rallies >= 2, rallies


def test_masked_game_rallies_leave_the_other_envs_as_the_indexed_step_does() -> None:
    """A game to N points with masked resets starts the next rally of every env and keeps it where a rally ended:
    an env whose rally has not ended steps bit for bit as with indexed resets (only the random draws of the
    restarted envs differ), and a restarted env serves again (ball at rest above its server, touches cleared)."""
    kw = {"mode": "2v2", "episode_length_s": 4.0, "rules": {"points_to_win": 3}, "obs_noise": {"enabled": False}}
    indexed, masked = (
        sim.make("drone_volleyball", num_envs=16, seed=0, **kw),
        sim.make("drone_volleyball", num_envs=16, seed=0, **kw),
    )
    masked.masked_resets = True
    indexed.reset(), masked.reset()
    gen = torch.Generator().manual_seed(1)
    touched = torch.zeros(16, dtype=torch.bool)  # envs whose rally (or episode) ended so far: their draws differ
    restarts = compared = 0
    for _ in range(80):
        act, hover = indexed.sample_actions(gen), indexed.hover_actions()
        for g in act:  # the last 8 envs hover (their rallies run on), the first 8 fly at random (theirs end)
            act[g][8:] = hover[g][8:]
        a, b = indexed.step(act), masked.step(act)
        ended = a[2] | a[3] | indexed.events.rally_over
        live = ~(touched | ended)
        for g in a[0]:
            for key, value in a[0][g].items():
                assert torch.equal(value[live], b[0][g][key][live]), (g, key)
        again = masked.events.rally_over & ~masked.events.game_over
        if bool(again.any()):
            restarts += int(again.sum())
            compared += int(live.sum())  # envs held equal on a step where others restarted
            assert (masked.rules.touches[again] == 0).all() and (~masked.rules.served[again]).all()
            assert torch.equal(masked.ball_vel[again], torch.zeros_like(masked.ball_vel[again]))
        touched |= ended | masked.events.rally_over
    assert restarts >= 2 and compared >= 4, (restarts, compared)


def test_sync_free_skills_plan_every_drone_as_the_playing_drones_plan() -> None:
    """With masked resets the scripted skills plan every drone (no index of the playing ones) and keep the plans of
    those that play: the same actions, up to float32 round-off (vectorised and scalar atan2 differ in the last bit)."""
    env = sim.make("drone_volleyball", num_envs=16, seed=0, mode="3v3")
    team = scripted_team(env)
    obs = env.reset()
    gen = torch.Generator().manual_seed(0)
    compact, every = ScriptedSkills(env), ScriptedSkills(env)
    for t in range(40):
        team(env, obs, 0), team(env, obs, 1)
        want = compact(obs)
        env._masked_resets = True  # the switch alone (no reset happens here)
        got = every(obs)
        env._masked_resets = False
        for g in want:
            torch.testing.assert_close(got[g], want[g], atol=1e-5, rtol=1e-5)
        obs = env.step(want if t % 2 else env.sample_actions(gen))[0]


# --------------------------------------------------------------------------- training rollouts
def _runner_cfg(tmp_path, *overrides: str) -> dict:
    from training.config import compose

    base = [
        "device=cpu",
        "torch_threads=1",
        "update_threads=1",
        "wandb.mode=disabled",
        "train.progress=false",
        "num_envs=16",
        "train.rollout_steps=12",
        "train.eval_every=0",
        "algo.policy.actor_hidden=[16]",
        "algo.policy.critic_hidden=[16]",
        "imitation.expert=none",
        f"runs_dir={tmp_path}",
    ]
    return OmegaConf.to_container(compose([*base, *overrides]), resolve=True)


def _selfplay(tmp_path):
    from training.selfplay_runner import SelfPlayRunner

    over = ["task=drone_volleyball", "algo=selfplay", "++task.mode=1v1", "++task.episode_length_s=0.2"]
    return SelfPlayRunner(_runner_cfg(tmp_path, *over, "league.opponents_per_iteration=2"))


def _coselfplay_strategy(tmp_path):
    """Co-self-play's strategy phase: the strategy's self-play with learned skills flying."""
    from training.selfplay_runner import SelfPlayRunner

    over = ["task=drone_volleyball_strategy", "++task.mode=1v1", "++task.episode_length_s=0.3"]
    runner = SelfPlayRunner(_runner_cfg(tmp_path, *over, "++task.strategy.decision_steps=3"))
    skills = torch.nn.Linear(runner.env.match.skill_observation().shape[-1], 4)
    runner.env.set_skills(lambda obs: torch.tanh(skills(obs)))
    return runner


def _coselfplay_skills(tmp_path):
    """Co-self-play's skills phase: the skills in matches, commanded by a strategy (and random choices)."""
    from training.coselfplay import SkillsInMatchRunner

    over = ["task=drone_volleyball_coplay", "algo=ppo", "++task.mode=1v1", "++task.episode_length_s=0.2"]
    cfg = _runner_cfg(tmp_path, *over, "++task.strategy.random_choice_prob=0.3")
    return SkillsInMatchRunner(cfg, lambda obs: torch.tanh(obs[..., :4]))


@pytest.mark.parametrize("build", [_selfplay, _coselfplay_strategy, _coselfplay_skills], ids=lambda f: f.__name__[1:])
def test_with_masked_resets_a_volleyball_rollout_waits_only_at_its_end(build, tmp_path) -> None:
    """The rollout's own end-of-rollout syncs (the index of its truncated steps for PPO's bootstrap, the rollout's
    finite check, the deferred action checks: a level's and its match's, the guard counts) and nothing per step,
    however many episodes end inside it. Self-play's per-step bookkeeping of finished games costs none (its
    once-per-iteration selection of them is end_iteration's, outside the rollout)."""
    runner = build(tmp_path)
    runner.env.masked_resets = True
    runner.env.reset()
    obs = runner.env.step(runner.env.zero_actions())[0]  # the first masked reset checks the shared state, once
    counter = _SyncCounter()
    with counter:
        _, episodes = runner.collect(obs)
    assert float(episodes.count) >= runner.env.num_envs, "episodes must end inside the rollout"
    assert len(counter.calls) <= 5, counter.calls
