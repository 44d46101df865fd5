"""Multirotor model: rotor thrust and drag torque, first-order motor lag, allocation, drag.

Per rotor ``i`` with speed ``Omega_i`` (rad/s):
    thrust  T_i = k_f Omega_i^2                 along body +z
    torque  Q_i = -s_i k_m Omega_i^2            about body z (reaction; s_i = +1 for a CCW rotor)
    motor   dOmega_i/dt = (Omega_cmd_i - Omega_i) / tau_m,   Omega_cmd clipped to motor limits
Body wrench: ``F_b = (0, 0, sum T_i)``, ``tau_b = sum r_i x (0, 0, T_i) + sum Q_i e_z``.
Aerodynamic drag: ``F_drag = -R diag(d) R^T v`` (linear, body-frame coefficients).

Parameter sets live in ``assets/multirotors/<name>.yaml``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml
from torch import Tensor

from sim.physics.quaternion import quat_rotate, quat_rotate_inv

ASSET_DIR = Path(__file__).resolve().parents[2] / "assets" / "multirotors"


@dataclass(frozen=True)
class MultirotorParams:
    """Physical constants of one multirotor type (SI units)."""

    name: str
    mass: float
    inertia: tuple[float, float, float]
    arm_length: float
    rotor_angles_deg: tuple[float, ...]
    rotor_spin: tuple[int, ...]
    thrust_coeff: float
    torque_coeff: float
    motor_time_constant: float
    rotor_speed_min: float
    rotor_speed_max: float
    drag_coeff: tuple[float, float, float]
    collision_radius: float
    cable_attach: tuple[float, float, float]

    @classmethod
    def load(cls, name: str) -> MultirotorParams:
        """Read ``assets/multirotors/<name>.yaml``; unknown or missing keys are errors."""
        path = ASSET_DIR / f"{name}.yaml"
        if not path.is_file():
            known = sorted(p.stem for p in ASSET_DIR.glob("*.yaml"))
            raise ValueError(f"unknown multirotor {name!r}; known: {known}")
        data = yaml.safe_load(path.read_text())
        fields = set(cls.__dataclass_fields__)
        if set(data) != fields:
            raise ValueError(
                f"{path}: unexpected keys {sorted(set(data) - fields)}, missing {sorted(fields - set(data))}"
            )
        for key, val in data.items():
            if isinstance(val, list):
                data[key] = tuple(val)
        if len(data["rotor_angles_deg"]) != len(data["rotor_spin"]):
            raise ValueError(f"{path}: rotor_angles_deg and rotor_spin differ in length")
        return cls(**data)

    @property
    def num_rotors(self) -> int:
        return len(self.rotor_spin)

    @property
    def max_thrust(self) -> float:
        """Total thrust at full rotor speed (N)."""
        return self.num_rotors * self.thrust_coeff * self.rotor_speed_max**2

    def rotor_positions(self) -> list[tuple[float, float, float]]:
        """Rotor hub positions in the body frame (m)."""
        return [
            (self.arm_length * math.cos(math.radians(a)), self.arm_length * math.sin(math.radians(a)), 0.0)
            for a in self.rotor_angles_deg
        ]


class MultirotorModel:
    """Tensor constants of a :class:`MultirotorParams` on a device, and the rotor maths.

    Per-instance randomisation enters as multiplicative scales (``thrust_scale [..., 1]``), so one
    model serves a whole batch of slightly different vehicles.
    """

    def __init__(self, params: MultirotorParams, device: torch.device | str = "cpu") -> None:
        self.params = params
        self.device = torch.device(device)
        f32 = dict(dtype=torch.float32, device=self.device)
        self.mass = params.mass
        self.inertia = torch.tensor(params.inertia, **f32)
        self.rotor_pos = torch.tensor(params.rotor_positions(), **f32)  # [R, 3]
        self.rotor_spin = torch.tensor(params.rotor_spin, **f32)  # [R]
        self.drag_coeff = torch.tensor(params.drag_coeff, **f32)
        self.cable_attach = torch.tensor(params.cable_attach, **f32)
        self.k_f = params.thrust_coeff
        self.k_m = params.torque_coeff
        # Allocation: [T, tau_x, tau_y, tau_z] = A @ rotor_thrusts, A [4, R].
        ratio = params.torque_coeff / params.thrust_coeff
        self.allocation = torch.stack(
            (
                torch.ones_like(self.rotor_spin),
                self.rotor_pos[:, 1],
                -self.rotor_pos[:, 0],
                -self.rotor_spin * ratio,
            )
        )
        self.allocation_pinv = torch.linalg.pinv(self.allocation)  # [R, 4]
        self.rotor_thrust_max = params.thrust_coeff * params.rotor_speed_max**2
        self.rotor_thrust_min = params.thrust_coeff * params.rotor_speed_min**2

    def motor_decay(self, dt: float, tau_scale: Tensor | float = 1.0) -> Tensor:
        """Per-step decay factor ``exp(-dt / tau)`` of the motor lag (constant within an episode)."""
        return torch.exp(torch.as_tensor(-dt / (self.params.motor_time_constant * tau_scale), device=self.device))

    def motor_step(
        self,
        speed: Tensor,
        speed_cmd: Tensor,
        dt: float,
        tau_scale: Tensor | float = 1.0,
        decay: Tensor | None = None,
    ) -> Tensor:
        """Exact discretisation of the first-order motor lag, ``[..., R]`` rad/s.

        ``Omega+ = Omega_c + (Omega - Omega_c) exp(-dt / tau)`` with ``Omega_c`` clipped to limits.
        ``decay`` (from :meth:`motor_decay`) skips recomputing the exponential on the hot path.
        """
        cmd = speed_cmd.clamp(self.params.rotor_speed_min, self.params.rotor_speed_max)
        if decay is None:
            decay = self.motor_decay(dt, tau_scale)
        return cmd + (speed - cmd) * decay

    def rotor_thrusts(self, speed: Tensor, thrust_scale: Tensor | float = 1.0) -> Tensor:
        """Per-rotor thrust ``k_f Omega^2``, ``[..., R]`` (N)."""
        return self.k_f * thrust_scale * speed.square()

    def body_wrench(self, speed: Tensor, thrust_scale: Tensor | float = 1.0) -> tuple[Tensor, Tensor]:
        """Collective thrust ``[...]`` (N) and body torque ``[..., 3]`` (N m) from rotor speeds."""
        # Broadcast-multiply-sum instead of a matmul: inductor fuses it with the surrounding ops.
        wrench = (self.rotor_thrusts(speed, thrust_scale).unsqueeze(-2) * self.allocation).sum(-1)  # [..., 4]
        return wrench[..., 0], wrench[..., 1:]

    def wrench_to_speed_cmd(self, thrust: Tensor, torque: Tensor, thrust_scale: Tensor | float = 1.0) -> Tensor:
        """Rotor speed commands ``[..., R]`` realising a collective thrust ``[...]`` and torque ``[..., 3]``.

        Inverts the allocation (least squares for R != 4), clips each rotor to its thrust range.
        """
        wrench = torch.cat((thrust.unsqueeze(-1), torque), dim=-1)
        rotor = (wrench.unsqueeze(-2) * self.allocation_pinv).sum(-1)
        rotor = rotor.clamp(self.rotor_thrust_min, self.rotor_thrust_max)
        return torch.sqrt(rotor / (self.k_f * thrust_scale))

    def hover_speed(self, thrust: float | Tensor) -> Tensor | float:
        """Equal rotor speed giving a collective thrust (N)."""
        per_rotor = thrust / self.params.num_rotors
        if isinstance(per_rotor, Tensor):
            return torch.sqrt(per_rotor / self.k_f)
        return math.sqrt(per_rotor / self.k_f)

    def drag_force(self, quat: Tensor, vel: Tensor) -> Tensor:
        """Linear aerodynamic drag in the world frame, ``[..., 3]`` (N)."""
        return -quat_rotate(quat, self.drag_coeff * quat_rotate_inv(quat, vel))
