"""cable_load's plain policy (every action-prior gain 0): the control-law expert it imitates before PPO
(``imitation.expert=task``) is the shipped PID prior, whatever the run's own gains; the shipped plain ONNX has no
prior in its graph and its metadata says so."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import sim
from training.evaluation import prior_policy

GROUP = "mavs"
PLAIN_GAINS = {"action_prior_kp": 0.0, "action_prior_kd": 0.0, "action_prior_ki": 0.0}
PLAIN_DIR = Path(__file__).resolve().parents[1] / "assets" / "policies" / "cable_load" / "plain"


@pytest.mark.parametrize("num_mavs", [3, 5])
def test_the_control_law_expert_of_a_plain_env_is_the_residual_prior(num_mavs: int) -> None:
    """A plain env has no prior of its own, but its expert gives the shipped prior's action on every state of a
    rollout flown by that prior (approach, braking and hover alike)."""
    residual = sim.make("cable_load", num_envs=4, seed=3, num_mavs=num_mavs)
    plain = sim.make("cable_load", num_envs=4, seed=3, num_mavs=num_mavs, **PLAIN_GAINS)
    assert prior_policy(plain) is None  # nothing of the law is left in the plain env's spec
    prior, expert = prior_policy(residual), plain.expert_policy()
    obs = residual.reset()
    moving = 0.0
    for _ in range(150):
        action = prior(obs)
        label = expert(obs)[GROUP]
        assert label.shape == (4, num_mavs, 5)
        torch.testing.assert_close(label, action[GROUP], rtol=0, atol=0)
        assert label[..., 3:].abs().max() == 0  # the law commands no body rates
        moving = max(moving, float(label.abs().max()))
        obs, *_ = residual.step(action)
    assert moving > 0.1  # the law was commanding, not hovering, somewhere in the rollout


def _prior_sized_weights(path: Path) -> list[np.ndarray]:
    """The ONNX graph's constant tensors of the prior's shape ``[150, 5]`` (observation x action)."""
    onnx = pytest.importorskip("onnx")
    from onnx import numpy_helper

    model = onnx.load(str(path))
    consts = [numpy_helper.to_array(t) for t in model.graph.initializer]
    for node in model.graph.node:
        consts += [numpy_helper.to_array(a.t) for a in node.attribute if a.type == onnx.AttributeProto.TENSOR]
    return [c for c in consts if c.shape == (150, 5)]


def test_the_shipped_plain_onnx_has_no_prior() -> None:
    from policies.export import read_metadata

    residual = PLAIN_DIR.parent / "policy.onnx"
    # The check can fail: the residual's graph does carry its prior, as a nonzero [150, 5] matrix.
    assert any(np.abs(w).max() > 0 for w in _prior_sized_weights(residual))
    path = PLAIN_DIR / "policy.onnx"
    assert not any(np.abs(w).max() > 0 for w in _prior_sized_weights(path))
    cfg = read_metadata(path)["task_cfg"]
    assert (cfg["action_prior_kp"], cfg["action_prior_kd"], cfg["action_prior_ki"]) == (0.0, 0.0, 0.0)
    assert cfg["rewards"]["profile"] == "plain"
