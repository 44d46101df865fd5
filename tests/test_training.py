"""Training stack: PPO pieces with known answers, checkpoints, resume, and learning on point_reach.

Runs use the tiny ``point_reach`` task, small networks and one torch thread, so the whole file takes
well under two minutes on a 2-core CPU. ``train.py`` itself runs once in a subprocess.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from policies import ActorCritic, AgentLinear, GroupDims, PolicyCfg, RunningNorm
from training.checkpoint import FORMAT, load_checkpoint, load_policy, save_checkpoint
from training.ppo import PPO, PPOCfg
from training.runner import Runner
from training.storage import RolloutStorage

ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = str(ROOT / "configs")
TINY = [
    "task=point_reach",
    "device=cpu",
    "torch_threads=1",
    "wandb.mode=disabled",
    "train.progress=false",
    "num_envs=32",
    "train.rollout_steps=8",
    "algo.policy.actor_hidden=[32,32]",
    "algo.policy.critic_hidden=[32,32]",
    "train.eval_envs=16",
]


def make_cfg(tmp_path: Path, *overrides: str) -> dict:
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name="config", overrides=[*TINY, f"runs_dir={tmp_path}", *overrides])
    return OmegaConf.to_container(cfg, resolve=True)


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# ===================================================================== building blocks
def test_running_norm_merges_batches_like_one_batch() -> None:
    x = torch.randn(1000, 5) * torch.tensor([1.0, 2.0, 0.1, 5.0, 1.0]) + 3.0
    norm = RunningNorm(5)
    for chunk in x.split([1, 99, 400, 500]):
        norm.update(chunk)
    torch.testing.assert_close(norm.mean, x.mean(0), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(norm.var, x.var(0, unbiased=False), rtol=1e-4, atol=1e-5)
    y = norm(x)
    torch.testing.assert_close(y.mean(0), torch.zeros(5), atol=1e-4, rtol=0)
    torch.testing.assert_close(norm.denormalize(norm.normalize(x)), x, atol=1e-4, rtol=1e-5)


def test_running_norm_of_a_rollout_sized_batch_matches_float64_moments() -> None:
    """A batch longer than one block of rows (summed block by block) keeps the float64 moments, offsets and a
    constant feature included."""
    gen = torch.Generator().manual_seed(0)
    scale, offset = torch.tensor([1.0, 0.01, 3.0, 0.0]), torch.tensor([0.0, 50.0, -2.0, 7.0])
    x = torch.randn(20_000, 4, generator=gen) * scale + offset
    norm = RunningNorm(4)
    norm.update(x)
    ref = x.double()
    torch.testing.assert_close(norm.mean.double(), ref.mean(0), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(norm.var.double(), ref.var(0, unbiased=False), rtol=1e-4, atol=1e-9)


def test_the_compiled_cpu_elu_is_elu_forward_and_backward() -> None:
    """The ELU of compiled runs on a CPU (policies.mlp.set_compiled_cpu_elu) computes torch's ELU and its gradient,
    takes the compiled kernel only on large inputs, and is switched off again by False."""
    from policies.mlp import COMPILED_ELU_MIN_NUMEL, ELU, set_compiled_cpu_elu
    from training.config import cpu_compiler_available

    if not cpu_compiler_available():
        pytest.skip("no C++ compiler for torch.compile")
    gen = torch.Generator().manual_seed(0)
    x = (3 * torch.randn(COMPILED_ELU_MIN_NUMEL // 128 + 1, 128, generator=gen)).requires_grad_()
    grad = torch.randn(x.shape, generator=gen)
    act = ELU()
    set_compiled_cpu_elu(True)
    try:
        y = act(x)
        small = act(x[:2])
        with torch.inference_mode():  # a rollout's policy step takes it too
            rollout = act(x.detach())
    finally:
        set_compiled_cpu_elu(False)
    assert type(y.grad_fn).__name__ == "_CompiledELUBackward"
    assert type(small.grad_fn).__name__ == "EluBackward0"  # a small input stays with torch's kernel
    assert type(act(x).grad_fn).__name__ == "EluBackward0"  # off again
    (dx,) = torch.autograd.grad(y, x, grad)
    ref = torch.nn.functional.elu(x)
    (ref_dx,) = torch.autograd.grad(ref, x, grad)
    torch.testing.assert_close(y, ref, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(rollout, ref.detach(), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(dx, ref_dx, rtol=1e-6, atol=1e-6)


def test_agent_linear_is_one_linear_per_agent() -> None:
    layer = AgentLinear(3, 4, 2)
    x = torch.randn(7, 3, 4)
    y = layer(x)
    for a in range(3):
        torch.testing.assert_close(y[:, a], x[:, a] @ layer.weight[a] + layer.bias[a])


@pytest.mark.parametrize("sharing", ["shared", "per_agent"])
def test_sharing_switch(sharing: str) -> None:
    """Identical observations give identical actions with shared weights, different ones per agent."""
    ac = ActorCritic(GroupDims(3, 4, 6, 2), PolicyCfg(sharing=sharing, actor_hidden=(16,), critic_hidden=(16,)))
    for p in ac.actor.parameters():  # beyond the near-zero output init
        torch.nn.init.normal_(p)
    obs = torch.randn(5, 1, 4).expand(5, 3, 4)
    mean = ac.action_mean(obs)
    same = torch.allclose(mean[:, 0], mean[:, 1])
    assert same == (sharing == "shared")
    assert ac.value(torch.randn(5, 3, 6)).shape == (5, 3)


@pytest.mark.parametrize("sharing", ["shared", "per_agent"])
def test_deterministic_actor_is_a_pure_trace(sharing: str) -> None:
    """The deployable actor has no Python control flow on values: fx traces it and the trace agrees."""
    ac = ActorCritic(GroupDims(3, 4, 6, 2), PolicyCfg(sharing=sharing, layer_norm=True, actor_hidden=(16, 16)))
    ac.obs_norm.update(torch.randn(100, 3, 4) * 3 + 1)
    actor = ac.deterministic_actor()
    traced = torch.fx.symbolic_trace(actor)
    obs = torch.randn(11, 3, 4) * 10
    torch.testing.assert_close(traced(obs), actor(obs))
    assert actor(obs).abs().max() <= 1.0


def test_gae_matches_a_hand_computation() -> None:
    """One env, one agent, 3 steps, done after step 1: the recursion restarts there."""
    store = RolloutStorage(3, 1, 1, {"policy": ((1,), torch.float32)}, 1, torch.device("cpu"))
    rewards, values, dones = [1.0, 2.0, 3.0], [0.5, 1.0, 1.5], [False, True, False]
    for r, v, d in zip(rewards, values, dones, strict=True):
        z = torch.zeros(1, 1, 1)
        store.add({"policy": z}, z, torch.zeros(1, 1), torch.tensor([[v]]), torch.tensor([[r]]), torch.tensor([d]))
    gamma, lam, last = 0.9, 0.8, 2.0
    store.compute_returns(torch.tensor([[last]]), gamma, lam)
    d2 = 3.0 + gamma * last - 1.5
    d1 = 2.0 - 1.0  # done: no bootstrap
    d0 = 1.0 + gamma * 1.0 - 0.5
    expected = torch.tensor([d0 + gamma * lam * d1, d1, d2])
    torch.testing.assert_close(store.advantages.flatten(), expected)
    torch.testing.assert_close(store.returns.flatten(), expected + torch.tensor(values))


def test_advantages_are_normalised_per_agent() -> None:
    store = RolloutStorage(4, 8, 3, {"policy": ((1,), torch.float32)}, 1, torch.device("cpu"))
    store.advantages = torch.randn(4, 8, 3) * torch.tensor([1.0, 10.0, 100.0]) + torch.tensor([0.0, 5.0, -50.0])
    adv = store.normalized_advantages()
    torch.testing.assert_close(adv.mean((0, 1)), torch.zeros(3), atol=1e-5, rtol=0)
    torch.testing.assert_close(adv.std((0, 1)), torch.ones(3), atol=1e-4, rtol=0)


def test_stratified_advantages_normalise_each_stratum_and_weigh_them_equally() -> None:
    store = RolloutStorage(4, 50, 2, {"policy": ((1,), torch.float32)}, 1, torch.device("cpu"), strata=True)
    g = torch.Generator().manual_seed(0)
    store.strata = torch.where(torch.rand(4, 50, 2, generator=g) < 0.1, 3, 0)  # strata 1 and 2 absent
    rare = store.strata == 3
    store.advantages = torch.where(rare, 100.0 + 50.0 * torch.randn(4, 50, 2, generator=g), torch.randn(4, 50, 2))
    adv = store.stratified_advantages(max_weight=1e9)
    n, n_rare = rare.numel(), int(rare.sum())
    w_common, w_rare = n / (2 * (n - n_rare)), n / (2 * n_rare)
    for mask, w in ((~rare, w_common), (rare, w_rare)):
        torch.testing.assert_close(adv[mask].mean(), torch.tensor(0.0), atol=1e-4, rtol=0)
        torch.testing.assert_close(adv[mask].std(), torch.tensor(w), atol=1e-4, rtol=1e-4)
    # Equal total weight per stratum present: sum of |w| over a stratum is N / K for both.
    torch.testing.assert_close(torch.tensor(w_common * (n - n_rare)), torch.tensor(w_rare * n_rare))
    capped = store.stratified_advantages(max_weight=2.0)
    torch.testing.assert_close(capped[rare].std(), torch.tensor(min(w_rare, 2.0)), atol=1e-4, rtol=1e-4)
    z = torch.zeros(50, 2)
    with pytest.raises(ValueError, match="stratum"):  # a stratified storage refuses a step without its strata
        store.add({"policy": z.unsqueeze(-1)}, z.unsqueeze(-1), z, z, z, torch.zeros(50, dtype=torch.bool))


def test_stratified_ppo_moves_a_rare_stratum_that_plain_ppo_drowns() -> None:
    """One step, 400 envs: 95% of the agent states (stratum 0) reward lower actions, 5% (stratum 1, told apart by
    the observation) reward higher ones. Plain PPO's shared network follows the majority and pulls the rare
    states' action down too; stratified PPO weighs both strata equally, so the rare states' action rises."""
    E = 400
    rare = torch.zeros(E, 1, dtype=torch.long)
    rare[::20] = 1
    obs = {"team": {"policy": torch.cat((1.0 - rare, rare, torch.ones(E, 1)), -1).float().unsqueeze(1)}}
    obs["team"]["state"] = torch.cat((obs["team"]["policy"], torch.zeros(E, 1, 2)), -1)
    moved = {}
    for stratify in (False, True):
        torch.manual_seed(0)
        cfg = PPOCfg(policy=PolicyCfg(actor_hidden=(16,), critic_hidden=(8,)), stratify=stratify, epochs=3,
                     minibatches=1, lr=3e-3, schedule="constant", clip=10.0, normalize_obs=False)  # fmt: skip
        models = torch.nn.ModuleDict({"team": ActorCritic(GroupDims(1, 3, 5, 1), cfg.policy)})
        ppo = PPO(models, cfg, E, 1, torch.device("cpu"), torch.Generator().manual_seed(0))
        probe = {"policy": torch.tensor([[[0.0, 1.0, 1.0]]])}
        mean = torch.no_grad()(models["team"].action_mean)
        before = float(mean(probe))
        with torch.inference_mode():
            act = ppo.act(obs, {"team": rare})["team"]
            ppo.process_env_step({"team": torch.zeros(E, 1)}, *(torch.zeros(E, dtype=torch.bool),) * 2, {})
            ppo.compute_returns(obs)
        store = ppo.storage["team"]
        store.advantages = torch.where(rare.bool(), act[..., 0], -act[..., 0]).unsqueeze(0)
        ppo.update()
        moved[stratify] = float(mean(probe)) - before
    assert moved[False] < 0 < moved[True], moved


def test_rollout_finite_check_names_the_bad_buffer_and_ignores_a_sum_overflow() -> None:
    store = RolloutStorage(
        4, 8, 3, {"policy": ((5,), torch.float32), "state": ((2,), torch.float32)}, 1, torch.device("cpu")
    )
    assert store.check_finite() is None
    store.obs["policy"][..., 0] = 3.0e38  # finite values whose float32 sum overflows: not an error
    assert store.check_finite() is None
    store.obs["state"][2, 5, 1, 0] = float("nan")
    assert store.check_finite() == "obs/state"
    store.obs["state"].zero_()
    store.rewards[3, 0, 2] = -float("inf")
    assert store.check_finite() == "rewards"


def _ppo(num_envs: int = 4, **cfg) -> PPO:
    dims = GroupDims(2, 3, 5, 2)
    ppo_cfg = PPOCfg(policy=PolicyCfg(actor_hidden=(8,), critic_hidden=(8,)), **cfg)
    models = torch.nn.ModuleDict({"team": ActorCritic(dims, ppo_cfg.policy)})
    return PPO(models, ppo_cfg, num_envs, 2, torch.device("cpu"), torch.Generator().manual_seed(0))


def test_truncation_bootstraps_from_final_obs_and_termination_does_not() -> None:
    """The critic's value of the final observation is added where an env was truncated, at whichever step of
    the rollout (the bootstrap runs once at the rollout's end, on the truncated envs alone)."""
    ppo = _ppo(gamma=0.9)
    ac = ppo.models["team"]
    obs = {"team": {"policy": torch.randn(4, 2, 3), "state": torch.randn(4, 2, 5)}}
    finals = [{"team": {"policy": torch.randn(4, 2, 3), "state": torch.randn(4, 2, 5) * 3}} for _ in range(2)]
    no = torch.zeros(4, dtype=torch.bool)
    with torch.inference_mode():
        ppo.act(obs)
        terminated = torch.tensor([False, True, False, False])
        truncated = torch.tensor([False, False, True, True])
        ppo.process_env_step({"team": torch.ones(4, 2)}, terminated, truncated, {"final_obs": finals[0]})
        ppo.act(obs)
        truncated = torch.tensor([True, False, False, False])
        ppo.process_env_step({"team": torch.full((4, 2), 2.0)}, no, truncated, {"final_obs": finals[1]})
        ppo.compute_returns(obs)
        v_final = [ac.value(f["team"]["state"]) for f in finals]
    stored = ppo.storage["team"].rewards
    expected = torch.stack((torch.ones(4, 2), torch.full((4, 2), 2.0)))
    expected[0, 2:] += 0.9 * v_final[0][2:]
    expected[1, 0] += 0.9 * v_final[1][0]
    torch.testing.assert_close(stored, expected)
    assert ppo.storage["team"].dones[0].tolist() == [False, True, True, True]


def test_nan_in_a_rollout_stops_with_a_clear_error() -> None:
    ppo = _ppo()
    obs = {"team": {"policy": torch.randn(4, 2, 3), "state": torch.randn(4, 2, 5)}}
    no = torch.zeros(4, dtype=torch.bool)
    with torch.inference_mode():
        for t in range(2):
            ppo.act(obs)
            reward = torch.full((4, 2), float("nan") if t else 0.0)
            ppo.process_env_step({"team": reward}, no, no, {"final_obs": obs})
        with pytest.raises(FloatingPointError, match="rewards"):
            ppo.compute_returns(obs)


# ===================================================================== checkpoints
def test_checkpoint_is_atomic_and_validated(tmp_path: Path) -> None:
    path = tmp_path / "ck.pt"
    payload = {"format": FORMAT, "x": torch.arange(3)}
    save_checkpoint(path, payload)
    assert not (tmp_path / "ck.pt.tmp").exists()
    with pytest.raises(ValueError, match="missing keys"):
        load_checkpoint(path)
    with pytest.raises(ValueError, match="format"):
        save_checkpoint(path, {"x": 1})
    torch.save({"weights": torch.ones(2)}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a covey checkpoint"):
        load_checkpoint(tmp_path / "other.pt")
    with pytest.raises(FileNotFoundError):
        load_checkpoint(tmp_path / "missing.pt")


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    """A short point_reach run (6 iterations, checkpoint every 2, eval every 3)."""
    tmp = tmp_path_factory.mktemp("runs")
    cfg = make_cfg(tmp, "train.total_steps=1536", "train.checkpoint_every=2", "train.eval_every=3")
    runner = Runner(cfg)
    runner.learn()
    return runner.run_dir


def test_run_directory_layout(trained_run: Path) -> None:
    assert trained_run.parent.name == "point_reach"
    for name in ("config.yaml", "metrics.csv", "checkpoints/latest.pt", "checkpoints/best.pt"):
        assert (trained_run / name).is_file(), name
    rows = read_csv(trained_run / "metrics.csv")
    assert [int(r["global_step"]) for r in rows] == [256 * i for i in range(1, 7)]
    for key in ("wall_time", "samples_per_s", "losses/approx_kl", "losses/explained_variance", "losses/entropy"):
        assert rows[-1][key] != "", key
    assert any(r.get("episode/metrics/final_dist_m") for r in rows)
    assert rows[2]["eval/metrics/final_dist_m"] and rows[5]["eval/metrics/final_dist_m"]


def test_truncated_checkpoint_fails_clearly(trained_run: Path, tmp_path: Path) -> None:
    data = (trained_run / "checkpoints" / "latest.pt").read_bytes()
    bad = tmp_path / "bad.pt"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="truncated or corrupt"):
        load_checkpoint(bad)


def test_load_policy_acts_like_the_trained_actor(trained_run: Path) -> None:
    payload = load_checkpoint(trained_run / "checkpoints" / "latest.pt")
    policy = load_policy(trained_run / "checkpoints" / "latest.pt")
    assert policy.task_cfg["name"] == "point_reach"
    assert policy.meta["global_step"] == payload["global_step"] == 1536
    assert policy.meta["algo"] == "mappo" and "config" in policy.meta and "run_id" in policy.meta
    actor = policy.actors["agents"]
    obs = torch.randn(5, 3, 4)
    ac = ActorCritic(
        GroupDims(**payload["meta"]["groups"]["agents"]), PolicyCfg.from_dict(payload["algo_cfg"]["policy"])
    )
    ac.load_state_dict({k.removeprefix("agents."): v for k, v in payload["model"].items()})
    torch.testing.assert_close(actor(obs), ac.act_deterministic(obs))
    assert not any(p.requires_grad for p in actor.parameters())


def test_resume_continues_steps_and_curve(trained_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    saved = load_checkpoint(run / "checkpoints" / "latest.pt")
    # More steps than the first run; resume by run directory.
    runner = Runner(make_cfg(tmp_path, "train.total_steps=2560", "train.eval_every=3", f"resume={run}"))
    assert runner.run_dir == run and runner.state.global_step == 1536 and runner.state.iteration == 6
    for key, val in runner.models.state_dict().items():
        torch.testing.assert_close(val, saved["model"][key], msg=key)
    assert runner.alg.learning_rate == saved["optimizer"]["param_groups"][0]["lr"]
    # The restored policy evaluates exactly as it did when saved: no jump in the curve.
    metrics, _ = runner.evaluate()
    assert metrics["metrics/final_dist_m"] == pytest.approx(saved["metrics"]["metrics/final_dist_m"], rel=1e-5)
    runner.learn()
    rows = read_csv(run / "metrics.csv")
    steps = [int(r["global_step"]) for r in rows]
    assert steps == [256 * i for i in range(1, 11)]
    assert float(rows[6]["wall_time"]) >= float(rows[5]["wall_time"])
    before, after = float(rows[5]["losses/value_loss"]), float(rows[6]["losses/value_loss"])
    assert after < 5 * before + 1e-3  # the critic and value normaliser carried over
    assert load_checkpoint(run / "checkpoints" / "latest.pt")["global_step"] == 2560


def test_resume_with_a_mismatched_task_names_the_mismatch(trained_run: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="n_agents 3 in the checkpoint vs 4"):
        Runner(make_cfg(tmp_path, "task.num_agents=4", f"resume={trained_run}"))
    with pytest.raises(ValueError, match="task 'point_reach' in the checkpoint vs 'cable_load'"):
        Runner(make_cfg(tmp_path, "task=cable_load", "num_envs=2", "sim.compile=false", f"resume={trained_run}"))


# ===================================================================== whole runs
@pytest.mark.parametrize("algo, sharing", [("ippo", "per_agent"), ("mappo", "per_agent"), ("ippo", "shared")])
def test_variants_run(tmp_path: Path, algo: str, sharing: str) -> None:
    runner = Runner(make_cfg(tmp_path, f"algo={algo}", f"algo.policy.sharing={sharing}", "train.total_steps=512"))
    state = runner.learn()
    assert state.global_step == 512
    rows = read_csv(runner.run_dir / "metrics.csv")
    assert all(float(r["losses/value_loss"]) >= 0 for r in rows)


def test_cable_load_tiny_run(tmp_path: Path) -> None:
    """The default task through the same loop (shared MAPPO on the ``mavs`` group), tiny budget."""
    runner = Runner(
        make_cfg(
            tmp_path,
            "task=cable_load",
            "num_envs=8",
            "train.rollout_steps=4",
            "train.total_steps=32",
            "train.eval_every=0",
        )
    )
    runner.learn()
    assert runner.state.global_step == 32 and set(runner.models) == {"mavs"}
    assert {p.name for p in (runner.run_dir / "checkpoints").iterdir()} == {"latest.pt"}
    assert load_policy(runner.run_dir / "checkpoints" / "latest.pt").task_cfg["name"] == "cable_load"


def test_best_checkpoint_without_evaluation_follows_training_episodes(tmp_path: Path) -> None:
    runner = Runner(make_cfg(tmp_path, "train.eval_every=0", "train.total_steps=1536", "train.checkpoint_every=3"))
    runner.learn()
    best = load_checkpoint(runner.run_dir / "checkpoints" / "best.pt")
    assert best["meta"]["best"]["metric"] == "metrics/final_dist_m"
    assert best["meta"]["best"]["value"] is not None and best["metrics"] == {}
    with pytest.raises(ValueError, match="best_mode"):
        Runner(make_cfg(tmp_path, "train.best_metric=return"))


def test_time_budget_stops_with_an_evaluated_last_row(tmp_path: Path) -> None:
    runner = Runner(make_cfg(tmp_path, "train.max_minutes=1e-6", "train.total_steps=100000", "train.eval_every=50"))
    state = runner.learn()
    assert state.iteration == 1
    (row,) = read_csv(runner.run_dir / "metrics.csv")
    assert row["eval/metrics/final_dist_m"] != ""
    assert (runner.run_dir / "checkpoints" / "latest.pt").is_file()


def test_training_halves_the_point_reach_error(tmp_path: Path) -> None:
    """Learning, not just running: ~30k steps cut the deterministic final distance by half or more."""
    cfg = make_cfg(
        tmp_path,
        "num_envs=128",
        "train.rollout_steps=16",
        "train.total_steps=30000",
        "train.eval_every=5",
        "train.eval_envs=64",
        "algo.policy.actor_hidden=[64,64]",
        "algo.policy.critic_hidden=[64,64]",
        # point_reach's settings, not the cable_load-tuned algo defaults (tiny noise, linear decay).
        "algo.schedule=adaptive",
        "algo.lr=3e-4",
        "algo.clip=0.2",
        "algo.policy.init_log_std=-1.0",
        "seed=1",
    )
    runner = Runner(cfg)
    untrained, _ = runner.evaluate()
    runner.learn()
    trained = runner.state.last_eval
    assert trained["metrics/final_dist_m"] <= 0.5 * untrained["metrics/final_dist_m"], (untrained, trained)
    assert trained["return"] > untrained["return"]


def test_wandb_offline_run_is_written_under_the_run_dir(tmp_path: Path) -> None:
    pytest.importorskip("wandb")
    runner = Runner(make_cfg(tmp_path, "wandb.mode=offline", "train.total_steps=256", "train.eval_every=0"))
    runner.learn()
    offline = list((runner.run_dir / "wandb").glob("offline-run-*"))
    assert offline, sorted(p.name for p in (runner.run_dir / "wandb").iterdir())


def test_train_py_smoke_without_wandb(tmp_path: Path) -> None:
    """The real entry point with a tiny budget; wandb.mode=disabled never imports wandb; a task field
    the task yaml does not list (``goal_range``, ``rewards.action``) is still overridable."""
    extra = ["task.goal_range=0.5", "task.rewards.action=-0.1"]
    args = [*TINY, f"runs_dir={tmp_path}", "train.total_steps=512", "train.eval_every=1", *extra]
    code = (
        "import runpy, sys; sys.argv = ['train.py'] + sys.argv[1:]; "
        "runpy.run_path('train.py', run_name='__main__'); "
        "assert 'wandb' not in sys.modules, 'wandb imported with wandb.mode=disabled'"
    )
    env = {**os.environ, "HYDRA_FULL_ERROR": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    (run,) = (tmp_path / "point_reach").iterdir()
    assert {p.name for p in (run / "checkpoints").iterdir()} == {"latest.pt", "best.pt"}
    cfg = OmegaConf.load(run / "config.yaml")
    assert cfg.task.name == "point_reach" and cfg.train.total_steps == 512
    assert cfg.task.goal_range == 0.5 and cfg.task.rewards.action == -0.1
    assert len(read_csv(run / "metrics.csv")) == 2
    assert "done: 512 steps" in proc.stdout


def test_train_py_rejects_an_unknown_task_field(tmp_path: Path) -> None:
    args = [*TINY, f"runs_dir={tmp_path}", "train.total_steps=512", "task.goal_rnage=0.5"]
    proc = subprocess.run([sys.executable, "train.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "goal_rnage" in proc.stdout + proc.stderr


def test_train_throughput_benchmark_smoke() -> None:
    script = ROOT / "benchmarks" / "train_throughput.py"
    args = ["--task", "point_reach", "--num-envs", "16", "32", "--rollout-steps", "4", "--rollouts", "1"]
    args += ["--device", "cpu", "--torch-threads", "1", "-o", "algo.policy.actor_hidden=[16]"]
    proc = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    key, _, value = proc.stdout.strip().splitlines()[-1].partition("=")
    assert key == "train_samples_per_s_32" and float(value) > 0
    assert "| 16 | cpu | eager | 4 |" in proc.stdout and proc.stdout.count("| 1 |\n") == 2  # update threads fixed


def test_an_annealed_action_prior_fades_to_a_plain_policy(tmp_path: Path) -> None:
    """train.prior_anneal_steps: each iteration's rollout and update use the prior at that step's weight,
    the last policy has none left (a plain policy, as exported), and best.pt only counts from there."""
    steps = 32 * 8  # one iteration of the TINY config
    over = ["task=cable_load", "task.randomization.enabled=false", "task.episode_length_s=0.5", "train.eval_envs=4"]
    over += [f"train.total_steps={4 * steps}", f"train.prior_anneal_steps={2 * steps}", "train.eval_every=1"]
    runner = Runner(make_cfg(tmp_path, *over))
    full = runner.env.spec.groups["mavs"].action_prior_matrix()
    assert full.abs().sum() > 0
    runner.learn()
    rows = read_csv(runner.run_dir / "metrics.csv")
    assert [float(r["charts/action_prior_scale"]) for r in rows] == [1.0, 0.5, 0.0, 0.0]
    assert runner.models["mavs"].action_prior.abs().sum() == 0
    best = load_checkpoint(runner.run_dir / "checkpoints" / "best.pt")
    assert best["global_step"] >= 3 * steps, "best.pt from before the prior was gone"
    assert best["model"]["mavs.action_prior"].abs().sum() == 0
