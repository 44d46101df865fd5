"""NVIDIA Warp against the C kernel on cable_load's control loop: is one Warp source as fast as C on a CPU?

    python benchmarks/warp_vs_c.py                       # 1024 and 4096 envs, 3 MAVs, 1 thread
    python benchmarks/warp_vs_c.py --num-envs 64 --repeats 1 --calls 1   # a quick check (seconds + Warp's compile)

The C kernel is ``cable_load_control_loop`` (sim/tasks/cable_load/control_loop.c, called by
``sim.tasks.cable_load.native.NativeControlLoop``): ``decimation`` control steps, each an INDI tick per MAV and
``physics_substeps`` physics steps (motors, rotor wrench, cables, drag, Newton-Euler for the MAVs and the load, ground
contact). :func:`control_loop` below is the same computation as ONE ``@wp.kernel`` (one Warp thread per env, the MAVs
in a loop inside it), with the same inputs and outputs, launched on ``--device`` ("cpu"; "cuda" where Warp finds a
GPU). The torch reference is ``CableLoadEnv._control_loop`` (eager, the env's layout: components from 1024 envs).

For each env count: an env (``sim.make("cable_load", kernels="native")``, seed 0) is reset and stepped a few
times with random actions (a mid-flight state: INDI memory filled, rotors spun up), then that state is the input of
every call. Parity: each backend's outputs against the C kernel's (max abs difference over the 17 outputs, and the
largest of (max abs difference / max |value|) per output; the lost-MAV flags must be equal). Timing: ``--repeats``
rounds of ``--calls`` turns, each turn one call of every backend (the order rotating, the state restored before
each call, outside the timing); a backend's figure is the median over the rounds of its per-round median, of the
call's CPU time (this thread's: ``time.thread_time``) and of its wall time. One thread everywhere
(``torch.set_num_threads(1)``, which the C kernel's OpenMP loop follows; Warp's CPU backend runs a launch's threads
one after another on the calling thread), so the CPU time is the whole cost; on a shared machine it holds where the
wall time does not (a call longer than the scheduler's slice waits for the other processes' share, a short one
seldom: the wall time inflates the slower backends most). The ratios use the CPU time; the wall time and the best
wall time are printed beside it.

Rows: "warp" is a call end to end as the env would pay it (new output tensors, ``wp.from_torch`` on the ~50
arrays, the launch), as "c" is (new tensors, ctypes pointers, the kernel; the widest build this CPU runs, AVX-512
on the reference machine: 16 envs a vector); "warp kernel only" replays one recorded launch (arrays wrapped once);
"c sse" is the same C file without AVX (``isa="generic"``: SSE, 4 envs a vector; its sin/cos/atan2 are libm's, as
Warp's: on the reference machine its outputs equal Warp's bit for bit); "torch" is the reference, eager.

Warp compiles a kernel at its first launch (C++ through its bundled Clang/LLVM on a CPU, NVRTC on a GPU) and caches
the binary by source hash: the compile is timed separately, into an empty cache directory (what a first run pays),
and so is loading the cached binary (what every later process pays).

The last printed line is ``warp_over_c_4096=<float>`` (Warp / C, end to end, CPU time medians, at the largest env
count; ``warp_over_torch_...`` with wall times on a GPU).
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sim  # noqa: E402
from sim.core import native  # noqa: E402
from sim.tasks.cable_load.env import CableLoadEnv  # noqa: E402
from sim.tasks.cable_load.native import SOURCES, NativeControlLoop, loop_state, set_loop_state  # noqa: E402

try:
    import warp as wp
except ImportError as err:  # the optional extra: pip install warp-lang (or covey[warp])
    sys.exit(f"warp_vs_c.py needs NVIDIA Warp: pip install warp-lang ({err})")

GROUP = "mavs"
# The loop's outputs, in control_loop.c's enum OUT order, as env attribute paths (then "failed").
OUTPUTS = (
    "drones.pos", "drones.quat", "drones.vel", "drones.ang_vel", "load.pos", "load.quat", "load.vel",
    "load.ang_vel", "rotor_speed", "cable_tension", "indi.spec_force_f", "indi.thrust_f", "indi.torque_f",
    "indi.ang_acc_f", "indi.prev_vel", "indi.prev_ang_vel", "time",
)  # fmt: skip
PI = 3.14159265358979323846


# ----------------------------------------------------------------- the Warp kernel (control_loop.c's computation)
@wp.func
def q2m(q: wp.vec4) -> wp.mat33:
    """components.quat_to_matrix, quaternion (w, x, y, z)."""
    w, x, y, z = q[0], q[1], q[2], q[3]
    xx, yy, zz, xy, xz, yz = x * x, y * y, z * z, x * y, x * z, y * z
    wx, wy, wz = w * x, w * y, w * z
    return wp.mat33(
        1.0 - 2.0 * (yy + zz), 2.0 * (xy - wz), 2.0 * (xz + wy),
        2.0 * (xy + wz), 1.0 - 2.0 * (xx + zz), 2.0 * (yz - wx),
        2.0 * (xz - wy), 2.0 * (yz + wx), 1.0 - 2.0 * (xx + yy),
    )  # fmt: skip


@wp.func
def rot(m: wp.mat33, v: wp.vec3) -> wp.vec3:
    return wp.vec3(
        m[0, 0] * v[0] + m[0, 1] * v[1] + m[0, 2] * v[2],
        m[1, 0] * v[0] + m[1, 1] * v[1] + m[1, 2] * v[2],
        m[2, 0] * v[0] + m[2, 1] * v[1] + m[2, 2] * v[2],
    )


@wp.func
def rot_inv(m: wp.mat33, v: wp.vec3) -> wp.vec3:
    return wp.vec3(
        m[0, 0] * v[0] + m[1, 0] * v[1] + m[2, 0] * v[2],
        m[0, 1] * v[0] + m[1, 1] * v[1] + m[2, 1] * v[2],
        m[0, 2] * v[0] + m[1, 2] * v[1] + m[2, 2] * v[2],
    )


@wp.func
def cross(a: wp.vec3, b: wp.vec3) -> wp.vec3:
    return wp.vec3(a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0])


@wp.func
def norm(a: wp.vec3) -> float:
    return wp.sqrt(a[0] * a[0] + a[1] * a[1] + a[2] * a[2])


@wp.func
def quat_integrate(q: wp.vec4, w: wp.vec3, dt: float) -> wp.vec4:
    """components.quat_integrate."""
    rate = norm(w)
    half = 0.5 * rate * dt
    scale = wp.where(rate > 1.0e-9, wp.sin(half) / rate, 0.5 * dt)
    d0, d1, d2, d3 = wp.cos(half), w[0] * scale, w[1] * scale, w[2] * scale
    o0 = q[0] * d0 - q[1] * d1 - q[2] * d2 - q[3] * d3
    o1 = q[0] * d1 + q[1] * d0 + q[2] * d3 - q[3] * d2
    o2 = q[0] * d2 - q[1] * d3 + q[2] * d0 + q[3] * d1
    o3 = q[0] * d3 + q[1] * d2 - q[2] * d1 + q[3] * d0
    n = wp.sqrt(o0 * o0 + o1 * o1 + o2 * o2 + o3 * o3)
    return wp.vec4(o0 / n, o1 / n, o2 / n, o3 / n)


@wp.func
def ld3(a: wp.array(dtype=float), i: int) -> wp.vec3:
    return wp.vec3(a[i], a[i + 1], a[i + 2])


@wp.func
def st3(a: wp.array(dtype=float), i: int, v: wp.vec3):
    a[i] = v[0]
    a[i + 1] = v[1]
    a[i + 2] = v[2]


@wp.func
def ld4(a: wp.array(dtype=float), i: int) -> wp.vec4:
    return wp.vec4(a[i], a[i + 1], a[i + 2], a[i + 3])


@wp.func
def st4(a: wp.array(dtype=float), i: int, v: wp.vec4):
    a[i] = v[0]
    a[i + 1] = v[1]
    a[i + 2] = v[2]
    a[i + 3] = v[3]


@wp.func
def body_step(
    pos_a: wp.array(dtype=float),
    quat_a: wp.array(dtype=float),
    vel_a: wp.array(dtype=float),
    w_a: wp.array(dtype=float),
    i3: int,
    i4: int,
    force: wp.vec3,
    torque: wp.vec3,
    mass: float,
    inertia: wp.vec3,
    dt: float,
    g: float,
    radius: float,
    friction: float,
):
    """components.rigid_body_step then components.ground_contact (restitution 0), on the body at (i3, i4)."""
    w = ld3(w_a, i3)
    vel0 = ld3(vel_a, i3)
    pos0 = ld3(pos_a, i3)
    acc = wp.vec3(force[0] / mass, force[1] / mass, force[2] / mass - g)
    gyro = cross(w, wp.vec3(inertia[0] * w[0], inertia[1] * w[1], inertia[2] * w[2]))
    vx = vel0[0] + dt * acc[0]
    vy = vel0[1] + dt * acc[1]
    vz = vel0[2] + dt * acc[2]
    wx = w[0] + dt * ((torque[0] - gyro[0]) / inertia[0])
    wy = w[1] + dt * ((torque[1] - gyro[1]) / inertia[1])
    wz = w[2] + dt * ((torque[2] - gyro[2]) / inertia[2])
    px = pos0[0] + dt * vx
    py = pos0[1] + dt * vy
    pz = pos0[2] + dt * vz
    st4(quat_a, i4, quat_integrate(ld4(quat_a, i4), wp.vec3(wx, wy, wz), dt))
    depth = radius - pz
    hit = depth > 0.0
    keep = 1.0 - friction
    vz = wp.where(hit and vz < 0.0, -0.0 * vz, vz)
    st3(pos_a, i3, wp.vec3(px, py, wp.where(hit, pz + depth, pz)))
    st3(vel_a, i3, wp.vec3(wp.where(hit, vx * keep, vx), wp.where(hit, vy * keep, vy), vz))
    st3(w_a, i3, wp.vec3(wp.where(hit, wx * keep, wx), wp.where(hit, wy * keep, wy), wp.where(hit, wz * keep, wz)))


@wp.func
def copy(src: wp.array(dtype=float), dst: wp.array(dtype=float), start: int, count: int):
    for i in range(start, start + count):
        dst[i] = src[i]


@wp.kernel
def control_loop(
    N: int,
    R: int,
    # the state read (control_loop.c's inputs, flat float32 rows)
    dpos: wp.array(dtype=float),
    dquat: wp.array(dtype=float),
    dvel: wp.array(dtype=float),
    dw: wp.array(dtype=float),
    lpos: wp.array(dtype=float),
    lquat: wp.array(dtype=float),
    lvel: wp.array(dtype=float),
    lw: wp.array(dtype=float),
    rotor_speed: wp.array(dtype=float),
    tension_in: wp.array(dtype=float),
    spec_force_f: wp.array(dtype=float),
    thrust_f: wp.array(dtype=float),
    torque_f: wp.array(dtype=float),
    ang_acc_f: wp.array(dtype=float),
    prev_vel: wp.array(dtype=float),
    prev_w: wp.array(dtype=float),
    time_in: wp.array(dtype=float),
    # per-env and per-MAV inputs
    yaw_ref: wp.array(dtype=float),
    cmd: wp.array(dtype=float),
    decay: wp.array(dtype=float),
    thrust_scale: wp.array(dtype=float),
    mav_mass: wp.array(dtype=float),
    mav_inertia: wp.array(dtype=float),
    speed_max: wp.array(dtype=float),
    cable_length: wp.array(dtype=float),
    load_mass: wp.array(dtype=float),
    load_inertia: wp.array(dtype=float),
    attach: wp.array(dtype=float),
    fault_time: wp.array(dtype=float),
    fault_agent: wp.array(dtype=wp.int64),
    dist_amp: wp.array(dtype=float),
    dist_phase: wp.array(dtype=float),
    # constants (control_loop.c's C_* scalars)
    decimation: int,
    substeps: int,
    ctrl_dt: float,
    dt: float,
    g: float,
    g_c: wp.vec3,
    a: float,
    mass: float,
    inertia: wp.vec3,
    k_rate: wp.vec3,
    att_gain: float,
    yaw_gain: float,
    cos_tilt: float,
    sin_tilt: float,
    k_f: float,
    thrust_min: float,
    thrust_max: float,
    speed_lo: float,
    speed_hi: float,
    drag: wp.vec3,
    r_c: wp.vec3,
    stiffness: float,
    damping: float,
    released: int,
    dist_on: int,
    period: float,
    mav_radius: float,
    load_radius: float,
    friction: float,
    alloc: wp.array2d(dtype=float),  # [4, R]
    pinv: wp.array2d(dtype=float),  # [R, 4]
    # outputs: the advanced state (new arrays), the lost MAVs, and scratch for the speed commands [E, N, R]
    o_dpos: wp.array(dtype=float),
    o_dquat: wp.array(dtype=float),
    o_dvel: wp.array(dtype=float),
    o_dw: wp.array(dtype=float),
    o_lpos: wp.array(dtype=float),
    o_lquat: wp.array(dtype=float),
    o_lvel: wp.array(dtype=float),
    o_lw: wp.array(dtype=float),
    o_speed: wp.array(dtype=float),
    o_tension: wp.array(dtype=float),
    o_sf: wp.array(dtype=float),
    o_thr_f: wp.array(dtype=float),
    o_tq: wp.array(dtype=float),
    o_aa: wp.array(dtype=float),
    o_pv: wp.array(dtype=float),
    o_pw: wp.array(dtype=float),
    o_time: wp.array(dtype=float),
    failed: wp.array(dtype=wp.uint8),
    speed_cmd: wp.array(dtype=float),
):
    e = wp.tid()
    two_pi = 2.0 * wp.pi
    # The state this env advances, copied into the outputs, which hold it through the loop.
    copy(dpos, o_dpos, 3 * e * N, 3 * N)
    copy(dquat, o_dquat, 4 * e * N, 4 * N)
    copy(dvel, o_dvel, 3 * e * N, 3 * N)
    copy(dw, o_dw, 3 * e * N, 3 * N)
    copy(lpos, o_lpos, 3 * e, 3)
    copy(lquat, o_lquat, 4 * e, 4)
    copy(lvel, o_lvel, 3 * e, 3)
    copy(lw, o_lw, 3 * e, 3)
    copy(rotor_speed, o_speed, R * e * N, R * N)
    copy(tension_in, o_tension, e * N, N)
    copy(spec_force_f, o_sf, 3 * e * N, 3 * N)
    copy(thrust_f, o_thr_f, e * N, N)
    copy(torque_f, o_tq, 3 * e * N, 3 * N)
    copy(ang_acc_f, o_aa, 3 * e * N, 3 * N)
    copy(prev_vel, o_pv, 3 * e * N, 3 * N)
    copy(prev_w, o_pw, 3 * e * N, 3 * N)
    t = time_in[e]
    ftime = fault_time[e]
    fagent = int(fault_agent[e])
    lmass = load_mass[e]
    linert = ld3(load_inertia, 3 * e)

    for _c in range(decimation):
        # INDI tick per MAV, then the fault and the thrust limit.
        for n in range(N):
            en = e * N + n
            i3 = 3 * en
            m = q2m(ld4(o_dquat, 4 * en))
            thrust = wp.float32(0.0)
            torque = wp.vec3(0.0, 0.0, 0.0)
            for r in range(R):
                s = o_speed[R * en + r]
                f = k_f * (s * s)
                thrust = thrust + alloc[0, r] * f
                torque = wp.vec3(torque[0] + alloc[1, r] * f, torque[1] + alloc[2, r] * f, torque[2] + alloc[3, r] * f)
            vel = ld3(o_dvel, i3)
            w = ld3(o_dw, i3)
            for k in range(3):
                meas = (vel[k] - o_pv[i3 + k]) / ctrl_dt - g_c[k]
                o_sf[i3 + k] = o_sf[i3 + k] + a * (meas - o_sf[i3 + k])
                aw = (w[k] - o_pw[i3 + k]) / ctrl_dt
                o_aa[i3 + k] = o_aa[i3 + k] + a * (aw - o_aa[i3 + k])
                o_tq[i3 + k] = o_tq[i3 + k] + a * (torque[k] - o_tq[i3 + k])
                o_pv[i3 + k] = vel[k]
                o_pw[i3 + k] = w[k]
            thr = o_thr_f[en] + a * (thrust - o_thr_f[en])
            o_thr_f[en] = thr
            sf = ld3(o_sf, i3)
            z_b = wp.vec3(m[0, 2], m[1, 2], m[2, 2])
            c0 = 5 * en
            f_des = wp.vec3(
                z_b[0] * thr + mass * ((cmd[c0] - g_c[0]) - sf[0]),
                z_b[1] * thr + mass * ((cmd[c0 + 1] - g_c[1]) - sf[1]),
                z_b[2] * thr + mass * ((cmd[c0 + 2] - g_c[2]) - sf[2]),
            )
            thrust_cmd = wp.max(f_des[0] * z_b[0] + f_des[1] * z_b[1] + f_des[2] * z_b[2], 0.0)
            f_norm = wp.max(norm(f_des), 1.0e-6)
            zx, zy, zz = f_des[0] / f_norm, f_des[1] / f_norm, f_des[2] / f_norm
            tilted = zz < cos_tilt
            h = wp.max(wp.sqrt(zx * zx + zy * zy), 1.0e-9)
            z_des = wp.vec3(
                wp.where(tilted, zx / h * sin_tilt, zx),
                wp.where(tilted, zy / h * sin_tilt, zy),
                wp.where(tilted, cos_tilt, zz),
            )
            tilt = rot_inv(m, cross(z_b, z_des))
            yaw = wp.atan2(m[1, 0], m[0, 0])
            rem = wp.mod(yaw_ref[en] - yaw + wp.pi, two_pi)
            rem = wp.where(rem < 0.0, rem + two_pi, rem)
            rate_cmd = wp.vec3(
                att_gain * tilt[0] + cmd[c0 + 3], att_gain * tilt[1] + cmd[c0 + 4], yaw_gain * (rem - wp.pi)
            )
            aa = ld3(o_aa, i3)
            tq = ld3(o_tq, i3)
            wrench = wp.vec4(
                thrust_cmd,
                tq[0] + inertia[0] * (k_rate[0] * (rate_cmd[0] - w[0]) - aa[0]),
                tq[1] + inertia[1] * (k_rate[1] * (rate_cmd[1] - w[1]) - aa[1]),
                tq[2] + inertia[2] * (k_rate[2] * (rate_cmd[2] - w[2]) - aa[2]),
            )
            lost = t >= ftime and fagent == n
            failed[en] = wp.where(lost, wp.uint8(1), wp.uint8(0))
            live = wp.where(lost, 0.0, 1.0)
            for r in range(R):
                f = wp.float32(0.0)
                for j in range(4):
                    f = f + pinv[r, j] * wrench[j]
                s = wp.sqrt(wp.clamp(f, thrust_min, thrust_max) / k_f)
                speed_cmd[R * en + r] = wp.min(s, speed_max[en]) * live
        disturbance = wp.vec3(0.0, 0.0, 0.0)
        if dist_on != 0:
            wave = wp.float32(1.0)
            if period > 0.0:
                wave = 0.5 * (1.0 + wp.sin(two_pi * t / period + dist_phase[e]))
            disturbance = wp.vec3(dist_amp[3 * e] * wave, dist_amp[3 * e + 1] * wave, dist_amp[3 * e + 2] * wave)
        # Physics substeps: each MAV's wrench, then its step (its cable reads only it and the load, stepped last).
        for _s in range(substeps):
            ml = q2m(ld4(o_lquat, 4 * e))
            lp = ld3(o_lpos, 3 * e)
            lv = ld3(o_lvel, 3 * e)
            lw3 = ld3(o_lw, 3 * e)
            force_l = wp.vec3(0.0, 0.0, 0.0)
            torque_l = wp.vec3(0.0, 0.0, 0.0)
            for n in range(N):
                en = e * N + n
                i3 = 3 * en
                m = q2m(ld4(o_dquat, 4 * en))
                thrust = wp.float32(0.0)
                rt = wp.vec3(0.0, 0.0, 0.0)
                kk = k_f * thrust_scale[en]
                for r in range(R):
                    c_ = wp.clamp(speed_cmd[R * en + r], speed_lo, speed_hi)
                    s = c_ + (o_speed[R * en + r] - c_) * decay[en]
                    o_speed[R * en + r] = s
                    f = kk * (s * s)
                    thrust = thrust + alloc[0, r] * f
                    rt = wp.vec3(rt[0] + alloc[1, r] * f, rt[1] + alloc[2, r] * f, rt[2] + alloc[3, r] * f)
                w = ld3(o_dw, i3)
                pos = ld3(o_dpos, i3)
                vel = ld3(o_dvel, i3)
                att = ld3(attach, 3 * n)
                p_d = pos + rot(m, r_c)
                v_d = vel + rot(m, cross(w, r_c))
                p_l = lp + rot(ml, att)
                v_l = lv + rot(ml, cross(lw3, att))
                delta = p_l - p_d
                length = norm(delta)
                safe = wp.max(length, 1.0e-6)
                dirn = wp.vec3(delta[0] / safe, delta[1] / safe, delta[2] / safe)
                dv = v_l - v_d
                rate = dv[0] * dirn[0] + dv[1] * dirn[1] + dv[2] * dirn[2]
                stretch = length - cable_length[en]
                ten = wp.max(stiffness * stretch + damping * rate, 0.0)
                ten = wp.where(stretch > 0.0, ten, 0.0)
                if released != 0:
                    ten = ten * wp.where(failed[en] != wp.uint8(0), 0.0, 1.0)
                o_tension[en] = ten
                fc = wp.vec3(dirn[0] * ten, dirn[1] * ten, dirn[2] * ten)
                vb = rot_inv(m, vel)
                dr = rot(m, wp.vec3(-drag[0] * vb[0], -drag[1] * vb[1], -drag[2] * vb[2]))
                force_d = wp.vec3(
                    m[0, 2] * thrust + dr[0] + fc[0], m[1, 2] * thrust + dr[1] + fc[1], m[2, 2] * thrust + dr[2] + fc[2]
                )
                torque_d = rt + cross(r_c, rot_inv(m, fc))
                force_l = force_l + fc
                torque_l = torque_l + cross(att, rot_inv(ml, fc))
                i4 = 4 * en
                inert = ld3(mav_inertia, i3)
                body_step(
                    o_dpos, o_dquat, o_dvel, o_dw, i3, i4, force_d, torque_d, mav_mass[en], inert, dt, g, mav_radius,
                    friction,
                )  # fmt: skip
            force_l = wp.vec3(-force_l[0], -force_l[1], -force_l[2]) + disturbance
            torque_l = wp.vec3(-torque_l[0], -torque_l[1], -torque_l[2])
            body_step(
                o_lpos, o_lquat, o_lvel, o_lw, 3 * e, 4 * e, force_l, torque_l, lmass, linert, dt, g, load_radius,
                friction,
            )  # fmt: skip
        t = t + ctrl_dt
    o_time[e] = t


# ----------------------------------------------------------------- the callables
def _flat(t: torch.Tensor, dtype=wp.float32) -> wp.array:
    return wp.from_torch(t.reshape(-1), dtype=dtype)


class WarpControlLoop:
    """Callable ``()`` for a ``CableLoadEnv``, as :class:`NativeControlLoop`: the Warp kernel, the state replaced
    by new tensors. ``params`` are NativeControlLoop's (control_loop.c's C_* order)."""

    def __init__(self, env: CableLoadEnv, params: ctypes.Array, device: str) -> None:
        self.env, self.device = env, device
        p = [float(x) for x in params]
        R = env.params.num_rotors
        (dec, sub, ctrl_dt, dt, g, gx, gy, gz, a, mass, ix, iy, iz, kx, ky, kz, att, yaw, cos_t, sin_t, k_f) = p[:21]
        (t_lo, t_hi, s_lo, s_hi, dx, dy, dz, rx, ry, rz, stiff, damp, rel, dist, period, mav_r, load_r, fric) = p[21:39]
        alloc = torch.tensor(p[39 : 39 + 4 * R], dtype=torch.float32, device=env.device).reshape(4, R)
        pinv = torch.tensor(p[39 + 4 * R : 39 + 8 * R], dtype=torch.float32, device=env.device).reshape(R, 4)
        self.alloc, self.pinv = alloc, pinv  # held: the Warp arrays below view them
        v3 = wp.vec3
        self.constants = [
            int(dec), int(sub), ctrl_dt, dt, g, v3(gx, gy, gz), a, mass, v3(ix, iy, iz), v3(kx, ky, kz), att, yaw,
            cos_t, sin_t, k_f, t_lo, t_hi, s_lo, s_hi, v3(dx, dy, dz), v3(rx, ry, rz), stiff, damp, int(rel),
            int(dist), period, mav_r, load_r, fric, wp.from_torch(alloc), wp.from_torch(pinv),
        ]  # fmt: skip
        self.speed_cmd = torch.empty(env.num_envs * env.n * R, device=env.device)

    def __call__(self) -> None:
        env, new, failed = self.launch(record=False)
        d, ld, indi = env.drones, env.load, env.indi
        env.drones, env.load = type(d)(*new[:4]), type(ld)(*new[4:8])
        env.rotor_speed, env.cable_tension, env.time = new[8], new[9], new[16]
        for name, value in zip(NativeControlLoop.MEMORY, new[10:16], strict=True):
            setattr(indi, name, value)
        env.failed = failed
        env.rotor_alive = (~failed).float().unsqueeze(-1)

    def recorded(self) -> tuple[wp.Launch, list[torch.Tensor]]:
        """The launch on the env's current state, arrays wrapped once (``launch.launch()`` runs it again, into the
        same outputs): the kernel alone, without the per-call tensors and wrapping. Returns it and what it holds."""
        _, new, failed = self.launch(record=True)
        return self._recorded, [*self._held, *new, failed]

    def launch(self, record: bool) -> tuple[CableLoadEnv, list[torch.Tensor], torch.Tensor]:
        env, indi = self.env, self.env.indi
        E, N, R = env.num_envs, env.n, env.params.num_rotors
        c = torch.Tensor.contiguous
        d, ld = env.drones, env.load
        state = [
            *(c(d.pos), c(d.quat), c(d.vel), c(d.ang_vel), c(ld.pos), c(ld.quat), c(ld.vel), c(ld.ang_vel)),
            c(env.rotor_speed), c(env.cable_tension),
            *(c(getattr(indi, name)) for name in NativeControlLoop.MEMORY), c(env.time),
        ]  # fmt: skip
        new = [torch.empty_like(t) for t in state]
        failed = torch.empty(E, N, dtype=torch.bool, device=env.device)
        inputs = [
            c(indi.yaw_ref), c(env.cmd), c(env.motor_decay), c(env.thrust_scale), c(env.mav_mass),
            c(env.mav_inertia), c(env.rotor_speed_max), c(env.cable_length), c(env.load_mass), c(env.load_inertia),
            c(env.attach), c(env.fault_time),
        ]  # fmt: skip
        tail = [c(env.disturbance_amp), c(env.disturbance_phase)]
        self._held = [*state, *inputs, *tail]
        self._recorded = wp.launch(
            control_loop,
            dim=E,
            inputs=[
                N,
                R,
                *map(_flat, state),
                *map(_flat, inputs),
                _flat(c(env.fault_agent), wp.int64),
                *map(_flat, tail),
                *self.constants,
                *map(_flat, new),
                _flat(failed.view(torch.uint8), wp.uint8),
                _flat(self.speed_cmd),
            ],  # fmt: skip
            device=self.device,
            record_cmd=record,
        )
        return env, new, failed


# ----------------------------------------------------------------- state, parity, timing
def outputs(env) -> dict[str, torch.Tensor]:
    out = {path: native.attribute(env, path).clone() for path in OUTPUTS}
    out["failed"] = env.failed.clone()
    return out


def parity(out: dict, ref: dict) -> tuple[float, float, str]:
    """(max abs difference, max of abs difference / max |ref| per output, the output where that is largest);
    the lost-MAV flags must be equal."""
    assert torch.equal(out["failed"], ref["failed"]), "the lost-MAV flags differ"
    worst_abs, worst_rel, where = 0.0, 0.0, ""
    for path in OUTPUTS:
        diff = float((out[path] - ref[path]).abs().max())
        rel = diff / max(float(ref[path].abs().max()), 1e-30)
        worst_abs = max(worst_abs, diff)
        if rel >= worst_rel:
            worst_rel, where = rel, path
    return worst_abs, worst_rel, where


def loop_params(env: CableLoadEnv) -> ctypes.Array:
    """control_loop.c's constants as NativeControlLoop packs them (on a GPU too: built without its library)."""
    stub = SimpleNamespace(cable_load_control_loop=SimpleNamespace(), cable_load_apply_actions=SimpleNamespace())
    return NativeControlLoop(env, stub).params


def make_env(num_envs: int, device: str, overrides: dict) -> CableLoadEnv:
    kernels = "native" if device == "cpu" else "torch"
    env = sim.make("cable_load", num_envs=num_envs, seed=0, device=device, kernels=kernels, **overrides)
    env.reset()
    gen = torch.Generator(device=device).manual_seed(0)
    for _ in range(5):  # mid-flight: INDI memory filled, rotors spun up
        env.step(env.sample_actions(gen))
    env.backend.apply_actions(env.sample_actions(gen))  # the command the loop follows
    return env


def sync(device: str) -> None:
    if device != "cpu":
        torch.cuda.synchronize()
        wp.synchronize()


def time_call(fn, env, before: dict, device: str) -> tuple[float, float]:
    """(wall seconds, this thread's CPU seconds) of one call from ``before`` (restored first, untimed)."""
    set_loop_state(env, before)
    sync(device)
    t0, c0 = time.perf_counter(), time.thread_time()
    fn()
    sync(device)
    return time.perf_counter() - t0, time.thread_time() - c0


def compile_times(env, params, device: str) -> tuple[float, float, float]:
    """(seconds of the first launch into an empty kernel cache, of a launch loading the cached binary, of a
    warm call), each from the env's current state."""
    loop = WarpControlLoop(env, params, device)
    before = loop_state(env)
    cold = time_call(loop, env, before, device)[0]
    control_loop.module.unload()
    cached = time_call(loop, env, before, device)[0]
    warm = time_call(loop, env, before, device)[0]
    set_loop_state(env, before)
    return cold, cached, warm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-envs", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--num-mavs", type=int, default=3, help="cable_load's default is 3")
    parser.add_argument("--repeats", type=int, default=7, help="rounds of alternated timing")
    parser.add_argument("--calls", type=int, default=5, help="timed calls of each backend per round")
    parser.add_argument("--device", default="cpu", help="cpu (C, Warp, torch) or cuda (Warp and torch only)")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (the C kernel follows it)")
    parser.add_argument("--warp-opt", type=int, default=None, help="Warp's optimization_level (default: -O2 on CPU)")
    parser.add_argument("--faults", action="store_true", help="faults (cable released) and a disturbance on")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    overrides: dict = {"num_mavs": args.num_mavs}
    if args.faults:
        overrides |= {"fault": {"enabled": True, "time_range": (0.0, 0.1), "cable": "released"}}
        overrides |= {"disturbance": {"enabled": True, "period_s": 2.0}}

    cache = tempfile.TemporaryDirectory(prefix="warp_cache_")
    wp.config.kernel_cache_dir = cache.name  # empty: the first launch compiles
    wp.config.quiet = True
    wp.init()
    if args.warp_opt is not None:
        wp.set_module_options({"optimization_level": args.warp_opt})
    on_cpu = args.device == "cpu"
    print(f"warp {wp.config.version}, device {args.device}, torch {torch.__version__}, {args.threads} thread(s)")
    compiled = False
    ratio = float("nan")
    rows = []
    for E in args.num_envs:
        env = make_env(E, args.device, overrides)
        params = loop_params(env)
        if not compiled:
            cold, cached, warm = compile_times(env, params, args.device)
            print(f"warp kernel: first launch {cold:.2f} s into an empty cache (the compile), "
                  f"{cached * 1e3:.1f} ms from the cache, then {warm * 1e3:.2f} ms a call ({E} envs)")  # fmt: skip
            compiled = True
        warp_loop = WarpControlLoop(env, params, args.device)
        backends = {"warp": warp_loop, "torch": lambda env=env: CableLoadEnv._control_loop(env)}
        if on_cpu:
            backends["c"] = NativeControlLoop(env, native.load_simd(SOURCES[0]))  # as the env builds it
            backends["c sse"] = NativeControlLoop(env, native.load_simd(SOURCES[0], "generic"))
        ref_name = "c" if on_cpu else "torch"

        before = loop_state(env)
        results = {}
        for name, fn in backends.items():
            set_loop_state(env, before)
            fn()
            results[name] = outputs(env)
        set_loop_state(env, before)
        pairs = [(name, ref_name) for name in backends if name != ref_name]
        if on_cpu:
            pairs.append(("warp", "c sse"))
        for name, other in pairs:
            a, r, where = parity(results[name], results[other])
            print(f"  {E} envs, {name} vs {other}: max abs diff {a:.3g}, max rel {r:.3g} ({where})")
        # The kernel alone: its arrays wrapped once, outputs into the same tensors each time.
        launch, held = warp_loop.recorded()
        backends["warp kernel only"] = launch.launch

        # Per round and backend: the median call's wall time and CPU time (of this thread, which runs every backend:
        # torch at 1 thread, the C loop's one OpenMP thread, Warp's CPU launch). On a shared machine the wall time of
        # a call longer than the scheduler's slice grows with the other processes' share; its CPU time does not.
        wall: dict[str, list[float]] = {name: [] for name in backends}
        cpu: dict[str, list[float]] = {name: [] for name in backends}
        names = list(backends)
        for rep in range(args.repeats):
            per: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
            for call in range(args.calls):  # one call of each in turn, the order rotating
                k = (rep * args.calls + call) % len(names)
                for name in names[k:] + names[:k]:
                    per[name].append(time_call(backends[name], env, before, args.device))
            for name in names:
                wall[name].append(statistics.median(w for w, _ in per[name]))
                cpu[name].append(statistics.median(c for _, c in per[name]))
        med_wall = {name: statistics.median(v) * 1e3 for name, v in wall.items()}
        med_cpu = {name: statistics.median(v) * 1e3 for name, v in cpu.items()}
        main_med = med_cpu if on_cpu else med_wall
        for name in names:
            rows.append((E, name, med_cpu[name], med_cpu[name] / med_cpu[ref_name], med_wall[name],
                         med_wall[name] / med_wall[ref_name], min(wall[name]) * 1e3))  # fmt: skip
        if on_cpu:
            print(f"  C build: {native.simd_isa()} (c), generic: SSE, 4 lanes (c sse)")
        ratio = main_med["warp"] / main_med[ref_name]
        del held

    ref = "C" if on_cpu else "torch"
    print(f"\n| envs | backend | CPU ms a call | / {ref} | wall ms a call | / {ref} | best wall ms |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for E, name, cpu_ms, cpu_rel, wall_ms, wall_rel, best in rows:
        print(f"| {E} | {name} | {cpu_ms:.2f} | {cpu_rel:.2f} | {wall_ms:.2f} | {wall_rel:.2f} | {best:.2f} |")
    what = "CPU time" if on_cpu else "wall time"
    print(f"(medians over {args.repeats} rounds of the per-round median of {args.calls} calls; the ratios of {what})")
    print(f"warp_over_{ref.lower()}_{args.num_envs[-1]}={ratio:.3f}")


if __name__ == "__main__":
    main()
