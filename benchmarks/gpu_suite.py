"""Every registered task on one GPU within a wall budget: env steps/s, training samples/s, CUDA graph capture.

    python benchmarks/gpu_suite.py --json runs/gpu_suite.json            # one GPU, at most --budget-s (480 s)
    python benchmarks/gpu_suite.py --json runs/gpu_suite.json --smoke    # tiny sizes on the CPU: the suite's own test

Per task (``sim.tasks.TASKS``), in this order, each within what is left of the task's share of the budget:

- env steps/s of ``env.step`` (random actions, action checks deferred as a training rollout runs them) at 4096 and
  65,536 envs, eager, then compiled last (``sim.make(..., compile=True)``: a cold compile takes minutes);
- whether one step is captured in a CUDA graph (masked resets, host constants made on the device: the method and
  :class:`DeviceConstants` of ``cuda_graph_capture.py``), and the replay's env steps/s;
- training samples/s with updates: the task's recipe runner (``configs/recipe/<task>.yaml``; a pipeline or
  co-self-play recipe is timed with ``algo=ppo``), env not compiled, DAgger and evaluation off, the median of
  ``samples_per_s`` (collect + update) over a few iterations after the first.

Each task runs in a child process with a hard timeout, so a crash, an out-of-memory or a hang costs that task's
remaining cells (printed with the reason), never the suite; cells already measured come back as they finish
(JSON lines). A size that does not fit the time left (estimated from the smaller one) is skipped with the reason.
Prints a markdown table; writes every cell with its note to ``--json`` (after each task, so a killed suite keeps
what it measured).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

SIZES = (4096, 65536)
SMOKE_SIZES = (8, 32)
COLUMNS = ("eager", "compiled", "graph", "train")


# --------------------------------------------------------------------------- child: one task's cells
def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def _step_rate(task: str, n: int, device, compile: bool, deadline: float) -> tuple[float, float]:
    """``(env steps/s, seconds per step)`` of ``task`` at ``n`` envs: two warm-up steps, then up to 20 timed."""
    import torch

    import sim

    env = sim.make(task, num_envs=n, device=str(device), seed=0, compile=compile)
    env.defer_action_checks = True
    env.reset()
    act = env.sample_actions()
    for _ in range(2):  # a compiled env compiles here
        env.step(act)
    _sync(device)
    t0, steps = time.perf_counter(), 0
    while steps < 20 and (steps < 3 or time.perf_counter() < min(deadline, t0 + 5.0)):
        env.step(act)
        steps += 1
    _sync(device)
    dt = (time.perf_counter() - t0) / steps
    del env
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return n / dt, dt


def _graph_capture(task: str, n: int, device) -> tuple[float | None, str]:
    """Whether one masked step of ``task`` is captured in a CUDA graph; the replay's env steps/s if so."""
    import torch

    import sim

    env = sim.make(task, num_envs=n, device=str(device), seed=0)
    reason = env.masked_reset_support()
    if reason is not None:
        return None, f"no: masked resets unsupported ({reason})"
    env.masked_resets = True
    env.defer_action_checks = True
    env.reset()
    act = env.sample_actions()
    if device.type != "cuda":  # the masked, sync-free step runs; a capture needs CUDA
        env.step(act)
        return None, "n/a: no CUDA device (the masked step ran)"
    from cuda_graph_capture import capture_step, warm_up

    warm_up(env, act)
    try:
        graph = capture_step(env, act)
    except Exception as exc:  # noqa: BLE001 - the reason is the result
        return None, f"no: {type(exc).__name__}: {str(exc).splitlines()[0][:100]}"
    graph.replay()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(20):
        graph.replay()
    torch.cuda.synchronize()
    return 20 * n / (time.perf_counter() - t0), "yes"


def _train_rate(task: str, n: int, device, iterations: int) -> tuple[float, str]:
    """Median ``samples_per_s`` (collect + update) of the task's recipe runner over ``iterations`` after the first."""
    from omegaconf import OmegaConf

    from training import pipeline
    from training.config import compose

    base = [f"task={task}", f"device={device}", "wandb.mode=disabled", "train.progress=false"]
    base += ["train.eval_every=0", "train.checkpoint_every=0", "imitation.expert=none", "sim.compile=false"]
    cfg = OmegaConf.to_container(compose(base), resolve=True)
    kind, note = pipeline.runner_kind(cfg), "recipe"
    if kind not in ("ppo", "selfplay", "sac"):  # several runs in turn (pipeline, co-self-play): time a PPO run
        note = f"{kind} recipe, as algo=ppo"
        cfg = OmegaConf.to_container(compose([*base, "algo=ppo", "runner=ppo"]), resolve=True)
        kind = "ppo"
    with tempfile.TemporaryDirectory() as runs:
        cfg.update({"num_envs": n, "runs_dir": runs})
        runner = pipeline.runner_class(kind)(cfg)
        obs = runner.env.reset()
        rates = []
        for _ in range(iterations + 1):
            obs, row = runner.train_iteration(obs)
            rates.append(float(row["samples_per_s"]))
    rollout = cfg["train"]["rollout_steps"]
    return statistics.median(rates[1:]), f"{note}: {kind}, {n} x {rollout} steps"


def child(tasks: list[str], args) -> None:
    """Measure ``tasks`` in turn, each within its share of what is left until ``args.end`` (a wall-clock time)."""
    import torch

    from training.config import COMPILE_CACHE

    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(COMPILE_CACHE))  # warm compiles on reruns
    device = torch.device(args.device)
    for i, task in enumerate(tasks):
        share = min(args.task_cap_s, (args.end - time.time() - 2.0) / (len(tasks) - i))
        print(json.dumps({"task": task, "start": time.time(), "deadline": time.time() + share}), flush=True)
        _measure(task, device, args, time.perf_counter() + share, task in args.compile_tasks)
        print(json.dumps({"task": task, "done": True}), flush=True)


def _measure(task: str, device, args, deadline: float, compile: bool) -> None:
    import torch

    sizes, small = args.sizes, args.sizes[0]
    left = lambda: deadline - time.perf_counter()  # noqa: E731

    def emit(cell: str, value: float | None, note: str = "") -> None:
        # One cell as a JSON line: the parent keeps it even if this process dies later.
        print(json.dumps({"task": task, "cell": cell, "value": value, "note": note}), flush=True)

    def guarded(cell: str, run, estimate: float = 0.0):
        if left() <= 0:
            emit(cell, None, "skipped: the task's share of the budget is spent")
            return None
        if estimate > left():
            emit(cell, None, f"skipped: needs ~{estimate:.0f} s, {left():.0f} s of the task's share left")
            return None
        try:
            return run()
        except torch.cuda.OutOfMemoryError:
            emit(cell, None, "out of GPU memory")
        except Exception as exc:  # noqa: BLE001 - one cell's failure is that cell's result
            emit(cell, None, f"failed: {type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:100]}")
        return None

    def steps(compiled: bool) -> None:
        estimate = 0.0  # the smallest size is always tried
        for n in sizes:
            cell = f"{'compiled' if compiled else 'eager'} {n}"
            out = guarded(cell, lambda n=n: _step_rate(task, n, device, compiled, deadline), estimate)
            if out is None:
                return
            emit(cell, out[0])
            # The next size: building, 2 warm-up and 3 timed steps, from this step time scaled by the env count.
            estimate = 8 * out[1] * (sizes[-1] / n)

    steps(False)
    out = guarded(f"graph {small}", lambda: _graph_capture(task, small, device))
    if out is not None:
        emit(f"graph {small}", out[0], out[1])
    out = guarded(f"train {small}", lambda: _train_rate(task, small, device, args.iterations))
    if out is not None:
        emit(f"train {small}", out[0], out[1])
    if compile:
        steps(True)
    else:
        for n in sizes:
            emit(f"compiled {n}", None, "skipped: not compiled in this run (--compile-tasks)")


# --------------------------------------------------------------------------- parent: budget, children, table
def _pump(stream, put) -> None:
    """Every line of ``stream`` to ``put``, then None (the stream ended)."""
    for line in stream:
        put(line)
    put(None)


def run_all(tasks: list[str], args, save) -> dict[str, dict[str, dict]]:
    """Every task's cells, from child processes: one runs the tasks in turn; where it dies or overruns a task's
    share (killed then), that task's missing cells say why and a new child goes on with the others. ``save(results)``
    after each task."""
    results: dict[str, dict[str, dict]] = {t: {} for t in tasks}
    remaining = list(tasks)
    while remaining and time.time() < args.end - 5.0:
        cmd = [sys.executable, __file__, "--child", *remaining, "--device", args.device, "--end", f"{args.end:.1f}"]
        cmd += ["--sizes", *map(str, args.sizes), "--iterations", str(args.iterations)]
        cmd += ["--task-cap-s", str(args.task_cap_s), "--compile-tasks", *sorted(args.compile_tasks)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        lines: queue.Queue = queue.Queue()
        errors: list[str] = []
        threading.Thread(target=_pump, args=(proc.stdout, lines.put), daemon=True).start()
        threading.Thread(target=_pump, args=(proc.stderr, errors.append), daemon=True).start()
        current, deadline, why, started = None, args.end + 15.0, "", False
        while True:
            try:
                line = lines.get(timeout=1.0)
            except queue.Empty:
                if time.time() > deadline + 15.0:  # its share and 15 s of grace: a hang
                    proc.kill()
                    why = f"timed out: killed {time.time() - deadline:.0f} s past the task's share of the budget"
                    break
                continue
            if line is None:  # the child ended
                proc.wait()
                if current is not None:
                    tail = next((e.strip() for e in reversed(errors) if e.strip()), "")
                    why = f"crashed (exit {proc.returncode}): {tail[:100]}"
                break
            with contextlib.suppress(json.JSONDecodeError, KeyError, TypeError):
                rec = json.loads(line)
                if "start" in rec:
                    current, deadline, started = rec["task"], rec["deadline"], True
                    t0 = time.time()
                elif "done" in rec:
                    print(f"{rec['task']}: {time.time() - t0:.0f} s", flush=True)
                    remaining.remove(rec["task"])
                    current = None
                    save(results)
                else:
                    results[rec["task"]][rec["cell"]] = {"value": rec["value"], "note": rec["note"]}
        if current is not None:
            print(f"{current}: {why}", flush=True)
            results[current]["why"] = {"value": None, "note": why}
            remaining.remove(current)
        elif not started:  # the child failed before its first task: a second one would too
            tail = next((e.strip() for e in reversed(errors) if e.strip()), "")
            for task in remaining:
                results[task]["why"] = {"value": None, "note": f"the suite's child failed: {tail[:100]}"}
            return results
    for task in remaining:
        results[task]["why"] = {"value": None, "note": "budget spent"}
    return results


def _fmt(cell: dict | None) -> str:
    if cell is None:
        return ""
    value, note = cell["value"], cell["note"]
    if value is None:
        return note
    text = f"{value:,.0f}"
    return f"{text} ({note})" if note and note not in ("yes",) else (f"yes, {text}" if note == "yes" else text)


def table(results: dict[str, dict[str, dict]], sizes: tuple[int, ...]) -> str:
    small = sizes[0]
    head = [*(f"eager {n}" for n in sizes), *(f"compiled {n}" for n in sizes), f"train {small}", f"graph {small}"]
    lines = [
        "| task | " + " | ".join(f"{h} (steps/s)" if h.split()[0] in ("eager", "compiled") else h for h in head) + " |",
        "|---|" + "---:|" * len(head),
    ]
    for task, cells in results.items():
        why = cells.get("why")  # the task's child died or overran its share: the cells it did not reach
        lines.append(f"| {task} | " + " | ".join(_fmt(cells.get(h, why)) for h in head) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", type=Path, help="write every cell (value, note) here")
    p.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU, a ~2 minute budget: the suite's test")
    p.add_argument("--device", default=None, help="cuda (default) or cpu (--smoke)")
    p.add_argument("--budget-s", type=float, default=None, help="hard wall budget of the suite (480; --smoke 110)")
    p.add_argument("--task-cap-s", type=float, default=120.0, help="at most this per task (its share may be less)")
    p.add_argument("--tasks", nargs="+", default=None, help="these tasks only (default: every registered task)")
    p.add_argument("--sizes", type=int, nargs="+", default=None, help=f"env counts (default {SIZES})")
    p.add_argument("--compile-tasks", nargs="*", default=None, help="compile only these (default all; --smoke one)")
    p.add_argument("--iterations", type=int, default=None, help="timed training iterations after the first (3)")
    p.add_argument("--child", nargs="+", default=None, help=argparse.SUPPRESS)
    p.add_argument("--end", type=float, default=0.0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.device = args.device or ("cpu" if args.smoke else "cuda")
    args.sizes = tuple(args.sizes or (SMOKE_SIZES if args.smoke else SIZES))
    args.iterations = args.iterations or (1 if args.smoke else 3)
    if args.child:
        args.compile_tasks = set(args.compile_tasks or ())
        child(args.child, args)
        return 0
    from sim.tasks import TASKS

    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("no CUDA device: run on a GPU, or --smoke (tiny sizes on the CPU)")
            return 2
    budget = args.budget_s or (110.0 if args.smoke else 480.0)
    tasks = list(args.tasks or TASKS)
    args.compile_tasks = set(tasks if args.compile_tasks is None and not args.smoke else args.compile_tasks or [])
    if args.smoke and not args.compile_tasks:
        args.compile_tasks = {"point_reach"} & set(tasks)  # one compile: minutes per task on a CPU
    start = time.time()
    args.end = start + budget - 5.0  # 5 s to print and write
    meta = {"device": args.device, "sizes": list(args.sizes), "budget_s": budget, "smoke": args.smoke}

    def save(results: dict) -> None:
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"meta": meta, "tasks": results}, indent=1))

    results = run_all(tasks, args, save)
    save(results)
    print()
    print(table(results, args.sizes))
    print(f"\n{len(tasks)} tasks in {time.time() - start:.0f} s of a {budget:.0f} s budget ({args.device})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
