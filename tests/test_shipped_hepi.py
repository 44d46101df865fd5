"""The shipped HEPi policies (assets/policies/hepi_*): exactly equivariant after training (where the
Transformer baseline is not), better than doing nothing, and the same through their ONNX exports."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

import sim
from training.checkpoint import load_policy
from training.evaluation import actor_policy, onnx_policy, onnx_session, run_episodes, summarize, zero_policy

ASSETS = Path(__file__).resolve().parents[1] / "assets" / "policies"
SHIPPED = ["hepi_insertion", "hepi_rope_closing", "hepi_cloth_hanging"]
EPISODES = 32


def _rotation(gen: torch.Generator) -> torch.Tensor:
    q, r = torch.linalg.qr(torch.randn(3, 3, generator=gen, dtype=torch.float64))
    q = q * torch.sign(torch.diagonal(r))
    return q if torch.det(q) > 0 else -q


def _transform(obs: dict[str, torch.Tensor], rot: torch.Tensor, shift: torch.Tensor) -> dict[str, torch.Tensor]:
    """The same scene turned by ``rot`` and moved by ``shift``: positions (channel 0) and all other
    vectors turn, only positions move; masks, types and edges stay."""
    out = dict(obs)
    v = obs["scene_node_vectors"].double() @ rot.T
    v[..., 0, :] += shift
    out["scene_node_vectors"] = v.float()
    return out


@pytest.mark.parametrize("task", SHIPPED)
def test_shipped_policy_turns_its_actions_with_the_scene(task: str) -> None:
    torch.set_num_threads(1)
    ac = load_policy(ASSETS / task / "policy.pt").actors["grippers"].ac
    env = sim.make(task, num_envs=16, seed=3)
    obs = env.reset()["grippers"]
    for _ in range(5):  # a few steps in, so velocities are not zero
        obs = env.step({"grippers": ac.act_deterministic(obs)})[0]["grippers"]
    gen = torch.Generator().manual_seed(0)
    base = ac.action_mean(obs)  # [E, 1, act_dim], unclamped
    scale = base.abs().max().item()
    assert scale > 1e-3  # a policy that outputs nothing would pass trivially
    for _ in range(3):
        rot, shift = _rotation(gen), torch.randn(3, generator=gen, dtype=torch.float64)
        turned = ac.action_mean(_transform(obs, rot, shift))
        expected = (base.double().reshape(*base.shape[:-1], -1, 3) @ rot.T).reshape(base.shape)
        assert (turned.double() - expected).abs().max().item() < 1e-4 * max(1.0, scale)


def _task_error(task: str, policy_fn, metric: str) -> float:
    env = sim.make(task, num_envs=EPISODES, seed=0)
    results = run_episodes(env, policy_fn(env), EPISODES, seed=0, window_s=type(env).evaluation_window_s)
    return float(summarize(results, {})[metric])


METRICS = {
    "hepi_insertion": "keypoint_err_m",
    "hepi_rope_closing": "task_error_m",
    "hepi_cloth_hanging": "task_error_m",
}


@pytest.mark.parametrize("task", SHIPPED)
def test_shipped_policy_at_least_halves_the_task_error_of_doing_nothing(task: str) -> None:
    torch.set_num_threads(1)
    loaded = load_policy(ASSETS / task / "policy.pt")
    learned = _task_error(task, lambda env: actor_policy(loaded.actors, env), METRICS[task])
    idle = _task_error(task, zero_policy, METRICS[task])
    assert math.isfinite(learned) and learned <= 0.5 * idle


@pytest.mark.parametrize("task", SHIPPED)
def test_shipped_onnx_export_acts_like_the_checkpoint(task: str) -> None:
    pytest.importorskip("onnxruntime")
    session = onnx_session(ASSETS / task / "policy.onnx")
    assert [i.name for i in session.get_inputs()] == [
        f"scene_{r}"
        for r in ("node_features", "node_vectors", "node_types", "node_mask", "edge_index", "edge_types", "edge_mask")
    ]
    loaded = load_policy(ASSETS / task / "policy.pt")
    via_onnx = _task_error(task, lambda env: onnx_policy(session, env), METRICS[task])
    via_torch = _task_error(task, lambda env: actor_policy(loaded.actors, env), METRICS[task])
    # Same weights, float32 in both; contact-rich closed loops amplify 1e-7 differences over 100 steps,
    # so single episodes drift apart while the task error over the batch stays the same.
    assert via_onnx == pytest.approx(via_torch, rel=0.1)
