"""cable_load with its bodies, cables and ground advanced by MuJoCo (``evaluate.py engine=mujoco``): a sim-to-sim check.

Everything but the rigid-body step is the task's own code: the actions, the INDI controller, the rotor model and the
fault logic run as in :func:`sim.tasks.cable_load.physics.control_step`; observations, rewards, terminations, resets
and metrics are the torch backend's (:class:`~sim.tasks.cable_load.backends.TorchPhysics`), which this engine wraps,
replacing only ``advance``. Per physics step the engine hands MuJoCo, as applied forces (``xfrc_applied``, world
frame, at each centre of mass), what covey's step adds to a body besides its cables: each MAV's rotor thrust and
rotor torque from the same motor model, its linear drag, and the load's disturbance force. MuJoCo then integrates
the MAVs, the load (a box body), the cables (spatial tendons: :func:`sim.mujoco.mjcf.cable_tendon`) and the floor
contacts (its soft contact solver) on its own.

Why tendons: a spatial tendon with a dead-band spring (``springlength="0 L"``) pulls ``k (l - L)`` only when longer
than ``L`` and never pushes, which is the cable's spring exactly. Its damper (``b dl/dt``) also acts while the cable
is slack and may push while it shortens fast, where covey's cable clamps the tension at 0. The alternatives are
further off: a tendon ``limit`` is a soft constraint whose force depends on the solver's impedance (``solimp``), not a
set stiffness, and MuJoCo's ``cable`` plugin is a chain of bodies with bending stiffness (a rope, not a massless
spring). The tension the observations, rewards and metrics read is covey's formula at MuJoCo's state.

Per-episode parameters (load mass and inertia, MAV mass and inertia, cable lengths) are written into each env's own
copy of the model at its reset, so randomised and heterogeneous teams fly as drawn. A released cable (fault
``cable="released"``) lets go when its MAV fails, as covey's does: that env's tendon loses its stiffness and damping
(it stays in the model as a path that transmits no force) until the env's next reset.

MuJoCo steps every env in one ``mujoco.rollout`` call per physics step (:class:`sim.mujoco.world.BatchedMjWorld`, CPU
threads): no Python loop over envs; the forces depend on the state, so each call advances one physics step.
Shapes: E envs, N MAVs.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import mujoco
import numpy as np
import torch
from torch import Tensor

from sim.mujoco.mjcf import cable_load_model
from sim.mujoco.world import BatchedMjWorld, MjWorldCfg, free_bodies, thrust_wrench
from sim.physics.cable import cable_tension
from sim.physics.rigid_body import RigidBodyState, point_velocity
from sim.tasks.cable_load import physics
from sim.tasks.cable_load.backends import TorchPhysics

if TYPE_CHECKING:
    from sim.core.env import Obs
    from sim.tasks.cable_load.env import CableLoadEnv


# MuJoCo integrators by the name ``engine=mujoco:<name>`` gives. Euler (semi-implicit) is covey's own scheme.
INTEGRATORS = {
    "euler": mujoco.mjtIntegrator.mjINT_EULER,
    "rk4": mujoco.mjtIntegrator.mjINT_RK4,
    "implicit": mujoco.mjtIntegrator.mjINT_IMPLICIT,
    "implicitfast": mujoco.mjtIntegrator.mjINT_IMPLICITFAST,
}


class MujocoEngine:
    """A :class:`~sim.tasks.cable_load.backends.CableLoadBackend` whose control loop steps MuJoCo; the rest is the
    torch backend's. ``integrator``: a key of :data:`INTEGRATORS` (``engine=mujoco:rk4``); ``nthread``: MuJoCo
    rollout threads (0: every core of this process)."""

    name = "mujoco"
    # MuJoCo's state mirrors the env's tensors (the snapshot's): after a restore (forget_errors) it is written anew.
    snapshot_constant = True

    def __init__(self, env: CableLoadEnv, integrator: str = "euler", nthread: int = 0) -> None:
        cfg = env.cfg
        if integrator not in INTEGRATORS:
            raise ValueError(
                f"cable_load engine 'mujoco': unknown integrator {integrator!r}; known: {list(INTEGRATORS)}"
            )
        self.env = env
        self.inner = TorchPhysics(env)
        self.evaluate = self.inner.evaluate
        n = env.n
        xml = cable_load_model(
            env.params,
            n,
            cfg.load_mass,
            cfg.load_size,
            env.attach.tolist(),
            [cfg.cable_length] * n,
            cfg.cable_stiffness,
            cfg.cable_damping,
            timestep=env.phys_dt,
        )
        base = mujoco.MjModel.from_xml_string(xml)
        base.opt.integrator = INTEGRATORS[integrator]
        # One model per env: its reset writes that episode's masses, inertias and cable lengths into it.
        models = [copy.copy(base) for _ in range(env.num_envs)]
        self.world = BatchedMjWorld(
            models,
            env.num_envs,
            model_index=np.arange(env.num_envs),
            control=("xfrc_applied",),
            cfg=MjWorldCfg(nthread=nthread, exact_sensors=False),  # the task reads no MuJoCo sensor
            device=env.device,
        )
        self.mav_body = [base.body(f"mav{i}").id for i in range(n)]
        self.load_body = base.body("load").id
        self.tendon = [base.tendon(f"cable{i}").id for i in range(n)]
        # A released cable: the failed MAV's tendon stops pulling (stiffness and damping 0) until the env's reset.
        self.release = cfg.fault.enabled and cfg.fault.cable == "released"
        self.cable_gains = base.tendon_stiffness[self.tendon].copy(), base.tendon_damping[self.tendon].copy()
        self.let_go = np.zeros((env.num_envs, n), dtype=bool)  # [E, N] tendons released in MuJoCo's models
        self._scratch = mujoco.MjData(base)  # workspace of mj_setConst (every env's model has the base's sizes)
        self._stale = False  # set when the env's state was written behind the engine's back
        self.reset_rows(torch.arange(env.num_envs, device=env.device), inner=False)  # the env's current state

    # ----------------------------------------------------------------- what the torch backend does
    def apply_actions(self, actions: dict[str, Tensor]) -> None:
        self.inner.apply_actions(actions)

    def observations_after_reset(self) -> Obs:
        return self.inner.observations_after_reset()

    def step_noise(self, shape: torch.Size) -> Tensor:
        return self.inner.step_noise(shape)

    def cached_errors(self) -> None:
        return None

    def forget_errors(self) -> None:
        """The env's state was written in place (a snapshot restored): MuJoCo takes it over before the next step."""
        self._stale = True

    def reset_rows(self, env_ids: Tensor, inner: bool = True) -> None:
        """Reset the envs ``env_ids [k]`` with the task's reset, then write their parameters and state into MuJoCo."""
        if inner:
            self.inner.reset_rows(env_ids)
        env = self.env
        ids = env_ids.cpu().numpy()
        mav_mass, mav_inertia = env.mav_mass[env_ids, :, 0].cpu().numpy(), env.mav_inertia[env_ids].cpu().numpy()
        load_mass, load_inertia = env.load_mass[env_ids].cpu().numpy(), env.load_inertia[env_ids].cpu().numpy()
        length = env.cable_length[env_ids].cpu().numpy()
        for row, i in enumerate(ids):  # a reset's few envs: each has its own model
            m = self.world.models[i]
            m.body_mass[self.mav_body] = mav_mass[row]
            m.body_inertia[self.mav_body] = mav_inertia[row]
            m.body_mass[self.load_body] = load_mass[row]
            m.body_inertia[self.load_body] = load_inertia[row]
            m.tendon_lengthspring[self.tendon, 1] = length[row]
            m.tendon_stiffness[self.tendon], m.tendon_damping[self.tendon] = self.cable_gains
            mujoco.mj_setConst(m, self._scratch)  # MuJoCo steps with constants derived from the masses (dof_M0)
        self.let_go[ids] = False
        d, ld = env.drones, env.load
        qpos = torch.cat((torch.cat((d.pos, d.quat), -1).flatten(1), ld.pos, ld.quat), -1)[env_ids]
        qvel = torch.cat((torch.cat((d.vel, d.ang_vel), -1).flatten(1), ld.vel, ld.ang_vel), -1)[env_ids]
        self.world.set_state(ids, qpos=qpos, qvel=qvel)

    # ----------------------------------------------------------------- the control loop, in MuJoCo
    def advance(self) -> None:
        """The ``decimation`` control ticks of one step."""
        if self._stale:
            self._stale = False
            self.reset_rows(torch.arange(self.env.num_envs, device=self.env.device), inner=False)
        for _ in range(self.env.decimation):
            self.control_tick()

    def control_tick(self) -> None:
        """One INDI tick (as :func:`~sim.tasks.cable_load.physics.control_step`), then ``physics_substeps`` MuJoCo
        steps."""
        env = self.env
        d = env.drones
        speed_cmd = env.indi(env.cmd[..., :3], env.cmd[..., 3:], d.quat, d.vel, d.ang_vel, env.rotor_speed)
        failed = physics.failed_mavs(env)
        env.failed = failed
        env.rotor_alive = (~failed).float().unsqueeze(-1)
        if self.release:
            self.release_cables(failed)
        speed_cmd = torch.minimum(speed_cmd, env.rotor_speed_max) * env.rotor_alive
        for _ in range(env.cfg.physics_substeps):
            self.physics_step(speed_cmd)
        env.time = env.time + env.ctrl_dt

    def release_cables(self, failed: Tensor) -> None:
        """Let go of the cables of MAVs newly failed (``failed [E, N]`` bool) in their envs' MuJoCo models."""
        new = failed.cpu().numpy() & ~self.let_go
        for e, i in zip(*np.nonzero(new), strict=True):
            m = self.world.models[e]
            m.tendon_stiffness[self.tendon[i]] = 0.0
            m.tendon_damping[self.tendon[i]] = 0.0
        self.let_go |= new

    def applied_forces(self) -> Tensor:
        """``xfrc_applied`` now, ``[E, nbody, 6]`` (force N, torque N m; world frame, at each centre of mass): each
        MAV's rotor thrust and torque at its current rotor speeds plus its drag, and the load's disturbance."""
        env, model = self.env, self.env.model
        d = env.drones
        thrust, rotor_torque = model.body_wrench(env.rotor_speed, env.thrust_scale)
        xfrc = torch.zeros(env.num_envs, self.world.nbody, 6, device=env.device)
        xfrc[:, self.mav_body] = thrust_wrench(d.quat, thrust, rotor_torque, model.drag_force(d.quat, d.vel))
        if env.cfg.disturbance.enabled:
            xfrc[:, self.load_body, :3] = physics.disturbance_force(env)
        return xfrc

    def physics_step(self, speed_cmd: Tensor) -> None:
        """Motors (covey's model), then one MuJoCo step of every env; the env's bodies read back. The tensions are
        those the step starts from, as covey's step records them."""
        env, cfg = self.env, self.env.cfg
        env.rotor_speed = env.model.motor_step(env.rotor_speed, speed_cmd, env.phys_dt, decay=env.motor_decay)
        p_d, vel_d = point_velocity(env.drones, env.model.cable_attach)
        p_l, vel_l = point_velocity(physics.load_per_mav(env), env.attach)
        tension, _, _ = cable_tension(p_d, vel_d, p_l, vel_l, env.cable_length, cfg.cable_stiffness, cfg.cable_damping)
        if self.release:
            tension = tension * (~env.failed)  # a lost MAV's cable has let go of the load
        env.cable_tension = tension
        self.world.step(self.applied_forces().flatten(1), nstep=1)
        self.read_state()

    def read_state(self) -> None:
        """The env's MAVs and load from MuJoCo's state (free joints: MAVs in order, then the load)."""
        env, n = self.env, self.env.n
        qpos, qvel = self.world.qpos, self.world.qvel  # [E, 7 (N + 1)], [E, 6 (N + 1)]
        q_l, v_l = qpos[:, 7 * n :], qvel[:, 6 * n :]
        env.drones = free_bodies(qpos, qvel, n)
        env.load = RigidBodyState(q_l[:, :3], q_l[:, 3:], v_l[:, :3], v_l[:, 3:])

    def diverged(self) -> Tensor:
        """``[E]`` bool: envs MuJoCo found unstable since their reset (:meth:`BatchedMjWorld.diverged`)."""
        return self.world.diverged()
