"""Graph actors (policies.graph): HEPi and EMPN rotate their actions with the scene, the Transformer
does not; node order and padding do not matter; ONNX parity; they learn and stay equivariant; PPO
runs on them. Graphs come from the HEPi task's SceneGraph (object nodes first, actuators last)."""

from __future__ import annotations

import math

import pytest
import torch

from policies import ActorCritic, GroupDims, InputSpec, PolicyCfg
from sim.tasks.hepi.graph import SceneGraph

N_OBJ, N_ACT, N_VEC = 10, 2, 3  # object nodes (two of them padding), actuators, vectors per node
GRAPH = SceneGraph(N_OBJ, N_ACT, N_VEC)
INPUTS = tuple(
    InputSpec(name, e.shape, str(e.dtype).removeprefix("torch."), kind="graph", graph=e.graph, role=e.role)
    for name, e in GRAPH.entries().items()
)


def _actor_critic(kind: str, vectors: int = 2, **policy) -> ActorCritic:
    cfg = PolicyCfg(graph_actor=kind, graph_action_vectors=vectors, critic_hidden=(32,), **policy)
    dims = GroupDims(1, action_dim=N_ACT * vectors * 3, actor_inputs=INPUTS, critic_inputs=INPUTS)
    return ActorCritic(dims, cfg)


def _scene(envs: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(object vectors [E, No, V, 3], actuator vectors [E, Na, V, 3], object mask [E, No])``: points
    of ~0.1 m objects somewhere in a 1 m workspace, free vectors of ~0.1 (displacements, velocities)."""
    gen = torch.Generator().manual_seed(seed)
    centre = torch.rand(envs, 1, 1, 3, generator=gen)
    obj = 0.1 * torch.randn(envs, N_OBJ, N_VEC, 3, generator=gen)
    obj[:, :, 0] += centre[:, :, 0]
    act = 0.1 * torch.randn(envs, N_ACT, N_VEC, 3, generator=gen)
    act[:, :, 0] += centre[:, :, 0] + 0.2
    mask = torch.ones(envs, N_OBJ, dtype=torch.bool)
    mask[:, -2:] = False
    return obj, act, mask


def _transform(obj: torch.Tensor, act: torch.Tensor, rot: torch.Tensor, shift: torch.Tensor) -> tuple:
    """Positions (channel 0) -> ``R x + t``, free vectors -> ``R v``."""

    def move(x: torch.Tensor) -> torch.Tensor:
        y = x @ rot.T
        y[..., 0, :] += shift
        return y

    return move(obj), move(act)


def _rotation(gen: torch.Generator) -> torch.Tensor:
    q, r = torch.linalg.qr(torch.randn(3, 3, generator=gen, dtype=torch.float64))
    q = q * torch.sign(torch.diagonal(r))
    if torch.det(q) < 0:  # a proper rotation (det +1)
        q[:, 0] = -q[:, 0]
    return q.float()


def _rotation_error(ac: ActorCritic, seed: int = 0) -> tuple[float, float]:
    """``(max |a(R x + t) - R a(x)|, max |a(x)|)`` over envs and a few random rotations (unclamped means)."""
    gen = torch.Generator().manual_seed(seed + 100)
    obj, act, mask = _scene(16, seed)
    base = ac.action_mean(GRAPH.observation(obj, act, mask)).detach()
    err = 0.0
    for _ in range(3):
        rot, shift = _rotation(gen), 2.0 * torch.randn(3, generator=gen)
        moved = ac.action_mean(GRAPH.observation(*_transform(obj, act, rot, shift), mask)).detach()
        expected = (base.unflatten(-1, (-1, 3)) @ rot.T).flatten(-2)
        err = max(err, float((moved - expected).abs().max()))
    return err, float(base.abs().max())


def _boost_readout(ac: ActorCritic, factor: float = 100.0) -> None:
    """Actions of order 0.1-1 instead of the ~0.01 of the initial readout, so errors are not hidden."""
    head = ac.actor.readout if hasattr(ac.actor, "readout") else ac.actor.head
    with torch.no_grad():
        head.weight.mul_(factor)


@pytest.mark.parametrize("kind", ["hepi", "empn"])
def test_equivariant_actors_rotate_actions_with_the_scene(kind: str) -> None:
    """At initialisation (float32, the shipped dtype): rotations R (det +1) and translations t of the
    whole scene give actions rotated by R, max error < 1e-4."""
    torch.manual_seed(0)
    ac = _actor_critic(kind)
    _boost_readout(ac)
    err, scale = _rotation_error(ac)
    assert scale > 0.1, "actions must be non-trivial for the check to mean anything"
    assert err < 1e-4, f"{kind}: rotation error {err:.2e}"


def test_deepsets_critic_is_invariant_to_rotations_and_translations() -> None:
    """The critic (DeepSets over the graph: positions relative to the centroid, vector norms) gives
    the same value for the moved scene."""
    torch.manual_seed(0)
    ac = _actor_critic("hepi")
    obj, act, mask = _scene(16)
    gen = torch.Generator().manual_seed(5)
    rot, shift = _rotation(gen), 2.0 * torch.randn(3, generator=gen)
    with torch.no_grad():
        value = ac.value_normalized(GRAPH.observation(obj, act, mask))
        moved = ac.value_normalized(GRAPH.observation(*_transform(obj, act, rot, shift), mask))
    assert float(value.std()) > 1e-3  # the critic does look at the scene
    torch.testing.assert_close(moved, value, atol=1e-5, rtol=1e-4)


def test_transformer_baseline_is_not_equivariant() -> None:
    torch.manual_seed(0)
    ac = _actor_critic("transformer")
    _boost_readout(ac)
    err, scale = _rotation_error(ac)
    assert scale > 0.1
    assert err > 1e-2, f"the Transformer reads coordinates as numbers; error {err:.2e} should be large"


@pytest.mark.parametrize("kind", ["hepi", "empn", "transformer"])
def test_object_order_and_padding_do_not_change_actions(kind: str) -> None:
    """Permuting the object nodes (edges relabelled, edge order shuffled) gives the same actions;
    whatever the padding nodes and masked edges hold is ignored."""
    torch.manual_seed(0)
    ac = _actor_critic(kind)
    _boost_readout(ac)
    obs = GRAPH.observation(*_scene(4))
    base = ac.action_mean(obs).detach()
    perm = torch.cat([torch.randperm(N_OBJ), torch.arange(N_OBJ, N_OBJ + N_ACT)])  # new node i = old perm[i]
    inverse = torch.argsort(perm)
    edge_perm = torch.randperm(GRAPH.n_edges)
    g = {k.removeprefix("scene_"): v for k, v in obs.items()}
    moved = {
        "node_features": g["node_features"][:, :, perm],
        "node_vectors": g["node_vectors"][:, :, perm],
        "node_types": g["node_types"][:, :, perm],
        "node_mask": g["node_mask"][:, :, perm],
        "edge_index": inverse[g["edge_index"]][:, :, edge_perm],
        "edge_types": g["edge_types"][:, :, edge_perm],
        "edge_mask": g["edge_mask"][:, :, edge_perm],
    }
    shuffled = {f"scene_{k}": v for k, v in moved.items()}
    torch.testing.assert_close(ac.action_mean(shuffled).detach(), base, atol=1e-5, rtol=1e-4)
    # Padding: masked nodes hold garbage, masked edges point anywhere with any type.
    garbage = {k: v.clone() for k, v in obs.items()}
    pad_nodes = ~garbage["scene_node_mask"]
    garbage["scene_node_vectors"][pad_nodes] = 99.0
    garbage["scene_node_features"][pad_nodes] = -7.0
    pad_edges = ~garbage["scene_edge_mask"]
    assert bool(pad_nodes.any()) and bool(pad_edges.any())
    garbage["scene_edge_index"][pad_edges] = torch.randint(
        0, N_OBJ + N_ACT, garbage["scene_edge_index"][pad_edges].shape
    )
    garbage["scene_edge_types"][pad_edges] = 2
    torch.testing.assert_close(ac.action_mean(garbage).detach(), base, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("kind", ["hepi", "empn", "transformer"])
def test_actors_take_graphs_of_another_size(kind: str) -> None:
    """An actor built for one object size acts on a graph with more object nodes (a longer rope, a held-out
    shape with more keypoints): padded to a bigger graph, the same scene gives the same actions, and a scene
    with more real nodes gives finite actions of the same shape. The actuators are the graph's last nodes."""
    torch.manual_seed(0)
    ac = _actor_critic(kind)
    _boost_readout(ac)
    obj, act, mask = _scene(4)
    base = ac.action_mean(GRAPH.observation(obj, act, mask)).detach()
    extra = 6
    big = SceneGraph(N_OBJ + extra, N_ACT, N_VEC)
    padded = big.observation(
        torch.cat([obj, torch.full((4, extra, N_VEC, 3), 5.0)], 1), act, torch.cat([mask, mask.new_zeros(4, extra)], 1)
    )
    torch.testing.assert_close(ac.action_mean(padded).detach(), base, atol=1e-5, rtol=1e-4)
    more = big.observation(
        torch.cat([obj, obj[:, :extra] + 0.01], 1), act, torch.cat([mask, mask.new_ones(4, extra)], 1)
    )
    out = ac.action_mean(more).detach()
    assert out.shape == base.shape and bool(torch.isfinite(out).all())
    assert not torch.allclose(out, base, atol=1e-4)  # the extra nodes are seen


def test_hepi_exports_to_onnx_with_parity(tmp_path) -> None:
    """One ONNX input per graph part; onnxruntime matches torch (small network: the export is slow),
    also where vectors are exactly zero (an epsilon the exporter would drop once made that 1e-4)."""
    pytest.importorskip("onnxruntime")
    from policies.export import export_onnx, onnx_runtime_session

    torch.manual_seed(0)
    ac = _actor_critic("hepi", graph_latent=16, graph_vector_channels=4)
    _boost_readout(ac)
    path = tmp_path / "hepi.onnx"
    obj, act, mask = _scene(32)
    obj[:16, :, 2:], act[:16, :, 2:] = 0.0, 0.0  # resting objects: exactly zero velocities
    recorded = {k: v[:, 0] for k, v in GRAPH.observation(obj, act, mask).items()}
    scale = torch.ones(ac.dims.action_dim)
    report = export_onnx(ac, path, {"task": "test"}, scale, recorded, random_samples=256, atol=1e-4)
    assert report.max_action < 1e-5, report
    names = [i.name for i in onnx_runtime_session(path).get_inputs()]
    assert names == [i.name for i in INPUTS]


@pytest.mark.parametrize("kind", ["hepi", "empn"])
def test_equivariant_actor_learns_and_stays_equivariant(kind: str) -> None:
    """Maximum-likelihood steps through the PPO path (``evaluate``: log-prob with the tied std) toward
    an equivariant target, each actuator's vector to the centroid of the real object nodes, cut the
    error in half; afterwards the actions still rotate with the scene."""
    torch.manual_seed(0)
    ac = _actor_critic(kind, vectors=1, graph_layers=2, graph_latent=32)
    obj, act, mask = _scene(64, seed=1)
    obs = GRAPH.observation(obj, act, mask)
    centroid = (obj[:, :, 0] * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    target = 2.0 * (centroid[:, None] - act[:, :, 0])  # [E, Na, 3]
    target = target.reshape(64, 1, -1)

    def error() -> float:
        with torch.no_grad():
            return float((ac.action_mean(obs) - target).square().mean())

    before = error()
    opt = torch.optim.Adam(ac.parameters(), lr=3e-3)
    for _ in range(80):
        log_prob, _, _ = ac.evaluate(obs, obs, target)
        loss = -log_prob.mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    after = error()
    assert after < 0.5 * before, f"{kind}: mse {before:.4f} -> {after:.4f}"
    assert ac.log_std.shape == (N_ACT,)  # one std per output vector, tied across x, y, z
    err, scale = _rotation_error(ac, seed=3)
    assert scale > 0.1 and err < 1e-4, f"after training: rotation error {err:.2e}"


def test_ppo_updates_a_graph_actor() -> None:
    """A rollout of graph observations through PPO storage and one update: finite losses, the
    graph actor's weights move, the critic (DeepSets encoder) trains too."""
    from training.ppo import PPO, PPOCfg

    envs, steps = 8, 6
    models = torch.nn.ModuleDict({"grippers": _actor_critic("hepi", graph_latent=16)})
    ppo = PPO(models, PPOCfg(minibatches=2, epochs=2), envs, steps, "cpu", torch.Generator().manual_seed(0))
    gen = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for t in range(steps):
            obs = {"grippers": GRAPH.observation(*_scene(envs, seed=t))}
            actions = ppo.act(obs)["grippers"]
            assert actions.shape == (envs, 1, N_ACT * 6)
            reward = {"grippers": -actions.square().sum(-1) + 0.1 * torch.randn(envs, 1, generator=gen)}
            done = torch.zeros(envs, dtype=torch.bool)
            ppo.process_env_step(reward, done, done, {})
        ppo.compute_returns({"grippers": GRAPH.observation(*_scene(envs, seed=steps))})
    before = [p.detach().clone() for p in models["grippers"].actor.parameters()]
    losses = ppo.update()
    assert all(math.isfinite(v) for v in losses.values())
    moved = sum(not torch.equal(a, b) for a, b in zip(before, models["grippers"].actor.parameters(), strict=True))
    assert moved > len(before) // 2


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ({"graph_actor": "gnn"}, "graph_actor must be"),
        ({"graph_actor": "hepi", "memory": "gru"}, "memory=none"),
        ({"graph_actor": "hepi", "sharing": "per_agent"}, "sharing=shared"),
        ({"graph_actor": "hepi", "graph_layers": 0}, "graph_layers"),
        ({"graph_actor": "hepi", "graph_layers": 3}, "even"),
    ],
)
def test_policy_config_rejects_bad_graph_actor_settings(policy: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PolicyCfg(**policy)


def test_graph_actor_rejects_inputs_it_cannot_use() -> None:
    cfg = PolicyCfg(graph_actor="hepi")
    with pytest.raises(ValueError, match="parts of one graph"):
        ActorCritic(
            GroupDims(1, action_dim=6, actor_inputs=(*INPUTS, InputSpec("own", (3,))), critic_inputs=INPUTS), cfg
        )
    with pytest.raises(ValueError, match="multiple of 3"):
        ActorCritic(GroupDims(1, action_dim=7, actor_inputs=INPUTS, critic_inputs=INPUTS), cfg)
    with pytest.raises(ValueError, match="continuous"):
        ActorCritic(GroupDims(1, action_dim=6, action_nvec=(3,) * 6, actor_inputs=INPUTS, critic_inputs=INPUTS), cfg)
