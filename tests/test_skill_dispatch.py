"""The hierarchical low level: each agent runs the actor of its commanded skill; ONNX-exportable."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from policies import SkillDispatcher

SKILLS = ("goto", "serve", "pass")


class Constant(nn.Module):
    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = value

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.full((*obs.shape[:-1], 2), self.value)


def _obs(skill_ids: list[list[int]]) -> torch.Tensor:
    ids = torch.tensor(skill_ids)
    onehot = torch.nn.functional.one_hot(ids, len(SKILLS)).float()
    return torch.cat((torch.randn(*ids.shape, 4), onehot), -1)  # the one-hot sits at [4, 7)


def test_each_agent_gets_its_own_skills_action_and_the_fallback_elsewhere() -> None:
    low = SkillDispatcher({"serve": Constant(1.0), "pass": Constant(2.0)}, SKILLS, slice(4, 7), 2, Constant(-5.0))
    out = low(_obs([[0, 1, 2], [2, 2, 1]]))
    assert out[..., 0].tolist() == [[-5.0, 1.0, 2.0], [2.0, 2.0, 1.0]]
    without = SkillDispatcher({"pass": Constant(2.0)}, SKILLS, slice(4, 7), 2)
    assert without(_obs([[0, 2]]))[..., 0].tolist() == [[0.0, 2.0]]


def test_bad_configuration_is_named() -> None:
    with pytest.raises(ValueError, match="unknown skills"):
        SkillDispatcher({"spike": Constant(1.0)}, SKILLS, slice(4, 7), 2)
    with pytest.raises(ValueError, match="one-hot"):
        SkillDispatcher({}, SKILLS, slice(4, 6), 2)


def test_dispatcher_exports_to_onnx_and_matches_torch(tmp_path) -> None:
    ort = pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    actors = {name: nn.Sequential(nn.Linear(7, 8), nn.Tanh(), nn.Linear(8, 2)) for name in ("serve", "pass")}
    low = SkillDispatcher(actors, SKILLS, slice(4, 7), 2).eval()
    obs = _obs([[0, 1, 2], [1, 2, 0]])
    path = tmp_path / "low.onnx"
    torch.onnx.export(low, (obs,), str(path), input_names=["obs"], output_names=["action"], dynamo=False)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (got,) = sess.run(["action"], {"obs": obs.numpy()})
    torch.testing.assert_close(torch.from_numpy(got), low(obs), atol=1e-5, rtol=0)
