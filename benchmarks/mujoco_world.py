"""BatchedMjWorld against the two obvious ways of stepping many MuJoCo envs, in one run.

    python benchmarks/mujoco_world.py                       # 40-particle chain held by 2 mocap grippers
    python benchmarks/mujoco_world.py --task hepi_insertion # + a task's env.step (--task-envs, 256)

Each timing block steps E envs for ``--control-steps`` control steps of ``--decimation`` physics
steps with fresh random controls per control step, three ways:

    loop     a Python loop over E MjData objects, mj_step each (the baseline everyone writes first)
    per_step one mujoco.rollout call per physics step (threads, but a call per step)
    world    BatchedMjWorld.step: one rollout call per control step + exact sensors at the end

The three alternate in ``--blocks`` blocks (so a busy machine hurts them alike); the medians are
reported as physics steps/s and the last line is ``world_vs_loop=<ratio>``.
With ``--task``, the task's own ``env.step`` (graph observation, rewards, resets included) is also
timed at ``--task-envs`` envs: control steps/s, the figure the issue's >= 5,000 target is about.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import mujoco
import numpy as np
import torch
from mujoco import rollout

from sim.mujoco.world import BatchedMjWorld, MjWorldCfg


def chain_xml(links: int = 40, dt: float = 0.01) -> str:
    """A rope-like chain: ``links`` particles (3 slide dofs each, so the mass matrix is diagonal) joined
    by spatial-tendon springs, both ends held by mocap grippers (connect constraints), over a floor
    and a bar; particles collide with the floor and the bar, not with each other."""
    seg, x0, z0 = 0.025, -0.5, 0.4
    bodies, tendons = [], []
    for i in range(links):
        bodies.append(
            f'<body name="p{i}" pos="{x0 + seg * i:.4f} 0 {z0}">'
            '<joint type="slide" axis="1 0 0"/><joint type="slide" axis="0 1 0"/><joint type="slide" axis="0 0 1"/>'
            f'<geom type="sphere" size="0.008" mass="0.02" contype="2" conaffinity="1"/><site name="s{i}"/></body>'
        )
    for i in range(links - 1):
        tendons.append(
            f'<spatial stiffness="30" damping="0.3" springlength="{seg}"><site site="s{i}"/><site site="s{i + 1}"/>'
            "</spatial>"
        )
    last = links - 1
    return f"""<mujoco><option timestep="{dt}" integrator="implicitfast"/>
      <worldbody><geom type="plane" size="2 2 .1" contype="1" conaffinity="2"/>
        <body name="g0" mocap="true" pos="{x0} 0 {z0}"/>
        <body name="g1" mocap="true" pos="{x0 + seg * last:.4f} 0 {z0}"/>
        <geom type="cylinder" fromto="0 -0.3 0.3 0 0.3 0.3" size="0.01" contype="1" conaffinity="2"/>
        {"".join(bodies)}
      </worldbody>
      <tendon>{"".join(tendons)}</tendon>
      <equality><connect body1="g0" body2="p0" anchor="0 0 0"/><connect body1="g1" body2="p{last}" anchor="0 0 0"/>
      </equality>
      <sensor>{"".join(f'<framepos objtype="body" objname="p{i}"/>' for i in range(links))}</sensor>
    </mujoco>"""


def time_loop(m: mujoco.MjModel, datas: list, ctrl: np.ndarray, nstep: int) -> float:
    t = time.perf_counter()
    for c in ctrl:  # control steps
        for d, ce in zip(datas, c, strict=True):
            d.mocap_pos[:] = ce.reshape(-1, 3)
            for _ in range(nstep):
                mujoco.mj_step(m, d)
    return time.perf_counter() - t


def time_per_step(m: mujoco.MjModel, thread_datas: list, state: np.ndarray, ctrl: np.ndarray, nstep: int) -> float:
    spec = mujoco.mjtState.mjSTATE_CTRL | mujoco.mjtState.mjSTATE_MOCAP_POS | mujoco.mjtState.mjSTATE_MOCAP_QUAT
    quat = np.tile([1.0, 0, 0, 0], (ctrl.shape[1], m.nmocap))
    t = time.perf_counter()
    for c in ctrl:
        full = np.concatenate([np.zeros((len(c), m.nu)), c, quat], -1)[:, None]
        for _ in range(nstep):
            out, _ = rollout.rollout(m, thread_datas, state, full, control_spec=spec, persistent_pool=True)
            state = out[:, -1]
    return time.perf_counter() - t


def time_world(world: BatchedMjWorld, ctrl: np.ndarray, nstep: int) -> float:
    t = time.perf_counter()
    for c in ctrl:
        world.step(torch.from_numpy(c), nstep)
    return time.perf_counter() - t


def time_task(task: str, steps: int, num_envs: int) -> tuple[int, float]:
    import sim

    env = sim.make(task, num_envs=num_envs, device="cpu", seed=0)
    env.reset()
    for _ in range(3):
        env.step(env.sample_actions())
    acts = [env.sample_actions() for _ in range(steps)]
    t = time.perf_counter()
    for a in acts:
        env.step(a)
    return env.num_envs, env.num_envs * steps / (time.perf_counter() - t)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--num-envs", type=int, default=256)
    p.add_argument("--decimation", type=int, default=2)
    p.add_argument("--control-steps", type=int, default=10)
    p.add_argument("--blocks", type=int, default=3)
    p.add_argument("--links", type=int, default=40)
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--task", default="", help="also time this task's env.step at its default env count")
    p.add_argument("--task-steps", type=int, default=50)
    p.add_argument("--task-envs", type=int, default=256, help="envs of the task's env.step timing")
    args = p.parse_args()
    torch.set_num_threads(1)

    m = mujoco.MjModel.from_xml_string(chain_xml(args.links))
    E, n = args.num_envs, args.decimation
    rng = np.random.default_rng(0)
    base = np.concatenate([m.body("g0").pos, m.body("g1").pos])
    datas = [mujoco.MjData(m) for _ in range(E)]
    for d in datas:
        mujoco.mj_forward(m, d)
    state0 = np.empty(mujoco.mj_stateSize(m, mujoco.mjtState.mjSTATE_FULLPHYSICS))
    mujoco.mj_getState(m, datas[0], state0, mujoco.mjtState.mjSTATE_FULLPHYSICS)
    state = np.tile(state0, (E, 1))
    thread_datas = [mujoco.MjData(m) for _ in range(args.threads)]
    world = BatchedMjWorld(m, E, control=("mocap_pos",), cfg=MjWorldCfg(nthread=args.threads))
    results: dict[str, list[float]] = {"loop": [], "per_step": [], "world": []}
    for _ in range(args.blocks):
        ctrl = base + rng.uniform(-0.05, 0.05, (args.control_steps, E, 6))
        physics = args.control_steps * E * n
        results["loop"].append(physics / time_loop(m, datas, ctrl, n))
        results["per_step"].append(physics / time_per_step(m, thread_datas, state, ctrl, n))
        results["world"].append(physics / time_world(world, ctrl, n))
    print(f"model: {args.links}-particle chain + 2 grippers, nv={m.nv}; E={E}, decimation={n}, threads={args.threads}")
    print("| method | physics steps/s (median) | control steps/s |")
    print("|---|---:|---:|")
    med = {k: statistics.median(v) for k, v in results.items()}
    for k, v in med.items():
        print(f"| {k} | {v:,.0f} | {v / n:,.0f} |")
    if args.task:
        envs, rate = time_task(args.task, args.task_steps, args.task_envs)
        print(f"task {args.task}: {envs} envs, env.step {rate:,.0f} control steps/s (random actions, resets included)")
    print(f"world_vs_per_step={med['world'] / med['per_step']:.3f}")
    print(f"world_vs_loop={med['world'] / med['loop']:.3f}")


if __name__ == "__main__":
    main()
