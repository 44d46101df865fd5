"""Inference latency of the shipped policies: onnxruntime (1 thread) vs torch (1 thread).

    python benchmarks/onnx_latency.py                                  # every assets/policies/*/policy.onnx
    python benchmarks/onnx_latency.py --models runs/x.onnx --samples 200

Per model: the median and p99 latency of one single-sample call (``obs [1, obs_dim]``, what a
robot's policy node runs every control tick) and the throughput of batch-1024 calls, for the ONNX
model in onnxruntime and for the same network in torch eager (the deterministic actor of the
checkpoint next to it, ``policy.pt``). Observations are recorded-like: the normaliser's mean plus
noise. The last line is ``onnx_vs_torch_single_latency_ratio=<float>`` (torch median / onnx median
of the first model; above 1 means onnxruntime is faster).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="*", default=None, help="ONNX files (default: assets/policies/*/policy.onnx)")
    p.add_argument("--samples", type=int, default=2000, help="timed single-sample calls")
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--batches", type=int, default=50, help="timed batch calls")
    return p.parse_args(argv)


def timed(fn: Callable[[], object], n: int) -> np.ndarray:
    """Per-call wall times (s) of ``n`` calls after 20 untimed warm-up calls."""
    for _ in range(20):
        fn()
    out = np.empty(n)
    for i in range(n):
        t = time.perf_counter()
        fn()
        out[i] = time.perf_counter() - t
    return out


def onnx_input_types(path: Path) -> dict[str, str]:
    from policies.export import onnx_runtime_session

    return {i.name: i.type for i in onnx_runtime_session(path).get_inputs()}


def bench_model(path: Path, args: argparse.Namespace) -> dict[str, float]:
    from policies.export import onnx_runtime_session
    from training.checkpoint import build_models_from_checkpoint, load_checkpoint

    session = onnx_runtime_session(path)
    (inp,) = session.get_inputs()
    obs_dim = int(inp.shape[-1])
    name = inp.name
    ckpt = path.with_suffix(".pt")
    actor = None
    if ckpt.is_file():
        models = build_models_from_checkpoint(load_checkpoint(ckpt)).eval().requires_grad_(False)
        ac = next(iter(models.values()))
        actor = ac.deterministic_actor()
        mean, std = ac.obs_norm.mean.numpy(), ac.obs_norm.var.sqrt().numpy()
    else:
        mean, std = np.zeros(obs_dim, np.float32), np.ones(obs_dim, np.float32)
    rng = np.random.default_rng(0)
    one = (mean + std * rng.standard_normal(obs_dim)).astype(np.float32)[None]
    batch = (mean + std * rng.standard_normal((args.batch, obs_dim))).astype(np.float32)
    res: dict[str, float] = {}
    ort_one = timed(lambda: session.run(["command"], {name: one}), args.samples)
    ort_batch = timed(lambda: session.run(["command"], {name: batch}), args.batches)
    res["onnx_median_us"], res["onnx_p99_us"] = np.median(ort_one) * 1e6, np.percentile(ort_one, 99) * 1e6
    res["onnx_batch_samples_per_s"] = args.batch / np.median(ort_batch)
    if actor is not None:
        one_t, batch_t = torch.from_numpy(one), torch.from_numpy(batch)
        with torch.inference_mode():
            t_one = timed(lambda: actor(one_t), args.samples)
            t_batch = timed(lambda: actor(batch_t), args.batches)
        res["torch_median_us"], res["torch_p99_us"] = np.median(t_one) * 1e6, np.percentile(t_one, 99) * 1e6
        res["torch_batch_samples_per_s"] = args.batch / np.median(t_batch)
    return res


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    models = (
        [Path(m) for m in args.models] if args.models else sorted((ROOT / "assets" / "policies").glob("*/policy.onnx"))
    )
    if not models:
        print("no ONNX models found", file=sys.stderr)
        return 1
    batch_col = f"batch-{args.batch} samples/s"
    print(f"{'model':40s} {'runtime':12s} {'median us':>10s} {'p99 us':>10s} {batch_col:>22s}")
    first_ratio = None
    for path in models:
        inputs = onnx_input_types(path)
        if list(inputs.values()) != ["tensor(float)"]:  # images and recurrent state: not this benchmark's case
            print(f"skip {path}: inputs {inputs} (this benchmark times single float-vector models)")
            continue
        r = bench_model(path, args)
        name = str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
        for rt in ("onnx", "torch"):
            if f"{rt}_median_us" in r:
                print(
                    f"{name:40s} {rt:12s} {r[f'{rt}_median_us']:10.1f} {r[f'{rt}_p99_us']:10.1f}"
                    f" {r[f'{rt}_batch_samples_per_s']:22,.0f}"
                )
        if first_ratio is None and "torch_median_us" in r:
            first_ratio = r["torch_median_us"] / r["onnx_median_us"]
    print(f"onnx_vs_torch_single_latency_ratio={first_ratio if first_ratio is not None else float('nan'):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
