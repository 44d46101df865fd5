"""The shipped example policies of Core v2 (assets/policies/pixel_reach, memory_reach) do what their
READMEs say, in torch and through their ONNX exports, beside their baselines."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import sim
from training.checkpoint import load_policy
from training.evaluation import (
    actor_policy,
    onnx_policy,
    onnx_session,
    run_episodes,
    success_criteria,
    summarize,
    zero_policy,
)

ASSETS = Path(__file__).resolve().parents[1] / "assets" / "policies"
EPISODES = 64


def _success(task: str, policy_fn) -> float:
    env = sim.make(task, num_envs=EPISODES, seed=0)
    results = run_episodes(env, policy_fn(env), EPISODES, seed=0, window_s=type(env).evaluation_window_s)
    return summarize(results, success_criteria(task))["success_rate"]


def _checkpoint(path: Path):
    loaded = load_policy(path)
    return lambda env: actor_policy(loaded.actors, env)


@pytest.mark.parametrize("task", ["pixel_reach", "memory_reach"])
def test_shipped_policy_reaches_its_target_where_blind_or_memoryless_ones_do_not(task: str) -> None:
    torch.set_num_threads(1)
    learned = _success(task, _checkpoint(ASSETS / task / "policy.pt"))
    assert learned >= 0.9
    assert _success(task, zero_policy) <= 0.05
    if task == "memory_reach":
        # The same MLP network trained with the same budget cannot remember the target: near chance.
        assert _success(task, _checkpoint(ASSETS / task / "mlp_baseline.pt")) <= 0.1


@pytest.mark.parametrize("task", ["pixel_reach", "memory_reach"])
def test_shipped_onnx_export_acts_like_the_checkpoint(task: str) -> None:
    pytest.importorskip("onnxruntime")
    session = onnx_session(ASSETS / task / "policy.onnx")
    inputs = [i.name for i in session.get_inputs()]
    assert inputs == (["image"] if task == "pixel_reach" else ["policy", "h_in"])
    via_onnx = _success(task, lambda env: onnx_policy(session, env))
    via_torch = _success(task, _checkpoint(ASSETS / task / "policy.pt"))
    assert via_onnx == via_torch >= 0.9
