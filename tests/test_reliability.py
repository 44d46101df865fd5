"""Reliability (issue 13): checkpoints that survive SIGKILL, one-line checkpoint errors, out-of-range
actions counted and warned, and the simulator's numerical guard (a non-finite env is reset, counted,
and reaches neither the policy nor the optimiser)."""

from __future__ import annotations

import csv
import os
import random
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from torch.overrides import TorchFunctionMode

import sim
from sim.core.env import MultiAgentEnv
from training.checkpoint import SCHEMA, NoCheckpointError, load_checkpoint, save_checkpoint
from training.resume import find_resume_point

ROOT = Path(__file__).resolve().parents[1]
# A tiny real run: 24 iterations of 16 envs x 8 steps, a checkpoint after every iteration.
TRAIN_ARGS = [
    "task=point_reach",
    "num_envs=16",
    "train.rollout_steps=8",
    "train.total_steps=3072",
    "train.eval_every=0",
    "train.checkpoint_every=1",
    "train.progress=false",
    "wandb.mode=disabled",
    "torch_threads=1",
    "update_threads=1",  # fixed: a timed choice follows the machine's load, and 1 or 2 threads round differently
    "seed=3",
]
# Timing columns differ between runs; every other column of metrics.csv is a function of the run.
TIMING = {"wall_time", "samples_per_s", "charts/collect_samples_per_s", "charts/collect_time", "charts/update_time"}


# --------------------------------------------------------------------------- checkpoint files


def _payload() -> dict:
    from training.checkpoint import FORMAT

    return {
        "format": FORMAT,
        "task_cfg": {"name": "point_reach"},
        "algo_cfg": {},
        "model": {"w": torch.arange(6.0).reshape(2, 3)},
        "optimizer": {},
        "normalizers": {},
        "global_step": 256,
        "iteration": 2,
        "rng": {},
        "meta": {"run_id": "r", "groups": {}},
        "metrics": {},
    }


def test_checkpoint_carries_a_schema_and_a_content_hash_and_a_changed_byte_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "latest.pt"
    save_checkpoint(path, _payload())
    payload = load_checkpoint(path)
    assert payload["schema"] == SCHEMA and payload["content_hash"].startswith("sha256:")
    # Same content, new tensor values: torch.load reads it fine, the hash does not match.
    tampered = dict(payload)
    tampered["model"] = {"w": payload["model"]["w"] + 1}
    torch.save(tampered, path)
    with pytest.raises(ValueError, match="does not match its hash") as err:
        load_checkpoint(path)
    assert "\n" not in str(err.value)
    # A checkpoint from a newer covey: refused in one line, not misread.
    newer = dict(payload, schema=SCHEMA + 1)
    torch.save(newer, path)
    with pytest.raises(ValueError, match=f"schema {SCHEMA + 1}"):
        load_checkpoint(path)
    # Files written before the schema (no schema, no hash: the shipped policies) still load.
    legacy = {k: v for k, v in payload.items() if k not in ("schema", "content_hash")}
    torch.save(legacy, path)
    assert load_checkpoint(path)["global_step"] == 256
    # Truncated: one line.
    save_checkpoint(path, _payload())
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(ValueError, match="truncated or corrupt") as err:
        load_checkpoint(path)
    assert "\n" not in str(err.value)


def test_a_run_killed_in_its_first_checkpoint_write_says_so_in_one_line(tmp_path: Path, capsys) -> None:
    """The issue's case: only an empty latest.pt.tmp exists; resume= must not print a traceback
    (train.py end to end: in the SIGKILL test below)."""
    from omegaconf import OmegaConf

    from training.config import compose, exit_on_user_error
    from training.runner import Runner

    run = tmp_path / "point_reach" / "2026-01-01_00-00-00"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "latest.pt.tmp").write_bytes(b"")
    with pytest.raises(NoCheckpointError, match="interrupted"):
        load_checkpoint(run / "checkpoints" / "latest.pt")
    cfg = OmegaConf.to_container(compose([*TRAIN_ARGS, f"resume={run}", f"runs_dir={tmp_path}"]), resolve=True)
    with pytest.raises(SystemExit) as exited:
        exit_on_user_error("train.py", lambda: Runner(cfg), errors=(ValueError, FileNotFoundError))
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "no complete checkpoint yet" in err and "start over" in err and "latest.pt.tmp" in err


def test_a_run_with_best_pt_but_no_complete_latest_pt_resumes_from_best_pt(tmp_path: Path, capsys) -> None:
    """A first latest.pt write interrupted after best.pt was written: resume= takes best.pt and says so in
    one line (the envs restart their episodes: best.pt holds no env state); the run goes on in its directory."""
    from training.config import compose
    from training.runner import Runner

    over = [*TRAIN_ARGS, "train.total_steps=256", f"runs_dir={tmp_path}"]
    first = Runner(OmegaConf.to_container(compose(over), resolve=True))
    first.learn()
    ckpts = first.run_dir / "checkpoints"
    assert (ckpts / "best.pt").is_file()
    (ckpts / "latest.pt").rename(ckpts / "latest.pt.tmp")  # as a kill in its first write leaves it
    (ckpts / "latest.pt.tmp").write_bytes(b"")
    capsys.readouterr()
    resumed = Runner(OmegaConf.to_container(compose([*over, "train.total_steps=512", f"resume={first.run_dir}"]),
                                            resolve=True))  # fmt: skip
    out = capsys.readouterr().out.splitlines()
    assert any("no complete checkpoints/latest.pt; resuming from checkpoints/best.pt" in line for line in out), out
    step = load_checkpoint(ckpts / "best.pt")["global_step"]
    assert resumed.run_dir == first.run_dir and resumed.state.global_step == step > 0
    assert resumed.learn().global_step == 512 and (ckpts / "latest.pt").is_file()


# --------------------------------------------------------------------------- SIGKILL at random moments


def _train(extra: list[str], capture: bool = False):
    cmd = [sys.executable, "-u", str(ROOT / "train.py"), *TRAIN_ARGS, *extra]
    env = dict(os.environ, OMP_NUM_THREADS="1", HYDRA_FULL_ERROR="0")
    if capture:
        return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return [{k: v for k, v in row.items() if k not in TIMING} for row in csv.DictReader(f)]


def _kill_when(proc: subprocess.Popen, ckpt: Path, mode: str, delay: float) -> bool:
    """SIGKILL ``proc``: ``"write"`` as soon as ``latest.pt.tmp`` exists (mid-write), ``"random"`` after
    ``delay`` s. Returns whether it was killed (False: it finished first)."""
    tmp = ckpt.with_name("latest.pt.tmp")
    end = time.monotonic() + (60.0 if mode == "write" else delay)
    while time.monotonic() < end and proc.poll() is None:
        if mode == "write" and tmp.exists():
            break
        if mode == "random":
            time.sleep(0.01)  # "write" polls without sleeping: a small checkpoint's write lasts about a millisecond
    if proc.poll() is not None:
        return False
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return True


def test_sigkill_at_random_moments_and_mid_write_resumes_the_same_run(tmp_path: Path) -> None:
    """Kill a real training process several times (mid checkpoint write too); every resume continues
    the very same run: metrics.csv ends identical to an uninterrupted run's, step for step."""
    from training.config import check_config, compose
    from training.runner import Runner

    seed = int(time.time()) % 10_000
    rng = random.Random(seed)
    # The uninterrupted reference, in this process (same code path as train.py).
    ref_cfg = compose([*TRAIN_ARGS, f"runs_dir={tmp_path / 'ref'}"])
    check_config(ref_cfg)
    from omegaconf import OmegaConf

    ref = Runner(OmegaConf.to_container(ref_cfg, resolve=True))
    ref.learn()
    expected = _rows(ref.run_dir / "metrics.csv")
    assert len(expected) == 24

    runs = tmp_path / "killed"

    def start(extra: list[str]) -> tuple[subprocess.Popen, Path]:
        proc = _train([f"runs_dir={runs}", *extra])
        line = ""
        while "run dir" not in line:  # printed when training starts
            line = proc.stdout.readline()
            assert line or proc.poll() is None, "train.py ended before it started training"
        return proc, Path(line.split("run dir", 1)[1].strip())

    proc, run_dir = start([])
    kills = []
    # The first kill lands in the run's first checkpoint write (the case), then one at a random
    # moment, then one in a later checkpoint write.
    for i, mode in enumerate(("write", "random", "write")):
        ckpt = run_dir / "checkpoints" / "latest.pt"
        if i:
            if ckpt.exists():
                proc, _ = start([f"resume={run_dir}"])
            else:  # killed in its first latest.pt write: resume would take best.pt (not exact); start over
                best = ckpt.with_name("best.pt")
                if best.exists():  # train.eval_every=0: best.pt is written just before latest.pt
                    assert find_resume_point(run_dir, "point_reach").path == best
                else:
                    refused = _train([f"resume={run_dir}", f"runs_dir={runs}"], capture=True)
                    assert refused.returncode == 2 and "no complete checkpoint yet" in refused.stderr, refused.stderr
                    assert len(refused.stderr.strip().splitlines()) == 1
                proc, run_dir = start([])
                ckpt = run_dir / "checkpoints" / "latest.pt"
        delay = rng.uniform(0.2, 1.5)
        if not _kill_when(proc, ckpt, mode, delay):
            break
        mid_write = ckpt.with_name("latest.pt.tmp").exists()
        kills.append((mode, round(delay, 2) if mode == "random" else None, mid_write))
        # Whatever the moment, latest.pt is a complete checkpoint (or none was finished yet).
        if ckpt.exists():
            step = load_checkpoint(ckpt)["global_step"]
            assert step % 128 == 0, step
    assert len(kills) >= 3, f"the run finished too early to be killed (seed {seed}): {kills}"
    assert any(mid for mode, _, mid in kills if mode == "write"), f"no kill landed mid-write: {kills}"
    if not (run_dir / "checkpoints" / "latest.pt").exists():
        proc, run_dir = start([])  # the last kill hit a first write: start over once more
        proc.wait()
    # Resume to the end; the resume says it is exact.
    final = _train([f"resume={run_dir}", f"runs_dir={runs}"], capture=True)
    assert final.returncode == 0, final.stdout[-2000:] + final.stderr[-2000:]
    assert "exact" in final.stdout.splitlines()[0], final.stdout
    got = _rows(run_dir / "metrics.csv")
    assert [r["global_step"] for r in got] == [r["global_step"] for r in expected], f"seed {seed}, kills {kills}"
    for g, e in zip(got, expected, strict=True):
        assert g == e, f"seed {seed}, kills {kills}: row {g['global_step']} differs"


# --------------------------------------------------------------------------- actions and the numerical guard


def test_out_of_range_actions_are_counted_per_env_and_warned_once() -> None:
    env = sim.make("point_reach", num_envs=4, seed=0)
    env.reset()
    act = env.zero_actions()["agents"]
    act[1, 0, 0] = 1e6
    act[3, :, 1] = -1e38
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, _, _, _, info = env.step({"agents": act})
        _, _, _, _, info2 = env.step({"agents": act})
    assert info["actions_out_of_range"].tolist() == [0, 1, 0, env.n] == info2["actions_out_of_range"].tolist()
    ours = [w for w in caught if "outside [-1, 1]" in str(w.message)]
    assert len(ours) == 1 and "1e+38" in str(ours[0].message)
    _, _, _, _, info = env.step(env.zero_actions())
    assert not info["actions_out_of_range"].any()
    # Exactly +-1 is in range (a clamped policy action), NaN still raises.
    _, _, _, _, info = env.step({"agents": torch.ones_like(act)})
    assert not info["actions_out_of_range"].any()
    act[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        env.step({"agents": act})


@pytest.mark.parametrize("compile_env", [False, True], ids=["eager", "compiled"])
def test_a_nonfinite_state_resets_that_env_only_counted_and_logged(caplog, compile_env: bool) -> None:
    """Compiled, the guard runs inside the fused post-physics pass and the observations after the reset
    come from their own compiled pass (~10 s of compiling here)."""
    env = sim.make("point_reach", num_envs=4, seed=0, compile=compile_env)
    env.reset()
    for _ in range(3):
        env.step(env.zero_actions())
    steps_before = env.episode_step.clone()
    env.vel[2, 1, 0] = float("nan")  # one env's state goes bad (as an unstable integrator would)
    with caplog.at_level("WARNING", logger="covey.sim"):
        obs, reward, terminated, truncated, info = env.step(env.zero_actions())
    assert info["nonfinite_reset"].tolist() == [0, 0, 1, 0]
    assert terminated.tolist() == [False, False, True, False] and info["termination_reasons"]["nonfinite"][2]
    assert all(torch.isfinite(v).all() for v in obs["agents"].values())
    assert all(torch.isfinite(v).all() for v in info["final_obs"]["agents"].values())  # no NaN to bootstrap from
    assert torch.isfinite(reward["agents"]).all() and reward["agents"][2].eq(0).all()
    assert env.episode_step[2] == 0 and env.episode_step[[0, 1, 3]].equal(steps_before[[0, 1, 3]] + 1)
    assert torch.isfinite(env.vel).all()
    for name, value in env._observations()["agents"].items():  # what the step returned is the state's
        assert torch.equal(obs["agents"][name], value), name
    assert env.nonfinite_resets_total == 1 and "non-finite state in 1 env" in caplog.text
    ep = info["episode"]
    assert float(ep["termination/nonfinite"]) == 1.0 and torch.isfinite(ep["return"])


def test_a_nonfinite_state_with_masked_resets_resets_that_env_only_and_is_logged_at_the_check(caplog) -> None:
    """The numerical guard without host syncs: the same reset and episode statistics as the indexed
    path, the count logged by check_deferred_actions (masked resets know no env indices in step)."""
    env = sim.make("point_reach", num_envs=4, seed=0)
    env.masked_resets = True
    env.reset()
    for _ in range(3):
        env.step(env.zero_actions())
    steps_before = env.episode_step.clone()
    env.vel[2, 1, 0] = float("nan")
    with caplog.at_level("WARNING", logger="covey.sim"):
        obs, reward, terminated, truncated, info = env.step(env.zero_actions())
        assert "non-finite" not in caplog.text
        env.check_deferred_actions()
    assert info["nonfinite_reset"].tolist() == [0, 0, 1, 0] and terminated.tolist() == [False, False, True, False]
    assert all(torch.isfinite(v).all() for v in obs["agents"].values())
    assert all(torch.isfinite(v).all() for v in info["final_obs"]["agents"].values())
    assert torch.isfinite(reward["agents"]).all() and reward["agents"][2].eq(0).all()
    assert env.episode_step[2] == 0 and env.episode_step[[0, 1, 3]].equal(steps_before[[0, 1, 3]] + 1)
    assert torch.isfinite(env.vel).all()
    for name, value in env._observations()["agents"].items():  # what the step returned is the state's
        assert torch.equal(obs["agents"][name], value), name
    assert env.nonfinite_resets_total == 1 and "non-finite state in 1 env" in caplog.text
    ep = info["episode"]
    assert float(ep["count"]) == 1 and float(ep["termination/nonfinite"]) == 1.0 and torch.isfinite(ep["return"])


def test_nonfinite_states_never_reach_the_policy_or_the_optimiser(tmp_path: Path) -> None:
    """A training iteration where one env's state turns NaN every few steps: the rollout storage, the
    losses and the weights stay finite, and the log row counts the resets."""
    from omegaconf import OmegaConf

    from training.config import compose
    from training.runner import Runner

    cfg = OmegaConf.to_container(compose([*TRAIN_ARGS, "train.total_steps=256", f"runs_dir={tmp_path}"]), resolve=True)
    runner = Runner(cfg)
    env = runner.env
    original = env._control_step
    ticks = {"n": 0}

    def poisoned() -> None:
        original()
        ticks["n"] += 1
        if ticks["n"] % 3 == 0:
            env.pos[ticks["n"] % env.num_envs, 0, 0] = float("inf")

    env._control_step = poisoned  # the control loop looks the tick up on the instance
    seen = []
    act = runner.alg.act

    def watch(obs):
        seen.append(all(torch.isfinite(v).all() for g in obs.values() for v in g.values()))
        return act(obs)

    runner.alg.act = watch
    obs = env.reset()
    _, row = runner.train_iteration(obs)
    assert seen and all(seen), "a non-finite observation reached the policy"
    assert row["charts/nonfinite_resets"] >= 2  # 8 steps, a poisoned env every third tick
    for name, storage in runner.alg.storage.items():
        for key, value in vars(storage).items():
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                assert torch.isfinite(value).all(), f"{name}.{key} holds a non-finite value"
            elif isinstance(value, dict):
                for k, v in value.items():
                    assert not v.is_floating_point() or torch.isfinite(v).all(), f"{name}.{key}[{k}]"
    assert all(torch.isfinite(v).all() for v in runner.models.state_dict().values() if v.is_floating_point())
    assert all(not isinstance(v, float) or v == v for k, v in row.items() if k.startswith("losses/"))


@pytest.mark.parametrize("task", ["point_reach", "cable_load", "drone_volleyball"])
def test_an_env_state_snapshot_restored_into_a_fresh_env_continues_identically(task: str) -> None:
    """What an exact resume rests on: nested physics objects, per-step records that a fresh env has
    as None (volleyball's rally events) and expanded views all come back."""
    env = sim.make(task, num_envs=3, seed=0)
    env.reset()
    env.randomize_episode_progress()
    for _ in range(3):
        env.step(env.sample_actions())
    snap = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in env.state_snapshot().items()}
    gen = torch.Generator().manual_seed(1)
    actions = [env.sample_actions(gen) for _ in range(12)]
    first = [env.step(a)[:2] for a in actions]
    fresh = sim.make(task, num_envs=3, seed=99)
    fresh.reset()
    assert fresh.load_state_snapshot(snap) is None
    for (obs, rew), a in zip(first, actions, strict=True):
        obs2, rew2 = fresh.step(a)[:2]
        for group in obs:
            assert all(torch.equal(obs[group][k], obs2[group][k]) for k in obs[group]) and torch.equal(
                rew[group], rew2[group]
            )
    other = sim.make(task, num_envs=4, seed=0)  # another batch size: refused with the reason, nothing changed
    assert "in the env vs" in other.load_state_snapshot(snap)


# --------------------------------------------------------------------------- host syncs on the hot path
class _SyncCounter(TorchFunctionMode):
    """Counts the tensor calls that make the host wait for the device (item, tolist, bool(), int(), ...)."""

    SYNCS = frozenset(
        {"item", "tolist", "__bool__", "__int__", "__float__", "__index__", "nonzero", "cpu", "numpy"}
        | {"equal", "allclose"}
    )

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in self.SYNCS:
            self.calls.append(name)
        return func(*args, **(kwargs or {}))


def test_a_training_rollout_syncs_the_host_once_per_step_and_once_more_where_an_episode_ended(tmp_path) -> None:
    """Issue 14: the rollout loop and env.step wait for the device only for the auto-reset's index (one
    `nonzero` per step, plus the count of non-finite envs on steps where an episode ended) and four
    times per rollout (the index of its truncated steps for PPO's bootstrap, the rollout's finite check,
    the deferred action checks, the guard counts). The actions' NaN check, PPO's truncation bootstrap and
    the latency randomisation's check used to cost three more on every step. A new `.item()`,
    `bool(tensor)` or `.tolist()` on the hot path fails this.
    (The auto-reset's index goes when resets are masked, not indexed: issue 14, left open.)"""
    from training.config import compose
    from training.runner import Runner

    over = ["task=cable_load", "train.rollout_steps=40", "task.episode_length_s=0.2", f"runs_dir={tmp_path}"]
    runner = Runner(OmegaConf.to_container(compose([*TRAIN_ARGS, *over]), resolve=True))
    obs = runner.env.reset()
    ended = []
    original = runner.env.step

    def step(actions):
        out = original(actions)
        ended.append(out[2] | out[3])  # read after the count
        return out

    runner.env.step = step
    counter = _SyncCounter()
    with counter:
        runner.collect(obs)
    steps = runner.train_cfg.rollout_steps
    dones = [bool(e.any()) for e in ended]
    assert sum(dones) > 0, "episodes must end inside the rollout for the test to mean anything"
    assert counter.calls.count("nonzero") == steps + 1, counter.calls
    assert len(counter.calls) <= steps + sum(dones) + 4, counter.calls


@pytest.mark.parametrize("points_to_win", [0, 2])
def test_a_volleyball_match_step_syncs_the_host_only_for_the_auto_reset(points_to_win: int) -> None:
    """Issue 14: with the action checks deferred (as the training rollout runs them), a drone_volleyball step waits
    for the device for the auto-reset's index (one `nonzero`) and, where an episode ended, the count of non-finite
    envs; nothing else. A game of one rally (the default) has no rally to restart; a game to N points takes the
    index of the envs whose rally ended without ending the game (one more `nonzero` a step: left as it is)."""
    env = sim.make("drone_volleyball", num_envs=64, seed=0, mode="2v2", rules={"points_to_win": points_to_win})
    env.defer_action_checks = True
    env.reset()
    gen = torch.Generator().manual_seed(0)
    ended_steps = 0
    for _ in range(100):
        actions = env.sample_actions(gen)
        counter = _SyncCounter()
        with counter:
            _, _, term, trunc, _ = env.step(actions)
        ended = bool((term | trunc).any())
        ended_steps += ended
        expected = ["nonzero"] * (1 if points_to_win == 0 else 2) + (["__int__"] if ended else [])
        assert sorted(counter.calls) == sorted(expected), (counter.calls, ended)
    assert ended_steps >= 3, "episodes must end for the test to mean anything"


def test_with_masked_resets_a_training_rollout_never_syncs_inside_its_steps(tmp_path) -> None:
    """With ``env.masked_resets`` (what code capturing CUDA graphs sets) the auto-reset needs no index of the
    finished envs, so the rollout waits for the device only at its end (the index of its truncated steps,
    the rollout's finite check, the deferred action checks, the guard counts), however many episodes end
    inside it."""
    from training.config import compose
    from training.runner import Runner

    over = ["task=cable_load", "train.rollout_steps=40", "task.episode_length_s=0.2", f"runs_dir={tmp_path}"]
    runner = Runner(OmegaConf.to_container(compose([*TRAIN_ARGS, *over]), resolve=True))
    assert not runner.env.masked_resets, "a run resets by index"
    runner.env.masked_resets = True
    runner.env.reset()
    obs = runner.env.step(runner.env.zero_actions())[0]  # the first masked reset checks the shared state, once
    counter = _SyncCounter()
    with counter:
        _, episodes = runner.collect(obs)
    assert float(episodes.count) >= 2 * runner.env.num_envs, "episodes must end inside the rollout"
    assert len(counter.calls) <= 4, counter.calls


def test_masked_resets_give_the_indexed_resets_episodes_and_leave_running_envs_alone() -> None:
    """Two cable_load envs with the same seed, one resetting by mask: while an env runs, the two agree
    bit for bit (the masked reset computes every env's reset but keeps it only where an episode ended);
    where one ends, both report the same episode statistics and restart it from a fresh hover."""
    kw = {"num_envs": 32, "seed": 0, "episode_length_s": 3.0, "obs_noise": {"enabled": False}}
    indexed, masked = sim.make("cable_load", **kw), sim.make("cable_load", **kw)
    assert indexed.masked_resets is False, "the indexed reset is the default"
    masked.masked_resets = True
    indexed.reset(), masked.reset()
    act = {"mavs": torch.zeros(32, indexed.n, 5)}
    act["mavs"][:8, :, 3] = torch.linspace(0.4, 1.0, 8).view(8, 1)  # 8 envs roll until they crash, one by one
    ended = torch.zeros(32, dtype=torch.bool)
    first = None
    for _ in range(200):
        a, b = indexed.step(act), masked.step(act)
        done = a[2] | a[3]
        assert torch.equal(done, b[2] | b[3]) and torch.equal(a[1]["mavs"][~ended], b[1]["mavs"][~ended])
        live = ~(ended | done)
        for key, value in a[0]["mavs"].items():
            assert torch.equal(value[live], b[0]["mavs"][key][live]), key
        if done.any():
            assert set(b[4]["episode"]) - set(a[4]["episode"]) == {"termination/nonfinite"}
            if first is None:  # the same episodes ended in both: the same statistics
                first = a[4]["episode"]
                for key, value in first.items():
                    assert torch.allclose(value, b[4]["episode"][key], atol=1e-5), key
            assert (masked.episode_step[done] == 0).all()
            assert torch.allclose(masked.load.pos[done, 2], torch.full((int(done.sum()),), masked.cfg.start_height))
        else:
            assert float(b[4]["episode"]["count"]) == 0
        ended |= done
    assert first is not None and 2 <= int(ended.sum()) <= 8, int(ended.sum())
    with pytest.raises(ValueError, match="masked resets are not supported"):  # episode metrics by env index
        sim.make("hepi_insertion", num_envs=2, seed=0).masked_resets = True


def test_deferred_action_checks_apply_zero_for_nan_and_raise_at_the_check() -> None:
    """With ``defer_action_checks`` (the training rollout) a NaN action costs no host sync in step: the
    env applies 0 for it, and ``check_deferred_actions`` raises naming the count; out-of-range actions
    warn there once. Without it, step raises at once (issue 13's behaviour)."""
    env = sim.make("cable_load", num_envs=4, seed=0, randomization={"enabled": False})  # no action latency
    bad = {"mavs": torch.full_like(env.zero_actions()["mavs"], 0.5)}
    bad["mavs"][1, 0, 2] = float("nan")
    with pytest.raises(ValueError, match="NaN or inf"):
        env.step(bad)
    env.defer_action_checks = True
    obs, *_ = env.step(bad)
    assert torch.isfinite(obs["mavs"]["policy"]).all() and torch.isfinite(env.cmd).all()
    assert env.cmd[1, 0, 2] == 0 and env.cmd[1, 0, 0] == 0.5 * env.action_scale[0], "NaN entries applied as 0"
    with pytest.raises(ValueError, match="1 agent action"):
        env.check_deferred_actions()
    env.check_deferred_actions()  # counts restart after a check
    big = env.zero_actions()
    big["mavs"][0, 0, 0] = 3.0
    _, _, _, _, info = env.step(big)
    assert int(info["actions_out_of_range"][0]) == 1
    with pytest.warns(RuntimeWarning, match="outside"):
        env.check_deferred_actions()


def test_huge_finite_actions_are_out_of_range_not_nan() -> None:
    """The step's NaN/inf check sums the actions (one fast reduction); a sum that overflows on finite actions
    (here 3e38 + 3e38) is told apart by the exact check: those actions count as out of range, they raise no
    NaN error. An inf among them still raises."""
    env = sim.make("cable_load", num_envs=4, seed=0)
    huge = env.zero_actions()
    huge["mavs"][2, :, 0] = 3e38
    with pytest.warns(RuntimeWarning, match="outside"):
        _, _, _, _, info = env.step(huge)
    assert info["actions_out_of_range"].tolist() == [0, 0, env.n, 0]
    huge["mavs"][3, 1, 4] = float("-inf")
    with pytest.raises(ValueError, match=r"NaN or inf \(first envs: \[3\]\)"):
        env.step(huge)


@pytest.mark.timeout(180)
def test_the_compiled_deferred_action_screen_matches_the_eager_one() -> None:
    """``compile=True`` fuses the deferred checks of the training rollout into one kernel: the same cleaned
    actions and counts as the eager checks, for NaN, inf, out-of-range and in-range entries."""
    compiled = sim.make("cable_load", num_envs=64, seed=0, compile=True)
    gen = torch.Generator().manual_seed(0)
    act = torch.rand(64, compiled.n, 5, generator=gen) * 2.4 - 1.2  # some entries beyond [-1, 1]
    act[3, 0, 1], act[7, 2, 4], act[7, 2, 0], act[9, 1, 2] = float("nan"), float("inf"), float("nan"), -float("inf")
    want = MultiAgentEnv._screen_actions_eager(act)
    got = compiled._screen_actions(act)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]) and torch.equal(got[2], want[2])
    assert want[1][0] == 3 and not torch.isnan(want[0]).any() and want[0][7, 2, 4] == 0
    assert want[1][1] == int((act.abs() > 1 + 1e-6).any(-1).sum())  # inf is out of range too; NaN is not
