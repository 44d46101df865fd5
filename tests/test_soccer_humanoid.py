"""robot_soccer's small humanoid (``task.robot_kind=humanoid``): it stands on its position servos, its state matches
MuJoCo's kinematics, actions move the joints they name, falls are counted, and the get-up skill starts on the floor."""

from __future__ import annotations

import math
from pathlib import Path

import mujoco
import numpy as np
import pytest
import torch

import sim
from sim.tasks.robot_soccer.humanoid import ACTION_RANGE, JOINTS, STAND_HEIGHT, forward_kinematics

E = 4


def _make(**overrides):
    kw = {"robot_kind": "humanoid", "opponent": "idle", "seed": 0, **overrides}
    return sim.make("robot_soccer", num_envs=E, **kw)


def _hold(env, seconds: float, actions: torch.Tensor | None = None):
    a = torch.zeros(E, 1, len(JOINTS)) if actions is None else actions
    for _ in range(round(seconds / env.spec.control_dt)):
        env.step({"team_a": a})


def test_humanoid_stands_on_its_servos_and_collapses_without_them():
    env = _make(randomization={"enabled": False})
    _hold(env, 3.0)
    s = env._read()
    assert env.counters["falls_a"].sum() == 0 and env.counters["falls_b"].sum() == 0
    assert torch.allclose(s["height"], torch.full_like(s["height"], STAND_HEIGHT), atol=0.015)
    assert (s["up_z"] > 0.99).all()
    weak = _make(randomization={"enabled": False}, humanoid={"kp": 0.05, "max_torque": 0.05})
    _hold(weak, 3.0)
    assert (weak.counters["falls_a"] == 1).all() and (weak.counters["falls_b"] == 1).all()  # each went down once
    assert weak.step_metrics()["goal_diff_a"].shape == (E,)


def test_humanoid_state_matches_mujoco_kinematics():
    """Torso yaw, yaw rate, height and the gravity direction read from the batched state agree with MuJoCo's own
    rotation matrix and world-frame velocity for tumbling states."""
    env = _make(randomization={"enabled": False})
    _hold(env, 0.5, torch.rand(E, 1, len(JOINTS), generator=torch.Generator().manual_seed(1)) * 2 - 1)
    rng = np.random.default_rng(0)
    qpos, qvel = env.world.qpos.double().numpy().copy(), env.world.qvel.double().numpy().copy()
    m = env.world.model
    adr = m.jnt_qposadr[m.joint("a0_root").id]
    vadr = m.jnt_dofadr[m.joint("a0_root").id]
    for e in range(E):
        q = rng.normal(size=4)
        qpos[e, adr + 3 : adr + 7] = q / np.linalg.norm(q)
        qvel[e, vadr : vadr + 6] = rng.normal(size=6)
    env.world.set_state(torch.arange(E), qpos=qpos, qvel=qvel)
    env._cache.clear()
    s = env._read()
    d = mujoco.MjData(m)
    body = m.body("a0").id
    for e in range(E):
        d.qpos[:], d.qvel[:] = qpos[e], qvel[e]
        mujoco.mj_forward(m, d)
        rot = d.xmat[body].reshape(3, 3)
        vel = np.zeros(6)
        mujoco.mj_objectVelocity(m, d, mujoco.mjtObj.mjOBJ_BODY, body, vel, 0)  # [angular, linear], world frame
        assert math.isclose(float(s["yaw"][e, 0]), math.atan2(rot[1, 0], rot[0, 0]), abs_tol=1e-4)
        assert math.isclose(float(s["up_z"][e, 0]), rot[2, 2], abs_tol=1e-5)
        assert math.isclose(float(s["yaw_rate"][e, 0]), vel[2], abs_tol=1e-4)
        assert math.isclose(float(s["height"][e, 0]), d.xpos[body][2], abs_tol=1e-5)
        np.testing.assert_allclose(s["gravity"][e, 0].numpy(), rot.T @ np.array([0.0, 0.0, -1.0]), atol=1e-5)


def test_an_action_moves_the_joint_it_names_to_its_target():
    env = _make(randomization={"enabled": False})
    a = torch.zeros(E, 1, len(JOINTS))
    j = JOINTS.index("left_shoulder_pitch")
    a[..., j] = -0.5  # the left arm forward and up by half its action range
    _hold(env, 1.0, a)
    s = env._read()
    scale = env.spec.groups["team_a"].action_scale[j]
    assert scale == ACTION_RANGE["shoulder_pitch"]
    assert torch.allclose(s["joint_pos"][:, 0, j], torch.full((E,), -0.5 * scale), atol=0.05)
    others = [i for i in range(len(JOINTS)) if i != j]
    assert s["joint_pos"][:, 0, others].abs().max() < 0.1
    names = env.spec.groups["team_a"].action_names
    assert tuple(names) == JOINTS and env.spec.groups["team_a"].observations["state"].shape == (77,)


def test_getup_skill_starts_on_the_floor_and_rewards_standing_up():
    env = _make(skill="getup", randomization={"enabled": False})
    s = env._read()
    assert (s["height"][:, 0] < 0.2).all() and env._fallen[:, 0].all()
    _hold(env, 1.0)  # holding the standing pose while lying gets nowhere: the hand-written baseline
    lying_reward = env.step({"team_a": torch.zeros(E, 1, len(JOINTS))})[1]["team_a"]
    assert env._fallen[:, 0].all() and env.counters["falls_a"].sum() == 0  # never up, so never fell
    metrics = env._episode_metrics(torch.arange(E))
    assert metrics["metrics/standing_a"] == 0.0
    standing = _make(randomization={"enabled": False})  # the same robots put on their feet, same reward
    env.world.set_state(torch.arange(E), qpos=standing.world.qpos.double().numpy())
    env._cache.clear()
    standing_reward = env.step({"team_a": torch.zeros(E, 1, len(JOINTS))})[1]["team_a"]
    w = env.cfg.getup_rewards
    assert (standing_reward > lying_reward + w.height * 0.5 + w.upright * 0.9).all()
    assert env.counters["falls_a"].sum() == 0 and not env._fallen[:, 0].any()
    assert env._episode_metrics(torch.arange(E))["metrics/standing_a"] == 1.0


@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"robot_kind": "humanoid"}, "opponent=idle"),
        ({"skill": "getup"}, "robot_kind=humanoid"),
        ({"robot_kind": "legged"}, "robot_kind must be one of"),
    ],
)
def test_humanoid_settings_that_cannot_work_are_refused(overrides, match):
    with pytest.raises(ValueError, match=match):
        sim.make("robot_soccer", num_envs=1, **overrides)


def test_forward_kinematics_matches_mujoco_body_poses():
    """The limbs the head cameras draw sit where MuJoCo puts the bodies, for a tumbled torso and random joints."""
    env = _make(randomization={"enabled": False})
    m = env.world.model
    d = mujoco.MjData(m)
    rng = np.random.default_rng(3)
    adr = m.jnt_qposadr[m.joint("b0_root").id]
    jadr = [m.jnt_qposadr[m.joint(f"b0_{j}").id] for j in JOINTS]
    d.qpos[adr : adr + 3] = [0.3, -0.2, 0.4]
    q = rng.normal(size=4)
    d.qpos[adr + 3 : adr + 7] = q / np.linalg.norm(q)
    d.qpos[jadr] = rng.uniform(-0.6, 0.6, size=len(JOINTS))
    mujoco.mj_forward(m, d)
    fk = forward_kinematics(torch.tensor(d.qpos[adr : adr + 3]), torch.tensor(d.qpos[adr + 3 : adr + 7]),
                            torch.tensor(d.qpos[jadr]))  # fmt: skip
    for i, side in enumerate(("left", "right")):
        body = {part: d.xpos[m.body(f"b0_{side}_{part}").id] for part in ("thigh", "shin", "foot", "forearm")}
        np.testing.assert_allclose(fk["a"][4 * i].numpy(), body["thigh"], atol=1e-9)  # hip
        np.testing.assert_allclose(fk["b"][4 * i].numpy(), body["shin"], atol=1e-9)  # knee
        np.testing.assert_allclose(fk["b"][4 * i + 1].numpy(), body["foot"], atol=1e-9)  # ankle
        np.testing.assert_allclose(fk["b"][4 * i + 2].numpy(), body["forearm"], atol=1e-9)  # elbow
        np.testing.assert_allclose(fk["foot_pos"][i].numpy(), d.geom_xpos[m.geom(f"b0_{side}_foot").id], atol=1e-9)
        rot = np.zeros(9)
        mujoco.mju_quat2Mat(rot, fk["foot_quat"][i].numpy())
        np.testing.assert_allclose(rot, d.xmat[m.body(f"b0_{side}_foot").id], atol=1e-9)


def _orange_pixels(frame: torch.Tensor) -> int:
    """Pixels of the ball's hue (orange under any shading: red well above green, green well above blue)."""
    r, g, b = frame[..., 0].float(), frame[..., 1].float(), frame[..., 2].float()
    return int(((r > 90) & (r > 1.4 * g) & (g > 2.5 * b)).sum())


def test_humanoid_head_camera_turns_with_the_torso():
    """A standing humanoid sees a ball 0.6 m ahead; turned away, or lying on its back, it does not (the camera follows
    the torso's full orientation, not only its heading), in its frames and in the ball-in-view rule."""
    env = _make(observation="vision", opponent="none", randomization={"enabled": False})
    m = env.world.model
    adr, ball = m.jnt_qposadr[m.joint("a0_root").id], m.jnt_qposadr[m.joint("ball").id]
    qpos = env.world.qpos.double().numpy().copy()
    half = math.pi / 4  # half angles of the quaternions below
    poses = [  # (z, quaternion): standing facing +x; facing -x; on its back (forward axis up); standing again
        (STAND_HEIGHT, [1, 0, 0, 0]),
        (STAND_HEIGHT, [0, 0, 0, 1]),
        (0.06, [math.cos(half), 0, -math.sin(half), 0]),
        (STAND_HEIGHT, [1, 0, 0, 0]),
    ]
    for e, (z, quat) in enumerate(poses):
        qpos[e, adr : adr + 7] = [0.0, 0.0, z, *quat]
        qpos[e, ball : ball + 3] = [0.6, 0.0, env.cfg.ball.radius]
    qpos[3, ball : ball + 3] = [-0.6, 0.0, env.cfg.ball.radius]  # behind the standing robot
    env.world.set_state(torch.arange(E), qpos=qpos)
    env._cache.clear()
    frames = env.render_cameras()[:, 0]  # team_a's robot, [E, H, W, 3]
    seen = [_orange_pixels(f) for f in frames]
    assert seen[0] >= 15, seen
    assert seen[1] == 0 and seen[2] == 0 and seen[3] == 0, seen
    # The ball-in-view rule (the metric and the seen state) agrees with the frames.
    assert env._ball_in_view()[:, 0].tolist() == [True, False, False, False]
    spec = env.spec.groups["team_a"].observations
    assert spec["image"].shape == (30, 40, 3) and spec["proprio"].shape == (3 + 3 + 3 * len(JOINTS),)
    assert env.deployment_profile() == {}  # no robot-side builder for its joint states and IMU yet: not deployable


def test_shipped_getup_policy_lifts_the_humanoid_off_the_floor():
    """The shipped get-up skill (PPO, 5.5M steps on one CPU core) gets the humanoid off the floor: over 100
    evaluation episodes its torso ends at 0.13 m against 0.05 m for the standing pose held (the hand-written
    baseline), on its feet at the end in 14%. Here: 16 episodes, the torso's height over the last second."""
    from training.checkpoint import load_policy

    path = Path(__file__).resolve().parents[1] / "assets" / "policies" / "robot_soccer_humanoid_getup" / "policy.pt"
    policy = load_policy(path)
    cfg = {k: policy.task_cfg[k] for k in ("robot_kind", "opponent", "skill", "episode_length_s")}
    heights = {}
    for name, act in (("policy", policy.actors["team_a"]), ("hold", None)):
        env = sim.make("robot_soccer", num_envs=16, seed=1, randomization={"enabled": False}, **cfg)
        obs, late = env.reset(), []
        for t in range(env.spec.max_episode_steps - 1):
            a = act(obs["team_a"]) if act is not None else torch.zeros(16, 1, len(JOINTS))
            obs = env.step({"team_a": a})[0]
            if t >= env.spec.max_episode_steps - 21:
                late.append(env.step_metrics()["torso_height_a_m"])
        heights[name] = float(torch.stack(late).mean())
    assert heights["hold"] < 0.06 and heights["policy"] > 0.1, heights
