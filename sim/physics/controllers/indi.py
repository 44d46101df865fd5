"""INDI controller tracking a commanded linear acceleration plus roll/pitch body rates.

The chain follows the decentralised cable-load paper (geometric outer loop -> INDI inner loop ->
motor model). Incremental nonlinear dynamic inversion replaces model knowledge of external forces
(cable tension, drag, faults) with the measured response, so the commanded acceleration is
tracked even while a cable pulls on the vehicle.

With ``s`` the specific force (accelerometer, ``a - g``), ``T`` the collective thrust computed
from measured rotor speeds, and ``(.)_f`` first-order low-pass filtered values (same filter on
measurement and actuator side, "synchronised" INDI):

    outer:  f_des  = T_f z_b + m (a_cmd - g - s_f)             desired thrust vector (world)
            T_cmd  = f_des . z_b                               collective thrust (N)
            z_des  = f_des / |f_des|
            w_cmd  = K_att (R^T (z_b x z_des))_xy + w_ff_xy    roll/pitch rates (feed-forward from policy)
            w_cmd_z = K_yaw wrap(psi_ref - psi)                yaw held at its reference
    inner:  tau    = tau_f + J (K_rate (w_cmd - w) - dw_f)     incremental torque
    rotors: allocation^-1 [T_cmd, tau]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from sim.physics.multirotor import MultirotorModel
from sim.physics.quaternion import quat_rotate, quat_rotate_inv, quat_yaw
from sim.physics.rigid_body import GRAVITY


@dataclass(frozen=True)
class INDIGains:
    """Gains of the INDI acceleration / body-rate controller."""

    attitude: float = 12.0  # 1/s, tilt error -> roll/pitch rate
    yaw: float = 3.0  # 1/s, heading error -> yaw rate
    rate: tuple[float, float, float] = (40.0, 40.0, 15.0)  # 1/s, rate error -> angular acceleration
    filter_cutoff_hz: float = 30.0  # synchronised low-pass on measurements and actuator feedback
    max_tilt_deg: float = 60.0  # desired thrust direction is limited to this cone about world z


class INDIController:
    """Batched INDI controller; memory shapes ``[..., 3]`` / ``[...]`` over a batch ``[...]``."""

    def __init__(
        self, model: MultirotorModel, batch_shape: tuple[int, ...], dt: float, gains: INDIGains | None = None
    ) -> None:
        self.model = model
        self.dt = dt
        self.gains = gains or INDIGains()
        dev = model.device
        self.k_rate = torch.tensor(self.gains.rate, device=dev)
        tau = 1.0 / (2 * math.pi * self.gains.filter_cutoff_hz)
        self.alpha = dt / (dt + tau)
        self.cos_max_tilt = math.cos(math.radians(self.gains.max_tilt_deg))
        self.gravity = torch.tensor((0.0, 0.0, -GRAVITY), device=dev)
        zeros3 = torch.zeros(*batch_shape, 3, device=dev)
        self.spec_force_f = zeros3.clone()  # filtered specific force, world (m/s^2)
        self.thrust_f = torch.zeros(batch_shape, device=dev)  # filtered collective thrust (N)
        self.torque_f = zeros3.clone()  # filtered rotor torque, body (N m)
        self.ang_acc_f = zeros3.clone()  # filtered angular acceleration, body (rad/s^2)
        self.prev_vel = zeros3.clone()
        self.prev_ang_vel = zeros3.clone()
        self.yaw_ref = torch.zeros(batch_shape, device=dev)

    def reset(
        self,
        env_ids: Tensor,
        vel: Tensor,
        ang_vel: Tensor,
        quat: Tensor,
        thrust: Tensor,
        torque: Tensor,
        external_force: Tensor | None = None,
        mass: Tensor | float | None = None,
    ) -> None:
        """Initialise the memory of batch rows ``env_ids [k]`` to a steady state.

        Args are the rows' current state (``[k, ..., 3]``/``[k, ..., 4]``), the actuator wrench
        (``thrust [k, ...]``, ``torque [k, ..., 3]``) and an optional known external force
        ``[k, ..., 3]`` (a taut cable at reset). The filters start at that wrench with the matching
        specific force ``(R T e_z + F_ext) / m``; the yaw reference at the current heading. ``mass``: the
        rows' true mass (``[k, ..., 1]``; default the model's), for vehicles heavier or lighter than nominal.
        """
        z_b = quat_rotate(quat, torch.tensor((0.0, 0.0, 1.0), device=quat.device).expand_as(vel))
        m = self.model.mass if mass is None else mass
        spec_force = z_b * (thrust.unsqueeze(-1) / m)
        if external_force is not None:
            spec_force = spec_force + external_force / m
        self.spec_force_f[env_ids] = spec_force
        self.thrust_f[env_ids] = thrust
        self.torque_f[env_ids] = torque
        self.ang_acc_f[env_ids] = 0.0
        self.prev_vel[env_ids] = vel
        self.prev_ang_vel[env_ids] = ang_vel
        self.yaw_ref[env_ids] = quat_yaw(quat)

    def __call__(
        self,
        acc_cmd: Tensor,
        rate_ff: Tensor,
        quat: Tensor,
        vel: Tensor,
        ang_vel: Tensor,
        rotor_speed: Tensor,
        thrust_scale: Tensor | float = 1.0,
    ) -> Tensor:
        """Rotor speed commands ``[..., R]`` (rad/s).

        Args:
            acc_cmd: ``[..., 3]`` commanded linear acceleration, world frame (m/s^2); zero = keep velocity.
            rate_ff: ``[..., 2]`` roll/pitch body-rate feed-forward (rad/s).
            quat, vel, ang_vel: ``[..., 4]``, ``[..., 3]`` (world), ``[..., 3]`` (body) measured state.
            rotor_speed: ``[..., R]`` measured rotor speeds (rad/s).
            thrust_scale: the vehicle's thrust-coefficient scale as the controller believes it.
        """
        a = self.alpha
        mass = self.model.mass
        # Measurements, differentiated over one controller period and low-passed.
        spec_force = (vel - self.prev_vel) / self.dt - self.gravity
        ang_acc = (ang_vel - self.prev_ang_vel) / self.dt
        self.prev_vel, self.prev_ang_vel = vel, ang_vel
        thrust, torque = self.model.body_wrench(rotor_speed, thrust_scale)
        self.spec_force_f = self.spec_force_f + a * (spec_force - self.spec_force_f)
        self.ang_acc_f = self.ang_acc_f + a * (ang_acc - self.ang_acc_f)
        self.thrust_f = self.thrust_f + a * (thrust - self.thrust_f)
        self.torque_f = self.torque_f + a * (torque - self.torque_f)

        # Outer loop: incremental thrust vector.
        e_z = torch.zeros_like(vel)
        e_z[..., 2] = 1.0
        z_b = quat_rotate(quat, e_z)
        f_des = z_b * self.thrust_f.unsqueeze(-1) + mass * (acc_cmd - self.gravity - self.spec_force_f)
        thrust_cmd = (f_des * z_b).sum(-1).clamp(min=0.0)
        z_des = f_des / torch.linalg.vector_norm(f_des, dim=-1, keepdim=True).clamp(min=1e-6)
        z_des = self._limit_tilt(z_des)

        # Attitude: tilt error as a body-frame rotation vector, plus the policy's feed-forward.
        tilt_err = quat_rotate_inv(quat, torch.linalg.cross(z_b, z_des, dim=-1))
        yaw_err = torch.remainder(self.yaw_ref - quat_yaw(quat) + math.pi, 2 * math.pi) - math.pi
        rate_cmd = torch.cat(
            (self.gains.attitude * tilt_err[..., :2] + rate_ff, (self.gains.yaw * yaw_err).unsqueeze(-1)), dim=-1
        )

        # Inner loop: incremental torque.
        inertia = self.model.inertia
        torque_cmd = self.torque_f + inertia * (self.k_rate * (rate_cmd - ang_vel) - self.ang_acc_f)
        return self.model.wrench_to_speed_cmd(thrust_cmd, torque_cmd, thrust_scale)

    def _limit_tilt(self, z_des: Tensor) -> Tensor:
        """Keep the desired thrust axis inside a cone of ``max_tilt_deg`` about world z."""
        cos_tilt = z_des[..., 2:]
        horiz = z_des[..., :2]
        horiz_norm = torch.linalg.vector_norm(horiz, dim=-1, keepdim=True).clamp(min=1e-9)
        sin_max = math.sqrt(1 - self.cos_max_tilt**2)
        limited = torch.cat((horiz / horiz_norm * sin_max, torch.full_like(cos_tilt, self.cos_max_tilt)), dim=-1)
        return torch.where(cos_tilt < self.cos_max_tilt, limited, z_des)
