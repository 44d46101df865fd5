"""Volleyball matches and self-play: results bookkeeping, both sides, the league, and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import sim
from sim.tasks.drone_volleyball.teams import hover_team
from training.checkpoint import load_checkpoint
from training.matches import play_matches, summarize_matches
from training.selfplay_runner import SelfPlayRunner

ROOT = Path(__file__).resolve().parents[1]


def falling_team(env, obs: dict, team: int) -> torch.Tensor:
    """Zero thrust: the team's drones fall and crash (a drone fault of that team)."""
    group = env.spec.groups[("team_a", "team_b")[team]]
    act = torch.zeros(env.num_envs, group.n_agents, group.action_dim)
    act[..., 0] = -1.0
    return act


def test_a_team_that_crashes_loses_every_game_on_either_side() -> None:
    env = sim.make("drone_volleyball", num_envs=16, seed=0, mode="2v2", episode_length_s=4.0)
    as_a = summarize_matches(play_matches(env, falling_team, hover_team, games=16))
    as_b = summarize_matches(play_matches(env, hover_team, falling_team, games=16))
    # A serving hover team double-touches its own toss before the other team hits the ground in some
    # games; the falling team loses every other game.
    assert as_a["win_rate_a"] <= 0.5 and as_b["win_rate_a"] >= 0.5
    assert as_a["outcomes_per_game"]["drone_crash"] > 0.4 and as_b["outcomes_per_game"]["drone_crash"] > 0.4
    assert as_a["games"] == 16 and as_a["wins_a"] + as_a["draws"] + as_a["losses_a"] == 16
    lo, hi = as_b["win_rate_ci95"]
    assert lo <= as_b["win_rate_a"] <= hi


def test_matches_are_reproducible_for_a_seed() -> None:
    env = sim.make("drone_volleyball", num_envs=8, seed=0, mode="1v1", episode_length_s=2.0)
    a = play_matches(env, hover_team, hover_team, games=12, seed=3)
    b = play_matches(env, hover_team, hover_team, games=12, seed=3)
    assert torch.equal(a.result, b.result) and a.games == 12


def _cfg(tmp_path: Path, *overrides: str) -> dict:
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
        cfg = compose(
            config_name="config",
            overrides=[
                "task=drone_volleyball",
                "algo=selfplay",
                "++task.mode=1v1",
                "++task.episode_length_s=2.0",
                "device=cpu",
                "torch_threads=1",
                "wandb.mode=disabled",
                "train.progress=false",
                "num_envs=32",
                "train.rollout_steps=16",
                "train.total_steps=3072",
                "train.eval_every=3",
                "train.eval_envs=8",
                "algo.policy.actor_hidden=[32]",
                "algo.policy.critic_hidden=[32]",
                "league.snapshot_every=2",
                "league.opponents_per_iteration=2",
                f"runs_dir={tmp_path}",
                *overrides,
            ],
        )
    return OmegaConf.to_container(cfg, resolve=True)


def test_selfplay_runner_trains_one_team_against_league_snapshots(tmp_path: Path) -> None:
    runner = SelfPlayRunner(_cfg(tmp_path))
    assert list(runner.models) == ["team_a"]  # team_b is played by frozen snapshots
    state = runner.learn()
    assert state.iteration == 6
    pool = runner.league.pool
    assert len(pool) == 1 + 3  # the protected initial policy + a snapshot every 2 iterations
    assert runner.league.elo.games("learner") + sum(runner.league.elo.games(i) for i in pool.ids) > 0
    # Snapshots are copies of the learner at that time, not views of the live weights.
    live = runner.models["team_a"].state_dict()
    first = pool.get(pool.ids[0])
    assert any(not torch.equal(first[k], live[k].cpu()) for k in first if first[k].is_floating_point())
    ckpt = load_checkpoint(runner.run_dir / "checkpoints" / "latest.pt")
    assert {k.split(".")[0] for k in ckpt["model"]} == {"team_a"}
    assert (runner.run_dir / "league" / "index.json").is_file()
    rows = (runner.run_dir / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    assert "selfplay/elo_learner" in header and "eval/metrics/win_a" in header

    # Resume picks the league up again.
    resumed = SelfPlayRunner(_cfg(tmp_path, f"resume={runner.run_dir}", "train.total_steps=4096"))
    assert len(resumed.league.pool) == len(pool)


def test_selfplay_results_cost_no_host_sync_per_step_and_land_on_the_right_opponents(tmp_path: Path) -> None:
    """Issue 14: the per-step bookkeeping of finished games keeps whole-batch copies (no ``nonzero``);
    the iteration's end records each finished game against the snapshot that played it, from the
    learner's side, and skips unfinished (NaN) results."""
    from test_reliability import _SyncCounter  # tests/ is on sys.path (pytest rootdir-relative imports)

    runner = SelfPlayRunner(_cfg(tmp_path, "league.learner_group=team_b"))
    E = runner.env.num_envs
    runner.opp_ids[:] = torch.arange(E) % 3
    runner.env.game_result = torch.full((E,), float("nan"))
    runner.env.game_result[[0, 1, E - 1]] = torch.tensor([1.0, 0.0, 0.5])  # team_a won, lost, drew
    done = torch.zeros(E, dtype=torch.bool)
    done[[0, 1, 2, E - 1]] = True  # env 2 ended without a result (NaN): not a game
    counter = _SyncCounter()
    with counter:
        runner.after_env_step(done, torch.zeros_like(done), {})
        runner.after_env_step(torch.zeros_like(done), torch.zeros_like(done), {})
    assert counter.calls == []
    recorded = []
    runner.league.record_results = lambda who, ids, scores: recorded.append((who, ids.tolist(), scores.tolist()))
    row = runner.end_iteration()
    assert recorded == [("learner", [0, 1, (E - 1) % 3], [0.0, 1.0, 0.5])]  # team_b's side of each game
    assert row["selfplay/games"] == 3 and row["selfplay/score_vs_pool"] == 0.5


def test_evaluate_cli_plays_a_match_and_prints_json_last() -> None:
    cmd = [sys.executable, "evaluate.py", "task=drone_volleyball", "match=hover,hover", "games=8"]
    cmd += ["task.mode=1v1", "task.episode_length_s=2.0"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["games"] == 8 and 0.0 <= report["win_rate_a"] <= 1.0 and len(report["win_rate_ci95"]) == 2
    bad = subprocess.run([*cmd[:3], "match=hover,nobody", "games=2"], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown team 'nobody'" in bad.stderr


def test_evaluate_cli_league_rates_the_scripted_team_above_hovering() -> None:
    cmd = [sys.executable, "evaluate.py", "task=drone_volleyball", "league=hover,scripted", "games=8"]
    cmd += ["task.mode=1v1", "task.episode_length_s=4.0", "task.rules.rally_time_limit_s=3.5"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [(p["team_a"], p["team_b"]) for p in report["pairs"]] == [("hover", "scripted")]
    assert report["pairs"][0]["win_rate_a"] < 0.5
    assert report["elo"]["scripted"] > report["elo"]["hover"] + 100


def test_a_league_reuses_the_pairs_of_an_earlier_report_only_under_the_same_setting(
    evaluate_cli, tmp_path, capsys
) -> None:
    evaluate = evaluate_cli
    base = ["task=drone_volleyball", "games=4", "task.mode=1v1", "task.episode_length_s=1.0"]
    first = tmp_path / "league.json"
    assert evaluate.main([*base, "league=hover,scripted", f"report={first}"]) == 0
    old = json.loads(first.read_text())
    old["pairs"][0]["win_rate_a"] = 0.875  # a mark: a reused pair keeps it, a replayed one would not
    first.write_text(json.dumps(old))
    capsys.readouterr()
    learned = f"rulebased:{ROOT / 'assets/policies/drone_volleyball'}"  # the rule-based team on the solo skills
    assert evaluate.main([*base, f"league=hover,scripted,{learned}", f"league_reuse={first}"]) == 0
    out = capsys.readouterr()
    report = json.loads(out.out.strip().splitlines()[-1])
    by_pair = {(p["team_a"], p["team_b"]): p for p in report["pairs"]}
    assert by_pair[("hover", "scripted")]["win_rate_a"] == 0.875
    assert len(by_pair) == 3 and "2 matches played (1 reused)" in out.err
    # Another number of games or another task config: the old results are not comparable.
    assert evaluate.main([*base[:1], "games=2", *base[2:], "league=hover,scripted", f"league_reuse={first}"]) == 2
    assert "played with games=4, this league games=2" in capsys.readouterr().err
    assert evaluate.main([*base, "task.rules.points_to_win=3", "league=hover,scripted", f"league_reuse={first}"]) == 2
    assert "differs from this league's in rules" in capsys.readouterr().err


def test_rule_based_team_flies_learned_skills_where_given_and_scripted_elsewhere() -> None:
    from sim.tasks.drone_volleyball.teams import rule_based_team

    class Marker(torch.nn.Module):
        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return torch.full((*obs.shape[:-1], 4), 0.123)

    env = sim.make("drone_volleyball", num_envs=8, seed=0, mode="3v3")
    obs = env.reset()
    team = rule_based_team(env, {"goto": Marker()})
    action = team(env, obs, 1)  # team B
    goto = env.skill_id[:, 3:] == 0  # the strategy's commands for team B's drones
    assert goto.any() and (~goto).any()
    assert torch.allclose(action[goto], torch.full_like(action[goto], 0.123))
    assert not torch.isclose(action[~goto], torch.full_like(action[~goto], 0.123)).all(-1).any()
