"""Body-rate PID controller: collective thrust + body rates (CTBR) -> rotor speed commands.

    e     = omega_cmd - omega
    tau   = J (Kp e + Ki int(e) - Kd domega/dt) + omega x J omega
    rotor = allocation^-1 [T_cmd, tau]

Used by tasks whose action is CTBR (volleyball) and by tests as a reference inner loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from sim.physics.multirotor import MultirotorModel


@dataclass(frozen=True)
class RatePIDGains:
    """Per-axis gains on the body-rate error (roll, pitch, yaw), in 1/s, 1/s^2 and dimensionless."""

    kp: tuple[float, float, float] = (20.0, 20.0, 8.0)
    ki: tuple[float, float, float] = (5.0, 5.0, 2.0)
    kd: tuple[float, float, float] = (0.05, 0.05, 0.0)
    integral_limit: float = 2.0  # rad


class RatePIDController:
    """Batched body-rate PID; state shapes ``[..., 3]`` over any batch ``[...]``."""

    def __init__(self, model: MultirotorModel, batch_shape: tuple[int, ...], gains: RatePIDGains | None = None) -> None:
        self.model = model
        gains = gains or RatePIDGains()
        dev = model.device
        self.kp = torch.tensor(gains.kp, device=dev)
        self.ki = torch.tensor(gains.ki, device=dev)
        self.kd = torch.tensor(gains.kd, device=dev)
        self.integral_limit = gains.integral_limit
        self.integral = torch.zeros(*batch_shape, 3, device=dev)
        self.prev_rate = torch.zeros(*batch_shape, 3, device=dev)

    def reset(self, rows: Tensor | None = None) -> None:
        """Zero the controller memory of the indices ``rows [k]`` of the leading axis (e.g. envs that reset;
        every row if None)."""
        if rows is None:
            self.integral.zero_()
            self.prev_rate.zero_()
        else:
            self.integral[rows] = 0.0
            self.prev_rate[rows] = 0.0

    def __call__(self, thrust_cmd: Tensor, rate_cmd: Tensor, ang_vel: Tensor, dt: float) -> Tensor:
        """Rotor speed commands ``[..., R]`` (rad/s).

        Args:
            thrust_cmd: ``[...]`` collective thrust (N).
            rate_cmd: ``[..., 3]`` desired body rates (rad/s).
            ang_vel: ``[..., 3]`` measured body rates (rad/s).
        """
        err = rate_cmd - ang_vel
        self.integral = (self.integral + err * dt).clamp(-self.integral_limit, self.integral_limit)
        rate_dot = (ang_vel - self.prev_rate) / dt
        self.prev_rate = ang_vel
        inertia = self.model.inertia
        ang_acc_cmd = self.kp * err + self.ki * self.integral - self.kd * rate_dot
        torque = inertia * ang_acc_cmd + torch.linalg.cross(ang_vel, inertia * ang_vel, dim=-1)
        return self.model.wrench_to_speed_cmd(thrust_cmd, torque)
