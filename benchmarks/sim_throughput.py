"""Simulation throughput: covey's batched torch env against the same scene stepped by MuJoCo.

    python benchmarks/sim_throughput.py --task cable_load

Torch side: ``sim.make(task, num_envs=n, device=..., seed=0)``, a few warm-up steps, then ``--steps``
timed ``env.step`` calls with pre-generated actions (uniform random in [-1, 1] by default). One
control step is one ``env.step`` of one env: controller ticks, physics substeps, observations,
rewards, terminations and auto-resets included. Physics steps/s = control steps/s x
``control_dt / physics_dt``.

MuJoCo side: the task's scene as MJCF (same parameters, ``timestep = physics_dt``), started at the
static hover, rolled out open loop with constant per-rotor hover thrusts by ``mujoco.rollout`` on
all cores (one ``MjData`` per thread), ``nbatch`` = the reference size (4096). Its control steps/s =
physics steps/s / (``control_dt / physics_dt``). No controller, observations or rewards run there,
so the comparison favours MuJoCo; see benchmarks/README.md.

On a CPU the process first keeps freed memory (``--allocator kept``, what every CPU training run sets:
``training/allocator.py``); with glibc's defaults each step's fresh observation and state tensors fault their
pages in again (drone_volleyball compiled at 4096 envs: ~57 ms a step against ~42 ms).

The ratio at the reference size (4096) is measured by alternation: torch, MuJoCo, torch, MuJoCo, ...
(``--repeats`` rounds, one env built once), at 1 thread on each side and at all threads
(``--ratio-threads``), each round timing every thread count in turn (so each count sees the same phases of the
random-action episodes, whose later steps reset more envs); the table gives each side's median and the ratio of
the medians, so that the figure holds on a shared machine where either side alone may be slowed by whatever else
runs.

The last printed line is always ``ratio_vs_mujoco_4096=<float>`` (torch / MuJoCo control steps/s at
4096 envs, medians, at the last ``--ratio-threads`` count; ``nan`` when the MuJoCo side was skipped)
so scripts can read it.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass

import numpy as np
import torch

REF_ENVS = 4096
DEFAULT_NUM_ENVS = (256, 4096, 16384)


@dataclass
class Result:
    backend: str
    num_envs: int
    steps: int  # control steps (torch) or physics steps (MuJoCo) per env
    seconds: float
    control_sps: float  # control steps per second, summed over envs
    physics_sps: float  # physics steps per second, summed over envs
    note: str = ""


# ----------------------------------------------------------------------------- torch side
def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class TorchSide:
    """One built env and its pre-generated actions; :meth:`time` steps it (the first call includes the
    ``warmup`` untimed steps, and with them any compilation)."""

    def __init__(
        self,
        task: str,
        num_envs: int,
        device: str,
        actions: str,
        compile_loop: bool,
        warmup: int,
        overrides: dict | None = None,
    ) -> None:
        import sim

        self.env = sim.make(task, num_envs=num_envs, device=device, seed=0, compile=compile_loop, **(overrides or {}))
        self.num_envs, self.warmup, self.compile = num_envs, warmup, compile_loop
        gen = torch.Generator(device=self.env.device)
        gen.manual_seed(1)
        self._zero = actions == "zero"
        self._gen = gen
        self.note = ""

    def _actions(self, n: int) -> list[dict[str, torch.Tensor]]:
        env = self.env
        return [env.zero_actions()] * n if self._zero else [env.sample_actions(self._gen) for _ in range(n)]

    def time(self, steps: int) -> Result:
        """Time ``steps`` calls of ``env.step`` (after the warm-up, on the first call)."""
        env, dev = self.env, self.env.device
        if self.warmup:
            t0 = time.perf_counter()
            for act in self._actions(self.warmup):
                env.step(act)
            _sync(dev)
            if self.compile:
                self.note = f"compiled; warm-up incl. compile {time.perf_counter() - t0:.1f} s"
            self.warmup = 0
        batch = self._actions(steps)
        start = time.perf_counter()
        for act in batch:
            env.step(act)
        _sync(dev)
        seconds = time.perf_counter() - start
        ratio = round(env.spec.control_dt / env.spec.physics_dt)
        control_sps = self.num_envs * steps / seconds
        return Result(f"torch ({dev.type})", self.num_envs, steps, seconds, control_sps, control_sps * ratio, self.note)


# ----------------------------------------------------------------------------- MuJoCo side
@dataclass
class MujocoScene:
    xml: str
    ctrl: np.ndarray  # [nu] constant controls


def cable_load_scene(cfg, physics_dt: float) -> MujocoScene:
    """The cable_load team at the nominal static hover, controls = per-rotor hover thrusts (N)."""
    from sim.mujoco.mjcf import cable_load_model
    from sim.physics.multirotor import MultirotorModel, MultirotorParams
    from sim.tasks.cable_load.geometry import hover_equilibrium, load_attach_points

    params = MultirotorParams.load(cfg.multirotor)
    model = MultirotorModel(params, "cpu")
    n = cfg.num_mavs
    attach = load_attach_points(n, cfg.load_attach_radius, cfg.load_size[2])
    load_pos = torch.tensor([[0.0, 0.0, cfg.start_height]])
    eq = hover_equilibrium(
        model,
        load_pos,
        torch.tensor([cfg.load_mass]),
        torch.full((1, n), cfg.cable_length),
        attach,
        math.radians(cfg.cable_angle_deg),
        cfg.cable_stiffness,
    )
    xml = cable_load_model(
        params,
        n,
        cfg.load_mass,
        cfg.load_size,
        attach.tolist(),
        [cfg.cable_length] * n,
        cfg.cable_stiffness,
        cfg.cable_damping,
        timestep=physics_dt,
        drone_pos=eq["drone_pos"][0].tolist(),
        drone_quat=eq["drone_quat"][0].tolist(),
        load_pos=load_pos[0].tolist(),
    )
    # Actuators are mav{i}_rotor{j}, i-major, in the rotor order of MultirotorParams.
    thrust = model.rotor_thrusts(eq["rotor_speed"][0]).reshape(-1)
    return MujocoScene(xml, thrust.double().numpy())


def drone_volleyball_scene(cfg, physics_dt: float) -> MujocoScene:
    """The match's drones hovering at their start positions and the ball; controls = hover thrusts (N)."""
    from sim.mujoco.mjcf import volleyball_model
    from sim.physics.multirotor import MultirotorParams
    from sim.physics.rigid_body import GRAVITY

    params = MultirotorParams.load(cfg.multirotor)
    n = cfg.drones_per_team if cfg.is_match else 1
    D = 2 * n if cfg.is_match else 1
    pos = [(-3.0 - 0.5 * (i % 2), 1.5 * (i % n) - 1.5, cfg.serve_height) for i in range(n)]
    pos += [(-x, -y, z) for x, y, z in pos][: D - n]
    court = cfg.court
    xml = volleyball_model(
        params, pos, (-4.5, 0.0, 4.0), cfg.ball.radius, cfg.ball.mass, court.net_height, court.width, physics_dt
    )
    hover = params.mass * GRAVITY / params.num_rotors
    return MujocoScene(xml, np.full(D * params.num_rotors, hover))


MUJOCO_SCENES = {"cable_load": cable_load_scene, "drone_volleyball": drone_volleyball_scene}


def _free_body_positions(m, qpos: np.ndarray) -> np.ndarray:
    """Positions of the free-joint bodies, ``[..., n_free, 3]``, from ``qpos [..., nq]``."""
    import mujoco

    adr = [m.jnt_qposadr[j] for j in range(m.njnt) if m.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE]
    return np.stack([qpos[..., a : a + 3] for a in adr], axis=-2)


def time_mujoco(scene: MujocoScene, nbatch: int, nstep: int, nthread: int, control_ratio: int, chunk: int) -> Result:
    """Roll out ``nbatch`` copies of the scene for ``nstep`` physics steps on ``nthread`` threads.

    ``mujoco.rollout`` writes every step's full state, so long rollouts go in chunks of ``chunk``
    steps, each starting from the last state of the previous one (output buffer reused).
    """
    import mujoco
    from mujoco import rollout

    m = mujoco.MjModel.from_xml_string(scene.xml)
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    nstate = mujoco.mj_stateSize(m, spec)
    state0 = np.empty(nstate)
    mujoco.mj_getState(m, d, state0, spec)

    chunk = max(1, min(chunk, nstep))
    nchunks = math.ceil(nstep / chunk)
    init = np.tile(state0, (nbatch, 1))
    control = np.ascontiguousarray(np.broadcast_to(scene.ctrl, (nbatch, chunk, m.nu)), dtype=np.float64)
    out = np.empty((nbatch, chunk, nstate))
    datas = [mujoco.MjData(m) for _ in range(nthread)]
    with rollout.Rollout(nthread=nthread) as pool:
        pool.rollout(m, datas, init, control, state=out)  # warm-up: thread pool, first touch of buffers
        start = time.perf_counter()
        state = init
        for _ in range(nchunks):
            pool.rollout(m, datas, state, control, state=out)
            state = out[:, -1].copy()
        seconds = time.perf_counter() - start
    total = nchunks * chunk
    qpos0, qpos = state0[1 : 1 + m.nq], state[:, 1 : 1 + m.nq]  # FULLPHYSICS state: time, qpos, qvel, ...
    drift = np.linalg.norm(_free_body_positions(m, qpos) - _free_body_positions(m, qpos0), axis=-1)
    drift_mm = float(np.nanmax(drift)) * 1e3 if np.isfinite(drift).all() else math.inf
    physics_sps = nbatch * total / seconds
    note = f"{nthread} threads, open loop; max body drift {drift_mm:.2g} mm after {total} steps"
    return Result("mujoco rollout", nbatch, total, seconds, physics_sps / control_ratio, physics_sps, note)


# ----------------------------------------------------------------------------- report
def _fmt_rate(x: float) -> str:
    return f"{x:,.0f}" if math.isfinite(x) else "nan"


def format_table(results: list[Result]) -> str:
    head = ("backend", "num_envs", "steps", "seconds", "control steps/s", "physics steps/s", "note")
    rows = [
        (
            r.backend,
            str(r.num_envs),
            str(r.steps),
            f"{r.seconds:.2f}",
            _fmt_rate(r.control_sps),
            _fmt_rate(r.physics_sps),
            r.note,
        )
        for r in results
    ]
    widths = [max(len(x[i]) for x in (head, *rows)) for i in range(len(head))]
    right = {1, 2, 3, 4, 5}

    def line(cells):
        cols = (c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))
        return "  ".join(cols).rstrip()

    return "\n".join([line(head), line(["-" * w for w in widths]), *(line(r) for r in rows)])


# ----------------------------------------------------------------------------- CLI
def _positive_int(text: str) -> int:
    val = int(text)
    if val < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return val


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Control steps/s of a covey task (torch) vs. the same scene in MuJoCo (mujoco.rollout).",
        epilog=f"The last line printed is 'ratio_vs_mujoco_{REF_ENVS}=<float>'.",
    )
    p.add_argument("--task", default="cable_load", help="registered task name (default: cable_load)")
    p.add_argument("--device", default="auto", help='torch device; "auto" = cuda if available, else cpu')
    p.add_argument(
        "--num-envs", type=_positive_int, nargs="+", default=list(DEFAULT_NUM_ENVS), help="batch sizes (torch)"
    )
    p.add_argument("--steps", type=_positive_int, default=50, help="timed env.step calls per size (default: 50)")
    p.add_argument("--warmup", type=int, default=5, help="untimed env.step calls first (default: 5)")
    p.add_argument("--actions", choices=("random", "zero"), default="random", help="pre-generated actions")
    p.add_argument("--torch-threads", type=_positive_int, default=None, help="torch.set_num_threads (default: torch's)")
    p.add_argument(
        "--compile",
        action="store_true",
        help="sim.make(..., compile=True): torch.compile the control/physics loop (compile time not timed)",
    )
    p.add_argument(
        "--mujoco-steps",
        type=_positive_int,
        default=180,
        help="MuJoCo physics steps per rollout env, timed (default: 180 = 0.6 s at cable_load's 300 Hz)",
    )
    p.add_argument(
        "--mujoco-threads", type=_positive_int, default=None, help="rollout threads (default: os.cpu_count())"
    )
    p.add_argument("--mujoco-chunk", type=_positive_int, default=60, help="physics steps per rollout call")
    p.add_argument(
        "--allocator",
        choices=("kept", "default"),
        default="kept",
        help="kept (default): glibc keeps freed memory, as every CPU training run sets it (training/allocator.py); "
        "default: glibc's own settings, where each step's fresh outputs fault their pages in again",
    )
    p.add_argument("--no-mujoco", action="store_true", help="skip the MuJoCo side (ratio prints as nan)")
    p.add_argument(
        "--repeats", type=_positive_int, default=5, help="alternations of torch and MuJoCo for the ratio (default: 5)"
    )
    p.add_argument(
        "--ratio-threads",
        type=_positive_int,
        nargs="+",
        default=None,
        help="thread counts of the alternated comparison, the same on both sides (default: 1 and os.cpu_count())",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a sim.make keyword or task config override, e.g. --set kernels=torch (repeatable; a Python literal)",
    )
    args = p.parse_args(argv)
    try:
        args.overrides = {k: _literal(v) for k, v in (item.split("=", 1) for item in args.set)}
    except ValueError:
        p.error(f"--set takes KEY=VALUE, got {args.set}")
    if args.warmup < 0 or (args.compile and args.warmup < 1):
        p.error("--warmup must be >= 0, and >= 1 with --compile (the first step compiles)")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        p.error(f"--device {args.device}: CUDA is not available here (torch {torch.__version__})")
    import sim

    tasks = sim.registered_tasks()
    if args.task not in tasks:
        p.error(f"unknown task {args.task!r}; registered tasks: {', '.join(tasks)}")
    return args


def _literal(text: str) -> object:
    """A Python literal (number, tuple, bool), else the text itself (a string value)."""
    import ast

    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def run(args: argparse.Namespace) -> float:
    """Run the benchmark, print the report; returns the torch/MuJoCo ratio at the reference size."""
    import sim
    from sim.core.config import resolve_device

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    device = resolve_device(args.device)
    allocator = "allocator: glibc's defaults"
    if args.allocator == "kept" and device.type == "cpu":
        from training.allocator import keep_freed_memory

        allocator = keep_freed_memory()
    probe = sim.make(args.task, num_envs=1, device="cpu", seed=0)
    control_ratio = round(probe.spec.control_dt / probe.spec.physics_dt)
    sizes = list(dict.fromkeys(args.num_envs))
    ref = REF_ENVS if REF_ENVS in sizes else max(sizes)
    nthread = args.mujoco_threads or os.cpu_count() or 1

    import mujoco

    print(
        f"task={args.task} device={device} torch={torch.__version__} torch_threads={torch.get_num_threads()} "
        f"mujoco={mujoco.__version__} cpu_count={os.cpu_count()} {allocator}"
    )
    print(
        f"control_dt={probe.spec.control_dt:g} s, physics_dt={probe.spec.physics_dt:.6g} s "
        f"({control_ratio} physics steps per control step); actions={args.actions}"
        + (f"; overrides {args.overrides}" if args.overrides else ""),
        flush=True,
    )

    results: list[Result] = []
    ref_side: TorchSide | None = None
    for n in sizes:
        side = TorchSide(args.task, n, str(device), args.actions, args.compile, args.warmup, args.overrides)
        res = side.time(args.steps)
        results.append(res)
        if n == ref:
            ref_side = side  # kept (and its compilation) for the alternating comparison
        kernels = f" ({side.env.kernels} kernels)" if hasattr(side.env, "kernels") else ""
        print(f"  torch   num_envs={n:>6}: {res.control_sps:,.0f} control steps/s{kernels}", flush=True)

    scene_fn = MUJOCO_SCENES.get(args.task)
    alternated: list[tuple[int, list[float], list[float]]] = []
    if args.no_mujoco:
        print("  mujoco  skipped (--no-mujoco)")
    elif scene_fn is None:
        print(f"  mujoco  skipped: no MuJoCo scene for task {args.task!r} (have: {', '.join(MUJOCO_SCENES)})")
    else:
        scene = scene_fn(probe.cfg, probe.spec.physics_dt)
        threads_all = list(dict.fromkeys(args.ratio_threads or (1, nthread)))
        for threads in threads_all:
            torch.set_num_threads(threads)
            # Untimed: compiled code compiles once per thread count, the reset's (every env) included.
            ref_side.env.reset()
            ref_side.time(2)
        rates = {threads: ([], []) for threads in threads_all}
        last: dict[int, Result] = {}
        # A, B, A, B, ...: both sides see the same machine; and each round times every thread count, so all
        # counts see the same phases of the (random-action) episodes: later steps reset more envs.
        for _ in range(args.repeats):
            for threads in threads_all:
                torch.set_num_threads(threads)
                t_rates, m_rates = rates[threads]
                t_rates.append(ref_side.time(args.steps).control_sps)
                last[threads] = time_mujoco(scene, ref, args.mujoco_steps, threads, control_ratio, args.mujoco_chunk)
                m_rates.append(last[threads].control_sps)
        for threads, (t_rates, m_rates) in rates.items():
            alternated.append((threads, t_rates, m_rates))
            results.append(last[threads])
            print(
                f"  {threads} thread(s), {args.repeats} alternations at {ref} envs: torch "
                f"{statistics.median(t_rates):,.0f}, mujoco {statistics.median(m_rates):,.0f} control steps/s",
                flush=True,
            )

    print()
    print(format_table(results))
    print()
    ratio = math.nan
    if alternated:
        print(f"alternated at {ref} envs ({args.repeats} rounds each; medians [min, max], control steps/s):")
        print("threads  torch                          mujoco                         ratio of medians")
        for threads, t_rates, m_rates in alternated:
            t_med, m_med = statistics.median(t_rates), statistics.median(m_rates)
            ratio = t_med / m_med
            t_txt = f"{t_med:,.0f} [{min(t_rates):,.0f}, {max(t_rates):,.0f}]"
            m_txt = f"{m_med:,.0f} [{min(m_rates):,.0f}, {max(m_rates):,.0f}]"
            print(f"{threads:>7}  {t_txt:<30} {m_txt:<30} {ratio:.3f}")
        print()
    if ref != REF_ENVS:
        print(f"note: {REF_ENVS} envs not measured; the ratio below compares torch and MuJoCo at {ref} envs")
    print(f"torch / mujoco control steps/s at {ref} envs: {ratio:.3f}")
    return ratio


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        ratio = run(args)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    print(f"ratio_vs_mujoco_{REF_ENVS}={ratio:.4g}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
