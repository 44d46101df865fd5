"""cable_load's C post-physics pass (sim/tasks/cable_load/post_physics.c) against its torch reference (env.py's
hooks through MultiAgentEnv._post_physics): the same observations, rewards, terms, terminations and guard."""

from __future__ import annotations

import dataclasses
import math
import re

import pytest
import torch

import sim
from sim.core import native
from sim.core.env import MultiAgentEnv
from sim.physics.quaternion import quat_angle_between
from sim.tasks.cable_load.env import CableLoadEnv
from sim.tasks.cable_load.native import REASONS, NativeControlLoop, NativePostPhysics, loop_state, set_loop_state

GROUP = "mavs"
# One control loop (3 INDI ticks, 3 physics steps) from the same state, native against torch rows: float32 round-off
# (the C code sums and rotates in another order), largest where INDI differentiates rates and a lost MAV tumbles.
# Measured, max over these configurations' 120 steps: rotor speed 0.38 rad/s (of ~1500), tension 1.4e-3 N, MAV pos
# 2.4e-7 m, vel 1.2e-5 m/s, ang_vel 3.5e-4 rad/s, load vel 9.0e-6, ang_vel 5.5e-5, INDI spec force 7.8e-4 m/s^2,
# thrust 4.9e-4 N, torque 3.7e-5 N m, angular acceleration 0.023 rad/s^2. Bounds ~4x; the rest equal.
LOOP_BOUNDS = {
    "rotor_speed": 1.5,
    "cable_tension": 6e-3,
    "drones.pos": 1e-6,
    "drones.quat": 4e-6,
    "drones.vel": 5e-5,
    "drones.ang_vel": 1.5e-3,
    "load.pos": 1e-6,
    "load.quat": 1e-6,
    "load.vel": 4e-5,
    "load.ang_vel": 2.5e-4,
    "indi.spec_force_f": 4e-3,
    "indi.thrust_f": 2e-3,
    "indi.torque_f": 1.5e-4,
    "indi.ang_acc_f": 0.1,
    "indi.prev_vel": 3e-5,
    "indi.prev_ang_vel": 1e-3,
}


def _both_loops(env) -> tuple[dict, dict]:
    """(native, torch) state after one control loop from the same state; the env keeps the native one's."""
    before = loop_state(env)
    CableLoadEnv._control_loop(env)
    ref = loop_state(env)
    set_loop_state(env, before)
    env._advance()
    return loop_state(env), ref


def _both_passes(env) -> tuple[tuple, tuple]:
    """(native, torch) outputs of the post-physics pass from the same state; the env keeps the native one's."""
    history, integ = env.history, env.attach_err_int
    ref = MultiAgentEnv._post_physics(env)
    ref_side = (env.history, env.attach_err_int)
    env.history, env.attach_err_int = history, integ
    out = env._evaluate()
    return (*out, env.history, env.attach_err_int), (*ref, *ref_side)


def _assert_same(out: tuple, ref: tuple) -> None:
    obs, reward, terms, terminated, reasons, bad, history, integ = out
    r_obs, r_reward, r_terms, r_terminated, r_reasons, r_bad, r_history, r_integ = ref
    for name in ("policy", "state"):
        torch.testing.assert_close(obs[GROUP][name], r_obs[GROUP][name], atol=2e-6, rtol=1e-5, equal_nan=True)
    torch.testing.assert_close(history, r_history, atol=2e-6, rtol=1e-5, equal_nan=True)
    torch.testing.assert_close(integ, r_integ, atol=1e-7, rtol=1e-6)
    torch.testing.assert_close(reward[GROUP], r_reward[GROUP], atol=1e-5, rtol=1e-5)
    assert list(terms) == list(r_terms)
    for name in terms:
        torch.testing.assert_close(terms[name], r_terms[name], atol=1e-5, rtol=1e-5)
    assert list(reasons) == list(r_reasons) == list(REASONS)
    for name in reasons:
        assert torch.equal(reasons[name], r_reasons[name]), name
    assert torch.equal(terminated, r_terminated)
    assert torch.equal(bad, r_bad)


def _native_env(num_envs: int = 48, **overrides) -> MultiAgentEnv:
    env = sim.make("cable_load", num_envs=num_envs, seed=3, kernels="native", **overrides)
    assert isinstance(env._evaluate, NativePostPhysics)
    return env


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"num_mavs": 2, "obs_noise": {"enabled": False}},
        {"num_mavs": 6, "rewards": {"formation": -1.0}, "integral_tau_s": 2.0},
        # Every MAV lost early (cable released in one case): the lost MAV's terms and terminations drop out.
        {"fault": {"enabled": True, "time_range": (0.0, 0.1)}, "disturbance": {"enabled": True, "period_s": 2.0}},
        {"num_mavs": 4, "fault": {"enabled": True, "time_range": (0.0, 0.1), "cable": "released"}},
    ],
)
@pytest.mark.parametrize(
    "isa",
    [
        pytest.param(isa, marks=pytest.mark.skipif(not native.simd_runs(isa), reason=f"no {isa} here"))
        for isa, *_ in native.SIMD_BUILDS
    ],
)
def test_native_pass_equals_torch_along_random_flight(overrides: dict, isa: str, monkeypatch) -> None:
    """Each vector build of the loop this CPU runs; 45 envs, so the last block of lanes is a partial one."""
    monkeypatch.setattr(native, "ISA_CAP", isa)
    env = _native_env(num_envs=45, **overrides)
    assert isinstance(env._advance, NativeControlLoop)
    env.reset()
    gen = torch.Generator().manual_seed(0)
    grounded, worst = 0, dict.fromkeys(LOOP_BOUNDS, 0.0)
    for _ in range(120):
        env.backend.apply_actions(env.sample_actions(gen))
        out, ref = _both_loops(env)
        for name in ref:
            if name in LOOP_BOUNDS:
                worst[name] = max(worst[name], float((out[name] - ref[name]).abs().max()))
            else:
                assert torch.equal(out[name], ref[name]), name
        grounded += int((env.drones.pos[..., 2] <= env.mav_contact_radius + 1e-6).sum())
        env.episode_step += 1
        env._sample_step_noise()
        out, ref = _both_passes(env)
        _assert_same(out, ref)
        done = out[3] | (env.episode_step >= env.max_episode_steps)
        if done.any():
            env._reset_all_idx(done.nonzero().squeeze(-1))
    print(isa, {name: f"{value:.2g}" for name, value in worst.items()})
    too_far = {name: (worst[name], bound) for name, bound in LOOP_BOUNDS.items() if not worst[name] <= bound}
    assert not too_far, f"native vs torch loop beyond round-off (difference, bound): {too_far}"
    assert worst["drones.vel"] > 0, "the two loops round differently: zero means one of them ran twice"
    if overrides.get("fault"):
        assert env.failed.any(), "the fault cases must reach a lost MAV"
        assert grounded > 0, "a lost MAV must reach the ground (contact)"


def test_native_pass_equals_torch_on_every_termination_and_the_guard() -> None:
    """States built to end each way (and one NaN), so every reason and the guard are compared while true."""
    env = _native_env(obs_noise={"enabled": False})
    env.reset()
    env.step(env.sample_actions(torch.Generator().manual_seed(1)))
    d, ld = env.drones, env.load
    pos, quat, load_pos = d.pos.clone(), d.quat.clone(), ld.pos.clone()
    pos[0, 0, 2] = 0.05  # crash: a MAV on the ground
    angle = math.radians(85.0)
    quat[1, 1] = torch.tensor((math.cos(angle / 2), math.sin(angle / 2), 0.0, 0.0))  # crash: tilted past 80 deg
    load_pos[2, 2] = 0.03  # load on the ground
    pos[3, 1] = pos[3, 0] + torch.tensor((0.1, 0.0, 0.0))  # two MAVs too close
    # A MAV beside another's cable: halfway down cable 0, offset 0.05 m sideways.
    top = pos[4, 0]
    bottom = load_pos[4] + env.attach[0]
    pos[4, 2] = 0.5 * (top + bottom) + torch.tensor((0.0, 0.05, 0.0))
    load_pos[5, 0] += 4.0  # out of bounds: the load in x, a MAV in x, another in y, one in z
    pos[7, 0, 0] += 4.0
    pos[8, 1, 1] -= 4.0
    pos[9, 2, 2] += 6.0
    pos[6, 1, 2] = math.nan  # non-finite: the guard ends it, rewarded 0
    env.drones = dataclasses.replace(d, pos=pos, quat=quat)
    env.load = dataclasses.replace(ld, pos=load_pos)
    env._sample_step_noise()
    out, ref = _both_passes(env)
    _assert_same(out, ref)
    reasons, bad = out[4], out[5]
    for name, e in zip(REASONS, (0, 2, 3, 4, 5), strict=True):
        assert reasons[name][e], name
    assert reasons["crash"][1] and reasons["out_of_bounds"][7:10].all()
    assert bad[6] and out[3][6] and bad.sum() == 1
    assert (out[1][GROUP][6] == 0).all()


@pytest.mark.parametrize("overrides", [{}, {"randomization": {"enabled": False}}])
def test_native_apply_actions_equals_torch(overrides: dict) -> None:
    """Clamp, delay (a per-env delay of 0 or 1 steps; none without randomisation) and scale, as the torch
    _apply_actions, over a few steps with actions beyond [-1, 1] and a NaN."""
    env = _native_env(**overrides)
    env.reset()
    if env.delay.max_delay:
        assert 0 < int(env.delay.delay.sum()) < env.num_envs  # both delays present
    gen = torch.Generator().manual_seed(1)
    for _ in range(4):
        act = torch.randn(env.num_envs, env.n, 5, generator=gen) * 1.5
        act[0, 0, 2] = math.nan
        before = (env.last_action, env.delay.buf.clone())
        env.backend.apply_actions({GROUP: act})
        native_out = (env.prev_action, env.last_action, env.cmd, env.delay.buf)
        env.last_action, env.delay.buf = before
        CableLoadEnv._apply_actions(env, {GROUP: act})
        torch_out = (env.prev_action, env.last_action, env.cmd, env.delay.buf)
        for a, b in zip(native_out, torch_out, strict=True):
            assert torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())


@pytest.mark.parametrize("compile", [False, True])
def test_errors_come_from_the_pass_until_the_state_changes(compile: bool) -> None:
    """env.errors() (the step's metrics, the episode statistics) reuses the pass's position and orientation errors
    while the load and goal tensors are the ones it read, unwritten; after a reset (in place, eager or compiled) or
    a control loop (new tensors) it computes them again."""
    env = _native_env(num_envs=16, compile=compile)
    env.reset()

    gen = torch.Generator().manual_seed(2)
    env.step(env.sample_actions(gen))
    cached = env._evaluate.cached_errors()
    assert cached is not None and env.errors() is cached
    for got, ref in zip(cached, _recompute(env), strict=True):
        torch.testing.assert_close(got, ref, atol=1e-6, rtol=1e-5)
    env._reset_all_idx(torch.tensor([2, 5]))
    assert env._evaluate.cached_errors() is None
    for got, ref in zip(env.errors(), _recompute(env), strict=True):
        assert torch.equal(got, ref)
    env.step(env.sample_actions(gen))
    assert env._evaluate.cached_errors() is not None
    env._advance()
    assert env._evaluate.cached_errors() is None


def _recompute(env) -> tuple[torch.Tensor, torch.Tensor]:
    pos = torch.linalg.vector_norm(env.goal_pos - env.load.pos, dim=-1)
    return pos, quat_angle_between(env.load.quat, env.goal_quat)


def test_native_steps_are_the_same_at_any_thread_count() -> None:
    """The kernels split whole blocks of envs over OpenMP threads and draw the noise by counter: 1 and 2 threads
    give the same observations, rewards and endings, bit for bit (resets included)."""
    runs = []
    threads = torch.get_num_threads()
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            env = _native_env(num_envs=40)
            env.reset()
            gen = torch.Generator().manual_seed(6)
            runs.append([env.step(env.sample_actions(gen))[:4] for _ in range(160)])
    finally:
        torch.set_num_threads(threads)
    ended = 0
    for (obs_a, rew_a, te_a, tr_a), (obs_b, rew_b, te_b, tr_b) in zip(*runs, strict=True):
        for name in ("policy", "state"):
            assert torch.equal(obs_a[GROUP][name], obs_b[GROUP][name])
        assert torch.equal(rew_a[GROUP], rew_b[GROUP]) and torch.equal(te_a, te_b) and torch.equal(tr_a, tr_b)
        ended += int(te_a.sum())
    assert ended > 0, "random actions should end some episodes"


def test_native_state_equals_torch() -> None:
    env = _native_env(fault={"enabled": True, "time_range": (0.0, 0.05)})
    env.reset()
    gen = torch.Generator().manual_seed(2)
    for _ in range(10):
        env.step(env.sample_actions(gen))
    torch.testing.assert_close(env._evaluate.state(), env._state(), atol=0, rtol=0)
    obs = env._observations_after_reset()
    torch.testing.assert_close(obs[GROUP]["state"], env._state(), atol=0, rtol=0)


def test_whole_steps_agree_native_and_torch() -> None:
    """env.step in lockstep: each step the torch env restarts from the native env's state (the two round
    differently, and this closed loop is chaotic), then both step with the same actions and noise draws. Their
    observations, rewards and endings (resets included) agree to round-off (tension and body rates as in
    LOOP_BOUNDS)."""
    native_env, torch_env = (sim.make("cable_load", num_envs=32, seed=5, kernels=p) for p in ("native", "torch"))
    assert (native_env.kernels, torch_env.kernels) == ("native", "torch")
    native_env.reset()
    gen = torch.Generator().manual_seed(4)
    dones = 0
    for _ in range(200):
        assert torch_env.load_state_snapshot(native_env.state_snapshot()) is None
        act = native_env.sample_actions(gen)
        o_n, r_n, te_n, tr_n, info_n = native_env.step(act)
        o_t, r_t, te_t, tr_t, info_t = torch_env.step(act)
        for name in ("policy", "state"):
            torch.testing.assert_close(o_n[GROUP][name], o_t[GROUP][name], atol=2e-3, rtol=1e-3)
            torch.testing.assert_close(
                info_n["final_obs"][GROUP][name], info_t["final_obs"][GROUP][name], atol=2e-3, rtol=1e-3
            )
        torch.testing.assert_close(r_n[GROUP], r_t[GROUP], atol=2e-3, rtol=1e-3)
        assert torch.equal(te_n, te_t) and torch.equal(tr_n, tr_t)
        dones += int(te_n.sum())
    assert dones > 0, "random actions should end some episodes"


def test_without_a_compiler_auto_falls_back_and_native_raises(monkeypatch, tmp_path, caplog) -> None:
    monkeypatch.setattr(native, "_LOADED", {})
    monkeypatch.setenv("COVEY_NATIVE_CACHE", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    env = sim.make("cable_load", num_envs=4, seed=0)
    assert env.kernels == "torch"
    assert "post_physics.c" in caplog.text and "its torch code runs instead" in caplog.text
    with pytest.raises(ValueError, match="kernels='native' cannot run here"):
        sim.make("cable_load", num_envs=4, seed=0, kernels="native")
    with pytest.raises(ValueError, match="kernels must be one of"):
        sim.make("cable_load", num_envs=4, seed=0, kernels="fast")


def test_kernel_builds_once_into_the_cache(monkeypatch, tmp_path) -> None:
    from sim.tasks.cable_load.native import POST_PHYSICS, SOURCES

    monkeypatch.setattr(native, "_LOADED", {})
    monkeypatch.setenv("COVEY_NATIVE_CACHE", str(tmp_path))
    assert native.load(SOURCES[1]) is not None  # with its declared layout
    built = list(tmp_path.glob("post_physics-*.so"))
    assert len(built) == 1
    header = built[0].with_suffix(".include") / "post_physics_layout.h"
    assert header.read_text() == POST_PHYSICS.header("post_physics")
    stamp = built[0].stat().st_mtime_ns
    monkeypatch.setattr(native, "_LOADED", {})
    assert native.load(SOURCES[1], layout=POST_PHYSICS) is not None
    assert built[0].stat().st_mtime_ns == stamp and sorted(tmp_path.glob("*")) == sorted([*built, header.parent])


def test_the_c_files_take_their_layout_from_the_python_declaration(monkeypatch, tmp_path, caplog) -> None:
    """Sizes, enums, structs and argument lists are declared once (native.py's layouts): the C files define none
    of their own and declare each function by its generated argument list, so they build only with the header, and
    a declaration's values are packed by name (a missing, extra or misshapen one is an error, not a shifted array)."""
    from sim.tasks.cable_load import native as kernels

    functions = {
        kernels.SOURCES[0]: {
            "cable_load_control_loop": "CONTROL_LOOP_ARGS",
            "cable_load_apply_actions": "APPLY_ACTIONS_ARGS",
        },
        kernels.SOURCES[1]: {
            "cable_load_post_physics": "POST_PHYSICS_ARGS",
            "cable_load_state": "STATE_ARGS",
            "cable_load_reset_history": "RESET_HISTORY_ARGS",
        },
        kernels.RESET_SOURCE: {"cable_load_reset": "RESET_ARGS"},
    }
    for source, layout in kernels.LAYOUTS.items():
        text = source.read_text()
        assert not re.search(r"\benum\s*\w*\s*\{", text), source.name
        assert not re.search(r"typedef struct \{\s*const", text), source.name
        assert not any(f"#define {name} " in text for name, _ in layout.defines), source.name
        for function, macro in functions[source].items():
            assert f"void {function}({macro})" in text and layout[macro], function
    header = kernels.POST_PHYSICS.header("post_physics")
    assert f"#define F {kernels.FRAME_SIZE}" in header and "#define FRAME_ENV 21" in header
    assert "T_TERMINATION = 6" not in header and "    T_TERMINATION,\n    T_COUNT," in header
    monkeypatch.setattr(native, "_LOADED", {})
    monkeypatch.setenv("COVEY_NATIVE_CACHE", str(tmp_path))
    assert native.load(kernels.RESET_SOURCE) is not None  # with its declared layout
    monkeypatch.setattr(native, "_DECLARED", {})
    monkeypatch.setattr(native, "_LOADED", {})
    assert native.load(kernels.RESET_SOURCE) is None  # no header: it cannot build
    assert "reset_layout.h" in caplog.text
    scalars = kernels.RESET["R"]
    values = {name: [0.0] * (size or 4) if size != 1 else 0.0 for name, size in scalars.fields}
    assert len(scalars.pack(**values)) == scalars.offsets()["count"] + 4
    with pytest.raises(KeyError):
        scalars.pack(**{**values, "extra": 1.0})
    with pytest.raises(ValueError):
        scalars.pack(**{**values, "inertia_diag": [1.0, 2.0]})
    with pytest.raises(KeyError):
        kernels.RESET["RESET_ARGS"].call(print, k=1)


ISAS = [
    pytest.param(isa, marks=pytest.mark.skipif(not native.simd_runs(isa), reason=f"no {isa} here"))
    for isa, *_ in native.SIMD_BUILDS
]


def _step_noise(env) -> torch.Tensor:
    """The noise the last step added to the newest frame: that frame minus the torch frame of the same state."""
    return env.history[:, :, -1] - env._frame()


@pytest.mark.parametrize("isa", ISAS)
def test_a_seed_draws_the_same_noise_whichever_kernels_run(isa: str, monkeypatch) -> None:
    """The torch code and each build of the C kernels draw every random number from the env's generator in one
    order (the reset's draws, one key a step for the step's noise): the same keys, and the noise of the first
    observations equal to the numbers sim.core.native.torch_normal gives for those keys, to the ulps of their
    logs and cosines."""
    monkeypatch.setattr(native, "ISA_CAP", isa)
    envs = [sim.make("cable_load", num_envs=21, seed=0, kernels=p) for p in ("torch", "native")]
    assert [e.kernels for e in envs] == ["torch", "native"]
    first = [e.reset()[GROUP]["policy"] for e in envs]
    torch.testing.assert_close(first[1], first[0], atol=1e-5, rtol=0)
    gen = torch.Generator().manual_seed(2)
    std = envs[0]._frame_noise_std
    for _ in range(5):
        act = envs[0].sample_actions(gen)
        for env in envs:
            env.step(act)
        keys = [e._obs_noise for e in envs]
        assert keys[0].dtype == torch.int64 and keys[0].shape == (1,) and torch.equal(keys[0], keys[1])
        expected = native.torch_normal(tuple(envs[0].history[:, :, -1].shape), keys[0]) * std
        for env in envs:
            torch.testing.assert_close(_step_noise(env), expected, atol=1e-5, rtol=0)
        obs = [e.history[:, :, -1] for e in envs]
        torch.testing.assert_close(obs[1], obs[0], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("isa", ISAS)
def test_a_seed_ends_the_same_episodes_whichever_kernels_run(isa: str, monkeypatch) -> None:
    """Free-running (no resynchronising): random actions end the episodes of a torch env and a native env of one
    seed, noise and randomisation on, at the same steps (measured: 182 to 289 steps, every env the same)."""
    monkeypatch.setattr(native, "ISA_CAP", isa)
    envs = [sim.make("cable_load", num_envs=16, seed=0, kernels=p) for p in ("torch", "native")]
    ends = []
    for env in envs:
        env.reset()
        gen = torch.Generator().manual_seed(1)
        first = torch.full((env.num_envs,), -1)
        for t in range(300):
            terminated = env.step(env.sample_actions(gen))[2]
            first = torch.where((first < 0) & terminated, t, first)
        ends.append(first)
    assert (ends[0] >= 0).sum() >= 8, "random actions should end most episodes"
    assert torch.equal(ends[0], ends[1]), f"torch {ends[0].tolist()}, native {ends[1].tolist()}"


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"randomization": {"enabled": False}, "obs_noise": {"enabled": False}},
        {
            "fault": {"enabled": True},
            "disturbance": {"enabled": True},
            "randomization": {"mav_mass_scale": (0.9, 1.1), "thrust_limit_scale": (0.8, 1.1)},
            "num_mavs": 4,
        },
        {"randomization": {"action_delay_steps": (0, 0)}},
    ],
)
def test_native_reset_equals_torch(overrides: dict) -> None:
    """reset.c and the history rows of post_physics.c against CableLoadEnv._reset_envs, from the same draws and the
    same mid-flight state: every per-env tensor agrees to round-off in the reset rows (libm's against torch's
    transcendentals) and is left alone in the others; integers and flags are equal."""
    env = _native_env(num_envs=37, **overrides)
    env.reset()
    gen = torch.Generator().manual_seed(8)
    for _ in range(15):
        env.step(env.sample_actions(gen))
    before = {p: v.clone() if isinstance(v, torch.Tensor) else v for p, v in env.state_snapshot().items()}
    ids = torch.tensor([36, 3, 0, 17])
    draws = env._reset_draws(ids.numel())
    env.backend.reset(ids, draws)  # the NativeReset; the history rows in place, as in a step's auto-reset
    native_state = {p: v.clone() for p, v in env.state_snapshot().items() if isinstance(v, torch.Tensor)}
    assert env.load_state_snapshot(before) is None
    CableLoadEnv._reset_envs(env, ids, draws)
    torch_state = {p: v for p, v in env.state_snapshot().items() if isinstance(v, torch.Tensor)}
    changed = 0
    for path, ref in torch_state.items():
        if "#" in path:
            continue
        got = native_state[path]
        if ref.is_floating_point():
            torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5, msg=path)
        else:
            assert torch.equal(got, ref), path
        changed += int(not torch.equal(ref, before[path]))
    assert changed >= 20, "the reset writes most of the state"


def test_the_kernels_are_custom_ops_a_compiled_graph_keeps() -> None:
    """Each C function is the custom op covey::<function> (native.KernelOp): a fullgraph compile calls it as eager
    does, and writes the outputs it is given."""
    from sim.tasks.cable_load.native import OPS

    env = _native_env(num_envs=4)
    op = OPS["cable_load_apply_actions"]
    fn = env.backend.advance.apply_fn
    address = op.address(fn)
    act = torch.linspace(-2, 2, 4 * env.n * 5).reshape(4, env.n, 5)
    delay, scale = torch.zeros(4, dtype=torch.int64), env.action_scale.float().contiguous()

    def apply(act: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        last, cmd = torch.empty_like(act), torch.empty_like(act)
        op.op(address, 4, env.n * 5, 1, 1, act, None, None, delay, scale, last, cmd)
        return last, cmd

    eager = apply(act)
    compiled = torch.compile(apply, fullgraph=True, backend="aot_eager")(act)
    torch.testing.assert_close(eager[0], act.clamp(-1, 1), atol=0, rtol=0)
    torch.testing.assert_close(eager[1], act.clamp(-1, 1) * scale, atol=0, rtol=0)
    for a, b in zip(eager, compiled, strict=True):
        torch.testing.assert_close(a, b, atol=0, rtol=0)
    assert sorted(OPS) == sorted(name for name in dir(torch.ops.covey) if name.startswith("cable_load_"))
