"""drone_volleyball's C kernels on a CPU (the sim's kernels choice): the match observations (``observations.c``)
and the ball's predicted flight (``ball_flight.c``).

:func:`observations` computes what ``VolleyballMatchEnv._observations_of`` does from the torch code (the skill,
policy and critic-state entries of every drone) through the custom op ``covey::volleyball_observations``
(:class:`sim.core.native.KernelOp`, as every C kernel is called), so that a compiled pass keeps it inside its graph
(inductor calls it like one of its own kernels; a plain ctypes call would split the graph). The torch code stays
the reference (``tests/test_volleyball_native.py`` holds the two together) and runs everywhere else: on a GPU, with
the torch kernels chosen, in the solo skills, and where no C compiler is found (:func:`sim.core.native.load`).
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from sim.core import native
from sim.tasks.drone_volleyball.config import SKILLS

if TYPE_CHECKING:
    from sim.tasks.drone_volleyball.match_env import VolleyballMatchEnv

SOURCE = Path(__file__).with_name("observations.c")
MAX_DRONES = 6  # observations.c's per-env arrays
# observations.c's inputs_t, in order: (its field, the env's attribute, dtype); [E, D, ...] per drone, [E] the rally's.
INPUTS = (
    ("pos", "drones.pos", torch.float32),
    ("quat", "drones.quat", torch.float32),
    ("vel", "drones.vel", torch.float32),
    ("ang_vel", "drones.ang_vel", torch.float32),
    ("ball_pos", "ball_pos", torch.float32),
    ("ball_vel", "ball_vel", torch.float32),
    ("target", "skill_target", torch.float32),  # world frame
    ("skill_id", "skill_id", torch.int64),
    ("touched", "touched", torch.bool),
    ("last_action", "last_action", torch.float32),
    ("last_team", "rules.last_team", torch.int64),
    ("touches", "rules.touches", torch.int64),
    ("last_toucher", "rules.last_toucher", torch.int64),
    ("serving_team", "rules.serving_team", torch.int64),
    ("server", "rules.server", torch.int64),
    ("episode_step", "episode_step", torch.int64),
    ("served", "rules.served", torch.bool),
)
_C_TYPES = {torch.float32: "const float*", torch.int64: "const int64_t*", torch.bool: "const bool*"}


def sizes(n: int) -> tuple[int, int, int]:
    """Entries per drone (skill, policy, critic state) of a match of ``n`` drones a team."""
    D, skill = 2 * n, 29 + len(SKILLS)
    return skill, skill + 3 * (D - 1) + 5, 16 * D + 12 + n


_INPUTS_T = native.Struct("inputs_t", tuple((_C_TYPES[dtype], name) for name, _, dtype in INPUTS))
# observations.c's sizes, inputs and argument list, declared once: native.load writes them as observations_layout.h.
LAYOUT = native.Layout(
    defines=(("MAX_DRONES", MAX_DRONES), ("MAX_STATE", sizes(MAX_DRONES // 2)[2])),
    parts=(
        _INPUTS_T,
        native.Signature(
            "OBSERVATIONS_ARGS",
            (
                ("int64_t", "k"),
                ("const int64_t*", "rows"),
                ("int32_t", "n"),
                ("int32_t", "num_skills"),
                ("float", "paddle_offset"),
                ("float", "max_touches"),
                ("float", "max_episode_steps"),
                ("const inputs_t*", "inputs"),
                ("float*", "policy"),
                ("float*", "skill"),
                ("float*", "state"),
                ("int32_t", "nthreads"),
            ),
        ),  # fmt: skip
    ),
)
native.declare(SOURCE, LAYOUT)


def _lib() -> ctypes.CDLL | None:
    lib = native.load(SOURCE)
    if lib is not None:
        lib.volleyball_observations.restype = None
    return lib


def unsupported(env: VolleyballMatchEnv) -> str | None:
    """None when the C observations can run ``env``, else why not."""
    if env.device.type != "cpu":
        return f"they run on CPU tensors only (the env is on {env.device})"
    if env.drones.pos.dtype != torch.float32:
        return f"they compute in float32 (the env holds {env.drones.pos.dtype})"
    if env.num_drones > MAX_DRONES:
        return f"they hold at most {MAX_DRONES} drones"
    if _lib() is None:
        return "no C compiler could build them (see the warning above)"
    return None


def inputs(env: VolleyballMatchEnv) -> list[Tensor]:
    """The env's tensors :func:`observations` reads, in :data:`INPUTS` order."""
    return [native.attribute(env, path) for _, path, _ in INPUTS]


# The C function as the custom op covey::volleyball_observations (one way for every C kernel: sim.core.native.KernelOp).
OP = native.KernelOp("volleyball_observations", LAYOUT, "OBSERVATIONS_ARGS")


def observations(
    tensors: list[Tensor],
    rows: Tensor | None,
    n: int,
    paddle_offset: float,
    max_touches: float,
    max_episode_steps: float,
    check_rows: bool = True,
) -> tuple[Tensor, Tensor, Tensor]:
    """``(skill [k, D, s], policy [k, D, p], state [k, D, c])`` of a match of ``n`` drones a team (``D = 2 n``; the
    sizes of :func:`sizes`) from ``tensors`` (:func:`inputs`, ``[E, ...]`` each), for the envs ``rows [k]`` (int64;
    None: every env, ``k = E``). The outputs are allocated here, in torch, and written by :data:`OP`.

    The kernel reads ``rows`` unchecked, so they are checked here (reading their values); the env passes
    ``check_rows=False`` for its own reset indices, in range by construction, and keeps its step free of reads."""
    lib = _lib()
    if lib is None:
        raise RuntimeError("volleyball_observations needs a C compiler (native.unsupported)")
    D, E = 2 * n, tensors[0].shape[0]
    if not 1 <= n <= MAX_DRONES // 2 or tensors[0].shape[1:] != (D, 3):
        raise ValueError(
            f"volleyball_observations: {n} drones a team, but positions of shape {tuple(tensors[0].shape)}"
        )
    held = [t.to(dtype).contiguous() for t, (_, _, dtype) in zip(tensors, INPUTS, strict=True)]
    if rows is not None:
        rows = rows.to(torch.int64).contiguous()
        if check_rows and rows.numel() and not 0 <= int(rows.min()) <= int(rows.max()) < E:
            raise IndexError(f"volleyball_observations: rows outside [0, {E})")
    k = E if rows is None else rows.shape[0]
    skill, policy, state = (held[0].new_empty(k, D, m) for m in sizes(n))
    OP(
        lib.volleyball_observations,
        k=k,
        rows=rows,
        n=n,
        num_skills=len(SKILLS),
        paddle_offset=paddle_offset,
        max_touches=max_touches,
        max_episode_steps=max_episode_steps,
        inputs=held,
        policy=policy,
        skill=skill,
        state=state,
        nthreads=native.threads(),
    )
    return skill, policy, state


# --------------------------------------------------------------------------- the ball's predicted flight
FLIGHT_SOURCE = Path(__file__).with_name("ball_flight.c")
FLIGHT_LAYOUT = native.Layout(
    parts=(
        native.Signature(
            "BALL_FLIGHT_ARGS",
            (
                ("int64_t", "E"),
                ("int64_t", "T"),
                ("const float*", "pos"),
                ("const float*", "vel"),
                ("float", "half_kdt"),
                ("float", "dt"),
                ("float", "drop"),
                ("float", "gdt"),
                ("float*", "out_pos"),
                ("float*", "out_vel"),
                ("int32_t", "nthreads"),
            ),
        ),
        native.Signature(
            "DRAG_FLIGHT_ARGS",
            (
                ("int64_t", "E"),
                ("int64_t", "S"),
                ("const float*", "pos"),
                ("const float*", "vel"),
                ("const float*", "dt"),
                ("float", "half_k"),
                ("float", "gravity"),
                ("float*", "out_end"),
                ("int32_t", "nthreads"),
            ),
        ),  # fmt: skip
    ),
)
native.declare(FLIGHT_SOURCE, FLIGHT_LAYOUT)
FLIGHT_OP = native.KernelOp("volleyball_ball_flight", FLIGHT_LAYOUT, "BALL_FLIGHT_ARGS")
DRAG_FLIGHT_OP = native.KernelOp("volleyball_drag_flight", FLIGHT_LAYOUT, "DRAG_FLIGHT_ARGS")


# fmaf as one instruction where the CPU has it (else glibc's fmaf: the same numbers, slower); no other op is fused, as
# native.FLAGS keep -ffp-contract=off. Read at import: a compiled graph cannot trace the read of /proc/cpuinfo.
_FLIGHT_FLAGS = ("-mfma",) if native.cpu_has("fma") else ()


def _flight_lib() -> ctypes.CDLL | None:
    lib = native.load(FLIGHT_SOURCE, _FLIGHT_FLAGS)
    if lib is not None:
        lib.volleyball_ball_flight.restype = None
        lib.volleyball_drag_flight.restype = None
    return lib


def ball_flight_runs(pos: Tensor) -> bool:
    """Whether :func:`ball_flight` can predict balls held as ``pos``: CPU float32 tensors and a C compiler."""
    return pos.device.type == "cpu" and pos.dtype == torch.float32 and _flight_lib() is not None


def ball_flight(
    pos: Tensor, vel: Tensor, drag_k: float, dt: float, steps: int, gravity: float
) -> tuple[Tensor, Tensor]:
    """``ballistics.predict_ball`` in C, to the bit: positions and velocities ``[E, T, 3]`` (``T = steps``) of the
    balls ``pos, vel [E, 3]`` after ``dt, 2 dt, .., T dt`` of ``sim.physics.ball.ball_flight_step`` (drag ``drag_k``,
    gravity along -z). The scalars are formed in Python's doubles as the torch code forms them, then rounded to
    float as torch rounds a Python number."""
    lib = _flight_lib()
    if lib is None:
        raise RuntimeError("volleyball_ball_flight needs a C compiler (ball_flight_runs)")
    if pos.shape != vel.shape or pos.dim() != 2 or pos.shape[-1] != 3:
        raise ValueError(f"ball_flight: pos and vel must be [E, 3], got {tuple(pos.shape)} and {tuple(vel.shape)}")
    pos, vel = pos.to(torch.float32).contiguous(), vel.to(torch.float32).contiguous()
    E = pos.shape[0]
    out_pos, out_vel = pos.new_empty(E, steps, 3), pos.new_empty(E, steps, 3)
    FLIGHT_OP(
        lib.volleyball_ball_flight,
        E=E,
        T=steps,
        pos=pos,
        vel=vel,
        half_kdt=0.5 * drag_k * dt,
        dt=dt,
        drop=0.5 * gravity * dt * dt,
        gdt=gravity * dt,
        out_pos=out_pos,
        out_vel=out_vel,
        nthreads=native.threads(),
    )
    return out_pos, out_vel


def drag_flight(pos: Tensor, vel: Tensor, dt: Tensor, drag_k: float, steps: int, gravity: float) -> Tensor:
    """``ballistics._flight`` in C, to the bit: the position ``[..., 3]`` after ``steps`` steps of ``dt [..., 1]``
    (per ball) of flight under drag ``drag_k`` from ``pos, vel [..., 3]`` (leading axes broadcast)."""
    lib = _flight_lib()
    if lib is None:
        raise RuntimeError("volleyball_drag_flight needs a C compiler (ball_flight_runs)")
    pos, vel, dt = torch.broadcast_tensors(pos, vel, dt)
    shape = pos.shape
    rows = lambda x: x.reshape(-1, 3).to(torch.float32).contiguous()  # noqa: E731
    pos, vel, dt = rows(pos), rows(vel), dt[..., 0].reshape(-1).to(torch.float32).contiguous()
    end = pos.new_empty(pos.shape)
    DRAG_FLIGHT_OP(
        lib.volleyball_drag_flight,
        E=pos.shape[0],
        S=steps,
        pos=pos,
        vel=vel,
        dt=dt,
        half_k=0.5 * drag_k,
        gravity=gravity,
        out_end=end,
        nthreads=native.threads(),
    )
    return end.reshape(shape)
