"""The shipped drone_volleyball policies (assets/policies/drone_volleyball/): the skills do their
job, every ONNX export gives the torch actions, the HCSP strategy beats the rule-based team, and
the stage-3 team (co-self-play: learned skills and strategy) beats the rule-based team flying the
same skills.

Measured numbers (256 episodes per skill, 200 games per match) are in the folder's README and
reports; the asserted bounds here are conservative for the smaller samples a test can afford.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import sim
from sim.core.teams import flat_team
from sim.tasks.drone_volleyball.teams import hover_team, rule_based_team, scripted_team, strategy_team
from training.checkpoint import load_policy
from training.coselfplay import skills_policy
from training.evaluation import actor_policy, run_episodes, summarize, zero_policy
from training.matches import play_matches

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "assets" / "policies" / "drone_volleyball"

# skill -> (bound asserted on 48 episodes, measured success on 256 episodes in <skill>_report.json)
SKILL_BOUNDS = {"pass": 0.8, "serve": 0.85, "set": 0.85, "attack": 0.75}


@pytest.mark.parametrize("skill", sorted(SKILL_BOUNDS))
def test_shipped_skill_succeeds_where_zero_actions_fail(skill: str) -> None:
    loaded = load_policy(SHIPPED / f"{skill}.pt")
    assert loaded.task_cfg["mode"] == skill
    env = sim.make(loaded.task_cfg, num_envs=48, seed=0)
    trained = summarize(run_episodes(env, actor_policy(loaded.actors, env), 48, seed=5, window_s=5.0), {})
    zero = summarize(run_episodes(env, zero_policy(env), 48, seed=5, window_s=5.0), {})
    assert trained["success"] >= SKILL_BOUNDS[skill], trained
    assert zero["success"] <= 0.15, zero


@pytest.mark.parametrize(
    "name",
    [
        "pass",
        "serve",
        "set",
        "attack",
        "flat_selfplay",
        "flat_games",
        "flat_dagger",
        "strategy",
        "stage3_skills",
        "stage3_strategy",
        "stage3_balanced_skills",
        "stage3_games_strategy",
        "games_strategy",
        "games_skills",
    ],
)
def test_shipped_onnx_matches_torch(name: str) -> None:
    ort = pytest.importorskip("onnxruntime")
    loaded = load_policy(SHIPPED / f"{name}.pt")
    ((group, actor),) = loaded.actors.items()
    env = sim.make(loaded.task_cfg, num_envs=16, seed=1)
    obs = env.reset()[group]["policy"]
    sess = ort.InferenceSession(str(SHIPPED / f"{name}.onnx"), providers=["CPUExecutionProvider"])
    (got,) = sess.run(["action"], {"policy": obs.reshape(-1, obs.shape[-1]).numpy()})  # shared weights: rows
    torch.testing.assert_close(torch.from_numpy(got).reshape(*obs.shape[:2], -1), actor(obs), atol=1e-5, rtol=0)


def test_shipped_strategy_beats_the_rule_based_team() -> None:
    loaded = load_policy(SHIPPED / "strategy.pt")
    cfg = {**loaded.task_cfg, "name": "drone_volleyball"}
    env = sim.make(cfg, num_envs=32, seed=0)
    steps = loaded.task_cfg["strategy"]["decision_steps"]
    res = play_matches(env, strategy_team(env, loaded.actors["team_a"], steps), scripted_team(env), games=32, seed=3)
    score = float(res.result.mean())
    assert score >= 0.6, score


def test_shipped_stage3_team_beats_the_rule_based_team_on_the_same_skills() -> None:
    """HCSP's comparison: the same learned skills, commanded by the co-self-play strategy or by the
    rule-based strategy (200 games: see the README; 32 here)."""
    loaded = load_policy(SHIPPED / "stage3_strategy.pt")
    env = sim.make({**loaded.task_cfg, "name": "drone_volleyball"}, num_envs=32, seed=0)
    steps = loaded.task_cfg["strategy"]["decision_steps"]
    skills = skills_policy(SHIPPED / "stage3_skills.pt", "cpu", "drone_volleyball_coplay")
    hcsp = strategy_team(env, loaded.actors["team_a"], steps, skills)
    res = play_matches(env, hcsp, rule_based_team(env, skills), games=32, seed=3)
    score = float(res.result.mean())
    assert score >= 0.6, score


def _games_team(name: str, num_envs: int, single_rally: bool = False, skills: str = "stage3_balanced_skills") -> tuple:
    """``(env, team)``: the strategy ``<name>.pt`` trained in games to 5, over the skills ``<skills>.pt`` (by default
    the balanced-DAgger skills it was trained over), in its own match (``single_rally``: one rally per episode
    instead of a game)."""
    loaded = load_policy(SHIPPED / f"{name}.pt")
    assert loaded.task_cfg["rules"]["points_to_win"] == 5  # trained on games
    cfg = {**loaded.task_cfg, "name": "drone_volleyball"}
    if single_rally:
        cfg = {**cfg, "episode_length_s": 10.0, "rules": {**cfg["rules"], "points_to_win": 0}}
    env = sim.make(cfg, num_envs=num_envs, seed=0)
    steps = loaded.task_cfg["strategy"]["decision_steps"]
    actors = skills_policy(SHIPPED / f"{skills}.pt", "cpu", "drone_volleyball_coplay")
    return env, strategy_team(env, loaded.actors["team_a"], steps, actors)


@pytest.mark.parametrize(("name", "bound"), [("stage3_games_strategy", 0.35), ("games_strategy", 0.5)])
def test_shipped_games_team_plays_the_scripted_team_level_in_single_rallies(name: str, bound: float) -> None:
    """Issue 21: the strategies trained in games to 5 (over the balanced-DAgger skills; 41% and 86% of 200 games to 5
    against the scripted team, the README) still play their rallies: single rallies against the rule-based strategy
    on the scripted skills, random servers (52% and 71.5% of 200: the README; 32 here, where games to 5 take minutes:
    the slow test below). A team at 71.5% scores under 0.5 here 0.3% of the time."""
    env, team = _games_team(name, 32, single_rally=True)
    res = play_matches(env, team, scripted_team(env), games=32, seed=3)
    score = float(res.result.mean())
    assert score >= bound, score


@pytest.mark.slow
@pytest.mark.parametrize(("skills", "wins_of_24"), [("stage3_balanced_skills", 14), ("games_skills", 19)])
def test_shipped_games_team_wins_games_to_5_against_the_scripted_team(skills: str, wins_of_24: int) -> None:
    """Issue 21's bar: the games team (``games_strategy.pt``) wins >= 80% of 200 games to 5 points against the
    rule-based strategy on the scripted skills (the README): 86% over the balanced-DAgger skills it was trained over,
    98% over the skills DAgger-trained in games under its own commands (``games_skills.pt``). 24 games each here
    (~3 min of one core: ``pytest -m slow``): a team at 80% wins fewer than 14 of them 0.4% of the time, the previous
    games team (41%) 14 or more 7% of the time; a team at 98% wins fewer than 19 of 24 with probability 6e-6, one at 86%
    19 or more 89% of the time (the second bound guards against a broken games_skills.pt, not a small drop)."""
    env, team = _games_team("games_strategy", 24, skills=skills)
    res = play_matches(env, team, scripted_team(env), games=24, seed=3)
    wins = int((res.result == 1.0).sum())
    assert wins >= wins_of_24, res.result.tolist()


@pytest.mark.parametrize("name", ["flat_games", "flat_dagger"])
def test_shipped_flat_team_beats_hovering_drones_and_loses_to_the_games_team(name: str) -> None:
    """Issue 21's second bar: the flat teams (one network flying every drone from its own observation, no hierarchy)
    beat hovering drones in >= 95% of games to 5 (the README: 200 of 200 on seeds 0 and 1): ``flat_dagger``, taught
    by DAgger from the scripted teams in games to 5, and ``flat_games``, MAPPO self-play from it against a league
    anchored by the scripted team. The HCSP games team still beats both (the first bar's >= 60% against the best flat
    team; 96.5% and 100% of 200). 32 games each here (~15 s): a team at 95% wins fewer than 28 of 32 2.5% of the
    time; the from-scratch flat team (about 40% of games against hovering drones) 28 or more almost never."""
    loaded = load_policy(SHIPPED / f"{name}.pt")
    assert loaded.task_cfg["rules"]["points_to_win"] == 5  # trained on games
    env = sim.make(loaded.task_cfg, num_envs=32, seed=0)
    res = play_matches(env, flat_team(loaded.actors["team_a"]), hover_team, games=32, seed=3)
    assert int((res.result == 1.0).sum()) >= 28, res.result.tolist()
    env, hcsp = _games_team("games_strategy", 32)
    res = play_matches(env, hcsp, flat_team(loaded.actors["team_a"]), games=32, seed=3)
    assert float(res.result.mean()) >= 0.6, res.result.tolist()


def _skills_vs_scripted(evaluate, capsys, envs: int, seconds: float) -> dict:
    """``evaluate.py``'s report: the games skills and the scripted skills (``expert=true``) in games to 5, both teams
    commanded by the games strategy (``commander=``), no random commands, observation noise off."""
    argv = [f"checkpoint={SHIPPED / 'games_skills.pt'}", f"commander={SHIPPED / 'games_strategy.pt'}", "expert=true"]
    argv += ["baseline=false", f"episodes={envs}", "eval_mode=true", "task.strategy.random_choice_prob=0"]
    assert evaluate.main([*argv, f"task.episode_length_s={seconds}"]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_evaluate_commands_a_skills_level_by_a_strategy_checkpoint_and_pools_its_touches(evaluate_cli, capsys) -> None:
    report = _skills_vs_scripted(evaluate_cli, capsys, envs=4, seconds=4.0)
    assert report["commander"].endswith("games_strategy.pt")
    for side in (report, report["expert_baseline"]):
        assert side["serve_attempts_pooled"] >= 4  # every game starts with a serve
        assert 0.0 <= side["serve_success_pooled"] <= 1.0


@pytest.mark.slow
def test_shipped_games_skills_attack_beats_the_scripted_attack_under_the_same_commands(evaluate_cli, capsys) -> None:
    """Issue 21's third bar: under the games strategy's commands, in games to 5, the skills DAgger-trained in games
    attack better than the scripted skills they were taught by (the README: 128 games, 77-78% against 54-55% on two
    seeds; 83-85% against 53-55% with mixed teams, so the lead is the attack's own; the pass's lead in these
    same-skills games comes from the balls it meets). 64 envs x 30 s here (~3 min of one core: ``pytest -m slow``;
    ~300 attacks a side; at 32 x 20 s the learned attack led 78% to 64%, intervals touching)."""
    report = _skills_vs_scripted(evaluate_cli, capsys, envs=64, seconds=30.0)
    learned, scripted = report, report["expert_baseline"]
    assert learned["attack_attempts_pooled"] >= 80 and scripted["attack_attempts_pooled"] >= 80
    assert learned["attack_success_pooled_ci95"][0] > scripted["attack_success_pooled_ci95"][1], (learned, scripted)


@pytest.mark.slow
def test_shipped_games_skills_attack_beats_the_scripted_attack_in_mixed_teams(monkeypatch) -> None:
    """The attack's lead is its own (the README's mixed-team table): team A flies the games skills, team B the scripted
    ones, both commanded by the games strategy, so each side attacks against the other's receivers; the touches are
    tallied per team by wrapping ``TouchScores._resolve``. 64 envs x 30 s of games to 5 (~2 min of one core)."""
    from sim.core.config import deep_merge
    from sim.tasks.drone_volleyball.coplay import ATTACK, TouchScores
    from training.coselfplay import strategy_policy
    from training.evaluation import wilson_ci95

    loaded = load_policy(SHIPPED / "games_skills.pt")
    cfg = deep_merge(
        dict(loaded.task_cfg),
        {"episode_length_s": 120.0, "strategy": {"random_choice_prob": 0.0}, "obs_noise": {"enabled": False}},
    )
    env = sim.make(cfg, num_envs=64, seed=0)
    strategy = strategy_policy(SHIPPED / "games_strategy.pt", "cpu", "drone_volleyball_strategy")
    for team in (0, 1):
        env.set_strategy(team, strategy)
    learned, scripted = loaded.actors["drones"], env.expert_policy()
    team_a = (torch.arange(env.match.num_drones) < env.match.n).view(1, -1, 1)
    tally = torch.zeros(2, 2)  # [team, (attempts, successes)] of attacks
    resolve = TouchScores._resolve

    def counted(self, match, now, opponent_touched):
        team, tried, won = match.team_of[self.pend_drone], self.attempts[:, ATTACK], self.successes[:, ATTACK]
        resolve(self, match, now, opponent_touched=opponent_touched)
        for t in (0, 1):
            tally[t, 0] += ((self.attempts[:, ATTACK] - tried) * (team == t)).sum()
            tally[t, 1] += ((self.successes[:, ATTACK] - won) * (team == t)).sum()

    monkeypatch.setattr(TouchScores, "_resolve", counted)
    obs = env.reset(seed=0)
    with torch.inference_mode():
        for _ in range(1500):
            act = torch.where(team_a, learned(obs["drones"]), scripted(obs)["drones"])
            obs, *_ = env.step({"drones": act})
    (rate_l, lo_l, _), (rate_s, _, hi_s) = (wilson_ci95(int(tally[t, 1]), int(tally[t, 0])) for t in (0, 1))
    assert tally[:, 0].min() >= 80, tally
    assert lo_l > hi_s, (rate_l, rate_s, tally)
