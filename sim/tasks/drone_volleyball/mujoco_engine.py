"""drone_volleyball with its drones, ball and contacts advanced by MuJoCo (``evaluate.py engine=mujoco``): a sim-to-sim
check.

Everything but the bodies' motion and the ball's contacts is the task's own code: the actions, the rate PID, the
motor lag and rotor model run as in :func:`sim.tasks.drone_volleyball.physics.control_step`, and hand MuJoCo, as
applied forces (``xfrc_applied``, world frame, at each centre of mass), each drone's rotor thrust and torque plus its
linear drag, held over the tick; observations, rules, rewards, terminations, resets and metrics are the env's own
backend's, which this engine wraps, replacing only ``advance``. MuJoCo then integrates the drones and the ball (its
gravity, its drag through MuJoCo's ellipsoid fluid model) and resolves the ball's contacts with the floor, the net
and the paddles with its soft contact solver (:class:`sim.mujoco.mjcf.BallContacts`): restitution comes from each
contact's spring-damper (``solref``, :func:`contact_solref`), the paddle's reaction acts on the drone, and a contact
lasts a few ms.

MuJoCo steps ``substeps`` times per physics tick (``engine=mujoco:<substeps>``, default :data:`DEFAULT_SUBSTEPS`):
a soft contact needs several steps to resolve (at least :data:`CONTACT_STEPS`), and covey's 5 ms tick would let a
10 m/s ball sink 13 cm into a paddle. A contact lasts :data:`CONTACT_DURATION_S` (10 steps at the default, 40 at
``mujoco:40``: a single contact's restitution then depends less on where in a step it begins, see
:func:`contact_solref`). With ``mujoco:1`` MuJoCo's steps are covey's (free flight agrees to round-off; contacts are
soft, 50 ms). The rules read contacts from MuJoCo's contact sensors at every MuJoCo step: a hit is the first step of
a paddle contact (a contact spanning two control steps is one touch), the net and the ground flags any contact, the
landing point is the ball's position at the first floor contact. The drones' crashes (ground, net, another drone)
are the task's checks on MuJoCo's positions; drones touch only the floor in MuJoCo (covey's fly through it).

MuJoCo steps every env in one ``mujoco.rollout`` call per physics tick (:class:`sim.mujoco.world.BatchedMjWorld`,
CPU threads): no Python loop over envs. State the task writes itself (episode and rally starts, a restored snapshot)
is found by comparison with what the engine last read and written into MuJoCo before the next step.
Shapes: E envs, D drones.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import mujoco
import torch
from torch import Tensor

from sim.mujoco.mjcf import BallContacts, volleyball_model
from sim.mujoco.world import BatchedMjWorld, MjWorldCfg, free_bodies, thrust_wrench

if TYPE_CHECKING:
    from sim.core.env import Obs
    from sim.tasks.drone_volleyball.env import DroneVolleyballEnv

# MuJoCo steps per physics tick: 0.5 ms steps at covey's 200 Hz.
DEFAULT_SUBSTEPS = 10
# Where in a MuJoCo step a contact begins (penetration at its first step, in speed x dt): contact_solref's average.
PHASES = tuple((k + 0.5) / 16 for k in range(16))
# How long a ball contact lasts (its undamped half period, pi / omega_0), and the fewest MuJoCo steps that resolve it
# (a coarser step lengthens the contact to this many steps).
CONTACT_DURATION_S = 0.005
CONTACT_STEPS = 10


def contact_solref(restitution: float, duration: float, dt: float) -> tuple[float, float]:
    """``(K 1/s^2, B 1/s)`` of a direct ``solref = "-K -B"``: the contact's undamped half period is ``duration`` s
    (``K = (pi / duration)^2``) and its damping ratio ``zeta`` (``B = 2 zeta sqrt K``) is the one whose contact, as
    MuJoCo steps it, returns ``restitution`` of the normal velocity.

    The closed form of the spring-damper, ``e = exp(-pi zeta / sqrt(1 - zeta^2))``, is not what MuJoCo does: its
    contact force is unilateral (clamped at 0, so the ball leaves while the damper would still pull it back) and
    stepped by semi-implicit Euler at ``dt``; at 10 steps a contact the closed form's 0.2 comes out 0.34, its 0.8 as
    0.82. ``zeta`` is therefore found by bisection on that discrete, clamped contact (``x'' = max(0, -B x' - K x)``
    in penetration, which reproduces MuJoCo's outgoing velocity to 1e-12 with ``solimp`` near 1), averaged over
    where in a step the contact begins: one contact's restitution depends on that (at 10 steps a contact: 0.8 +-
    0.02, 0.7 +- 0.03, 0.2 +- 0.05), which the mean over many contacts does not.
    """
    if not 0.0 < restitution < 1.0:
        raise ValueError(f"a MuJoCo spring-damper contact needs 0 < restitution < 1, got {restitution}")
    omega = math.pi / duration

    def bounce(zeta: float) -> float:  # the outgoing speed of a unit-speed contact, mean over where it starts
        out = 0.0
        for phase in PHASES:
            x, v = -phase * dt, -1.0  # penetration depth -x at the first step that finds the contact
            while not (x >= 0.0 and v > 0.0):
                v += dt * max(0.0, -2.0 * zeta * omega * v - omega**2 * x)
                x += dt * v
            out += v / len(PHASES)
        return out

    lo, hi = 0.0, 1.5  # bounce falls from ~1 to ~0.1 over it (stable while B dt < 1)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if bounce(mid) > restitution else (lo, mid)
    return omega**2, 2.0 * lo * omega


class MujocoEngine:
    """A :class:`~sim.core.backend.StepBackend` whose control loop steps MuJoCo; the rest is the env's backend's.
    ``substeps``: MuJoCo steps per physics tick (``engine=mujoco:<substeps>``); ``nthread``: rollout threads (0: every
    core of this process)."""

    name = "mujoco"
    snapshot_constant = True  # MuJoCo's state mirrors the env's tensors: a restored snapshot is written anew

    def __init__(self, env: DroneVolleyballEnv, substeps: str | int = DEFAULT_SUBSTEPS, nthread: int = 0) -> None:
        try:
            substeps = int(substeps)
        except ValueError:
            substeps = 0
        if substeps < 1:
            raise ValueError(f"drone_volleyball engine 'mujoco': the option is MuJoCo steps per physics tick "
                             f"(mujoco:<int >= 1>), got {substeps!r}")  # fmt: skip
        cfg, bp, court = env.cfg, env.cfg.ball, env.cfg.court
        self.env, self.substeps = env, substeps
        self.inner = env.backend
        self.evaluate = self.inner.evaluate
        dt = env.phys_dt / substeps
        duration = max(CONTACT_DURATION_S, CONTACT_STEPS * dt)
        contacts = BallContacts(
            solref={
                "floor": contact_solref(bp.restitution_ground, duration, dt),
                "net": contact_solref(bp.restitution_net, duration, dt),
                "paddle": contact_solref(bp.restitution_drone, duration, dt),
            },
            drag_coeff=bp.drag_coeff,
            air_density=bp.air_density,
        )
        D = env.num_drones
        xml = volleyball_model(
            env.params,
            [(0.0, 0.0, 2.0)] * D,
            (0.0, 0.0, 3.0),
            bp.radius,
            bp.mass,
            court.net_height,
            2.0 * court.antenna_y,
            dt,
            paddle=(cfg.paddle_radius, cfg.paddle_offset),
            contacts=contacts,
        )
        self.model = mujoco.MjModel.from_xml_string(xml)
        self.world = BatchedMjWorld(
            self.model,
            env.num_envs,
            control=("xfrc_applied",),
            cfg=MjWorldCfg(nthread=nthread, exact_sensors=False),  # the per-step sensors are read instead
            device=env.device,
        )
        self.drone_body = [self.model.body(f"drone{i}").id for i in range(D)]
        # Sensor columns: contact found with each paddle, the net, the floor; then the ball's position.
        self.contact_cols = [self.world.sensor_slice(f"ball_drone{i}_paddle").start for i in range(D)]
        self.contact_cols += [self.world.sensor_slice(s).start for s in ("ball_net", "ball_floor")]
        self.ball_pos_cols = self.world.sensor_slice("ball_pos")
        # Contacts found at the last state MuJoCo reported, [E, D + 2]: a hit is a contact's first step.
        self.in_contact = torch.zeros(env.num_envs, D + 2, dtype=torch.bool, device=env.device)
        self._mirror: tuple[Tensor, ...] = ()
        self.write_rows(torch.arange(env.num_envs, device=env.device))  # the env's current state

    # ----------------------------------------------------------------- what the env's backend does
    def apply_actions(self, actions: dict[str, Tensor]) -> None:
        self.inner.apply_actions(actions)

    def reset_rows(self, env_ids: Tensor) -> None:
        self.inner.reset_rows(env_ids)  # MuJoCo takes the new state over at the next advance (sync)

    def observations_after_reset(self) -> Obs:
        return self.inner.observations_after_reset()

    # ----------------------------------------------------------------- the env's state <-> MuJoCo
    def _state_tensors(self) -> tuple[Tensor, ...]:
        d, env = self.env.drones, self.env
        return d.pos, d.quat, d.vel, d.ang_vel, env.ball_pos, env.ball_vel

    def write_rows(self, env_ids: Tensor) -> None:
        """Write the drones and ball of the envs ``env_ids [k]`` into MuJoCo (their contacts start anew)."""
        if env_ids.numel() == 0:
            return
        pos, quat, vel, ang_vel, ball_pos, ball_vel = (x[env_ids] for x in self._state_tensors())
        k = env_ids.numel()
        ball_quat = torch.zeros(k, 4, device=pos.device)
        ball_quat[:, 0] = 1.0
        qpos = torch.cat((torch.cat((pos, quat), -1).flatten(1), ball_pos, ball_quat), -1)
        qvel = torch.cat((torch.cat((vel, ang_vel), -1).flatten(1), ball_vel, torch.zeros_like(ball_vel)), -1)
        self.world.set_state(env_ids.cpu().numpy(), qpos=qpos, qvel=qvel)
        self.in_contact[env_ids] = False
        self._mirror = tuple(x.clone() for x in self._state_tensors())

    def sync(self) -> None:
        """Write into MuJoCo the envs whose state the task changed since the engine last read it (resets, rally
        starts, a restored snapshot)."""
        changed = torch.zeros(self.env.num_envs, dtype=torch.bool, device=self.env.device)
        for now, seen in zip(self._state_tensors(), self._mirror, strict=True):
            changed |= (now != seen).flatten(1).any(-1)
        self.write_rows(changed.nonzero().squeeze(-1))

    def read_state(self) -> None:
        """The env's drones and ball from MuJoCo's state (free joints: drones in order, then the ball)."""
        env, D = self.env, self.env.num_drones
        qpos, qvel = self.world.qpos, self.world.qvel  # [E, 7 (D + 1)], [E, 6 (D + 1)]
        env.drones = free_bodies(qpos, qvel, D)  # angular velocity: body frame
        env.ball_pos, env.ball_vel = qpos[:, 7 * D : 7 * D + 3], qvel[:, 6 * D : 6 * D + 3]
        self._mirror = tuple(x.clone() for x in self._state_tensors())

    # ----------------------------------------------------------------- the control loop, in MuJoCo
    def advance(self) -> None:
        """The ``decimation`` ticks of one control step."""
        self.sync()
        for _ in range(self.env.decimation):
            self.control_tick()

    def applied_forces(self) -> Tensor:
        """``xfrc_applied`` now, ``[E, nbody, 6]`` (force N, torque N m; world frame, at each centre of mass): each
        drone's rotor thrust and torque at its current rotor speeds plus its drag."""
        env, model, d = self.env, self.env.model, self.env.drones
        thrust, torque = model.body_wrench(env.rotor_speed)
        xfrc = torch.zeros(env.num_envs, self.world.nbody, 6, device=env.device)
        xfrc[:, self.drone_body] = thrust_wrench(d.quat, thrust, torque, model.drag_force(d.quat, d.vel))
        return xfrc

    def control_tick(self) -> None:
        """One tick as :func:`~sim.tasks.drone_volleyball.physics.control_step`: rate PID (``ctbr``) or rotor
        commands and the motors in covey, the bodies and the ball's contacts in MuJoCo (``substeps`` steps), then
        the drones' crash checks and the step's contact flags."""
        env, cfg, dt = self.env, self.env.cfg, self.env.phys_dt
        d = env.drones
        if cfg.action == "ctbr":
            thrust = (env.cmd[..., 0] + 1.0) * 0.5 * env.params.max_thrust
            speed_cmd = env.rate_ctrl(thrust, env.cmd[..., 1:] * env.rate_scale, d.ang_vel, dt)
        else:
            speed_cmd = (env.cmd + 1.0) * 0.5 * env.params.rotor_speed_max
        env.rotor_speed = env.model.motor_step(env.rotor_speed, speed_cmd, dt)
        self.world.step(self.applied_forces().flatten(1), nstep=self.substeps)
        self.read_state()
        self.crashes()
        self.contact_flags()

    def crashes(self) -> None:
        """The task's crash checks (:func:`~sim.tasks.drone_volleyball.physics.control_step`'s) on MuJoCo's drones."""
        env, court, r = self.env, self.env.cfg.court, self.env.params.collision_radius
        pos = env.drones.pos
        ground = pos[..., 2] < r * 0.5
        at_net = (pos[..., 0].abs() < r) & (pos[..., 2] < court.net_height) & (pos[..., 1].abs() < court.antenna_y)
        eye = torch.eye(env.num_drones, dtype=torch.bool, device=env.device)
        collide = ((torch.cdist(pos, pos) < r) & ~eye).any(-1)
        env.drone_crash = env.drone_crash | ground | at_net | collide

    def contact_flags(self) -> None:
        """The tick's paddle hits (contact onsets), net and ground contacts and the first landing point, from the
        contact sensors of every MuJoCo step (each at the state that step started from)."""
        env, D = self.env, self.env.num_drones
        sensors = self.world.sensors_per_step()  # [E, S, nsensordata]
        found = sensors[..., self.contact_cols] > 0  # [E, S, D + 2]
        before = torch.cat((self.in_contact.unsqueeze(1), found[:, :-1]), 1)
        onset = found & ~before
        self.in_contact = found[:, -1]
        env.hits = env.hits | onset[..., :D].any(1)
        env.ball_net = env.ball_net | found[..., D].any(1)
        ground = found[..., D + 1]  # [E, S]
        first = ground.long().argmax(1)  # the tick's first floor contact
        landed = ground.any(1) & ~env.ball_ground
        at = sensors[torch.arange(env.num_envs, device=env.device), first][:, self.ball_pos_cols]
        env.landed_at = torch.where(landed.unsqueeze(-1), at, env.landed_at)
        env.ball_ground = env.ball_ground | ground.any(1)

    def diverged(self) -> Tensor:
        """``[E]`` bool: envs MuJoCo found unstable since their last write (:meth:`BatchedMjWorld.diverged`)."""
        return self.world.diverged()
