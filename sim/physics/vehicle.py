"""Vehicle models for driving tasks: the kinematic bicycle and the dynamic bicycle with linear tyres.

Batched over any leading shape ``[...]``, pure functions of the state, float32, any device.

Kinematic bicycle about the centre of gravity (CoG), slip angle ``beta = atan(lr / L * tan(steer))``::

    x' = v cos(yaw + beta),  y' = v sin(yaw + beta),  yaw' = v / lr * sin(beta),  v' = accel

Dynamic bicycle (body-frame ``vx, vy`` and yaw rate ``r``; Rajamani, "Vehicle Dynamics and Control", ch. 2)
with linear tyres ``F = C * alpha``::

    alpha_f = steer - atan2(vy + lf r, vx),   alpha_r = -atan2(vy - lr r, vx)
    vy' = (Cf alpha_f cos(steer) + Cr alpha_r) / m - vx r,   r' = (lf Cf alpha_f cos(steer) - lr Cr alpha_r) / Iz
    vx' = accel   (the powertrain tracks the commanded longitudinal acceleration)

Its steady state is the classic understeer result ``r = vx steer / (L + K vx^2)``,
``K = m / L * (lr / Cf - lf / Cr)``. The tyre terms are stiff at low speed (time constant ~ m vx / C), so the
step substeps at ``max_substep_s`` and blends into the kinematic model below ``blend_speed``, where the
dynamic one is singular (vx -> 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from sim.core.config import positive


@dataclass(frozen=True)
class VehicleParams:
    """A mid-size car (SI units)."""

    length: float = positive(4.5)
    width: float = positive(1.9)
    wheelbase: float = positive(2.7)
    lf: float = positive(1.2)  # CoG to the front axle
    mass: float = positive(1500.0)
    yaw_inertia: float = positive(2250.0)
    cornering_stiffness_front: float = positive(80000.0)  # N/rad
    cornering_stiffness_rear: float = positive(80000.0)
    max_steer: float = positive(0.6)  # rad
    max_accel: float = positive(3.0)  # m/s^2
    max_brake: float = positive(6.0)
    max_speed: float = positive(30.0)  # m/s
    blend_speed: float = positive(1.0)  # m/s: below, the dynamic model hands over to the kinematic one
    max_substep_s: float = positive(0.005)  # dynamic model integration step (stiff tyres at low speed)

    @property
    def lr(self) -> float:
        return self.wheelbase - self.lf

    @property
    def understeer_gradient(self) -> float:
        """``K`` in ``r = v steer / (L + K v^2)`` (rad s^2/m); > 0 understeers."""
        cf, cr = self.cornering_stiffness_front, self.cornering_stiffness_rear
        return self.mass / self.wheelbase * (self.lr / cf - self.lf / cr)


def _limits(steer: Tensor, accel: Tensor, p: VehicleParams) -> tuple[Tensor, Tensor]:
    return steer.clamp(-p.max_steer, p.max_steer), accel.clamp(-p.max_brake, p.max_accel)


def kinematic_bicycle_step(
    x: Tensor, y: Tensor, yaw: Tensor, v: Tensor, steer: Tensor, accel: Tensor, dt: float, p: VehicleParams
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """One step of the kinematic bicycle (module docstring); all ``[...]``, speed clamped to ``[0, max_speed]``.

    Integrated exactly along the arc the CoG follows at this step's speed (constant speed and
    steering over the step: a circle of radius ``lr / sin(beta)``), so a long step does not spiral
    outwards the way explicit Euler does (the path is exact for any ``dt`` while the inputs are held). The
    arc is driven at the step's starting speed and the speed is updated afterwards (explicit in ``v``:
    the distance differs from constant acceleration by ``accel dt^2 / 2`` per step, and speed limits stay exact).
    """
    steer, accel = _limits(steer, accel, p)
    beta = torch.atan(p.lr / p.wheelbase * torch.tan(steer))
    yaw_rate = v / p.lr * torch.sin(beta)
    dyaw = yaw_rate * dt
    heading = yaw + beta
    # Chord of the arc: length v dt * sinc(dyaw / 2), along the mean heading.
    half = 0.5 * dyaw
    sinc = torch.where(half.abs() > 1e-6, torch.sin(half) / half.where(half.abs() > 1e-6, 1.0), 1.0 - half**2 / 6)
    chord = v * dt * sinc
    x = x + chord * torch.cos(heading + half)
    y = y + chord * torch.sin(heading + half)
    yaw = yaw + dyaw
    v = (v + accel * dt).clamp(0.0, p.max_speed)
    return x, y, yaw, v


def dynamic_bicycle_step(state: Tensor, steer: Tensor, accel: Tensor, dt: float, p: VehicleParams) -> Tensor:
    """One step of the dynamic bicycle: ``state [..., 6] = (x, y, yaw, vx, vy, yaw_rate)`` -> the same.

    ``ceil(dt / max_substep_s)`` semi-implicit Euler substeps; below ``blend_speed`` the lateral
    states are pulled onto the kinematic model's (``vy = vx tan(beta)``, ``r = vx tan(beta) / lr``),
    fully at rest, linearly up to ``blend_speed``.
    """
    steer, accel = _limits(steer, accel, p)
    n = max(1, math.ceil(dt / p.max_substep_s))
    h = dt / n
    x, y, yaw, vx, vy, r = state.unbind(-1)
    cf, cr, m, iz = p.cornering_stiffness_front, p.cornering_stiffness_rear, p.mass, p.yaw_inertia
    cos_s = torch.cos(steer)
    tan_beta = p.lr / p.wheelbase * torch.tan(steer)
    for _ in range(n):
        vx = (vx + accel * h).clamp(0.0, p.max_speed)
        safe_vx = vx.clamp(min=p.blend_speed)
        alpha_f = steer - torch.atan2(vy + p.lf * r, safe_vx)
        alpha_r = -torch.atan2(vy - p.lr * r, safe_vx)
        fy_f, fy_r = cf * alpha_f, cr * alpha_r
        vy_dyn = vy + h * ((fy_f * cos_s + fy_r) / m - vx * r)
        r_dyn = r + h * (p.lf * fy_f * cos_s - p.lr * fy_r) / iz
        w = (vx / p.blend_speed).clamp(0.0, 1.0)  # 1: dynamic, 0: kinematic
        vy = w * vy_dyn + (1 - w) * vx * tan_beta
        r = w * r_dyn + (1 - w) * vx * tan_beta / p.lr
        yaw = yaw + h * r
        c, s = torch.cos(yaw), torch.sin(yaw)
        x = x + h * (vx * c - vy * s)
        y = y + h * (vx * s + vy * c)
    return torch.stack((x, y, yaw, vx, vy, r), -1)
