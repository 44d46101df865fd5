"""The bare controlled multirotor step per core, next to a roofline estimate of this machine.

    python benchmarks/multirotor_step.py                 # 65,536 drones, eager and compiled, 1 thread
    python benchmarks/multirotor_step.py --drones 4096 --steps 20 --no-compile   # smoke test

One drone-substep is what every multirotor task runs per physics step: the body-rate PID
(``sim.physics.controllers.RatePIDController``) turning a collective thrust and body-rate command
into rotor speed commands, the first-order motor lag, rotor thrusts and the body wrench, linear
drag, a semi-implicit Newton-Euler step with quaternion attitude, and ground contact. The drones
are iris quadrotors hovering with small random rate commands; everything is ``[drones, ...]``.

Measured on one thread (``torch.set_num_threads(1)``): drone-substeps per second per core, eager
and ``torch.compile``d. Beside it, the work of one substep counted from the eager op trace (a
``TorchDispatchMode`` over one step):

- flops: one per output element of each pointwise op (two for multiply-adds such as ``addcmul``,
  three per component for ``linalg_cross``; a transcendental counts one, so this is a lower bound),
  input elements for reductions, ``2 m n k`` for matrix products;
- bytes: what each eager op reads and writes (unfused traffic), and the fused minimum: the state and
  the command read once, the state written once.

The machine's peak on one core, measured in the same run: float32 multiply-add throughput (eight
independent compiled chains of 32 multiply-adds per element on an in-cache tensor) and copy
bandwidth (a 256 MB tensor). The roofline is ``min(peak flop/s / flops, bandwidth / fused bytes)`` drone-substeps/s,
and the table says what fraction of it each variant reaches.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections import defaultdict

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from sim.physics.components import VECTORISED_LOOP
from sim.physics.contact import ground_contact
from sim.physics.controllers import RatePIDController
from sim.physics.multirotor import MultirotorModel, MultirotorParams
from sim.physics.quaternion import quat_rotate
from sim.physics.rigid_body import GRAVITY, RigidBodyState, rigid_body_step

DT = 1.0 / 200.0  # drone_volleyball's physics rate
MULTIPLY_ADD = {"addcmul", "addcdiv", "lerp", "add", "sub"}  # add/sub count twice only with alpha != 1 (rare)
REDUCTIONS = {"sum", "mean", "amax", "amin", "max", "min", "prod", "norm", "linalg_vector_norm"}


class Drones:
    """A batch of hovering multirotors with their rate controller; :meth:`step` is one drone-substep."""

    def __init__(self, n: int, seed: int = 0) -> None:
        self.params = MultirotorParams.load("iris")
        self.model = MultirotorModel(self.params)
        gen = torch.Generator().manual_seed(seed)
        self.state = RigidBodyState(
            torch.rand(n, 3, generator=gen) * 10 + torch.tensor([0.0, 0.0, 1.0]),
            torch.tensor([1.0, 0.0, 0.0, 0.0]).repeat(n, 1),
            torch.zeros(n, 3),
            torch.zeros(n, 3),
        )
        hover = self.model.hover_speed(self.params.mass * GRAVITY)
        self.speed = torch.full((n, self.params.num_rotors), float(hover))
        self.decay = self.model.motor_decay(DT)
        self.pid = RatePIDController(self.model, (n,))
        self.thrust_cmd = torch.full((n,), self.params.mass * GRAVITY)
        self.rate_cmd = 0.1 * torch.randn(n, 3, generator=gen)

    def step(self) -> None:
        model, s = self.model, self.state
        cmd = self.pid(self.thrust_cmd, self.rate_cmd, s.ang_vel, DT)
        self.speed = model.motor_step(self.speed, cmd, DT, decay=self.decay)
        thrust, torque = model.body_wrench(self.speed)
        e_z = torch.zeros_like(s.vel)
        e_z[..., 2] = thrust
        force = quat_rotate(s.quat, e_z) + model.drag_force(s.quat, s.vel)
        self.state, _ = ground_contact(rigid_body_step(s, force, torque, model.mass, model.inertia, DT), radius=0.05)

    def fused_bytes(self) -> int:
        """Bytes per drone of the state and command read once and the state written once (float32)."""
        state = 3 + 4 + 3 + 3 + self.params.num_rotors + 3 + 3  # body, rotors, PID integral and last rate
        return 4 * (state + 1 + 3 + state)  # read state + thrust and rate command, write state


class ComponentMajorDrones:
    """The same drone-substep as :class:`Drones`, on component-major state: one ``[drones]`` tensor per vector
    component (``px, py, pz, ...``) instead of ``[drones, 3]`` rows.

    A layout study, not used by the tasks yet. With ``[..., 3]`` rows, every eager op loops over 3 or 4
    components inside and the compiled kernels vectorise over those instead of over the drones; here every op is a
    plain contiguous loop over the drones. The rotation matrix is built once per substep and serves the thrust
    direction and both drag rotations. :func:`max_state_difference` checks it against :class:`Drones`.
    """

    def __init__(self, ref: Drones) -> None:
        model, s, pid = ref.model, ref.state, ref.pid

        def split(t: torch.Tensor) -> list[torch.Tensor]:
            return [c.clone().contiguous() for c in t.unbind(-1)]

        self.pos, self.vel, self.quat, self.ang_vel = split(s.pos), split(s.vel), split(s.quat), split(s.ang_vel)
        self.speed = split(ref.speed)
        self.integral, self.prev_rate = split(pid.integral), split(pid.prev_rate)
        self.rate_cmd, self.thrust_cmd = split(ref.rate_cmd), ref.thrust_cmd.clone()
        self.inertia = model.inertia.tolist()
        self.kp, self.ki, self.kd = pid.kp.tolist(), pid.ki.tolist(), pid.kd.tolist()
        self.integral_limit = float(pid.integral_limit)
        self.allocation, self.allocation_pinv = model.allocation.tolist(), model.allocation_pinv.tolist()
        self.thrust_range = (model.rotor_thrust_min, model.rotor_thrust_max)
        self.speed_range = (model.params.rotor_speed_min, model.params.rotor_speed_max)
        self.k_f, self.mass, self.decay = model.k_f, model.mass, float(ref.decay)
        self.drag = model.drag_coeff.tolist()

    def state(self) -> RigidBodyState:
        """The state as ``[drones, 3 | 4]`` rows (for comparisons, not on the hot path)."""
        rows = {k: torch.stack(getattr(self, k), -1) for k in ("pos", "quat", "vel", "ang_vel")}
        return RigidBodyState(**rows)

    def step(self) -> None:
        J, w = self.inertia, self.ang_vel
        # Body-rate PID -> torque (with the gyroscopic term) -> rotor speed commands through the allocation inverse.
        err = [c - x for c, x in zip(self.rate_cmd, w, strict=True)]
        lim = self.integral_limit
        integral = [(i + e * DT).clamp(-lim, lim) for i, e in zip(self.integral, err, strict=True)]
        acc = [
            self.kp[k] * err[k] + self.ki[k] * integral[k] - self.kd[k] * (w[k] - self.prev_rate[k]) / DT
            for k in range(3)
        ]
        self.integral, self.prev_rate = integral, w
        gyro = _gyro(w, J)
        wrench = (self.thrust_cmd, *(J[k] * acc[k] + gyro[k] for k in range(3)))
        speed = []
        for r, old in enumerate(self.speed):
            rotor = sum(self.allocation_pinv[r][j] * wrench[j] for j in range(4)).clamp(*self.thrust_range)
            cmd = torch.sqrt(rotor / self.k_f).clamp(*self.speed_range)  # the motor lag's clipped command
            speed.append(cmd + (old - cmd) * self.decay)
        self.speed = speed
        f = [self.k_f * s * s for s in speed]
        thrust, *torque = (sum(row[r] * f[r] for r in range(len(f))) for row in self.allocation)
        # One rotation matrix for the thrust direction and the drag's two rotations.
        qw, qx, qy, qz = self.quat
        R = (
            (1 - 2 * (qy * qy + qz * qz), 2 * (qx * qy - qw * qz), 2 * (qx * qz + qw * qy)),
            (2 * (qx * qy + qw * qz), 1 - 2 * (qx * qx + qz * qz), 2 * (qy * qz - qw * qx)),
            (2 * (qx * qz - qw * qy), 2 * (qy * qz + qw * qx), 1 - 2 * (qx * qx + qy * qy)),
        )
        v = self.vel
        drag_body = [self.drag[j] * (R[0][j] * v[0] + R[1][j] * v[1] + R[2][j] * v[2]) for j in range(3)]
        force = [R[i][2] * thrust - (R[i][0] * drag_body[0] + R[i][1] * drag_body[1] + R[i][2] * drag_body[2])
                 for i in range(3)]  # fmt: skip
        # Semi-implicit Euler (rigid_body_step), then the exact quaternion exponential (quat_integrate).
        vel = [v[i] + DT * (force[i] / self.mass - (GRAVITY if i == 2 else 0.0)) for i in range(3)]
        ang_vel = [w[k] + DT * (torque[k] - gyro[k]) / J[k] for k in range(3)]
        pos = [p + DT * u for p, u in zip(self.pos, vel, strict=True)]
        rate = torch.sqrt(ang_vel[0] * ang_vel[0] + ang_vel[1] * ang_vel[1] + ang_vel[2] * ang_vel[2])
        half = 0.5 * rate * DT
        moving = rate > 1e-9
        scale = torch.where(moving, torch.sin(half) / torch.where(moving, rate, 1.0), 0.5 * DT)
        dw, (dx, dy, dz) = torch.cos(half), (a * scale for a in ang_vel)
        q = (
            qw * dw - qx * dx - qy * dy - qz * dz,
            qw * dx + qx * dw + qy * dz - qz * dy,
            qw * dy - qx * dz + qy * dw + qz * dx,
            qw * dz + qx * dy - qy * dx + qz * dw,
        )
        inv_norm = torch.rsqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3])
        self.quat = [c * inv_norm for c in q]
        # Ground contact as sim.physics.contact.ground_contact (radius 0.05, no bounce, friction 0.5).
        depth = 0.05 - pos[2]
        contact = depth > 0
        pos[2] = torch.where(contact, pos[2] + depth, pos[2])
        vel[2] = torch.where(contact & (vel[2] < 0), 0.0, vel[2])
        vel[:2] = [torch.where(contact, 0.5 * u, u) for u in vel[:2]]
        self.ang_vel = [torch.where(contact, 0.5 * a, a) for a in ang_vel]
        self.pos, self.vel = pos, vel


def _gyro(w: list[torch.Tensor], inertia: list[float]) -> tuple[torch.Tensor, ...]:
    """``w x (J w)`` by components."""
    jw = [inertia[k] * w[k] for k in range(3)]
    return (w[1] * jw[2] - w[2] * jw[1], w[2] * jw[0] - w[0] * jw[2], w[0] * jw[1] - w[1] * jw[0])


def max_state_difference(n: int = 1024, steps: int = 50) -> float:
    """Largest difference of position, velocity, attitude or rate between :class:`Drones` and
    :class:`ComponentMajorDrones` after ``steps`` substeps from the same state."""
    ref = Drones(n)
    soa = ComponentMajorDrones(ref)
    for _ in range(steps):
        ref.step()
        soa.step()
    got = soa.state()
    return max(float((getattr(ref.state, k) - getattr(got, k)).abs().max()) for k in ("pos", "vel", "quat", "ang_vel"))


class OpCounter(TorchDispatchMode):
    """Flops and bytes of every aten op run inside it (see the module docstring for the rules)."""

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0
        self.bytes = 0
        self.ops: dict[str, int] = defaultdict(int)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__.rstrip("_")
        ins = [a for a in args if isinstance(a, torch.Tensor)]
        outs = [o for o in (out if isinstance(out, tuple | list) else (out,)) if isinstance(o, torch.Tensor)]
        self.ops[name] += 1
        self.bytes += sum(t.numel() * t.element_size() for t in (*ins, *outs))
        out_elems = sum(o.numel() for o in outs)
        if name in ("mm", "bmm", "matmul"):
            a, b = ins[0], ins[1]
            self.flops += 2 * a.numel() * b.shape[-1]
        elif name in REDUCTIONS:
            self.flops += max((t.numel() for t in ins), default=0)
        elif name == "linalg_cross":
            self.flops += 3 * out_elems
        elif name in MULTIPLY_ADD and name in ("addcmul", "addcdiv", "lerp"):
            self.flops += 2 * out_elems
        elif outs and all(o.is_floating_point() for o in outs) and name not in ("copy", "clone", "zeros_like", "empty"):
            self.flops += out_elems
        return out


def peak_flops(n: int = 1 << 14, chain: int = 32, streams: int = 8, reps: int = 200) -> float:
    """Float32 flop/s of one core on an in-cache tensor: ``streams`` independent chains of ``chain``
    multiply-adds per element, compiled into one loop (independent chains hide the latency of each)."""

    def fma_chains(x: torch.Tensor) -> torch.Tensor:
        ys = [x * (1.0 + 1e-3 * i) for i in range(streams)]
        for _ in range(chain):
            ys = [y * 0.999 + 0.001 for y in ys]
        return sum(ys)

    f = torch.compile(fma_chains)
    x = torch.rand(n)
    f(x)
    best = math.inf
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            f(x)
        best = min(best, time.perf_counter() - t0)
    return (2 * chain + 2) * streams * n * reps / best


def peak_bandwidth(mbytes: int = 256, reps: int = 5) -> float:
    """Copy bandwidth of one core (bytes read + written per second)."""
    src = torch.rand(mbytes * (1 << 20) // 4)
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = math.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - t0)
    return 2 * src.numel() * 4 / best


def time_steps(n: int, step, steps: int, repeats: int) -> float:
    """Median drone-substeps/s of ``n`` drones over ``repeats`` runs of ``steps`` steps."""
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        rates.append(steps * n / (time.perf_counter() - t0))
    return statistics.median(rates)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--drones", type=int, default=65536)
    p.add_argument("--steps", type=int, default=50, help="timed steps per repeat")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--no-compile", action="store_true", help="eager only")
    args = p.parse_args(argv)
    torch.set_num_threads(1)

    drones = Drones(args.drones)
    drones.step()
    counter = OpCounter()
    with counter:
        drones.step()
    per = args.drones
    flops, unfused, fused = counter.flops / per, counter.bytes / per, drones.fused_bytes()
    print(f"drones={args.drones} threads=1 torch={torch.__version__}")
    print(
        f"one drone-substep: {sum(counter.ops.values())} eager ops, ~{flops:.0f} flops, "
        f"{unfused:.0f} bytes unfused, {fused} bytes fused minimum"
    )
    fps, bw = peak_flops(), peak_bandwidth()
    roof = min(fps / flops, bw / fused)
    bound = "compute" if fps / flops < bw / fused else "memory"
    print(f"machine, one core: {fps / 1e9:.1f} GFLOP/s float32 multiply-add, {bw / 1e9:.1f} GB/s copy")
    print(f"roofline: {roof / 1e6:.1f} M drone-substeps/s ({bound}-bound at the fused minimum)")

    soa = ComponentMajorDrones(drones)
    diff = max_state_difference()
    print(f"component-major step vs [drones, 3] rows, 50 substeps from the same state: max difference {diff:.1e}")
    rows = [
        ("eager", time_steps(args.drones, drones.step, args.steps, args.repeats)),
        ("component-major, eager", time_steps(args.drones, soa.step, args.steps, args.repeats)),
    ]
    if not args.no_compile:
        # "vectorised": inductor's CPU tiling heuristics off, as the envs compile their component-major loops.
        for name, step, options in (
            ("compiled", drones.step, None),
            ("compiled, vectorised", drones.step, VECTORISED_LOOP),
            ("component-major, compiled", soa.step, None),
            ("component-major, vectorised", soa.step, VECTORISED_LOOP),
        ):
            compiled = torch.compile(step, options=options)
            compiled()
            rows.append((name, time_steps(args.drones, compiled, args.steps, args.repeats)))
    print()
    print("variant                      drone-substeps/s per core   of roofline")
    for name, rate in rows:
        print(f"{name:<27}  {rate:>24,.0f}   {rate / roof:>10.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
