"""The drone_volleyball ROS sim bridge's step: one match env and the scripted team B inside it, as the bridge runs
them (``sim.tasks.drone_volleyball.ros_bridge.make_env``), in three builds, timed in alternating rounds:

- ``torch``: ``sim.kernels=torch``, every op in eager torch (the ball's predicted flights too);
- ``c``: the default on a CPU, the observations and the ball's predicted flights in C (``ball_flight.c``);
- ``c+compile``: the same with the env's step through ``torch.compile`` (the bridge's ``-p compile:=true``).

Prints CPU ms per control step (process time: what the step costs on a shared machine) and each build's ratio to
``torch`` measured in the same run. The bridge runs at 50 Hz: 20 ms a step, which the three policy nodes and DDS
share on a 2-core machine.

    OMP_NUM_THREADS=1 python benchmarks/volleyball_bridge_step.py --steps 300 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from unittest import mock

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sim  # noqa: E402
from sim.ros.bridge import read_task_cfg  # noqa: E402
from sim.tasks.drone_volleyball.ros_bridge import make_env  # noqa: E402
from sim.tasks.drone_volleyball.teams import scripted_team  # noqa: E402

SKILLS = Path("assets/policies/drone_volleyball/games_skills.onnx")


def build(name: str, seed: int):
    """The bridge's env and scripted team B for build ``name``."""
    task_cfg = read_task_cfg(SKILLS)
    if name == "torch":
        with mock.patch.object(sim, "make", lambda cfg, **kw: _make(cfg, kernels="torch", **kw)):
            env = make_env(task_cfg, seed)
    else:
        env = make_env(task_cfg, seed, compile=name == "c+compile")
    return env, scripted_team(env)


_make = sim.make


def cpu_ms_per_step(env, team_b, steps: int) -> float:
    """CPU ms per step of ``env.step`` with team B scripted and team A hovering (zero actions)."""
    zero = env.zero_actions()
    t = time.process_time()
    for _ in range(steps):
        env.step({"team_a": zero["team_a"], "team_b": team_b(env, None, 1)})
    return (time.process_time() - t) / steps * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-compile", action="store_true", help="skip the compiled build")
    args = parser.parse_args()
    torch.set_num_threads(1)
    names = ["torch", "c"] + ([] if args.no_compile else ["c+compile"])
    builds = {}
    for name in names:
        t = time.perf_counter()
        builds[name] = build(name, seed=2)
        cpu_ms_per_step(*builds[name], 20)  # warm-up
        print(f"{name}: built in {time.perf_counter() - t:.1f} s", flush=True)
    times: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(args.rounds):
        for name in names:
            times[name].append(cpu_ms_per_step(*builds[name], args.steps))
    ref = statistics.median(times["torch"])
    print(f"\n{'build':<10} {'CPU ms/step (median)':>22} {'all rounds':>26} {'x torch':>8}")
    for name in names:
        med = statistics.median(times[name])
        rounds = " ".join(f"{t:.2f}" for t in times[name])
        print(f"{name:<10} {med:>22.2f} {rounds:>26} {ref / med:>8.2f}")


if __name__ == "__main__":
    main()
