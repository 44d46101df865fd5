"""Self-play league: Elo, the zero-sum meta-solver, the payoff matrix, the snapshot pool and the
League's opponent distributions, each against a known answer. Pure numpy/torch, well under 5 s.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from training.selfplay import (
    EloTable,
    League,
    LeagueCfg,
    OpponentPool,
    PayoffMatrix,
    exploitability,
    group_by_opponent,
    solve_zero_sum,
)

# Row vs column expected score: rock loses to paper, beats scissors.
RPS = np.array([[0.5, 0.0, 1.0], [1.0, 0.5, 0.0], [0.0, 1.0, 0.5]])


def consistent(upper: np.ndarray) -> np.ndarray:
    """A score matrix with ``P + P^T = 1`` from its strict upper triangle."""
    p = np.triu(upper, 1)
    p = p + np.tril(1.0 - p.T, -1)
    np.fill_diagonal(p, 0.5)
    return p


def tiny_state(seed: int) -> dict[str, torch.Tensor]:
    return {"w": torch.full((2, 3), float(seed)), "b": torch.zeros(2)}


# ===================================================================== Elo
def test_elo_expected_score_formula() -> None:
    elo = EloTable(k=16.0, initial=1000.0)
    assert elo.expected("a", "b") == pytest.approx(0.5)
    elo.set_rating("a", 1400.0)
    assert elo.expected("a", "b") == pytest.approx(10.0 / 11.0)  # 1 / (1 + 10^(-400/400))
    elo.set_rating("a", 1200.0)
    assert elo.expected("a", "b") == pytest.approx(1.0 / (1.0 + 10.0**-0.5))
    assert elo.expected("a", "b") + elo.expected("b", "a") == pytest.approx(1.0)


def test_elo_winner_rises_and_pairwise_updates_conserve_the_sum() -> None:
    elo = EloTable(k=16.0, initial=1000.0)
    previous = elo.rating("a")
    for _ in range(20):
        elo.update("a", "b", 1.0)
        assert elo.rating("a") > previous
        previous = elo.rating("a")
    assert elo.rating("b") < 1000.0
    assert elo.games("a") == 20

    rng = np.random.default_rng(0)
    players = ["a", "b", "c", "d", "e"]
    for _ in range(300):
        i, j = rng.choice(5, size=2, replace=False)
        elo.update(players[i], players[j], float(rng.choice([0.0, 0.5, 1.0])), games=int(rng.integers(1, 50)))
    assert sum(elo.rating(p) for p in players) == pytest.approx(5 * 1000.0, abs=1e-6)
    ratings = [r for _, r, _ in elo.table()]
    assert ratings == sorted(ratings, reverse=True)


def test_elo_gap_converges_to_the_true_win_rate() -> None:
    """p = 0.76 per game -> gap = 400 log10(0.76 / 0.24) ~ 200 points, per game and as one batch."""
    target = 400.0 * math.log10(0.76 / 0.24)
    rng = np.random.default_rng(1)
    elo = EloTable(k=16.0)
    gaps = []
    for win in rng.random(5000) < 0.76:
        elo.update("strong", "weak", float(win))
        gaps.append(elo.rating("strong") - elo.rating("weak"))
    # K = 16 per game leaves ~50 points of noise on the gap; its time average over the second half
    # (after ~30-game correlation time, ~80 effective samples) is within a few points of the target.
    mean_gap = float(np.mean(gaps[2500:]))
    assert mean_gap == pytest.approx(target, abs=25.0)
    assert 1.0 / (1.0 + 10.0 ** (-mean_gap / 400.0)) == pytest.approx(0.76, abs=0.03)
    assert elo.rating("strong") + elo.rating("weak") == pytest.approx(2000.0)

    batch = EloTable(k=16.0)
    batch.update("strong", "weak", 0.76, games=5000)
    assert batch.rating("strong") - batch.rating("weak") == pytest.approx(target, abs=0.5)
    assert batch.games("weak") == 5000


def test_elo_batch_equals_sequential_updates_with_the_mean_score() -> None:
    batch, seq = EloTable(), EloTable()
    batch.update("a", "b", 0.3, games=7)
    for _ in range(7):
        seq.update("a", "b", 0.3)
    assert batch.rating("a") == pytest.approx(seq.rating("a"), abs=1e-9)
    with pytest.raises(ValueError, match="score_a"):
        batch.update("a", "b", 1.5)
    with pytest.raises(ValueError, match="itself"):
        batch.update("a", "a", 1.0)


# ===================================================================== meta-solver
def test_solve_zero_sum_rock_paper_scissors_is_uniform() -> None:
    mix = solve_zero_sum(RPS)
    np.testing.assert_allclose(mix, np.full(3, 1.0 / 3.0), atol=0.02)
    assert exploitability(RPS, mix) < 0.01
    assert exploitability(RPS, np.array([1.0, 0.0, 0.0])) == pytest.approx(0.5)  # paper beats pure rock


def test_solve_zero_sum_gives_a_dominated_strategy_no_mass() -> None:
    # D scores 0.4 against everything: the uniform RPS mixture beats it against every column.
    p = np.full((4, 4), 0.6)
    p[:3, :3] = RPS
    p[3, :] = 0.4
    p[3, 3] = 0.5
    mix = solve_zero_sum(p)
    assert mix[3] < 0.01
    np.testing.assert_allclose(mix[:3], np.full(3, 1.0 / 3.0), atol=0.02)
    assert exploitability(p, mix) < 0.01


def test_solve_zero_sum_finds_a_pure_dominant_strategy() -> None:
    rng = np.random.default_rng(2)
    upper = rng.uniform(0.0, 1.0, (5, 5))
    upper[0, :] = 0.8  # strategy 0 scores 0.8 against everybody
    p = consistent(upper)
    mix = solve_zero_sum(p)
    assert mix[0] > 0.99
    assert exploitability(p, mix) < 0.01


@pytest.mark.parametrize("k", [2, 6, 16])
def test_solve_zero_sum_is_a_nash_mixture_of_random_games(k: int) -> None:
    rng = np.random.default_rng(k)
    for _ in range(3):
        p = consistent(rng.uniform(0.0, 1.0, (k, k)))
        mix = solve_zero_sum(p)
        assert mix.shape == (k,) and mix.min() >= 0.0 and mix.sum() == pytest.approx(1.0)
        assert exploitability(p, mix) < 0.01


# ===================================================================== payoff
def test_payoff_orientations_agree_and_win_rates_are_smoothed() -> None:
    pay = PayoffMatrix()
    pay.record("learner", 0, wins_a=3, draws=1, losses_a=6)
    assert pay.counts(0, "learner") == (6, 1, 3)
    win_ab, draw, _ = pay.outcome_probs("learner", 0)
    win_ba, draw_ba, _ = pay.outcome_probs(0, "learner")
    assert win_ab + win_ba + draw == pytest.approx(1.0) and draw == draw_ba
    # (3 wins + 1 draw / 2 + 0.5 prior x 1 game) / (10 games + 1).
    assert pay.win_rate("learner", 0) == pytest.approx(4.0 / 11.0)
    assert pay.win_rate("learner", 0, prior_games=0.0) == pytest.approx(0.35)
    assert pay.win_rate("learner", 0) + pay.win_rate(0, "learner") == pytest.approx(1.0)
    assert pay.win_rate("learner", 7) == 0.5  # never played: the prior
    assert pay.win_rate("learner", 7, prior=0.2) == pytest.approx(0.2)
    assert math.isnan(pay.outcome_probs("learner", 7)[0])
    pay.record(0, 1, 5, 0, 0)
    m = pay.matrix(["learner", 0, 1])
    np.testing.assert_array_equal(np.diag(m), 0.5)
    np.testing.assert_allclose(m + m.T, 1.0)
    assert m[1, 2] == pytest.approx(5.5 / 6.0)
    with pytest.raises(ValueError, match="itself"):
        pay.record(0, 0, 1, 0, 0)


# ===================================================================== pool
def test_pool_snapshots_are_deep_copies() -> None:
    model = nn.Linear(3, 2)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    pool = OpponentPool(4)
    sid = pool.add(model.state_dict(), step=0)
    with torch.no_grad():
        model.weight.add_(1.0)
        model.bias.zero_()
    for k, v in pool.get(sid).items():
        torch.testing.assert_close(v, before[k])
        assert not v.requires_grad
    assert pool.get(sid)["weight"].data_ptr() != model.weight.data_ptr()


def test_pool_evicts_the_oldest_unprotected_snapshot() -> None:
    pool = OpponentPool(3)
    seed = pool.add(tiny_state(0), step=0, name="seed", protected=True)
    a, b = pool.add(tiny_state(1), 10), pool.add(tiny_state(2), 20)
    c = pool.add(tiny_state(3), 30)
    assert pool.ids == [seed, b, c] and a not in pool
    d = pool.add(tiny_state(4), 40)
    assert pool.ids == [seed, c, d] and len(pool) == 3 and pool.newest == d
    assert pool.names[seed] == "seed" and pool.meta(d).step == 40
    with pytest.raises(KeyError, match="not in the pool"):
        pool.get(a)
    with pytest.raises(ValueError, match="already in the pool"):
        pool.add(tiny_state(5), 50, name="seed")

    full = OpponentPool(2)
    full.add(tiny_state(0), 0, protected=True)
    full.add(tiny_state(1), 0, protected=True)
    with pytest.raises(ValueError, match="full of protected"):
        full.add(tiny_state(2), 0)


def test_pool_save_load_round_trip(tmp_path) -> None:
    pool = OpponentPool(2)
    pool.add(tiny_state(0), 0, name="seed", protected=True)
    pool.add(tiny_state(1), 100)
    pool.save(tmp_path)
    pool.add(tiny_state(2), 200)  # evicts id 1: its file goes on the next save
    pool.save(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.json", "snapshot_000000.pt", "snapshot_000002.pt"]

    loaded = OpponentPool.load(tmp_path)
    assert loaded.ids == pool.ids and loaded.names == pool.names and loaded.pool_size == 2
    assert [loaded.meta(i) for i in loaded.ids] == [pool.meta(i) for i in pool.ids]
    for i in pool.ids:
        for k, v in pool.get(i).items():
            torch.testing.assert_close(loaded.get(i)[k], v)
    assert loaded.add(tiny_state(3), 300) == 3  # ids keep counting up: never reused


def test_pool_load_names_a_corrupt_or_missing_file(tmp_path) -> None:
    pool = OpponentPool(4)
    pool.add(tiny_state(0), 0)
    pool.add(tiny_state(1), 1)
    pool.save(tmp_path)
    (tmp_path / "snapshot_000001.pt").write_bytes(b"not a torch file")
    with pytest.raises(ValueError, match="snapshot_000001.pt"):
        OpponentPool.load(tmp_path)
    (tmp_path / "snapshot_000001.pt").unlink()
    with pytest.raises(FileNotFoundError, match="snapshot_000001.pt"):
        OpponentPool.load(tmp_path)
    (tmp_path / "index.json").write_text("{truncated")
    with pytest.raises(ValueError, match="index.json"):
        OpponentPool.load(tmp_path)
    with pytest.raises(FileNotFoundError, match="index.json"):
        OpponentPool.load(tmp_path / "elsewhere")


# ===================================================================== league
def make_league(n_snapshots: int, seed: int = 0, numpy_rng: bool = False, **cfg) -> League:
    gen = np.random.default_rng(seed) if numpy_rng else torch.Generator().manual_seed(seed)
    league = League(LeagueCfg(**cfg), gen)
    for i in range(n_snapshots):
        league.add_snapshot(tiny_state(i), step=i * 100, from_learner=None)
    return league


def test_league_self_play_gives_all_mass_to_the_newest() -> None:
    league = make_league(4, meta_solver="self", latest_prob=0.2)
    assert league.opponent_distribution() == {0: 0.0, 1: 0.0, 2: 0.0, 3: 1.0}
    assert (league.sample_opponents(50) == 3).all()


def test_league_fsp_is_uniform_plus_latest_prob() -> None:
    dist = make_league(4, meta_solver="fsp", latest_prob=0.2).opponent_distribution()
    assert list(dist) == [0, 1, 2, 3]
    np.testing.assert_allclose(list(dist.values()), [0.2, 0.2, 0.2, 0.2 + 0.8 / 4])
    assert sum(dist.values()) == pytest.approx(1.0)
    pure = make_league(4, meta_solver="fsp", latest_prob=0.0).opponent_distribution()
    np.testing.assert_allclose(list(pure.values()), 0.25)


def test_league_first_quarter_draws_only_the_oldest_snapshots() -> None:
    """Robot soccer's rule (Tirumala et al.): opponents from the first quarter of the saved snapshots."""
    dist = make_league(8, meta_solver="first_quarter", latest_prob=0.0).opponent_distribution()
    np.testing.assert_allclose(list(dist.values()), [0.5, 0.5, 0, 0, 0, 0, 0, 0])
    small = make_league(3, meta_solver="first_quarter", latest_prob=0.0).opponent_distribution()
    assert small == {0: 1.0, 1: 0.0, 2: 0.0}  # at least one snapshot


def test_league_pfsp_weights_harder_opponents_more() -> None:
    league = make_league(3, meta_solver="pfsp", latest_prob=0.0, pfsp_power=2.0)
    league.record_results("learner", [0] * 100 + [1] * 100 + [2] * 100,
                          [1.0] * 90 + [0.0] * 10 + [1.0] * 50 + [0.0] * 50 + [1.0] * 20 + [0.0] * 80)  # fmt: skip
    dist = league.opponent_distribution()
    assert dist[2] > dist[1] > dist[0]
    p = np.array([(90 + 0.5) / 101, (50 + 0.5) / 101, (20 + 0.5) / 101])  # smoothed win rates
    expected = (1 - p) ** 2 / ((1 - p) ** 2).sum()
    np.testing.assert_allclose(list(dist.values()), expected)


def test_league_psro_nash_concentrates_on_the_nash_support() -> None:
    league = make_league(4, meta_solver="psro_nash", latest_prob=0.0)
    # Snapshots 0, 1, 2 play rock-paper-scissors; 3 scores 0.4 against each of them (dominated).
    for a, b, score in [(0, 1, 0.0), (1, 2, 0.0), (2, 0, 0.0)]:
        league.record_results(a, [b] * 100, [score] * 100)
    for a in range(3):
        league.record_results(3, [a] * 100, [1.0] * 40 + [0.0] * 60)
    dist = league.opponent_distribution()
    assert dist[3] < 0.01
    np.testing.assert_allclose([dist[0], dist[1], dist[2]], 1.0 / 3.0, atol=0.02)
    with_latest = League(LeagueCfg(meta_solver="psro_nash", latest_prob=0.2), torch.Generator(), league.pool)
    with_latest.payoff = league.payoff
    assert with_latest.opponent_distribution()[3] == pytest.approx(0.2, abs=0.01)  # newest: 0.2 + ~0


def test_sample_opponents_is_reproducible_and_matches_the_distribution() -> None:
    for numpy_rng in (False, True):
        a = make_league(4, seed=3, numpy_rng=numpy_rng, meta_solver="fsp", latest_prob=0.4)
        b = make_league(4, seed=3, numpy_rng=numpy_rng, meta_solver="fsp", latest_prob=0.4)
        draws = a.sample_opponents(20000)
        assert isinstance(draws, np.ndarray if numpy_rng else torch.Tensor)
        np.testing.assert_array_equal(np.asarray(draws), np.asarray(b.sample_opponents(20000)))
        assert not np.array_equal(np.asarray(draws[:100]), np.asarray(a.sample_opponents(100)))

        dist = a.opponent_distribution()
        expected = 20000 * np.array(list(dist.values()))
        observed = np.array([(np.asarray(draws) == i).sum() for i in dist])
        chi2 = ((observed - expected) ** 2 / expected).sum()
        assert chi2 < 16.27  # chi-square, 3 degrees of freedom, p = 0.001


def test_record_results_updates_payoff_and_elo_and_snapshots_inherit_the_learner() -> None:
    league = make_league(2, meta_solver="pfsp")
    league.record_results("learner", torch.tensor([0, 1, 0, 1, 0]), torch.tensor([1.0, 0.5, 1.0, 0.0, 0.0]))
    assert league.payoff.counts("learner", 0) == (2, 0, 1)
    assert league.payoff.counts(1, "learner") == (1, 1, 0)
    assert league.elo.games("learner") == 5 and league.elo.rating(0) < 1000.0
    with pytest.raises(ValueError, match="scores must be"):
        league.record_results("learner", [0], [0.7])
    with pytest.raises(ValueError, match="same length"):
        league.record_results("learner", [0, 1], [1.0])

    rating = league.elo.rating("learner")
    new = league.add_snapshot(tiny_state(9), step=900)
    assert league.elo.rating(new) == rating
    assert league.payoff.counts(new, 0) == (2, 0, 1) and league.payoff.games("learner", 0) == 0


def test_eviction_drops_payoff_rows_but_late_results_still_rate() -> None:
    league = make_league(2, pool_size=2)
    league.record_results("learner", [0, 1], [1.0, 1.0])
    league.add_snapshot(tiny_state(5), step=500, from_learner=None)  # evicts 0
    assert league.pool.ids == [1, 2] and 0 not in league.payoff.players()
    games = league.elo.games(0)
    league.record_results("learner", [0], [1.0])  # sampled before the eviction, finished after
    assert league.elo.games(0) == games + 1 and 0 not in league.payoff.players()


def test_group_by_opponent_partitions_the_env_slots() -> None:
    groups = group_by_opponent(torch.tensor([3, 1, 3, 2, 1]))
    assert list(groups) == [1, 2, 3]
    assert [g.tolist() for g in groups.values()] == [[1, 4], [3], [0, 2]]
    assert group_by_opponent(np.array([7, 7]))[7].tolist() == [0, 1]


@pytest.mark.parametrize("numpy_rng", [False, True])
def test_league_state_dict_round_trip(tmp_path, numpy_rng: bool) -> None:
    league = make_league(3, seed=5, numpy_rng=numpy_rng, meta_solver="pfsp", pool_size=4)
    league.record_results("learner", league.sample_opponents(64), np.repeat([1.0, 0.0, 0.5, 1.0], 16))
    league.add_snapshot(tiny_state(7), step=700)
    league.record_results("learner", league.sample_opponents(32), np.repeat([0.0, 1.0], 16))
    league.pool.save(tmp_path / "pool")
    torch.save(league.state_dict(), tmp_path / "league.pt")

    state = torch.load(tmp_path / "league.pt", weights_only=True)  # what a checkpoint load does
    gen = np.random.default_rng(99) if numpy_rng else torch.Generator().manual_seed(99)
    resumed = League(league.cfg, gen, OpponentPool.load(tmp_path / "pool"))
    resumed.load_state_dict(state)
    assert resumed.opponent_distribution() == league.opponent_distribution()
    assert resumed.elo_table() == league.elo_table()
    np.testing.assert_array_equal(np.asarray(resumed.sample_opponents(100)), np.asarray(league.sample_opponents(100)))

    other = League(league.cfg, gen)  # an empty pool: not the one this state refers to
    with pytest.raises(ValueError, match="load the pool saved"):
        other.load_state_dict(state)


def test_league_cfg_validation() -> None:
    with pytest.raises(ValueError, match="meta_solver"):
        LeagueCfg(meta_solver="nash")
    with pytest.raises(ValueError, match="latest_prob"):
        LeagueCfg(latest_prob=1.5)
    with pytest.raises(RuntimeError, match="add_snapshot"):
        League(LeagueCfg(), torch.Generator()).opponent_distribution()


def test_fit_elo_recovers_the_logistic_gap_and_orders_a_round_robin() -> None:
    from training.selfplay import fit_elo

    # Two players, A scores 0.76 over many games: the Elo gap is 400 log10(0.76 / 0.24) ~ 200.
    r = fit_elo(np.array([[0.0, 0.76], [0.24, 0.0]]), np.array([[0, 100_000], [100_000, 0]]))
    assert abs((r[0] - r[1]) - 400 * np.log10(0.76 / 0.24)) < 1.0 and abs(r.mean() - 1000.0) < 1e-6
    # Three players from true ratings: the fit recovers them (large samples, exact expected scores).
    true = np.array([1200.0, 1000.0, 800.0])
    exp = 1.0 / (1.0 + 10 ** ((true[None, :] - true[:, None]) / 400))
    g = np.full((3, 3), 1_000_000) * (1 - np.eye(3))
    np.testing.assert_allclose(fit_elo(exp, g), true, atol=0.5)
    # A clean sweep stays finite thanks to the virtual draws; more games widen the gap.
    sweep = np.array([[0.0, 1.0], [0.0, 0.0]])
    gap = [np.diff(fit_elo(sweep, np.array([[0, k], [k, 0]])))[0] for k in (10, 100)]
    assert -2000 < gap[1] < gap[0] < 0


def test_self_play_runs_a_recurrent_image_policy_against_its_snapshots(tmp_path) -> None:
    """Self-play for structured, recurrent policies (robot soccer's vision agents): the opponents read the same
    observation dict (images + proprioception) and keep their own LSTM memory per env."""
    from pathlib import Path

    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from training.selfplay_runner import SelfPlayRunner

    over = ["task=robot_soccer", "task.opponent=none", "task.observation=vision", "task.camera.background=",
            "algo=selfplay", "algo.policy.memory=lstm", "algo.policy.memory_hidden=32", "league.snapshot_every=1",
            "league.meta_solver=first_quarter", "league.opponents_per_iteration=2", "num_envs=4",
            "train.rollout_steps=4", "train.total_steps=48", "train.eval_every=0", "train.progress=false",
            "device=cpu", "torch_threads=1", "wandb.mode=disabled", f"runs_dir={tmp_path}"]  # fmt: skip
    root = Path(__file__).resolve().parents[1]
    with initialize_config_dir(config_dir=str(root / "configs"), version_base=None):
        cfg = OmegaConf.to_container(compose(config_name="config", overrides=over), resolve=True)
    runner = SelfPlayRunner(cfg)
    runner.learn()
    assert len(runner.league.pool) == 1 + 3  # the initial policy and one snapshot per iteration
    obs = runner.env.observe()
    runner.other_actions(obs)
    assert runner.opp_memory is not None and runner.opp_memory.abs().sum() > 0


def test_a_match_plays_its_scripted_team_where_the_league_draws_it(tmp_path) -> None:
    """``league.env_scripted``: the env's rule-based team joins the pool as the protected snapshot ``scripted``, and
    in the envs where it is drawn it flies the opponent group whatever the snapshot's actions say; elsewhere the
    snapshot's actions stand, and the drones' observed skill commands stay untouched (a flat opponent reads them)."""
    from pathlib import Path

    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from sim.tasks.drone_volleyball.teams import scripted_team
    from training.selfplay_runner import SelfPlayRunner

    over = ["task=drone_volleyball", "task.mode=1v1", "algo=selfplay", "league.env_scripted=true",
            "league.opponents_per_iteration=2", "num_envs=8", "train.rollout_steps=4", "train.total_steps=64",
            "train.eval_every=0", "train.progress=false", "device=cpu", "torch_threads=1", "wandb.mode=disabled",
            f"runs_dir={tmp_path}"]  # fmt: skip
    root = Path(__file__).resolve().parents[1]
    with initialize_config_dir(config_dir=str(root / "configs"), version_base=None):
        cfg = OmegaConf.to_container(compose(config_name="config", overrides=over), resolve=True)
    runner = SelfPlayRunner(cfg)
    pool = runner.league.pool
    assert [pool.names[i] for i in pool.ids] == ["scripted", "initial"] and runner._eval_opponent() == pool.ids[0]
    runner.learn()
    with torch.inference_mode():  # the env's buffers are the rollout's inference tensors
        env = runner.env
        mask = torch.zeros(8, dtype=torch.bool)
        mask[:4] = True
        env.set_scripted_opponent("team_b", mask)
        reference = scripted_team(env)  # a second scripted team, fresh like the env's was at its first call
        env.reset(seed=1)
        commands = env.skill_id.clone(), env.skill_target.clone()
        env._scripted_team = scripted_team(env)
        want = reference(env, None, 1)
        env.skill_id, env.skill_target = commands
        given = torch.full((8, 1, 4), 0.3)
        env._apply_actions({"team_a": torch.zeros(8, 1, 4), "team_b": given})
        torch.testing.assert_close(env.cmd[:4, 1], want[:4, 0])
        torch.testing.assert_close(env.cmd[4:, 1], given[4:, 0])
        assert torch.equal(env.skill_id, commands[0]) and torch.equal(env.skill_target, commands[1])
    with pytest.raises(ValueError, match="group"):
        env.set_scripted_opponent("team_c", mask)
