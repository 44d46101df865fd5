"""BatchedMjWorld against MuJoCo itself: the batched rollout gives exactly what a loop of mj_step gives."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
import torch

from sim.mujoco.world import BatchedMjWorld, MjWorldCfg

XML = """
<mujoco>
  <option timestep="0.01"/>
  <worldbody>
    <geom type="plane" size="5 5 .1"/>
    <body name="hand" mocap="true" pos="0 0 0.5"/>
    <body name="box" pos="0 0 0.5">
      <freejoint/>
      <geom name="box" type="box" size=".05 .05 .05" mass="0.2"/>
      <site name="corner" pos=".05 .05 .05"/>
    </body>
    <body name="pole" pos="1 0 0.3">
      <joint name="hinge" type="hinge" axis="0 1 0" damping="0.01"/>
      <geom type="capsule" fromto="0 0 0 0 0 0.4" size="0.02" mass="0.1"/>
    </body>
  </worldbody>
  <equality><weld body1="hand" body2="box" solref="0.02 1"/></equality>
  <actuator><motor joint="hinge" gear="1"/></actuator>
  <sensor>
    <framepos name="corner_pos" objtype="site" objname="corner"/>
    <framelinvel name="box_vel" objtype="body" objname="box"/>
    <jointpos name="hinge_pos" joint="hinge"/>
  </sensor>
</mujoco>
"""


def _model(box_half: float = 0.05) -> mujoco.MjModel:
    m = mujoco.MjModel.from_xml_string(XML)
    m.geom_size[m.geom("box").id] = box_half
    return m


def _loop_reference(
    model: mujoco.MjModel, qpos: np.ndarray, ctrl: np.ndarray, mocap: np.ndarray, nstep: int
) -> tuple[np.ndarray, np.ndarray]:
    """One env with plain mj_step: ``ctrl [T, nstep, nu]``, ``mocap [T, nstep, 3]`` -> final (qpos, sensordata)."""
    d = mujoco.MjData(model)
    d.qpos[:] = qpos
    mujoco.mj_forward(model, d)
    for t in range(ctrl.shape[0]):
        for s in range(nstep):
            d.ctrl[:] = ctrl[t, s]
            d.mocap_pos[0] = mocap[t, s]
            mujoco.mj_step(model, d)
    mujoco.mj_forward(model, d)  # sensors at the final state
    return d.qpos.copy(), d.sensordata.copy()


def test_batched_rollout_equals_a_loop_of_mj_step_per_env() -> None:
    """Several envs, two model variants, per-step controls and mocap targets: every env ends where
    a plain mj_step loop of its own ends, to float precision, sensors included."""
    rng = np.random.default_rng(0)
    models = [_model(0.05), _model(0.08)]
    E, T, nstep = 6, 20, 4
    index = np.array([0, 1, 0, 1, 1, 0])
    world = BatchedMjWorld(models, E, model_index=index, control=("ctrl", "mocap_pos"), cfg=MjWorldCfg(nthread=2))
    qpos0 = np.tile(models[0].qpos0, (E, 1))
    qpos0[:, 0:3] += rng.uniform(-0.05, 0.05, (E, 3))
    qpos0[:, 7] = rng.uniform(-0.5, 0.5, E)
    world.set_state(np.arange(E), qpos=torch.tensor(qpos0))
    ctrl = rng.uniform(-0.2, 0.2, (E, T, nstep, 1))
    mocap = np.array([0.0, 0.0, 0.5]) + np.cumsum(rng.uniform(-0.01, 0.01, (E, T, nstep, 3)), axis=(1))
    for t in range(T):
        control = np.concatenate([ctrl[:, t], mocap[:, t]], -1)
        world.step(torch.tensor(control), nstep)
    for e in range(E):
        qpos, sens = _loop_reference(models[index[e]], qpos0[e], ctrl[e], mocap[e], nstep)
        np.testing.assert_allclose(world.qpos[e].numpy(), qpos, atol=1e-5)
        np.testing.assert_allclose(world.sensordata[e].numpy(), sens, atol=1e-4)
    # The variants really differ: the bigger box hangs differently from the same commands.
    assert not np.allclose(world.qpos[0].numpy(), world.qpos[2].numpy()) or index[0] == index[2]


def test_sensors_are_at_the_current_state_not_one_step_stale() -> None:
    world = BatchedMjWorld(_model(), 2, control=("mocap_pos",))
    target = torch.tensor([[0.3, 0.0, 0.5], [0.0, 0.0, 0.5]])
    world.step(target, 3)
    corner = world.sensordata[:, world.sensor_slice("corner_pos")]
    box = world.qpos[:, :3]
    np.testing.assert_allclose((corner - box).numpy(), np.full((2, 3), 0.05), atol=1e-4)
    stale = BatchedMjWorld(_model(), 2, control=("mocap_pos",), cfg=MjWorldCfg(exact_sensors=False))
    stale.step(target, 3)
    lag = stale.sensordata[0, stale.sensor_slice("corner_pos")] - stale.qpos[0, :3]
    assert (lag - 0.05).abs().max() > 1e-3  # what rollout alone reports: the state before the last step


def test_set_state_resets_only_the_chosen_envs_and_restarts_their_clock() -> None:
    world = BatchedMjWorld(_model(), 3, control=("ctrl",))
    world.step(torch.ones(3, 1), 10)
    before = world.qpos.clone()
    qpos = torch.tensor(_model().qpos0, dtype=torch.float32)[None]
    qpos[0, 7] = 0.3
    world.set_state([1], qpos=qpos)
    assert torch.equal(world.qpos[[0, 2]], before[[0, 2]])
    assert world.qpos[1, 7] == pytest.approx(0.3)
    assert world.time.tolist() == pytest.approx([0.1, 0.0, 0.1])
    assert world.sensordata[1, world.sensor_slice("hinge_pos")].item() == pytest.approx(0.3)


def test_switching_variants_at_reset_changes_the_physics_of_that_env_only() -> None:
    """An env moved to another variant steps exactly like an env built on that variant."""
    moving = torch.tensor([[0.2, 0.0, 0.06]]).repeat(2, 1)  # the big box reaches the floor, the small one not
    world = BatchedMjWorld([_model(0.05), _model(0.1)], 2, control=("mocap_pos",))
    world.set_model([1], 1)
    world.set_state([0, 1])
    reference = BatchedMjWorld([_model(0.05), _model(0.1)], 2, model_index=[0, 1], control=("mocap_pos",))
    for _ in range(30):
        world.step(moving, 2)
        reference.step(moving, 2)
    assert world.model_index.tolist() == [0, 1]
    assert torch.allclose(world.qpos, reference.qpos, atol=1e-6)
    assert (world.qpos[0] - world.qpos[1]).abs().max() > 1e-3  # the sizes change the contact


def test_bad_inputs_are_clear_errors() -> None:
    small = mujoco.MjModel.from_xml_string(
        "<mujoco><worldbody><body><freejoint/><geom size='.1'/></body></worldbody></mujoco>"
    )
    with pytest.raises(ValueError, match="differs in size"):
        BatchedMjWorld([_model(), small], 2)

    # Same nq/nv/ngeom, but the offset geom moves the centre of mass and so the sparse mass matrix (nC):
    # rollout would accept the pair and step garbage.
    def free_box(offset: float) -> mujoco.MjModel:
        xml = f"<mujoco><worldbody><body><freejoint/><geom type='box' size='.1 .1 .1' pos='0 0 {offset}'/></body>"
        return mujoco.MjModel.from_xml_string(xml + "</worldbody></mujoco>")

    with pytest.raises(ValueError, match="'nC'"):
        BatchedMjWorld([free_box(0.0), free_box(0.05)], 2)
    with pytest.raises(ValueError, match="subset of"):
        BatchedMjWorld(_model(), 2, control=("mocap_pos", "ctrl"))
    world = BatchedMjWorld(_model(), 2, control=("ctrl",))
    with pytest.raises(ValueError, match="control must be"):
        world.step(torch.zeros(2, 3), 1)
    with pytest.raises(ValueError, match="backend"):
        MjWorldCfg(backend="mjx")


def test_a_diverging_env_is_flagged_although_mujoco_resets_it_silently() -> None:
    """MuJoCo replaces an unstable state by the initial one (only a warning): the world still flags it."""
    world = BatchedMjWorld(_model(), 2, control=("ctrl",))
    qpos = torch.tensor(_model().qpos0, dtype=torch.float32)[None]
    qvel = torch.zeros(1, world.nv)
    qvel[0, 6] = float("nan")
    world.set_state([0], qpos=qpos, qvel=qvel)
    world.step(torch.zeros(2, 1), 2)
    assert world.diverged().tolist() == [True, False]
    world.set_state([0])
    assert world.diverged().tolist() == [False, False]


def test_the_warp_backend_without_mujoco_warp_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "mujoco_warp", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "sim.mujoco.warp_world", raising=False)
    with pytest.raises(ImportError, match=r"pip install 'covey\[warp\]'.*mujoco.backend=rollout"):
        BatchedMjWorld(_model(), 2, cfg=MjWorldCfg(backend="warp"))


@pytest.mark.slow
def test_warp_backend_matches_rollout_on_the_cpu_device() -> None:
    """The config switch, not a fork: the same scene and controls on MuJoCo Warp (float32, CPU device
    here; a GPU in production) and on rollout (float64) end in the same state. ~1-2 min of compile."""
    pytest.importorskip("mujoco_warp")
    rng = np.random.default_rng(1)
    models, E = [_model(0.05), _model(0.08)], 4
    kw = dict(model_index=[0, 1, 1, 0], control=("ctrl", "mocap_pos"))
    ref = BatchedMjWorld(models, E, **kw)
    warp = BatchedMjWorld(models, E, cfg=MjWorldCfg(backend="warp"), **kw)
    assert type(warp).__name__ == "WarpMjWorld"
    qpos = torch.tensor(np.tile(models[0].qpos0, (E, 1)), dtype=torch.float32)
    qpos[:, 7] = torch.tensor(rng.uniform(-0.5, 0.5, E), dtype=torch.float32)
    for w in (ref, warp):
        w.set_state(range(E), qpos=qpos)
    for _ in range(10):
        c = torch.tensor(np.concatenate([rng.uniform(-0.2, 0.2, (E, 1)), [[0.0, 0.0, 0.45]] * E], -1))
        ref.step(c, 3)
        warp.step(c, 3)
    assert torch.allclose(warp.qpos, ref.qpos, atol=2e-3), (warp.qpos - ref.qpos).abs().max()
    assert torch.allclose(warp.sensordata, ref.sensordata, atol=5e-3)
    assert torch.allclose(warp.time, ref.time)
