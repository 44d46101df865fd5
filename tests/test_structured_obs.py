"""Core v2: structured observations (images, graphs) and memory through storage, PPO and policies."""

from __future__ import annotations

import pytest
import torch

import sim
from policies import ActorCritic, GroupDims, InputSpec, PolicyCfg
from policies.memory import RecurrentMemory
from training.ppo import PPO, PPOCfg
from training.runner import group_dims


def _models(env, **policy) -> torch.nn.ModuleDict:
    cfg = PolicyCfg(actor_hidden=(32,), critic_hidden=(32,), **policy)
    return torch.nn.ModuleDict({name: ActorCritic(group_dims(g), cfg) for name, g in env.spec.groups.items()})


def _rollout(env, ppo: PPO, steps: int) -> dict:
    obs = env.reset()
    with torch.inference_mode():
        for _ in range(steps):
            actions = ppo.act(obs)
            obs, reward, terminated, truncated, info = env.step(actions)
            ppo.process_env_step(reward, terminated, truncated, info)
        ppo.compute_returns(obs)
    return obs


def test_images_stay_uint8_in_storage_and_reach_the_cnn() -> None:
    env = sim.make("pixel_reach", num_envs=8, seed=0)
    models = _models(env, image_features=16, cnn_channels=(4, 8, 8))
    ppo = PPO(models, PPOCfg(minibatches=2, epochs=1), 8, 6, env.device, torch.Generator().manual_seed(0))
    _rollout(env, ppo, 6)
    store = ppo.storage["robot"]
    assert store.obs["image"].dtype == torch.uint8 and store.obs["image"].shape == (6, 8, 1, 48, 48, 3)
    assert store.obs["state"].dtype == torch.float32
    # The stored frames are the env's frames: a target (red) pixel and the robot (green) at the centre.
    img = store.obs["image"]
    assert int(img[..., 0].max()) == 255 and int(img[0, 0, 0, 23:25, 23:25, 1].min()) > 200
    before = [p.clone() for p in models["robot"].actor_encoder.parameters()]
    losses = ppo.update()
    assert all(v == v for v in losses.values())  # finite (NaN != NaN)
    moved = [not torch.equal(a, b) for a, b in zip(before, models["robot"].actor_encoder.parameters(), strict=True)]
    assert all(moved), "the PPO gradient reaches every CNN parameter"


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_recurrent_replay_reproduces_the_rollout(kind: str) -> None:
    """Replaying a stored rollout from its initial state, with resets where episodes started, gives
    back the log-probabilities and values computed step by step while acting (ratio exactly 1), so
    truncated BPTT trains the policy that collected the data."""
    env = sim.make("memory_reach", num_envs=6, seed=1, episode_length_s=0.7)  # 7-step episodes: resets inside
    env.reset()
    models = _models(env, memory=kind, memory_hidden=8)
    ppo = PPO(models, PPOCfg(minibatches=2), 6, 16, env.device, torch.Generator().manual_seed(0))
    env.randomize_episode_progress()
    _rollout(env, ppo, 16)
    store, ac = ppo.storage["robot"], models["robot"]
    assert bool(store.dones.any()) and bool((~store.dones).any())
    ids = torch.arange(6)
    batch = store.sequence_batch(ids, store.advantages)
    with torch.no_grad():
        log_prob, _, value = ac.evaluate_sequence(
            batch["obs"], batch["obs"], batch["actions"], batch["memory0"], batch["resets"]
        )
    torch.testing.assert_close(log_prob, store.log_probs, atol=1e-5, rtol=1e-5)
    value = ac.value_norm.denormalize(value.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(value, store.values, atol=1e-5, rtol=1e-5)
    # Without the resets the replay differs: the state really carries across steps.
    with torch.no_grad():
        wrong, _, _ = ac.evaluate_sequence(
            batch["obs"], batch["obs"], batch["actions"], batch["memory0"], torch.zeros_like(batch["resets"])
        )
    assert not torch.allclose(wrong, store.log_probs, atol=1e-4)
    ppo.update()  # and the update runs on env-sequence minibatches


def test_memory_state_is_explicit_and_zeroed_on_reset() -> None:
    mem = RecurrentMemory("gru", 3, 5, layers=2)
    x = torch.randn(4, 7, 3)
    state0 = torch.randn(7, 2, 5)
    resets = torch.zeros(4, 7, dtype=torch.bool)
    resets[2, 3] = True
    y = mem.sequence(x, state0, resets)
    # Env 3 restarts at t=2: its outputs from there equal a fresh run on x[2:] from zeros.
    fresh = mem.sequence(x[2:, 3:4], torch.zeros(1, 2, 5), torch.zeros(2, 1, dtype=torch.bool))
    torch.testing.assert_close(y[2:, 3:4], fresh)
    assert not torch.allclose(y[2:, 2:3], mem.sequence(x[2:, 2:3], torch.zeros(1, 2, 5), resets[2:, 2:3]))


def test_graph_entries_encode_permutation_invariantly() -> None:
    """A graph as padded parts: node order and padding content do not change the encoding."""
    n = 6
    inputs = (
        InputSpec("g_x", (n, 4), kind="graph", graph="g", role="node_features"),
        InputSpec("g_v", (n, 2, 3), kind="graph", graph="g", role="node_vectors"),
        InputSpec("g_t", (n,), "int64", kind="graph", graph="g", role="node_types"),
        InputSpec("g_m", (n,), "bool", kind="graph", graph="g", role="node_mask"),
        InputSpec("own", (3,)),
    )
    ac = ActorCritic(GroupDims(2, action_dim=2, actor_inputs=inputs, critic_inputs=inputs[-1:]), PolicyCfg())
    x = {
        "g_x": torch.randn(5, 2, n, 4),
        "g_v": torch.randn(5, 2, n, 2, 3),
        "g_t": torch.randint(0, 3, (5, 2, n)),
        "g_m": torch.tensor([True] * 4 + [False] * 2).expand(5, 2, n),
        "own": torch.randn(5, 2, 3),
    }
    a = ac.act_deterministic(x)
    perm = torch.tensor([2, 0, 3, 1, 4, 5])
    shuffled = {k: v[:, :, perm] if k != "own" else v for k, v in x.items()}
    shuffled["g_x"] = shuffled["g_x"].clone()
    shuffled["g_x"][:, :, 4:] = 99.0  # padding content is ignored
    torch.testing.assert_close(ac.act_deterministic(shuffled), a)


def test_spec_rejects_malformed_entries() -> None:
    from sim.core.spec import ObsEntry

    with pytest.raises(ValueError, match="image entry"):
        ObsEntry((48, 48, 3), torch.float32, kind="image")
    with pytest.raises(ValueError, match="graph entry"):
        ObsEntry((4,), kind="graph")
    with pytest.raises(ValueError, match="dtype"):
        ObsEntry((4, 2), torch.float32, kind="graph", graph="g", role="edge_index")


def test_graph_and_image_policy_exports_with_one_onnx_input_per_entry(tmp_path) -> None:
    """Graph parts (float, int64 types, bool masks) and an image in one policy: each its own ONNX
    input in its dtype, parity within 1e-5."""
    pytest.importorskip("onnxruntime")
    from policies.export import export_onnx, onnx_runtime_session, read_metadata

    n = 5
    inputs = (
        InputSpec("cam", (16, 16, 1), "uint8", kind="image"),
        InputSpec("g_x", (n, 3), kind="graph", graph="g", role="node_features"),
        InputSpec("g_t", (n,), "int64", kind="graph", graph="g", role="node_types"),
        InputSpec("g_m", (n,), "bool", kind="graph", graph="g", role="node_mask"),
    )
    cfg = PolicyCfg(cnn_channels=(4,), cnn_kernels=(3,), cnn_strides=(2,), image_features=8, actor_hidden=(16,))
    ac = ActorCritic(GroupDims(1, action_dim=2, actor_inputs=inputs, critic_inputs=(InputSpec("s", (2,)),)), cfg)
    with torch.no_grad():
        ac.actor[-1].weight.mul_(50.0)
    path = tmp_path / "g.onnx"
    report = export_onnx(ac, path, {"task": "test"}, torch.ones(2), random_samples=256)
    assert report.max_action < 1e-5
    session = onnx_runtime_session(path)
    assert [(i.name, i.type) for i in session.get_inputs()] == [
        ("cam", "tensor(uint8)"),
        ("g_x", "tensor(float)"),
        ("g_t", "tensor(int64)"),
        ("g_m", "tensor(bool)"),
    ]
    assert [i["kind"] for i in read_metadata(path)["inputs"]] == ["image", "graph", "graph", "graph"]


def test_feed_forward_groups_take_env_sequence_minibatches() -> None:
    """When some group is recurrent, minibatches are whole envs for every group: a feed-forward
    group's replay on them reproduces its rollout (ratio 1: zero KL, nothing clipped)."""
    env = sim.make("memory_reach", num_envs=4, seed=0)
    ppo = PPO(_models(env), PPOCfg(minibatches=2), 4, 5, env.device, torch.Generator().manual_seed(0))
    _rollout(env, ppo, 5)
    adv = {"robot": ppo.storage["robot"].normalized_advantages()}
    _, stats = ppo._minibatch_loss(torch.tensor([2, 0]), adv, by_env=True)
    assert abs(stats["approx_kl"]) < 1e-7 and stats["clipfrac"] == 0.0


def test_spatial_softmax_finds_where_a_small_bright_spot_is() -> None:
    """The spatial encoder's keypoint layer reports a one-pixel peak's image position and its strength, which is what
    makes it keep a 1-2 pixel ball that a coarse flattened grid blurs."""
    from policies.encoders import SpatialSoftmax

    layer = SpatialSoftmax(9, 14)
    maps = torch.zeros(2, 1, 9, 14)
    maps[0, 0, 2, 11] = 20.0  # upper right
    maps[1, 0, 7, 1] = 20.0  # lower left
    out = layer(maps)  # [2, 3]: x, y, peak
    expected_x = torch.tensor([-1 + 2 * 11 / 13, -1 + 2 * 1 / 13])
    expected_y = torch.tensor([-1 + 2 * 2 / 8, -1 + 2 * 7 / 8])
    assert torch.allclose(out[:, 0], expected_x, atol=1e-3) and torch.allclose(out[:, 1], expected_y, atol=1e-3)
    assert torch.equal(out[:, 2], torch.tensor([20.0, 20.0]))
    flat = layer(torch.zeros(1, 1, 9, 14))  # nothing there: the centre, peak 0
    assert torch.allclose(flat, torch.zeros(1, 3), atol=1e-6)
