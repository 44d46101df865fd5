"""Can a task's ``env.step`` be captured in a CUDA graph, and how fast does the graph replay? (GPU only)

    python benchmarks/cuda_graph_capture.py                       # cable_load, 4096 and 65,536 envs
    python benchmarks/cuda_graph_capture.py --num-envs 4096 --compile

A capture fails at any host synchronisation or host-to-device copy inside the step. The env runs with
``masked_resets`` (no ``nonzero``) and ``defer_action_checks`` (no NaN check on the host), and the capture
runs under :class:`DeviceConstants`: Python numbers written into tensors (``x[ids] = 0.0``) and small
``torch.tensor(..., device=cuda)`` constants, which resets use, are built on the device by fill kernels
instead of copied from the host. This is a measuring tool, not a training path: the state is not fed
back between replays (the env rebinds its state tensors every step, so a replay recomputes the same
step from the captured inputs), so the replay time is what a graph-captured step would cost, nothing
more. Printed per size: the uncaptured masked step and the replay, env steps/s.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sim  # noqa: E402


class DeviceConstants(TorchFunctionMode):
    """Host constants made on the device: scalar ``__setitem__`` values and ``torch.tensor(data, device=gpu)``."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is Tensor.__setitem__ and isinstance(args[2], int | float | bool):
            t = args[0]
            args = (t, args[1], torch.full((), args[2], dtype=t.dtype, device=t.device))
        elif func is torch.tensor and str(kwargs.get("device", "cpu")) != "cpu":
            ref = torch.tensor(args[0], dtype=kwargs.get("dtype"))
            dev = kwargs["device"]
            flat = [torch.full((), float(x), dtype=ref.dtype, device=dev) for x in ref.flatten().tolist()]
            return torch.stack(flat).reshape(ref.shape) if flat else torch.empty(ref.shape, device=dev)
        return func(*args, **kwargs)


def warm_up(env, act: dict) -> None:
    """Steps off the capture, on a side stream: compilation (under the mode too, which a compiled function's guards
    see), and the masked reset's one-time check."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(4):
            with DeviceConstants() if i % 2 else contextlib.nullcontext():
                env.step(act)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()


def capture_step(env, act: dict) -> torch.cuda.CUDAGraph:
    """One ``env.step(act)`` captured in a CUDA graph (the env's generator registered with it); raises where the
    step cannot be captured."""
    graph = torch.cuda.CUDAGraph()
    graph.register_generator_state(env.rng.graphsafe_get_state())
    with torch.cuda.graph(graph), DeviceConstants():
        env.step(act)
    torch.cuda.synchronize()
    return graph


def measure(task: str, n: int, compile: bool) -> str:
    env = sim.make(task, num_envs=n, device="cuda", seed=0, compile=compile)
    env.masked_resets = True
    env.defer_action_checks = True
    env.reset()
    act = env.sample_actions()
    warm_up(env, act)
    t = time.perf_counter()
    for _ in range(20):
        env.step(act)
    torch.cuda.synchronize()
    plain = 20 * n / (time.perf_counter() - t)
    try:
        graph = capture_step(env, act)
    except Exception as exc:  # noqa: BLE001 - report why, whatever it is
        why = str(exc).splitlines()[0][:120]
        return f"| {n} | {compile} | {plain:,.0f} | capture failed: {type(exc).__name__}: {why} |"
    graph.replay()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(50):
        graph.replay()
    torch.cuda.synchronize()
    replay = 50 * n / (time.perf_counter() - t)
    return f"| {n} | {compile} | {plain:,.0f} | {replay:,.0f} ({replay / plain:.1f}x) |"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="cable_load")
    p.add_argument("--num-envs", type=int, nargs="+", default=[4096, 65536])
    p.add_argument("--compile", action="store_true", help="sim.make(..., compile=True)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: this benchmark captures CUDA graphs")
        return 2
    print("| num_envs | compiled | masked step, env steps/s | graph replay, env steps/s |")
    print("|---:|---|---:|---:|")
    for n in args.num_envs:
        print(measure(args.task, n, args.compile), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
