"""The shipped drone_volleyball pass skill: it passes, and its ONNX export gives the same actions."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import sim
from training.checkpoint import load_policy
from training.evaluation import actor_policy, run_episodes, summarize, zero_policy

ROOT = Path(__file__).resolve().parents[1]
PASS = ROOT / "assets" / "policies" / "drone_volleyball" / "pass.pt"


@pytest.mark.skipif(not PASS.is_file(), reason="no shipped pass skill")
def test_shipped_pass_skill_delivers_the_ball_near_the_target() -> None:
    loaded = load_policy(PASS)
    env = sim.make(loaded.task_cfg, num_envs=48, seed=0)
    trained = summarize(run_episodes(env, actor_policy(loaded.actors, env), 48, seed=5, window_s=5.0), {})
    zero = summarize(run_episodes(env, zero_policy(env), 48, seed=5, window_s=5.0), {})
    assert trained["success"] >= 0.8, trained  # 96% over 256 episodes in pass_report.json
    assert zero["success"] == 0.0 and trained["miss_m"] < 1.5


@pytest.mark.skipif(not PASS.is_file(), reason="no shipped pass skill")
def test_shipped_pass_onnx_matches_torch() -> None:
    ort = pytest.importorskip("onnxruntime")
    loaded = load_policy(PASS)
    actor = loaded.actors["team_a"]
    env = sim.make(loaded.task_cfg, num_envs=16, seed=1)
    obs = env.reset()["team_a"]["policy"]
    sess = ort.InferenceSession(str(PASS.with_suffix(".onnx")), providers=["CPUExecutionProvider"])
    (got,) = sess.run(["action"], {"obs": obs.reshape(-1, obs.shape[-1]).numpy()})
    torch.testing.assert_close(torch.from_numpy(got).reshape(obs.shape[0], 1, -1), actor(obs), atol=1e-5, rtol=0)
