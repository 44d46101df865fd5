"""SAC (training/sac.py, training/sac_runner.py) and its replay buffer (training/replay.py).

Known answers: the squashed-Gaussian log-probability against torch.distributions, a contextual
bandit SAC must solve within a few hundred updates, and a tiny point_reach run through the runner
(run directory, CSV, best/latest, resume, ONNX export of tanh(mean)). Seconds on one thread.
"""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from torch import nn

from policies import ActorCritic, GroupDims, InputSpec, PolicyCfg
from training.checkpoint import load_checkpoint, load_policy
from training.replay import ReplayBuffer
from training.sac import SAC, SACCfg, squashed_log_prob
from training.sac_runner import SACRunner

ROOT = Path(__file__).resolve().parents[1]
TINY = [
    "task=point_reach",
    "algo=sac",
    "device=cpu",
    "torch_threads=1",
    "wandb.mode=disabled",
    "train.progress=false",
    "num_envs=8",
    "train.rollout_steps=8",
    "algo.policy.actor_hidden=[32,32]",
    "algo.policy.critic_hidden=[32,32]",
    "train.eval_envs=8",
    "sac.learning_starts=128",
    "sac.batch_size=32",
    "sac.gradient_steps=4",
]


def make_cfg(tmp_path: Path, *overrides: str) -> dict:
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
        cfg = compose(config_name="config", overrides=[*TINY, f"runs_dir={tmp_path}", *overrides])
    return OmegaConf.to_container(cfg, resolve=True)


# ===================================================================== replay buffer
def test_replay_buffer_wraps_around_and_keeps_dtypes() -> None:
    entries = {"policy": ((3,), torch.float32), "image": ((4, 5, 3), torch.uint8)}
    buf = ReplayBuffer(capacity=10, n_agents=2, entries=entries, action_dim=1, device="cpu")
    for step in range(4):  # 4 batches of 4 envs: 16 transitions through 10 slots
        ids = torch.arange(4) + 4 * step  # a transition's id, written into every field
        obs = {
            "policy": ids.float().view(4, 1, 1).expand(4, 2, 3),
            "image": (ids % 256).to(torch.uint8).view(4, 1, 1, 1, 1).expand(4, 2, 4, 5, 3),
        }
        nxt = {k: v + 1 for k, v in obs.items()}
        buf.add(obs, ids.float().view(4, 1, 1).expand(4, 2, 1), ids.float().view(4, 1).expand(4, 2), nxt, ids % 2 == 0)
    assert len(buf) == 10 and buf.pos == 6
    assert buf.obs["image"].dtype == torch.uint8 and buf.next_obs["image"].dtype == torch.uint8
    # The ring holds the last 10 transitions (ids 6..15); slots 0..5 were overwritten by ids 10..15.
    assert sorted(buf.reward[:, 0].long().tolist()) == list(range(6, 16))
    assert buf.reward[0, 0] == 10 and buf.reward[6, 0] == 6
    batch = buf.sample(64, torch.Generator().manual_seed(0))
    ids = batch.reward[:, 0]
    assert batch.obs["image"].dtype == torch.uint8 and batch.obs["image"].shape == (64, 2, 4, 5, 3)
    torch.testing.assert_close(batch.obs["policy"][:, 1, 2], ids)
    torch.testing.assert_close(batch.next_obs["image"][:, 0, 3, 4, 2].float(), ids + 1)
    torch.testing.assert_close(batch.action[:, 1, 0], ids)
    torch.testing.assert_close(batch.terminated, (ids.long() % 2 == 0).float())
    # A batch larger than the ring keeps its last `capacity` transitions.
    big = ReplayBuffer(3, 1, {"x": ((1,), torch.float32)}, 1, "cpu")
    x = torch.arange(5.0).view(5, 1, 1)
    big.add({"x": x}, x, x[..., 0], {"x": x}, torch.zeros(5))
    assert len(big) == 3 and sorted(big.obs["x"].flatten().tolist()) == [2.0, 3.0, 4.0]


# ===================================================================== the algorithm
def test_squashed_log_prob_matches_torch_distributions() -> None:
    from torch.distributions import Normal

    torch.manual_seed(0)
    mean, log_std = torch.randn(5, 3, 2) * 2, torch.randn(5, 3, 2) * 0.5
    u = mean + torch.randn(5, 3, 2) * log_std.exp()
    # Change of variables a = tanh(u): log pi(a) = log N(u) - log(1 - tanh(u)^2), in float64 the naive way.
    u64 = u.double()
    naive = Normal(mean.double(), log_std.double().exp()).log_prob(u64) - torch.log(1 - torch.tanh(u64).square())
    torch.testing.assert_close(squashed_log_prob(u, mean, log_std).double(), naive.sum(-1), atol=1e-4, rtol=1e-5)


def _bandit_sac(seed: int = 0, **sac_kw) -> tuple[SAC, nn.ModuleDict]:
    dims = GroupDims(
        1, action_dim=1, actor_inputs=(InputSpec("policy", (1,)),), critic_inputs=(InputSpec("policy", (1,)),)
    )
    cfg = PolicyCfg(squash=True, actor_hidden=(32, 32), critic_hidden=(32, 32), activation="relu")
    torch.manual_seed(seed)
    models = nn.ModuleDict({"agent": ActorCritic(dims, cfg)})
    sac_cfg = SACCfg(buffer_size=4096, batch_size=128, learning_starts=0, gradient_steps=1, **sac_kw)
    gen = torch.Generator().manual_seed(seed)
    return SAC(models, sac_cfg, lr=3e-3, gamma=0.98, schedule="constant", device="cpu", generator=gen), models


@pytest.mark.parametrize("use_sde", [False, True], ids=["gaussian", "gsde"])
def test_sac_solves_a_contextual_bandit(use_sde: bool) -> None:
    """One-step episodes, reward -(a - 0.8 x)^2: the deterministic tanh(mean) must track 0.8 x far
    better than random actions (expected squared error 1/3 + 0.64/3 = 0.55)."""
    sac, models = _bandit_sac(use_sde=use_sde, sde_sample_freq=4)
    gen = torch.Generator().manual_seed(1)

    def context(n: int) -> dict:
        return {"agent": {"policy": torch.rand(n, 1, 1, generator=gen) * 2 - 1}}

    for it in range(300):
        obs = context(64)
        actions = sac.act(obs) if it > 0 else {"agent": torch.rand(64, 1, 1, generator=gen) * 2 - 1}
        reward = {"agent": -(actions["agent"][..., 0] - 0.8 * obs["agent"]["policy"][..., 0]).square()}
        sac.add(obs, actions, reward, obs, torch.ones(64, dtype=torch.bool))  # terminal: no bootstrap
        sac.env_steps += 64
        losses = sac.update(progress=it / 300)
    assert {"losses/critic", "losses/actor", "losses/alpha", "charts/alpha", "charts/entropy"} <= set(losses)
    test = context(512)
    x = test["agent"]["policy"]
    with torch.no_grad():
        action = models["agent"].deterministic_actor()(test["agent"])
        mu, _ = sac._policy("agent", test["agent"])
    torch.testing.assert_close(action, torch.tanh(mu))  # the deployed action is SAC's tanh(mean)
    err = (action - 0.8 * x).square().mean().item()
    random_err = (torch.rand_like(x) * 2 - 1 - 0.8 * x).square().mean().item()
    assert err < (0.15 if use_sde else 0.03) < 0.4 < random_err, (err, random_err)
    if not use_sde:  # the temperature followed the entropy towards its target (-1 nat for one action dimension)
        assert sac.log_alpha.exp().item() < 1.0


def test_gsde_holds_its_exploration_noise_for_sde_sample_freq_steps() -> None:
    sac, _ = _bandit_sac(use_sde=True, sde_sample_freq=3)
    obs = {"agent": {"policy": torch.rand(16, 1, 1) * 2 - 1}}
    first = [sac.act(obs)["agent"] for _ in range(3)]
    later = sac.act(obs)["agent"]  # a new exploration matrix on the 4th step
    assert torch.equal(first[0], first[1]) and torch.equal(first[0], first[2])
    assert not torch.allclose(first[0], later)
    mu, _ = sac._policy("agent", obs["agent"])
    assert not torch.allclose(first[0], torch.tanh(mu))  # noise, per env: envs differ from their mean action


def test_sac_refuses_actors_it_cannot_train() -> None:
    dims = GroupDims(1, obs_dim=2, critic_dim=2, action_dim=1)
    with pytest.raises(ValueError, match="squash"):
        SAC(nn.ModuleDict({"a": ActorCritic(dims, PolicyCfg())}), SACCfg(), lr=1e-3, gamma=0.9)
    with pytest.raises(ValueError, match="continuous feed-forward"):
        SAC(nn.ModuleDict({"a": ActorCritic(dims, PolicyCfg(squash=True, memory="gru"))}), SACCfg(), lr=1e-3, gamma=0.9)
    with pytest.raises(ValueError, match="schedule"):
        SAC(
            nn.ModuleDict({"a": ActorCritic(dims, PolicyCfg(squash=True))}),
            SACCfg(),
            lr=1e-3,
            gamma=0.9,
            schedule="adaptive",
        )


def test_soft_update_moves_targets_by_tau() -> None:
    sac, _ = _bandit_sac()
    before = [p.clone() for p in sac.targets.parameters()]
    with torch.no_grad():
        for p in sac.critics.parameters():
            p.add_(1.0)
    sac._soft_update()
    for b, t in zip(before, sac.targets.parameters(), strict=True):
        torch.testing.assert_close(t, b + sac.cfg.tau)  # theta' + tau (theta' + 1 - theta') with theta = theta' + 1


# ===================================================================== the runner
@pytest.fixture(scope="module")
def sac_run(tmp_path_factory) -> Path:
    """A tiny point_reach SAC run: 6 iterations of 64 env steps, checkpoint every 2, eval every 3."""
    tmp = tmp_path_factory.mktemp("sac_runs")
    runner = SACRunner(make_cfg(tmp, "train.total_steps=384", "train.checkpoint_every=2", "train.eval_every=3"))
    runner.learn()
    return runner.run_dir


def test_sac_run_writes_the_runners_outputs(sac_run: Path) -> None:
    for name in ("config.yaml", "metrics.csv", "checkpoints/latest.pt", "checkpoints/best.pt"):
        assert (sac_run / name).is_file(), name
    with open(sac_run / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["global_step"]) for r in rows] == [64 * i for i in range(1, 7)]
    assert rows[0]["losses/critic"] == ""  # the warm-up (128 env steps of random actions): no update yet
    assert all(rows[i][k] != "" for i in (1, 5) for k in ("losses/critic", "losses/actor", "charts/alpha"))
    assert rows[2]["eval/metrics/final_dist_m"] and rows[5]["eval/metrics/final_dist_m"]
    payload = load_checkpoint(sac_run / "checkpoints" / "latest.pt")
    assert payload["meta"]["algo"] == "sac" and payload["optimizer"]["kind"] == "sac"
    assert payload["algo_cfg"]["policy"]["squash"] is True


def test_sac_checkpoint_evaluates_and_exports_tanh_of_the_mean(sac_run: Path, tmp_path: Path) -> None:
    ckpt = sac_run / "checkpoints" / "latest.pt"
    actor = load_policy(ckpt).actors["agents"]
    ac = actor.ac
    obs = torch.randn(16, 3, 4) * 2
    with torch.no_grad():
        mean = ac.actor(ac.actor_encoder([obs])) + obs @ ac.action_prior
        torch.testing.assert_close(actor(obs), torch.tanh(mean))
    out = tmp_path / "policy.onnx"
    proc = subprocess.run(
        [sys.executable, "export.py", f"checkpoint={ckpt}", f"out={out}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["parity"]["agents"]["max_abs_diff_recorded"] < 1e-5 and out.is_file()


def test_sac_resume_restores_critics_and_starts_an_empty_buffer(sac_run: Path, capsys) -> None:
    payload = load_checkpoint(sac_run / "checkpoints" / "latest.pt")
    runner = SACRunner(make_cfg(sac_run.parent.parent, f"resume={sac_run}", "train.total_steps=512"))
    assert "restarts empty" in capsys.readouterr().out
    assert runner.state.global_step == 384 and len(runner.alg.buffers["agents"]) == 0
    for key, val in payload["optimizer"]["critics"].items():
        torch.testing.assert_close(runner.alg.critics.state_dict()[key], val)
    torch.testing.assert_close(runner.alg.log_alpha, payload["optimizer"]["log_alpha"])
    state = runner.learn()
    assert state.global_step == 512
    with open(sac_run / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["global_step"]) for r in rows][-2:] == [448, 512]
    # Past the warm-up: the resumed run acts with its policy and updates once the buffer holds a batch.
    assert rows[-1]["losses/critic"] != "" and math.isfinite(float(rows[-1]["losses/critic"]))
