"""HEPi vs EMPN vs Transformer graph actors on a hepi task, at the same budget, several seeds.

    python benchmarks/hepi_architectures.py --task hepi_insertion --seeds 0 1
    python benchmarks/hepi_architectures.py --task hepi_rope_closing --ppo-steps 200000
    python benchmarks/hepi_architectures.py --task hepi_insertion --smoke      # seconds, checks the plumbing

For each architecture (``algo.policy.graph_actor``) and seed it runs, as a user would,
``train.py`` (the same settings for all: DAgger from the task's scripted expert for
``--dagger-rounds`` rounds, then ``--ppo-steps`` PPO env steps; ``--dagger-rounds 0`` = PPO only) and
then ``evaluate.py`` on the final checkpoint (``--episodes`` episodes, deterministic actions, the
zero-action and scripted-expert baselines beside it), once with the training config and once per ``--extra-eval``
override set (e.g. held-out peg shapes). Runs go one after another (a 2-core machine cannot run
two without slowing both). The result is a markdown table of success rate and return, mean over
seeds with the 95% interval over the pooled episodes (Wilson for success), also written as JSON to
``--out``. The trained runs stay under ``runs/hepi_arch/<task>/<arch>_s<seed>/``.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARCHS = ("hepi", "empn", "transformer")


def run(cmd: list[str], log: Path) -> str:
    """Run ``cmd`` in the repository root; its output goes to ``log``; returns stdout (raises on failure)."""
    t = time.time()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}) after {time.time() - t:.0f} s: {' '.join(cmd)}; see {log}")
    return proc.stdout


def train(args: argparse.Namespace, arch: str, seed: int) -> Path:
    runs_dir = ROOT / "runs" / "hepi_arch" / args.task / f"{arch}_s{seed}"
    cmd = [
        sys.executable, "train.py", f"task={args.task}", f"num_envs={args.num_envs}", f"seed={seed}",
        f"algo.policy.graph_actor={arch}", f"algo.policy.graph_action_vectors={args.action_vectors}",
        f"algo.policy.graph_latent={args.latent}", f"algo.policy.graph_layers={args.layers}",
        f"train.total_steps={args.ppo_steps}", "train.eval_every=0", "train.progress=false",
        "wandb.mode=disabled", f"runs_dir={runs_dir}",
    ]  # fmt: skip
    if args.dagger_rounds:
        cmd += [
            "imitation.expert=task", f"imitation.rounds={args.dagger_rounds}", f"imitation.steps={args.dagger_steps}",
        ]  # fmt: skip
    cmd += args.train_override
    run(cmd, runs_dir / "train.log")
    ckpts = sorted(runs_dir.glob(f"{args.task}/*/checkpoints/latest.pt"))
    if not ckpts:
        raise SystemExit(f"no checkpoint under {runs_dir}")
    return ckpts[-1]


def evaluate(args: argparse.Namespace, ckpt: Path, overrides: list[str], label: str) -> dict:
    cmd = [sys.executable, "evaluate.py", f"checkpoint={ckpt}", f"episodes={args.episodes}", "expert=true", *overrides]
    out = run(cmd, ckpt.parents[1] / f"eval_{label}.log")
    return json.loads(out.strip().splitlines()[-1])


def wilson(successes: float, n: int) -> tuple[float, float]:
    if n == 0:
        return math.nan, math.nan
    z, p = 1.96, successes / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return mid - half, mid + half


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="hepi_insertion")
    p.add_argument("--archs", nargs="+", default=list(ARCHS), choices=ARCHS)
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    p.add_argument("--num-envs", type=int, default=128)
    p.add_argument("--dagger-rounds", type=int, default=6)
    p.add_argument("--dagger-steps", type=int, default=100)
    p.add_argument("--ppo-steps", type=int, default=100_000)
    p.add_argument("--latent", type=int, default=32)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--action-vectors", type=int, default=None, help="default: 2 for insertion, else 1")
    p.add_argument("--episodes", type=int, default=200)
    p.add_argument("--success-key", default="success_rate")
    p.add_argument("--extra-eval", action="append", default=[], help="label=override[;override...]")
    p.add_argument("--train-override", action="append", default=[], help="extra train.py override")
    p.add_argument("--out", default=None, help="JSON results (default runs/hepi_arch/<task>/results.json)")
    p.add_argument("--smoke", action="store_true", help="tiny sizes: checks that everything runs")
    args = p.parse_args()
    if args.action_vectors is None:
        args.action_vectors = 2 if args.task.startswith("hepi_insertion") else 1
    if args.smoke:
        args.num_envs, args.dagger_rounds, args.dagger_steps, args.ppo_steps, args.episodes = 8, 1, 4, 256, 8
        args.seeds = args.seeds[:1]
    evals = [("train", [])] + [
        (e.split("=", 1)[0], e.split("=", 1)[1].split(";") if "=" in e else []) for e in args.extra_eval
    ]
    results: dict[str, dict[str, list[dict]]] = {a: {label: [] for label, _ in evals} for a in args.archs}
    for seed in args.seeds:  # seeds outermost: a cut-short run still compares every architecture
        for arch in args.archs:
            t = time.time()
            ckpt = train(args, arch, seed)
            for label, ov in evals:
                rep = evaluate(args, ckpt, ov, label)
                results[arch][label].append(rep)
                print(
                    f"{arch} seed {seed} [{label}]: success {rep.get(args.success_key)} "
                    f"return {rep.get('episode_return')} ({time.time() - t:.0f} s)",
                    flush=True,
                )
    print(f"\n{args.task}: DAgger {args.dagger_rounds}x{args.dagger_steps} steps x {args.num_envs} envs, then "
          f"{args.ppo_steps:,} PPO steps; latent {args.latent}, {args.layers} layers; {len(args.seeds)} seed(s), "
          f"{args.episodes} episodes each\n")  # fmt: skip
    print("| policy | eval | success (95% CI) | return (mean over seeds) | zero action | scripted expert |")
    print("|---|---|---|---|---|---|")
    table = {}
    for arch in args.archs:
        for label, _ in evals:
            reps = results[arch][label]
            n = sum(int(r["episodes"]) for r in reps)
            succ = sum(float(r[args.success_key]) * int(r["episodes"]) for r in reps)
            lo, hi = wilson(succ, n)
            ret = sum(float(r["episode_return"]) for r in reps) / len(reps)
            base = (reps[0].get("baseline") or {}).get(args.success_key)
            expert = (reps[0].get("expert_baseline") or {}).get(args.success_key)
            table[f"{arch}/{label}"] = {"success": succ / n, "ci95": [lo, hi], "return": ret, "episodes": n,
                                        "per_seed": [r[args.success_key] for r in reps]}  # fmt: skip
            print(f"| {arch} | {label} | {succ / n:.3f} [{lo:.3f}, {hi:.3f}] | {ret:.3f} | {base} | {expert} |")
    out = Path(args.out) if args.out else ROOT / "runs" / "hepi_arch" / args.task / "results.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "table": table}, indent=2, default=str))
    print(f"\nresults: {out}")


if __name__ == "__main__":
    main()
