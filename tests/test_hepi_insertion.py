"""hepi_insertion: peg geometry, the batched world of shape variants, resets, the scripted expert,
numerical stability and walls that hold at the maximum velocity."""

from __future__ import annotations

import numpy as np
import pytest
import torch

mujoco = pytest.importorskip("mujoco")

from graph_checks import assert_same_edge_index  # noqa: E402

import sim  # noqa: E402
from sim.core.config import ConfigError  # noqa: E402
from sim.physics.quaternion import quat_conj, quat_rotate  # noqa: E402
from sim.tasks.hepi.insertion import InsertionEnv  # noqa: E402
from sim.tasks.hepi.insertion_config import HELD_OUT_SHAPES, TRAIN_SHAPES, InsertionCfg  # noqa: E402
from sim.tasks.hepi.insertion_model import build_variants, insertion_mjcf, size_signature  # noqa: E402
from sim.tasks.hepi.shapes import N_OUTLINE, SHAPES, fan_areas, offset_polygon, outline, point_in_polygon  # noqa: E402

GROUP = "grippers"


def make(num_envs: int, seed: int = 0, **overrides) -> InsertionEnv:
    return sim.make("hepi_insertion", num_envs=num_envs, seed=seed, **overrides)


def peg_in_hole_frame(env: InsertionEnv) -> torch.Tensor:
    """``[E, 3]`` the peg frame's origin (bottom-face centroid) in the hole frame."""
    pos, _ = env.peg_pose()
    return quat_rotate(quat_conj(env.hole_quat), pos - env.hole_pos)


def run(env: InsertionEnv, policy, steps: int) -> dict:
    obs = env.reset(seed=1)
    for _ in range(steps):
        obs, *_ = env.step(policy(obs))
    return obs


# ----------------------------------------------------------------------------- geometry
@pytest.mark.parametrize("shape", SHAPES)
def test_every_outline_is_a_fan_of_positive_triangles_and_the_walls_leave_the_clearance_free(shape: str) -> None:
    poly, kernel = outline(shape)
    assert poly.shape == (N_OUTLINE, 2) and (fan_areas(poly, kernel) > 0).all()
    # Points of the hole (the outline offset by 0.9 clearance) lie in no wall box of the compiled model.
    size, cfg = 0.02, InsertionCfg()
    xml, outline_m, _ = insertion_mjcf(cfg, shape, size)
    model = mujoco.MjModel.from_xml_string(xml)
    inner = offset_polygon(outline_m, 0.9 * cfg.clearance)
    rng = np.random.default_rng(0)
    lo, hi = inner.min(0), inner.max(0)
    pts = lo + (hi - lo) * rng.random((6000, 2))
    pts = pts[point_in_polygon(pts, inner)]
    assert len(pts) > 1000
    pts3 = np.concatenate((pts, np.full((len(pts), 1), -0.5 * cfg.hole_depth)), -1)
    for i in range(N_OUTLINE):
        geom = model.geom(f"wall{i}")
        rot = np.empty(9)
        mujoco.mju_quat2Mat(rot, geom.quat)
        local = (pts3 - geom.pos) @ rot.reshape(3, 3)  # into the box frame
        inside = (np.abs(local) < geom.size).all(-1)
        assert not inside.any(), f"{shape}: wall {i} reaches into the hole"
    # ... and the walls close the outline: a ring of points just outside the wall outline is covered.
    wall = offset_polygon(outline_m, cfg.clearance)
    t = np.linspace(0.02, 0.98, 20)
    ring = np.concatenate([a + t[:, None] * (b - a) for a, b in zip(wall, np.roll(wall, -1, 0), strict=True)])
    edge = np.repeat(np.roll(wall, -1, 0) - wall, len(t), 0)
    normal = np.stack((edge[:, 1], -edge[:, 0]), -1) / np.linalg.norm(edge, axis=-1, keepdims=True)
    ring = np.concatenate((ring + 0.5 * cfg.wall_thickness * normal, np.full((len(ring), 1), -0.01)), -1)
    covered = np.zeros(len(ring), bool)
    for i in range(N_OUTLINE):
        geom = model.geom(f"wall{i}")
        rot = np.empty(9)
        mujoco.mju_quat2Mat(rot, geom.quat)
        covered |= (np.abs((ring - geom.pos) @ rot.reshape(3, 3)) < geom.size).all(-1)
    assert covered.mean() > 0.95, f"{shape}: walls cover {covered.mean():.0%} of the outline"


def test_all_shapes_and_sizes_compile_to_models_of_one_size() -> None:
    variants = build_variants(InsertionCfg(shapes=SHAPES, n_actuators=2))
    assert len(variants) == len(SHAPES) * InsertionCfg().n_sizes
    signatures = {tuple(sorted(size_signature(v.model).items())) for v in variants}
    assert len(signatures) == 1


def test_unknown_shapes_and_bad_settings_are_rejected() -> None:
    with pytest.raises(ConfigError, match="shapes"):
        make(1, shapes=["circle"])
    with pytest.raises(ConfigError, match="n_actuators"):
        make(1, n_actuators=3)


# ----------------------------------------------------------------------------- spec, reset
@pytest.mark.parametrize("n_actuators", [1, 2])
def test_spec_and_graph_shapes(n_actuators: int) -> None:
    env = make(3, n_actuators=n_actuators)
    g = env.spec.groups[GROUP]
    nodes = 2 * N_OUTLINE + n_actuators
    edges = 2 * N_OUTLINE * 3 + 2 * N_OUTLINE * n_actuators + n_actuators * (n_actuators - 1)
    assert g.action_dim == 6 * n_actuators and g.action_units[:6] == ("m/s",) * 3 + ("rad/s",) * 3
    assert g.actor_obs == g.critic_obs == tuple(g.observations)
    assert env.spec.control_dt == pytest.approx(0.04) and env.max_episode_steps == 100
    obs = env.reset()[GROUP]
    assert obs["scene_node_vectors"].shape == (3, 1, nodes, 4, 3)
    assert obs["scene_edge_index"].shape == (3, 1, edges, 2)
    assert (obs["scene_node_types"][:, 0, -n_actuators:] == 1).all() and (
        obs["scene_node_types"][:, 0, :-n_actuators] == 0
    ).all()
    # Actuator nodes sit at the grippers; object displacements point at the targets.
    vec = obs["scene_node_vectors"][:, 0]
    assert torch.allclose(vec[:, -n_actuators:, 0], env.world.mocap_pos[:, :n_actuators], atol=1e-5)
    kp, target = env.keypoints()
    assert torch.allclose(vec[:, : 2 * N_OUTLINE, 0] + vec[:, : 2 * N_OUTLINE, 1], target, atol=1e-5)


def test_reset_places_the_peg_above_its_hole_within_the_configured_ranges() -> None:
    cfg = InsertionCfg()
    env = make(64, seed=2)
    rel = peg_in_hole_frame(env)
    assert (rel[:, 2] >= cfg.start_height[0] - 1e-5).all() and (rel[:, 2] <= cfg.start_height[1] + 1e-5).all()
    assert (rel[:, :2].abs() <= cfg.start_lateral + 1e-5).all()
    lo, hi = torch.tensor(cfg.hole_pos_low), torch.tensor(cfg.hole_pos_high)
    assert ((env.hole_pos >= lo) & (env.hole_pos <= hi)).all()
    axis = quat_rotate(env.hole_quat, torch.tensor([0.0, 0.0, 1.0]).expand(64, 3))
    tilt = torch.acos(axis[:, 2].clamp(-1, 1))
    assert tilt.max() <= cfg.hole_tilt_max + 1e-4 and tilt.max() > 0.5 * cfg.hole_tilt_max  # tilted, not flat
    assert (env.keypoint_error() > 0.03).all() and not env.inserted().any()


def test_held_out_shapes_are_never_sampled_in_training_and_only_they_when_asked() -> None:
    train = make(64)
    seen = set()
    for seed in range(4):
        train.reset(seed=seed)
        seen |= {SHAPES[i] for i in train.shape.tolist()}
    assert seen == set(TRAIN_SHAPES) and not seen & set(HELD_OUT_SHAPES)
    held_out = make(32, shapes=list(HELD_OUT_SHAPES))
    assert {SHAPES[i] for i in held_out.shape.tolist()} == set(HELD_OUT_SHAPES)


# ----------------------------------------------------------------------------- behaviour
@pytest.mark.parametrize("n_actuators", [1, 2])
def test_scripted_expert_inserts_every_shape_in_one_world_and_the_zero_policy_does_not(n_actuators: int) -> None:
    """All 8 shapes (3 sizes each) share one batched world; a peg meeting the wrong hole would not go in."""
    env = make(48, shapes=list(SHAPES), n_actuators=n_actuators)
    run(env, env.expert_policy(), env.max_episode_steps - 1)
    success = env.success()
    per_shape = {SHAPES[k]: float(success[env.shape == k].float().mean()) for k in env.shape.unique().tolist()}
    assert len(per_shape) >= 6, per_shape
    assert success.float().mean() >= 0.8 and min(per_shape.values()) >= 0.5, per_shape
    assert float(env.keypoint_error()[success].max()) < 0.01
    run(env, lambda obs: env.zero_actions(), env.max_episode_steps - 1)
    assert not env.success().any()


@pytest.mark.parametrize("n_actuators", [1, 2])
def test_random_actions_for_10k_steps_stay_finite_and_stable(n_actuators: int) -> None:
    """100 envs x 100 steps of uniform and of full-scale (+-1) random actions: no NaN, no MuJoCo reset
    (two grippers pulling apart included)."""
    env = make(100, shapes=list(SHAPES), n_actuators=n_actuators)
    g = torch.Generator().manual_seed(0)
    obs = env.reset(seed=0)
    for step in range(100):
        a = torch.rand(100, 1, 6 * n_actuators, generator=g) * 2 - 1
        if step % 2:
            a = a.sign()
        obs, reward, *_ = env.step({GROUP: a})
        assert torch.isfinite(obs[GROUP]["scene_node_vectors"]).all() and torch.isfinite(reward[GROUP]).all()
    assert env.unstable_resets_total == 0


def test_an_inserted_peg_pushed_sideways_and_down_at_full_speed_stays_in_its_hole() -> None:
    """No tunnelling: after the expert inserts, full-speed pushes across the hole axis and down (plus
    full-speed random turning) for 1.5 s leave the peg inside the walls and above the floor."""
    env = make(32, shapes=list(SHAPES))
    obs = run(env, env.expert_policy(), 60)
    assert env.inserted().all()
    g = torch.Generator().manual_seed(1)
    for _ in range(38):
        local = torch.cat((torch.randn(32, 2, generator=g), torch.zeros(32, 1)), -1)
        local = local / local.norm(dim=-1, keepdim=True) + torch.tensor([0.0, 0.0, -1.0])
        v = quat_rotate(env.hole_quat, local).clamp(-1.0, 1.0)
        w = torch.randn(32, 3, generator=g).sign()
        obs, *_ = env.step({GROUP: torch.cat((v, w), -1).unsqueeze(1)})
        rel = peg_in_hole_frame(env)
        assert env.inserted().all()
        assert (rel[:, 2] > -env.cfg.hole_depth - 0.002).all()  # not through the floor
    assert env.unstable_resets_total == 0


def test_the_static_knn_of_a_rigid_peg_picks_the_nearest_keypoints_at_any_pose() -> None:
    """RigidPegGraph finds neighbours once per variant; after motion they are still the k nearest."""
    env = make(16, shapes=list(SHAPES))
    run(env, env.expert_policy(), 30)
    obs = env.observe()[GROUP]
    kp, _ = env.keypoints()
    k, n = env.graph.k, 2 * N_OUTLINE
    senders = obs["scene_edge_index"][:, 0, : n * k, 0].view(16, n, k)
    dist = torch.cdist(kp, kp) + torch.eye(n) * 1e9
    chosen = dist.gather(2, senders).sort(-1).values
    nearest = dist.topk(k, dim=-1, largest=False).values
    assert torch.allclose(chosen, nearest, atol=1e-5)


def test_the_renderer_draws_each_env_with_its_own_variant() -> None:
    from sim.render import RenderUnavailableError, make_renderer

    env = make(2, shapes=["plus", "star"], n_sizes=1)
    env.variant[:] = torch.tensor([0, 1])  # draw-only: the renderer reads the variant, not the world
    try:
        renderer = make_renderer(env, width=64, height=48)
    except RenderUnavailableError as err:
        pytest.skip(f"no offscreen GL backend: {err}")
    with renderer:
        frames = renderer.render()
        assert frames.shape == (2, 48, 64, 3) and frames.dtype == np.uint8 and frames.std() > 5
        assert np.abs(frames[0].astype(int) - frames[1].astype(int)).mean() > 1  # different pegs and poses


def test_velocity_commands_integrate_into_the_gripper_trajectory_and_move_a_free_peg() -> None:
    """p_k = p_0 + v k dt and q_k = exp(w k dt) q_0 per physics step; the welded peg follows them."""
    from sim.physics.quaternion import quat_angle_between, quat_mul
    from sim.tasks.hepi.base import rotation_quat

    env = make(4, seed=3)
    cfg, dt = env.cfg, env.cfg.physics_dt
    a = torch.tensor([0.5, -1.0, 0.25, 0.0, 0.3, -1.0]).expand(4, 1, 6).contiguous()
    env.action = a[:, 0]
    pos0, quat0 = env.world.mocap_pos[:, :1], env.world.mocap_quat[:, :1]
    pos, quat = env.gripper_trajectory()
    assert pos.shape == (4, cfg.decimation, 1, 3) and quat.shape == (4, cfg.decimation, 1, 4)
    k = torch.arange(1, cfg.decimation + 1).float().view(1, -1, 1, 1) * dt
    v, w = cfg.max_lin_vel * a[:, :, :3], cfg.max_ang_vel * a[:, :, 3:]
    assert torch.allclose(pos, pos0.unsqueeze(1) + v.unsqueeze(1) * k, atol=1e-6)
    expected = quat_mul(rotation_quat(w.unsqueeze(1), k.squeeze(-1)), quat0.unsqueeze(1).expand_as(quat))
    assert torch.allclose(quat, expected, atol=1e-5)  # same sign: both turn q_0 by less than pi
    # Ten control steps of the same command move the (free) peg's grasp point with it.
    peg_pos0, peg_quat0 = env.peg_pose()
    for _ in range(10):
        env.step({GROUP: a})
    peg_pos, peg_quat = env.peg_pose()
    grasp = torch.tensor([0.0, 0.0, cfg.peg_height])
    moved = quat_rotate(peg_quat, grasp.expand(4, 3)) + peg_pos - quat_rotate(peg_quat0, grasp.expand(4, 3)) - peg_pos0
    # The weld is a spring (time constant 0.02 s): the peg trails its gripper by ~v * 25 ms.
    assert torch.allclose(moved, v[:, 0] * 10 * env.spec.control_dt, atol=4e-3)
    turned = quat_angle_between(peg_quat, peg_quat0)
    assert torch.allclose(turned, torch.full((4,), float(w[0, 0].norm()) * 10 * env.spec.control_dt), atol=0.04)


def test_seeding_is_deterministic_and_a_partial_reset_leaves_the_other_envs_alone() -> None:
    def rollout(seed: int) -> torch.Tensor:
        env = make(6, seed=seed)
        g = torch.Generator().manual_seed(0)
        for _ in range(5):
            obs, *_ = env.step({GROUP: torch.rand(6, 1, 6, generator=g) * 2 - 1})
        return obs[GROUP]["scene_node_vectors"]

    assert torch.equal(rollout(0), rollout(0)) and not torch.equal(rollout(0), rollout(1))
    env = make(6, seed=0)
    env.step({GROUP: torch.ones(6, 1, 6)})
    before = env.observe()[GROUP]["scene_node_vectors"]
    env._reset_all_idx(torch.tensor([1, 4]))
    after = env.observe()[GROUP]["scene_node_vectors"]
    keep = torch.tensor([0, 2, 3, 5])
    assert torch.equal(after[keep], before[keep]) and not torch.equal(after[1], before[1])


@pytest.mark.parametrize("n_actuators", [1, 2])
def test_the_robot_side_graph_builder_reproduces_the_simulator_observation(n_actuators: int) -> None:
    """insertion_robot.GraphPart fed with what a robot measures (keypoint cloud, gripper odometry, hole
    pose) builds every graph part as the simulator does (kNN compared by distance: ties may swap)."""
    from deploy_ros.messages import OdometryState, PoseState
    from deploy_ros.profile import DeploymentProfile, make_builder
    from sim.physics.quaternion import quat_rotate_inv

    env = make(6, seed=4, shapes=["tee"], n_sizes=1, n_actuators=n_actuators)  # one peg: the deployed one
    obs = run(env, env.expert_policy(), 12)[GROUP]  # moving, turning, not yet inserted
    spec = env.spec.groups[GROUP]
    meta = {
        "n_agents": 1,
        "control_hz": env.spec.control_hz,
        "deployment": env.deployment_constants(GROUP),
        "inputs": [{"name": k, **spec.observations[k].to_dict()} for k in spec.actor_obs],
    }
    profile = DeploymentProfile.parse(env.deployment_profile(GROUP), list(spec.actor_obs), spec.action_dim)
    builders = {e["name"]: make_builder(profile.observations[e["name"]], meta, e, 0) for e in meta["inputs"]}
    kp, _ = env.keypoints()
    held = env._held_positions()
    f = env.frames()
    held_vel = f["vel"].unsqueeze(1) + torch.linalg.cross(
        f["omega"].unsqueeze(1).expand_as(held), held - f["pos"].unsqueeze(1)
    )
    body_omega = quat_rotate_inv(f["quat"], f["omega"])
    n, k = 2 * N_OUTLINE, env.graph.k
    for e in range(6):
        inputs = {
            "points": kp[e].numpy().astype(np.float32),
            "target": PoseState(env.hole_pos[e].double().numpy(), env.hole_quat[e].double().numpy()),
        }
        for a in range(n_actuators):
            inputs[f"gripper{a}"] = OdometryState(
                held[e, a].double().numpy(), f["quat"][e].double().numpy(),
                held_vel[e, a].double().numpy(), body_omega[e].double().numpy(),
            )  # fmt: skip
        built = {name: b.reset(inputs) for name, b in builders.items()}
        for name, sim_part in obs.items():
            sim_part = sim_part[e, 0].numpy()
            assert built[name].dtype == sim_part.dtype and built[name].shape == sim_part.shape, name
            if name == "scene_node_vectors":
                np.testing.assert_allclose(built[name], sim_part, atol=2e-5)
            elif name == "scene_edge_index":
                assert_same_edge_index(built[name], sim_part, obs["scene_node_vectors"][e, 0, :n, 0].numpy(), k)
            else:
                assert (built[name] == sim_part).all(), name


def test_a_non_finite_physics_state_is_reset_counted_and_never_observed() -> None:
    env = make(4, seed=0)
    env.step({GROUP: torch.zeros(4, 1, 6)})
    env.world._state[2, 1:4] = np.nan  # env 2's peg position blows up (what a diverging solver leaves)
    obs, reward, terminated, truncated, info = env.step({GROUP: torch.zeros(4, 1, 6)})
    assert terminated.tolist() == [False, False, True, False]
    assert info["termination_reasons"]["unstable"].tolist() == [False, False, True, False]
    assert env.unstable_resets_total == 1 and info["episode"]["metrics/unstable"] == 1.0
    assert all(torch.isfinite(v).all() for v in obs[GROUP].values() if v.is_floating_point())
    assert torch.isfinite(info["final_obs"][GROUP]["scene_node_vectors"]).all() and torch.isfinite(reward[GROUP]).all()
    assert not env.world.diverged().any() and env.episode_step[2] == 0
