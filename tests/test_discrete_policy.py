"""Discrete (multi-head categorical) actions: the sampling law, log-probs, the env's read-back,
ONNX export, and PPO learning a contextual choice."""

from __future__ import annotations

import pytest
import torch

from policies import ActorCritic, GroupDims, PolicyCfg, action_from_choice, choice_from_action
from sim.core.spec import choice_from_action as env_choice_from_action
from training.ppo import PPO, PPOCfg

NVEC = (4, 2, 9)


def _ac(seed: int = 0) -> ActorCritic:
    torch.manual_seed(seed)
    return ActorCritic(GroupDims(2, 5, 6, len(NVEC), NVEC), PolicyCfg(actor_hidden=(16,), critic_hidden=(16,)))


@pytest.mark.parametrize("n", [1, 2, 3, 9])
def test_choice_round_trip_through_the_env_contract(n: int) -> None:
    idx = torch.arange(n)
    a = action_from_choice(idx, n)
    assert float(a.min()) >= -1.0 and float(a.max()) <= 1.0
    assert torch.equal(env_choice_from_action(a, n), idx)  # what the env reads back
    assert torch.equal(choice_from_action(a, n), idx)
    # A little float noise (e.g. ONNX) still reads back the same choice.
    assert torch.equal(env_choice_from_action(a + 0.4 / max(n - 1, 1), n), idx)


def test_discrete_dims_are_validated() -> None:
    with pytest.raises(ValueError, match="heads"):
        GroupDims(1, 3, 3, 2, (4, 2, 9))


def test_samples_follow_the_softmax_and_log_probs_agree_with_evaluate() -> None:
    ac = _ac()
    with torch.no_grad():
        ac.actor[-1].weight.normal_(0, 1.0)  # a non-uniform policy
    obs = torch.randn(1, 2, 5).expand(20000, 2, 5).contiguous()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        action, log_prob = ac.act(obs, generator=g)
        logits = ac.logits(obs[:1])
        lp, ent, _ = ac.evaluate(obs, torch.randn(20000, 2, 6), action)
    torch.testing.assert_close(lp, log_prob)
    start = 0
    for k, n in enumerate(NVEC):
        idx = choice_from_action(action[..., k], n)
        freq = torch.bincount(idx[:, 0], minlength=n).float() / idx.shape[0]
        torch.testing.assert_close(freq, logits[k][0, 0].exp(), atol=0.015, rtol=0)
        start += n
    expected = sum(-(lg.exp() * lg).sum(-1) for lg in logits)
    torch.testing.assert_close(ent[:1], expected)
    # The deterministic action is each head's most likely choice.
    det = ac.act_deterministic(obs[:1])
    for k, n in enumerate(NVEC):
        assert int(choice_from_action(det[0, 0, k], n)) == int(logits[k][0, 0].argmax())


def test_discrete_actor_exports_to_onnx(tmp_path) -> None:
    ort = pytest.importorskip("onnxruntime")
    ac = _ac(3)
    with torch.no_grad():
        ac.actor[-1].weight.normal_(0, 1.0)
    actor = ac.deterministic_actor().eval()
    obs = torch.randn(64, 2, 5)
    path = tmp_path / "d.onnx"
    torch.onnx.export(actor, (obs,), str(path), input_names=["obs"], output_names=["action"], dynamo=False)
    out = ort.InferenceSession(str(path)).run(None, {"obs": obs.numpy()})[0]
    with torch.no_grad():
        ref = actor(obs)
    for k, n in enumerate(NVEC):
        assert torch.equal(choice_from_action(torch.from_numpy(out[..., k]), n), choice_from_action(ref[..., k], n))


def test_ppo_learns_a_contextual_choice() -> None:
    """One-step episodes: the observation is a one-hot context c of 3, reward 1 when head 0 picks c
    (head 1 is irrelevant). PPO must go from chance (1/3) to >= 95%."""
    E = 256
    dims = GroupDims(1, 3, 3, 2, (3, 2))
    net = PolicyCfg(actor_hidden=(32,), critic_hidden=(32,))
    cfg = PPOCfg(lr=3e-3, schedule="constant", entropy_coef=0.0, policy=net)
    torch.manual_seed(0)
    models = torch.nn.ModuleDict({"g": ActorCritic(dims, cfg.policy)})
    ppo = PPO(models, cfg, E, 8, torch.device("cpu"), torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(2)

    def contexts() -> tuple[torch.Tensor, dict]:
        c = torch.randint(0, 3, (E,), generator=g)
        o = torch.nn.functional.one_hot(c, 3).float().unsqueeze(1)
        return c, {"g": {"policy": o, "state": o}}

    def accuracy() -> float:
        c, obs = contexts()
        with torch.no_grad():
            a = models["g"].act_deterministic(obs["g"]["policy"])
        return float((choice_from_action(a[:, 0, 0], 3) == c).float().mean())

    before = accuracy()
    done = torch.ones(E, dtype=torch.bool)
    for _ in range(15):
        for _ in range(8):
            c, obs = contexts()
            with torch.inference_mode():
                a = ppo.act(obs)["g"]
                reward = (choice_from_action(a[:, 0, 0], 3) == c).float().unsqueeze(-1)
                ppo.process_env_step({"g": reward}, done, ~done, {"final_obs": obs})
        with torch.inference_mode():
            ppo.compute_returns(contexts()[1])
        ppo.update()
    assert before < 0.7
    assert accuracy() >= 0.95
