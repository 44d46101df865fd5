"""HCSP stage 3 (co-self-play): the skills-in-matches env, learned skills under the strategy env,
and the co-self-play run end to end.

Measured (``runs/scratch/coplay_smoke.py``: 256 envs, 600 steps, rule-based commands on both
sides): the scripted skills score 100% on every skill in matches (every rally reaches the 9.5 s
limit); hovering servers touch the dropped ball but never serve it over.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import sim
from sim.tasks.drone_volleyball import rules as R
from sim.tasks.drone_volleyball.coplay import ATTACK, GROUP, PASS, SET
from sim.tasks.drone_volleyball.skills import ScriptedSkills
from sim.tasks.drone_volleyball.strategy import RULE_BASED_CHOICE, choice_sizes
from training.checkpoint import load_checkpoint
from training.selfplay import OpponentPool

ROOT = Path(__file__).resolve().parents[1]
STRATEGY = ROOT / "assets" / "policies" / "drone_volleyball" / "strategy.pt"


def _episode_means(env, policy, steps: int) -> dict[str, float]:
    obs, sums, count = env.reset(seed=0), {}, 0.0
    for _ in range(steps):
        obs, _, _, _, info = env.step(policy(obs))
        if "episode" in info:
            n = float(info["episode"]["count"])
            count += n
            for k, v in info["episode"].items():
                sums[k] = sums.get(k, 0.0) + float(v) * n
    return {k: v / count for k, v in sums.items()} if count else {}


def test_scripted_skills_succeed_in_matches_and_hovering_drones_never_touch() -> None:
    # 4.9 s rallies (the scripted teams' last to the limit): a serve, pass, set and attack each.
    env = sim.make(
        "drone_volleyball_coplay", num_envs=12, seed=0, episode_length_s=5.0, rules={"rally_time_limit_s": 4.9}
    )
    assert env.spec.groups[GROUP].n_agents == 6
    assert env.spec.groups[GROUP].observations["policy"].shape == (34,)
    scripted = _episode_means(env, env.expert_policy(), 250)
    assert scripted["metrics/serve_attempts"] >= 0.9  # every rally starts with a serve
    for skill in ("serve", "pass", "set", "attack"):
        assert scripted[f"metrics/{skill}_attempts"] >= 0.5 and scripted[f"metrics/{skill}_success"] >= 0.9, skill
    hover = _episode_means(env, lambda obs: env.hover_actions(), 120)  # the dropped serve bounces off the paddle
    assert hover["metrics/skill_success"] == 0.0 and hover["metrics/serve_attempts"] > 0


def _events(E: int, D: int, touch: dict[int, int], rally_over=(), point_to=None, crossed=(), outcome=R.LAND_IN):
    hit = torch.zeros(E, D, dtype=torch.bool)
    for e, d in touch.items():
        hit[e, d] = True
    over = torch.zeros(E, dtype=torch.bool)
    over[list(rally_over)] = True
    cross = torch.zeros(E, dtype=torch.bool)
    cross[list(crossed)] = True
    pt = torch.full((E,), -1, dtype=torch.long) if point_to is None else torch.tensor(point_to)
    return R.RallyEvents(
        point_to=pt,
        outcome=torch.where(over, outcome, R.NONE),
        fault_team=torch.full((E,), -1, dtype=torch.long),
        crossed=cross,
        valid_hit=hit,
        game_over=over,
        rally_over=over,
    )


def test_touch_outcomes_are_scored_by_what_the_ball_does_next() -> None:
    """Hand-built touches: env 0 a pass that reaches its target (0.5 m) and a teammate plays it;
    env 1 a pass that stays 3 m off; env 2 an attack that crosses and lands in (point to A);
    env 3 an attack that never crosses before the rally ends (point to B)."""
    env = sim.make("drone_volleyball_coplay", num_envs=4, seed=0)
    env.reset(seed=0)
    m, scores = env.match, env.scores  # the match the scores read, and the scores
    E, D = 4, env.num_drones
    target = torch.tensor((-1.0, 0.0, 2.5))
    m.skill_id = torch.tensor(
        [[PASS, 0, 0, 0, 0, 0], [PASS, 0, 0, 0, 0, 0], [ATTACK, 0, 0, 0, 0, 0], [ATTACK, 0, 0, 0, 0, 0]]
    )
    m.skill_target = target.expand(E, D, 3).clone()
    m.ball_pos = target.expand(E, 3) + torch.tensor([[0.5, 0, 0], [3.0, 0, 0], [0, 0, 0], [0, 0, 0]])
    m.events = _events(E, D, {0: 0, 1: 0, 2: 0, 3: 0})  # drone 0 touches in every env
    scores.update(m)
    assert (scores.attempts.sum(-1) == 0).all()  # pending until the ball's flight ends
    m.skill_id = torch.full((E, D), SET)
    m.ball_pos = torch.tensor([[-3.0, 0, 2.0], [-3.0, 0, 2.0], [3.0, 0, 0.1], [-3.0, 0, 0.1]])
    m.events = _events(E, D, {0: 1, 1: 1}, rally_over=(2, 3), point_to=[-1, -1, 0, 1], crossed=(2,))
    scores.update(m)
    assert scores.attempts[:, PASS].tolist() == [1, 1, 0, 0] and scores.attempts[:, ATTACK].tolist() == [0, 0, 1, 1]
    assert scores.successes[:, PASS].tolist() == [1, 0, 0, 0] and scores.successes[:, ATTACK].tolist() == [0, 0, 1, 0]
    assert scores.delivery[0, 0] > scores.delivery[1, 0] > 0  # exp(-miss): 0.5 m beats 3 m
    assert scores.delivery[2, 0] == env.cfg.skill_rewards.in_court and scores.delivery[3, 0] == 0
    # The new touches (a set in envs 0 and 1) are pending; a timeout drops them unscored.
    m.events = _events(E, D, {}, rally_over=(0, 1), outcome=R.TIMEOUT)
    scores.update(m)
    assert scores.attempts[:, SET].sum() == 0 and (scores.pend_skill == -1).all()


def test_the_strategy_sets_the_commands_the_skills_see() -> None:
    env = sim.make("drone_volleyball_coplay", num_envs=6, seed=0)
    nvec = choice_sizes(env.n)
    # A strategy that always lets drone 3 (choice 3) of team A play the ball.
    fixed = torch.tensor([(3, 0, 4, 0)], dtype=torch.float32)
    as_action = -1 + 2 * fixed / (torch.tensor(nvec, dtype=torch.float32) - 1)
    env.set_strategy(0, lambda obs: as_action.expand(obs.shape[0], 4))
    obs = env.reset(seed=3)
    assert env.choices[:, 0].tolist() == [[3, 0, 4, 0]] * 6
    assert env.choices[:, 1].tolist() == [list(RULE_BASED_CHOICE)] * 6
    skill_onehot = obs[GROUP]["policy"][..., env.spec.groups[GROUP].observations["policy"].slices()["skill"]]
    assert torch.equal(skill_onehot.argmax(-1), env.match.skill_id)
    with pytest.raises(ValueError, match="team must be 0 or 1"):
        env.set_strategy(2, None)


def test_strategy_env_flies_learned_skills_through_set_skills() -> None:
    """A 'learned' skill policy that is the scripted skills on the same commands reproduces the
    scripted run exactly: the strategy env hands every drone's skill observation to the policy."""
    results = []
    for learned in (False, True):
        env = sim.make("drone_volleyball_strategy", num_envs=8, seed=0, strategy={"decision_steps": 5})
        if learned:
            scripted = ScriptedSkills(env.match)

            def policy(skill_obs, scripted=scripted, env=env):
                assert skill_obs.shape == (8, 6, 34)
                return torch.cat(list(scripted().values()), 1)

            env.set_skills(policy)
        env.reset(seed=1)
        act = {g: torch.zeros(8, 1, 4) for g in ("team_a", "team_b")}
        for _ in range(6):
            env.step(act)
        results.append(env.match.ball_pos.clone())
    assert torch.equal(results[0], results[1])


@pytest.mark.skipif(not STRATEGY.is_file(), reason="shipped strategy missing")
def test_coselfplay_runs_both_phases_from_the_stage2_strategy(tmp_path) -> None:
    from training.coselfplay import run

    cfg = {
        "seed": 0,
        "device": "cpu",
        "runs_dir": str(tmp_path),
        # 1 s episodes: the ball prediction in the rule layer costs ~10 ms a step whatever the batch.
        "task": {"name": "drone_volleyball", "episode_length_s": 1.0, "rules": {"rally_time_limit_s": 0.9}},
        "algo": {"name": "hcsp", "critic_input": "state", "policy": {"actor_hidden": [32], "critic_hidden": [32]}},
        "train": {"rollout_steps": 8, "eval_every": 1, "eval_envs": 2, "progress": False},
        "imitation": {"expert": "task", "rounds": 2, "steps": 4, "epochs": 1, "critic_warmup": 0},
        "wandb": {"mode": "disabled"},
        "coselfplay": {
            "strategy": str(STRATEGY),
            "skills_steps": 64,
            "strategy_steps": 8,
            "skills_num_envs": 8,
            "strategy_num_envs": 8,
        },
    }
    run_dir = run(cfg)
    log = json.loads((run_dir / "coselfplay.json").read_text())
    assert [r["phase"] for r in log] == ["skills", "strategy"]
    skills = load_checkpoint(run_dir / "skills.pt")
    assert skills["task_cfg"]["name"] == "drone_volleyball_coplay"
    assert skills["task_cfg"]["strategy"]["decision_steps"] == 25  # the stage-2 strategy's decision rate
    assert (Path(log[0]["run_dir"]) / "imitation.json").is_file()
    # The strategy phase started from the stage-2 weights: its protected "initial" snapshot is them.
    pool = OpponentPool.load(Path(log[1]["run_dir"]) / "league")
    initial = pool.get(next(i for i, name in pool.names.items() if name == "initial"))
    stage2 = load_checkpoint(STRATEGY)["model"]
    # Every stage-2 tensor is in the snapshot (by value: the policy's parameter names may have moved on).
    snapshot = list(initial.values())
    for k, v in stage2.items():
        if k.startswith("team_a."):
            assert any(w.shape == v.shape and torch.equal(w, v) for w in snapshot), k
    assert load_checkpoint(run_dir / "strategy.pt")["task_cfg"]["name"] == "drone_volleyball_strategy"


STAGE3 = ROOT / "assets" / "policies" / "drone_volleyball"


@pytest.mark.skipif(not (STAGE3 / "stage3_skills.pt").is_file(), reason="shipped stage-3 team missing")
def test_coselfplay_without_a_skills_phase_retrains_the_strategy_over_given_skills(tmp_path) -> None:
    """Issue 21: ``coselfplay.skills_steps=0`` retrains a strategy over learned skills as they are (e.g. the
    stage-3 team for rotated servers, ``task.opening_server=random``); the run's skills are the given ones."""
    from training.coselfplay import run

    cfg = {
        "seed": 0,
        "device": "cpu",
        "runs_dir": str(tmp_path),
        "task": {"name": "drone_volleyball", "episode_length_s": 1.0, "rules": {"rally_time_limit_s": 0.9}},
        "algo": {"name": "hcsp", "critic_input": "state"},
        "train": {"eval_every": 1, "eval_envs": 2, "progress": False},
        "wandb": {"mode": "disabled"},
        "coselfplay": {"strategy": str(STAGE3 / "stage3_strategy.pt"), "skills_steps": 0, "strategy_steps": 8},
    }
    cfg["coselfplay"].update(strategy_num_envs=8, opponent_skills="scripted")
    cfg["task"]["opening_server"] = "random"
    with pytest.raises(ValueError, match="skills_steps=0"):
        run(cfg)
    cfg["coselfplay"]["skills"] = str(STAGE3 / "stage3_skills.pt")
    run_dir = run(cfg)
    log = json.loads((run_dir / "coselfplay.json").read_text())
    assert [r["phase"] for r in log] == ["strategy"]
    assert (run_dir / "skills.pt").read_bytes() == (STAGE3 / "stage3_skills.pt").read_bytes()
    task = load_checkpoint(run_dir / "strategy.pt")["task_cfg"]
    assert task["opening_server"] == "random"  # the run's task keys reach the strategy phase...
    assert task["strategy"]["team_b_skills"] == "scripted"  # ...its opponents fly the scripted skills...
    assert task["strategy"]["decision_steps"] == 25  # ...at the stage-2 strategy's decision rate


@pytest.mark.skipif(not (STAGE3 / "stage3_skills.pt").is_file(), reason="shipped stage-3 team missing")
def test_team_b_can_fly_the_scripted_skills_while_team_a_flies_learned_ones() -> None:
    """Issue 21: a strategy over learned skills trained only against learned-skill opponents lost to the scripted
    team; ``strategy.team_b_skills=scripted`` gives its opponents (team B) the scripted skills."""
    from training.coselfplay import skills_policy

    skills = skills_policy(STAGE3 / "stage3_skills.pt", "cpu", "drone_volleyball_coplay")
    acts = {}
    for team_b in ("same", "scripted"):
        env = sim.make("drone_volleyball_strategy", num_envs=6, seed=0, strategy={"team_b_skills": team_b})
        env.set_skills(skills)
        env.reset(seed=0)
        env.step(env.zero_actions())  # a serve under way: the skills act differently
        act = env.skill_step(env.choices)
        learned, scripted = skills(env.match.skill_observation()), env.skills()
        assert torch.equal(act["team_a"], learned[:, :3]) and not torch.equal(act["team_a"], scripted["team_a"])
        acts[team_b] = (act["team_b"], learned[:, 3:], scripted["team_b"])
    assert torch.equal(acts["same"][0], acts["same"][1])
    assert torch.equal(acts["scripted"][0], acts["scripted"][2]) and not torch.equal(
        acts["scripted"][0], acts["scripted"][1]
    )
    with pytest.raises(ValueError, match="team_b_skills"):
        sim.make("drone_volleyball_strategy", num_envs=2, strategy={"team_b_skills": "hover"})
