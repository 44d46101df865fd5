"""HCSP's high level (sim/tasks/drone_volleyball/strategy.py): the choice -> command layer, the
strategy env, and the scripted team inside a self-play league.

Measured (64 games, 3v3, seed 0, ``runs``-free: ``python -c`` of the env below): the rule-based
choice against itself draws every rally (both sides return everything until the 9.5 s limit); a
constant choice that serves and attacks into the far corner wins 94% against it. The asserted
bounds are conservative.
"""

from __future__ import annotations

from pathlib import Path

import torch

import sim
from policies import ActorCritic, GroupDims, PolicyCfg, action_from_choice
from sim.tasks.drone_volleyball.rule_strategy import RuleBasedStrategy
from sim.tasks.drone_volleyball.strategy import (
    HIT_TARGETS,
    RULE_BASED_CHOICE,
    choice_sizes,
    default_choices,
    plan_from_choices,
)
from sim.tasks.drone_volleyball.teams import scripted_team, strategy_team
from training.matches import play_matches


def _match(num_envs: int = 8):
    return sim.make("drone_volleyball", num_envs=num_envs, mode="3v3", seed=0)


def _advance(env, steps: int) -> None:
    a, b = scripted_team(env), scripted_team(env)
    obs = env.observe()
    for _ in range(steps):
        obs, *_ = env.step({"team_a": a(env, obs, 0), "team_b": b(env, obs, 1)})


def test_the_rule_based_choice_reproduces_the_rule_based_strategy() -> None:
    env = _match()
    env.reset(seed=1)
    layer = RuleBasedStrategy(env)
    with torch.inference_mode():
        for _ in range(6):  # the serve, then the rally (both teams in possession at times)
            skill, target = layer()
            skill_p, target_p = layer(plan=plan_from_choices(env, default_choices(env)))
            assert torch.equal(skill, skill_p)
            torch.testing.assert_close(target, target_p)
            _advance(env, 25)


def test_choices_steer_the_server_and_the_player() -> None:
    env = _match(4)
    env.reset(seed=2)
    layer = RuleBasedStrategy(env)
    choices = default_choices(env)
    choices[:, :, 2] = 8  # far corner (5.3, 2.3) of each team's opponent court
    skill, target = layer(plan=plan_from_choices(env, choices))
    ru, rows = env.rules, torch.arange(4)
    serve_target = target[rows, ru.server]
    corner = torch.tensor(HIT_TARGETS[8])
    team_b = ru.server >= env.n
    expected = torch.where(team_b.unsqueeze(-1), corner * torch.tensor((-1.0, -1.0, 1.0)), corner)  # B mirrored
    torch.testing.assert_close(serve_target, expected)
    assert bool((skill[rows, ru.server] == 1).all())  # SERVE
    # The player choice: once the ball is in play, the chosen eligible drone of the team in
    # possession plays it (and only it); an ineligible choice (the last toucher) falls back.
    _advance(env, 60)
    valid, point = layer.interception_point()
    side = (point[:, 0] >= 0).long()
    for pick in range(env.n):
        choices = default_choices(env)
        choices[:, :, 0] = pick + 1
        skill, _ = layer(plan=plan_from_choices(env, choices))
        playing = (skill >= 2) & (skill <= 4)  # PASS, SET, ATTACK
        chosen = side * env.n + pick
        eligible = chosen != ru.last_toucher
        live = valid & ru.served
        for e in range(4):
            if bool(live[e]) and bool(eligible[e]):
                assert playing[e].nonzero().flatten().tolist() == [int(chosen[e])]
            elif bool(live[e]):
                assert int(playing[e].sum()) == 1 and not bool(playing[e, chosen[e]])


def _constant(env, choice) -> torch.Tensor:
    nvec = choice_sizes(env.match.n)
    a = torch.stack([action_from_choice(torch.tensor(c), n) for c, n in zip(choice, nvec, strict=True)])
    return a.expand(env.num_envs, 1, len(nvec)).contiguous()


def test_strategy_env_rewards_the_rally_winner_and_a_corner_plan_beats_the_rules() -> None:
    E = 48
    env = sim.make("drone_volleyball_strategy", num_envs=E, seed=0)
    spec = env.spec.groups["team_a"]
    assert spec.action_nvec == (4, 2, 9, 3) and spec.observations["policy"].shape == (55,)
    env.reset(seed=0)
    corner, rules = _constant(env, (0, 0, 8, 0)), _constant(env, RULE_BASED_CHOICE)
    result, finished = torch.full((E,), 0.5), torch.zeros(E, dtype=torch.bool)
    with torch.inference_mode():
        for _ in range(env.max_episode_steps):
            _, reward, terminated, truncated, _ = env.step({"team_a": corner, "team_b": rules})
            done = terminated | truncated
            # Zero-sum, +-1 exactly when a rally ends with a winner, 0 otherwise.
            torch.testing.assert_close(reward["team_a"], -reward["team_b"])
            expected = torch.where(done, 2.0 * env.game_result - 1.0, 0.0)
            torch.testing.assert_close(reward["team_a"][:, 0], expected)
            new = done & ~finished
            result = torch.where(new, env.game_result, result)
            finished |= new
            if bool(finished.all()):
                break
    assert bool(finished.all())
    assert float((result == 1.0).float().mean()) >= 0.75  # 94% measured


def test_a_constant_choice_policy_is_the_scripted_team_in_a_match() -> None:
    """``set_constant_choice`` makes an actor the rule-based team: played through strategy_team
    against scripted_team on the match env, every game is a draw (as scripted vs scripted)."""
    env = _match(16)
    ac = ActorCritic(GroupDims(1, 55, 55, 4, choice_sizes(3)), PolicyCfg(actor_hidden=(16,), critic_hidden=(16,)))
    ac.set_constant_choice(RULE_BASED_CHOICE)
    res = play_matches(env, strategy_team(env, ac.deterministic_actor(), 10), scripted_team(env), games=16)
    assert bool((res.result == 0.5).all())


def test_the_strategy_sees_the_rallys_clock_not_the_episodes() -> None:
    """Issue 21: a strategy trained on one-rally episodes plays games to N points, whose episodes are many rallies
    long. Its observation must not depend on the episode length (with the episode's clock, the shipped stage-3
    team won 35% of opening rallies in 90 s episodes against 80% in 10 s ones); its time term is the fraction
    of the rally's time limit left."""
    envs = [sim.make("drone_volleyball_strategy", num_envs=4, seed=0, episode_length_s=s) for s in (10.0, 90.0)]
    obs = [env.reset()["team_a"]["policy"] for env in envs]
    for _ in range(3):
        obs = [env.step(env.zero_actions())[0]["team_a"]["policy"] for env in envs]
    assert torch.equal(obs[0], obs[1])
    env = envs[0]
    term = env.spec.groups["team_a"].observations["policy"].slices()["time_left"]
    expected = 1.0 - env.match.rules.rally_time / env.cfg.rules.rally_time_limit_s
    assert torch.allclose(obs[0][:, 0, term].squeeze(-1), expected) and (expected < 1.0).all()


def test_in_games_every_point_is_rewarded_when_it_is_scored() -> None:
    """Issue 21 (games as the unit): in a game to N points the strategy is rewarded +-win_reward per point as
    it falls, not once for the game, and an episode's rewards add up to its point difference."""
    E = 8
    env = sim.make(
        "drone_volleyball_strategy", num_envs=E, mode="1v1", seed=0, episode_length_s=40.0, rules={"points_to_win": 2}
    )
    env.reset(seed=0)
    corner, rules = _constant(env, (0, 0, 8, 0)), _constant(env, RULE_BASED_CHOICE)
    total, finished = torch.zeros(E), torch.zeros(E, dtype=torch.bool)
    diff = torch.zeros(E)
    rewarded_before_the_end = False
    with torch.inference_mode():
        for _ in range(env.max_episode_steps):
            _, reward, terminated, truncated, _ = env.step({"team_a": corner, "team_b": rules})
            r = reward["team_a"][:, 0]
            torch.testing.assert_close(r, -reward["team_b"][:, 0])
            done = terminated | truncated
            total += torch.where(finished, 0.0, r)
            rewarded_before_the_end |= bool((~done & ~finished & (r != 0)).any())
            new = done & ~finished
            diff = torch.where(new, env.final_counters["points_a"] - env.final_counters["points_b"], diff)
            finished |= new
            if bool(finished.all()):
                break
    assert bool(finished.all())
    assert rewarded_before_the_end  # a game's first point is paid when it falls
    torch.testing.assert_close(total, diff)
    assert bool((diff.abs() >= 1).all())  # every game had a winner, so its points differ


def test_a_rally_served_by_any_drone_looks_the_same_to_a_strategy() -> None:
    """Issue 21: a game rotates the serve through every drone, but strategies were trained on rallies served by
    the first. The formation rotates with the serve and the strategy sees (and names) its drones in rotation
    order, so a rally served by any drone of either team starts with the same strategy observation; the drone
    a choice names is the one in that place."""
    from sim.tasks.drone_volleyball.strategy import plan_from_choices, strategy_observation

    env = _match(4)
    ids = torch.arange(4)
    seen, planned = [], []
    for team in (0, 1):
        for slot in range(3):
            env.reset(seed=0)
            env.rules.reset(ids, serving_team=team, server=team * 3 + slot)
            env._start_rally(ids)
            seen.append(strategy_observation(env, RuleBasedStrategy(env).interception_point()))
            choice = torch.tensor((2, 0, 4, 1)).expand(4, 2, 4)  # player: the 2nd in rotation, deep formation
            plan = plan_from_choices(env, choice)
            assert bool((plan.player[:, team] == (slot + 1) % 3).all())  # the drone after the server
            planned.append(plan.home[:, team].gather(1, env.rules.rotation_order()[:, team, :, None].expand(4, 3, 3)))
        for s in (1, 2):
            torch.testing.assert_close(seen[3 * team + s], seen[3 * team], rtol=0, atol=1e-5)
            torch.testing.assert_close(planned[3 * team + s], planned[3 * team], rtol=0, atol=0)


def test_a_scripted_opponent_is_the_rule_based_team_in_every_rotation() -> None:
    """Issue 21: the league's scripted snapshot plays the constant RULE_BASED_CHOICE, whose formation goes by
    place in the rotation order; the scripted team's drones keep their own homes, so after a side-out the two
    differ (a strategy won 79% of games to 5 against the constant choice in training, 41% against the
    scripted team in evaluate.py). Where ``set_scripted_opponent`` is set, team B must command every drone as
    the rule-based team does, in every rotation and whatever team B's choices say; team A keeps its plan."""
    E = 18
    env = sim.make("drone_volleyball_strategy", num_envs=E, seed=0)
    env.reset(seed=0)
    rules = _constant(env, RULE_BASED_CHOICE)
    with torch.inference_mode():
        env.step({"team_a": rules, "team_b": rules})  # the ball in play: players chosen, not only homes
    r = torch.arange(E)
    env.match.rules.rotation = torch.stack((r % 3, (r // 3) % 3), -1)
    env.match.rules.serving_team = r // 9
    seen = {}
    env.match.set_skill_commands = lambda skill, target, **_: seen.update(skill=skill, target=target)
    skill, target = RuleBasedStrategy(env.match)()
    b = env.match.team_of == 1
    plain = default_choices(env.match)
    env.skill_step(plain)
    rotated = (seen["target"][:, b] - target[:, b]).abs().amax((1, 2)) > 1e-6
    in_order = (env.match.rules.rotation_order()[:, 1] == torch.arange(3)).all(-1)  # team B's, as at a game start
    assert not rotated[in_order].any() and bool(rotated[~in_order].all())  # the constant choice: right only there
    other = plain.clone()
    other[:, 1] = torch.tensor((0, 1, 8, 1))  # team B's actions say: attack at once, to a corner, deep
    env.set_scripted_opponent("team_b", torch.ones(E, dtype=torch.bool))
    env.skill_step(other)
    assert torch.equal(seen["skill"][:, b], skill[:, b])
    torch.testing.assert_close(seen["target"][:, b], target[:, b], rtol=0, atol=1e-6)
    plan_a = seen["target"][:, ~b].clone()
    env.set_scripted_opponent("team_b", None)
    env.skill_step(other)
    torch.testing.assert_close(seen["target"][:, ~b], plan_a)  # team A's plan, unchanged
    assert not torch.allclose(seen["target"][:, b], target[:, b])  # team B follows its choices again


def test_the_selfplay_runner_plays_the_envs_scripted_team_where_the_scripted_snapshot_is_drawn(tmp_path) -> None:
    """The wiring of the test above: in training, the envs whose opponent is the league's scripted snapshot;
    in evaluation (against the pool's first snapshot, the scripted one), every env."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from training.selfplay_runner import SelfPlayRunner

    root = Path(__file__).resolve().parents[1]

    def build(*extra: str) -> SelfPlayRunner:
        with initialize_config_dir(config_dir=str(root / "configs"), version_base=None):
            cfg = compose(
                config_name="config",
                overrides=[
                    "task=drone_volleyball",
                    "algo=hcsp",
                    "stage=strategy",
                    "device=cpu",
                    "torch_threads=1",
                    "wandb.mode=disabled",
                    "train.progress=false",
                    "num_envs=8",
                    "train.eval_envs=4",
                    "league.opponents_per_iteration=4",
                    f"runs_dir={tmp_path}",
                    *extra,
                ],
            )
        return SelfPlayRunner(OmegaConf.to_container(cfg, resolve=True))

    assert build("league.learner_group=team_b").env.scripted[0] == 0  # the opponent's team, never the learner's
    runner = build()
    scripted = next(i for i, name in runner.league.pool.names.items() if name == "scripted")
    for _ in range(3):  # a few draws of opponents: the mask follows them
        assert runner.env.scripted[0] == 1 and torch.equal(runner.env.scripted[1], runner.opp_ids == scripted)
        runner._draw_opponents()
    assert runner.league.pool.ids[0] == scripted
    eval_env = runner._get_eval_env()
    runner.eval_other_actions(eval_env)
    assert eval_env.scripted[0] == 1 and bool(eval_env.scripted[1].all())
