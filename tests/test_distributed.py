"""Data-parallel PPO (training/distributed.py): two torchrun ranks on CPU (Gloo) train point_reach.

The test runs this very file under ``python -m torch.distributed.run --nproc_per_node=2``; each rank
(the ``__main__`` block) builds a :class:`~training.runner.Runner` with ``distributed=true``, trains
two iterations, then resumes for a third (exactly: each rank gets its own envs and random streams back), and
saves what it holds; the tests compare the ranks.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from policies import RunningNorm
from policies.normalizer import reduced_moments
from sim.core.config import ConfigError
from training.config import check_distributed

ROOT = Path(__file__).resolve().parents[1]
TINY = [
    "task=point_reach",
    "device=cpu",
    "torch_threads=1",
    "wandb.mode=disabled",
    "train.progress=false",
    "num_envs=8",
    "train.rollout_steps=8",
    "algo.epochs=2",
    "algo.minibatches=2",
    "algo.policy.actor_hidden=[16,16]",
    "algo.policy.critic_hidden=[16,16]",
    "train.eval_envs=4",
    "train.eval_every=2",
    "distributed=true",
]
STEPS_PER_ITER = 8 * 8 * 2  # num_envs x rollout_steps x ranks


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _state(runner) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in runner.models.state_dict().items()}


def _worker(out: Path) -> None:
    """One rank: train 2 iterations, resume to 3, save parameters, buffers and a few facts."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from training.distributed import all_reduce_sum, shutdown
    from training.runner import Runner

    def cfg(*extra: str) -> dict:
        with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
            c = compose(config_name="config", overrides=[*TINY, f"runs_dir={out / 'runs'}", *extra])
        return OmegaConf.to_container(c, resolve=True)

    rank = int(os.environ["RANK"])
    runner = Runner(cfg(f"train.total_steps={2 * STEPS_PER_ITER}"))
    initial = _state(runner)
    runner.learn()
    after = _state(runner)
    last_obs = runner.env.observe()["agents"]["policy"].clone()
    lr = runner.alg.learning_rate
    streams = (runner.env.rng.get_state(), runner.generator.get_state())
    resumed = Runner(cfg(f"train.total_steps={3 * STEPS_PER_ITER}", f"resume={runner.run_dir}"))
    loaded = _state(resumed)
    resumed_obs = resumed.env.observe()["agents"]["policy"].clone()
    now = (resumed.env.rng.get_state(), resumed.generator.get_state())
    same_streams = all(torch.equal(a, b) for a, b in zip(streams, now, strict=True))
    resumed.learn()
    # The exact normaliser merge: each rank adds its own samples; compare with one process holding all.
    norm = RunningNorm(3)
    norm.batch_reduce = all_reduce_sum
    norm.update(torch.randn(50 + 30 * rank, 3, generator=torch.Generator().manual_seed(rank)) * (1 + rank) + rank)
    torch.save(
        {
            "initial": initial,
            "after": after,
            "loaded": loaded,
            "resumed": _state(resumed),
            "lr": lr,
            "last_obs": last_obs,
            "resumed_obs": resumed_obs,
            "same_streams": same_streams,
            "env_restored": resumed._env_restored,
            "run_dir": str(runner.run_dir),
            "resumed_step": resumed.state.global_step,
            "norm": (norm.mean, norm.var, norm.count),
        },
        out / f"rank{rank}.pt",
    )
    shutdown()  # as train.py does: leaving with the process group alive can abort at exit


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    out = tmp_path_factory.mktemp("ddp")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        "--master_addr=127.0.0.1",
        f"--master_port={_free_port()}",
        __file__,
        str(out),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ranks = [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(2)]
    return out, ranks


def test_ranks_hold_identical_parameters_and_normalisers_after_updates(two_ranks) -> None:
    _, (r0, r1) = two_ranks
    assert r0["initial"].keys() == r1["initial"].keys()
    for key in r0["initial"]:
        torch.testing.assert_close(r0["initial"][key], r1["initial"][key], rtol=0, atol=0)  # rank 0's init broadcast
        torch.testing.assert_close(r0["after"][key], r1["after"][key], rtol=0, atol=0, msg=key)
        torch.testing.assert_close(r0["resumed"][key], r1["resumed"][key], rtol=0, atol=0, msg=key)
    moved = [k for k in r0["initial"] if not torch.equal(r0["initial"][k], r0["after"][k])]
    assert any(k.endswith("norm.mean") or ".norms." in k for k in moved), "normaliser statistics did not move"
    assert sum(not k.endswith(("mean", "var", "count")) for k in moved) > 2, "the weights did not move"
    assert r0["lr"] == r1["lr"]  # the adaptive schedule saw the same (rank-mean) KL
    # ...while each rank stepped its own envs (seed + rank)
    assert not torch.allclose(r0["last_obs"], r1["last_obs"])


def test_normaliser_merge_is_exact_over_ranks(two_ranks) -> None:
    _, (r0, r1) = two_ranks
    xs = [torch.randn(50 + 30 * r, 3, generator=torch.Generator().manual_seed(r)) * (1 + r) + r for r in range(2)]
    one = RunningNorm(3)
    one.update(torch.cat(xs))
    for mean, var, count in (r0["norm"], r1["norm"]):
        assert int(count) == 130
        torch.testing.assert_close(mean, one.mean)
        torch.testing.assert_close(var, one.var)


def test_only_rank_0_writes_and_resume_loads_latest(two_ranks) -> None:
    out, (r0, r1) = two_ranks
    assert r0["run_dir"] == r1["run_dir"]
    run_dirs = [p for p in (out / "runs" / "point_reach").iterdir()]
    assert [p.name for p in run_dirs] == [Path(r0["run_dir"]).name]  # one directory for both ranks
    run = run_dirs[0]
    rows = (run / "metrics.csv").read_text().strip().splitlines()
    assert len(rows) == 1 + 3  # header + 3 iterations, written once (not once per rank)
    assert rows[-1].split(",")[0] == str(3 * STEPS_PER_ITER)
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["best.pt", "latest.pt"]
    assert r0["resumed_step"] == r1["resumed_step"] == 3 * STEPS_PER_ITER
    for key in r0["after"]:  # every rank resumed from latest.pt, i.e. where training stopped
        torch.testing.assert_close(r1["loaded"][key], r0["after"][key], rtol=0, atol=0)
    # ...and each rank got its own envs and random streams back (latest.pt's rank_states): an exact resume
    for r in (r0, r1):
        assert r["env_restored"] and r["same_streams"]
        torch.testing.assert_close(r["resumed_obs"], r["last_obs"], rtol=0, atol=0)


def test_the_readme_torchrun_command_trains_and_rank_0_alone_reports(tmp_path: Path) -> None:
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1"]
    args = [f"--master_port={_free_port()}", "train.py", *TINY, "train.total_steps=128", "train.eval_every=0"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [*launcher, *args, f"runs_dir={tmp_path}"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("done: 128 steps") == 1  # one summary, from rank 0
    assert proc.stdout.count("covey train:") == 1
    (run,) = (tmp_path / "point_reach").iterdir()
    assert (run / "checkpoints" / "latest.pt").is_file() and (run / "metrics.csv").is_file()


def test_distributed_needs_torchrun_and_the_ppo_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(ConfigError, match="torchrun"):
        check_distributed({"imitation": {"expert": "none"}}, "ppo")
    with pytest.raises(ConfigError, match="PPO runner only"):
        check_distributed({}, "sac")
    with pytest.raises(ConfigError, match="imitation"):
        check_distributed({"imitation": {"expert": "task"}}, "ppo")


def test_other_runners_refuse_distributed(tmp_path: Path) -> None:
    from training.sac_runner import SACRunner

    with pytest.raises(ValueError, match="PPO Runner's"):
        SACRunner({"distributed": True, "task": {"name": "point_reach"}, "runs_dir": str(tmp_path), "num_envs": 2})


def test_reduced_moments_with_an_identity_reduce_match_the_single_process_update() -> None:
    x = torch.randn(64, 4) * 3.0 + 1.0
    n, mean, var = reduced_moments(x, lambda t: t)
    assert n == 64
    torch.testing.assert_close(mean, x.mean(0))
    torch.testing.assert_close(var, x.var(0, unbiased=False))


if __name__ == "__main__":  # a torchrun rank (see the two_ranks fixture)
    torch.set_num_threads(1)
    _worker(Path(sys.argv[1]))
