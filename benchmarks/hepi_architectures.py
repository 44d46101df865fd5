"""HEPi vs EMPN vs Transformer graph actors on a hepi task: the same budget, several seeds, one table.

    python benchmarks/hepi_architectures.py --seeds 0 1 2 3 4 --jobs 2 --extra-eval "heldout=task.shapes=[star,heart]"
    python benchmarks/hepi_architectures.py --archs hepi --algos ppo trpl --seeds 0 1 2 3 4 --jobs 2
    python benchmarks/hepi_architectures.py --dagger-rounds 4 --algos ppo --steps 49152    # DAgger, then PPO
    python benchmarks/hepi_architectures.py --smoke                                       # seconds: the plumbing

For each architecture (``algo.policy.graph_actor``), algorithm (``algo=ppo|trpl``) and seed it runs ``train.py``
as a user would, with the same settings for all: by default the seeded comparison's protocol (sim/tasks/hepi/
README.md), pure RL from scratch for ``--steps`` env steps (64 envs x 64-step rollouts, one torch thread;
``--dagger-rounds N`` first imitates the task's scripted expert), then ``evaluate.py`` on the final checkpoint
(``latest.pt``: the best one is chosen on evaluation episodes; ``--episodes`` episodes, deterministic actions, the
scripted expert beside it), once with the training config and once per ``--extra-eval`` override set (e.g.
held-out peg shapes). ``--jobs`` runs go at once (each takes one core). Runs and reports stay under
``runs/hepi_arch/<task>/<arch>_<algo>_s<seed>/`` (``eval_<label>.json``); a run or an evaluation already there is
reused, so a cut-short sweep continues where it stopped and a finished one only prints its table.
``--eval-only`` trains nothing: it evaluates the finished runs and leaves out the rest (safe beside a running sweep).

The table gives, per architecture and algorithm, each seed's success and the mean over seeds with Student's t 95%
interval over seeds (seeds, not episodes, are the samples: a pooled-episode interval would ignore how much runs
differ), the task error and the return with the same interval, and the wall time of a run. JSON goes to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from training.sweep import flat_config, last_value, read_metrics, t_ci95  # noqa: E402

ARCHS = ("hepi", "empn", "transformer")
ERROR_KEYS = ("keypoint_err_m", "task_error_m")  # insertion's, rope's and cloth's task error
EVAL_ERROR_KEYS = ("eval/metrics/keypoint_err_m", "eval/metrics/task_error")  # the same in metrics.csv


def run(cmd: list[str], log: Path) -> None:
    """Run ``cmd`` in the repository root, its output to ``log``; raises SystemExit on failure."""
    t = time.time()
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as f:
        code = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, check=False).returncode
    if code != 0:
        raise SystemExit(f"failed ({code}) after {time.time() - t:.0f} s: {' '.join(cmd)}; see {log}")


def train_command(args: argparse.Namespace, arch: str, algo: str, seed: int, runs_dir: Path) -> list[str]:
    """The ``train.py`` command of one run (the README's command of its row, with the seed filled in)."""
    cmd = [
        sys.executable, "train.py", f"task={args.task}", f"algo={algo}", f"algo.policy.graph_actor={arch}",
        f"algo.policy.graph_action_vectors={args.action_vectors}", f"num_envs={args.num_envs}",
        f"train.total_steps={args.steps}", f"train.rollout_steps={args.rollout_steps}",
        f"train.eval_every={args.eval_every}", f"train.eval_envs={args.num_envs}", f"seed={seed}",
        "torch_threads=1", "train.progress=false", f"runs_dir={runs_dir}",
        "train.max_minutes=0",  # the budget is env steps: a recipe's time limit must not cut a slow task's run
    ]  # fmt: skip
    if args.dagger_rounds:
        cmd += [
            "imitation.expert=task",
            f"imitation.rounds={args.dagger_rounds}",
            f"imitation.steps={args.dagger_steps}",
        ]
    else:
        cmd += ["imitation.expert=none"]
    return cmd + args.train_override


def one_run(
    args: argparse.Namespace, arch: str, algo: str, seed: int, evals: list[tuple[str, list[str]]]
) -> dict | None:
    """Train (unless done) and evaluate (unless done) one run; returns ``{label: report}`` plus ``run``, the
    run's own metrics (wall time, training-time evaluation curve). ``None`` with ``--eval-only`` for a run that
    is not finished (absent, or still training)."""
    runs_dir = ROOT / args.runs_root / args.task / f"{arch}_{algo}_s{seed}"
    ckpts = sorted(runs_dir.glob(f"{args.task}/*/checkpoints/latest.pt"))
    if ckpts:
        metrics = run_metrics(ckpts[-1].parents[1])
        if args.eval_only and metrics["steps"] < args.steps:
            print(f"{arch} {algo} seed {seed}: not finished ({metrics['steps']:,} env steps), left out", flush=True)
            return None
        check_reused(ckpts[-1].parents[1], metrics["steps"], args, arch, algo, seed)
    elif args.eval_only:
        print(f"{arch} {algo} seed {seed}: not trained, left out", flush=True)
        return None
    else:
        t = time.time()
        run(train_command(args, arch, algo, seed, runs_dir), runs_dir / "train.log")
        print(f"{arch} {algo} seed {seed}: trained in {(time.time() - t) / 60:.1f} min", flush=True)
        ckpts = sorted(runs_dir.glob(f"{args.task}/*/checkpoints/latest.pt"))
        if not ckpts:
            raise SystemExit(f"no checkpoint under {runs_dir}")
        metrics = run_metrics(ckpts[-1].parents[1])
    out: dict[str, Any] = {"run": metrics}
    for label, overrides in evals:
        report = runs_dir / f"eval_{label}.json"
        if not report.is_file():
            cmd = [sys.executable, "evaluate.py", f"checkpoint={ckpts[-1]}", f"episodes={args.episodes}",
                   f"report={report}", *(["expert=true"] if label == "train" else []), *overrides]  # fmt: skip
            run(cmd, runs_dir / f"eval_{label}.log")
        out[label] = json.loads(report.read_text())
    return out


def check_reused(run_dir: Path, steps: int, args: argparse.Namespace, arch: str, algo: str, seed: int) -> None:
    """Refuse to reuse a run trained with other settings than this sweep's (its ``config.yaml``), or one that
    stopped at ``steps`` env steps, short of the sweep's."""
    cfg = flat_config(run_dir)
    want = {"algo.name": algo, "algo.policy.graph_actor": arch, "seed": seed, "train.total_steps": args.steps,
            "num_envs": args.num_envs}  # fmt: skip
    have = {key: cfg.get(key) for key in want}
    if want != have:
        raise SystemExit(f"{run_dir} was trained with {have}, this sweep wants {want}: move it or pass --runs-root")
    if steps < args.steps:  # a run stopped early (killed, or a time limit) keeps a latest.pt of fewer steps
        raise SystemExit(f"{run_dir} stopped at {steps:,} of {args.steps:,} env steps: remove it to train it again")


def run_metrics(run_dir: Path) -> dict[str, Any]:
    """A run's wall time (min), env steps, and its training-time evaluation success (``curve``) and task error
    (``error_curve``, m) at 1/4, 1/2, 3/4 and all of the run."""
    columns = read_metrics(run_dir)

    def quarters(key: str) -> list[float]:
        values = columns.get(key, np.array([]))
        curve = values[np.isfinite(values)].tolist()
        return [curve[max(0, round(len(curve) * q) - 1)] for q in (0.25, 0.5, 0.75, 1.0)] if curve else []

    error_key = next((k for k in EVAL_ERROR_KEYS if k in columns), "")
    steps = int(last_value(columns["global_step"]))
    return {"wall_min": last_value(columns["wall_time"]) / 60, "steps": steps,
            "curve": quarters("eval/metrics/success"), "error_curve": quarters(error_key)}  # fmt: skip


def over_seeds(values: list[float]) -> dict[str, Any]:
    """``{"mean", "ci95"}``: the mean of per-seed values with Student's t 95% interval over seeds."""
    mean, low, high = t_ci95(values)
    return {"mean": float(mean), "ci95": [float(low), float(high)]}


def summarize(results: dict[tuple[str, str], list[dict]], labels: list[str], success_key: str) -> dict[str, Any]:
    """Per ``(arch, algo)``: each seed's success per label, and the mean with its t 95% interval over seeds;
    the task error and return the same way (training shapes), and the mean wall time (``results``: one_run's
    outputs, seed order)."""
    table = {}
    for (arch, algo), runs in results.items():
        row: dict[str, Any] = {"seeds": len(runs)}
        for label in labels:
            values = [float(r[label][success_key]) for r in runs]
            row[label] = {"per_seed": values, **over_seeds(values)}
        train = [r["train"] for r in runs]
        error_key = next((k for k in ERROR_KEYS if k in train[0]), None)
        # The task error and the return get the same interval over seeds as success: on a task where no actor
        # succeeds within the budget (the rope's winding), they are what tells the actors apart.
        errors = [float(r[error_key]) for r in train] if error_key else None
        row["error_m"] = {"per_seed": errors, **over_seeds(errors)} if errors else None
        returns = [float(r["episode_return"]) for r in train]
        row["return"] = {"per_seed": returns, **over_seeds(returns)}
        row["wall_min"] = sum(r["run"]["wall_min"] for r in runs) / len(runs)
        row["curves"] = [r["run"]["curve"] for r in runs]
        # The error curve over seeds: how fast each actor learns (sample efficiency), where success may lag.
        row["error_curves"] = [r["run"].get("error_curve") or [] for r in runs]
        if all(len(e) == 4 for e in row["error_curves"]):
            row["error_curve"] = [over_seeds([e[q] for e in row["error_curves"]]) for q in range(4)]
        row["expert"] = (train[0].get("expert_baseline") or {}).get(success_key)
        table[f"{arch}/{algo}"] = row
    return table


def markdown(table: dict[str, Any], labels: list[str]) -> str:
    pct = lambda x: f"{100 * x:.1f}"  # noqa: E731
    head = "| actor / algorithm | seeds | " + " | ".join(f"{lab}: mean [95% CI over seeds]" for lab in labels)
    head += " | per seed (train) | task error [95% CI] | return [95% CI] | min a run |"
    lines = [head, "|" + "---|" * (len(labels) + 6)]
    for name, row in table.items():
        # One seed has no interval over seeds: its cells give the value alone.
        span = (lambda lo, hi, f: f" [{f(lo)}, {f(hi)}]") if row["seeds"] > 1 else (lambda lo, hi, f: "")
        ci = {lab: [min(max(x, 0.0), 1.0) for x in row[lab]["ci95"]] for lab in labels}  # a rate: [0, 1]
        cells = [f"{pct(row[lab]['mean'])}{span(*ci[lab], pct)}" for lab in labels]
        per_seed = " / ".join(pct(v) for v in row["train"]["per_seed"])
        e, cm = row["error_m"], lambda x: f"{100 * x:.2f}"
        err = f"{cm(e['mean'])}{span(*e['ci95'], cm)} cm" if e else "-"
        ret = f"{row['return']['mean']:.2f}{span(*row['return']['ci95'], lambda x: f'{x:.2f}')}"
        lines.append(f"| {name} | {row['seeds']} | " + " | ".join(cells)
                     + f" | {per_seed} | {err} | {ret} | {row['wall_min']:.1f} |")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="hepi_insertion")
    p.add_argument("--archs", nargs="+", default=list(ARCHS), choices=ARCHS)
    p.add_argument("--algos", nargs="+", default=["trpl"], choices=("ppo", "trpl", "mappo"))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    p.add_argument("--jobs", type=int, default=1, help="runs at once (each uses one torch thread)")
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--steps", "--ppo-steps", type=int, default=262_144, help="RL env steps a run")
    p.add_argument("--rollout-steps", type=int, default=64)
    p.add_argument("--eval-every", type=int, default=4, help="training-time evaluation every N iterations")
    p.add_argument("--dagger-rounds", type=int, default=0, help="0: pure RL (the protocol)")
    p.add_argument("--dagger-steps", type=int, default=100)
    p.add_argument("--action-vectors", type=int, default=None, help="default: 2 for insertion, else 1")
    p.add_argument("--episodes", type=int, default=200)
    p.add_argument("--success-key", default="success_rate")
    p.add_argument("--extra-eval", action="append", default=[], help="label=override[;override...]")
    p.add_argument("--train-override", action="append", default=[], help="extra train.py override")
    p.add_argument("--runs-root", default="runs/hepi_arch", help="runs go to <root>/<task>/<arch>_<algo>_s<seed>")
    p.add_argument("--out", default=None, help="JSON results (default <runs-root>/<task>/results.json)")
    p.add_argument("--smoke", action="store_true", help="tiny sizes: checks that everything runs")
    p.add_argument("--eval-only", action="store_true", help="train nothing; evaluate and report finished runs")
    args = p.parse_args()
    if args.action_vectors is None:
        args.action_vectors = 2 if args.task.startswith("hepi_insertion") else 1
    if args.smoke:
        args.num_envs, args.steps, args.rollout_steps, args.episodes, args.eval_every = 8, 64, 8, 4, 0
        args.seeds, args.runs_root = args.seeds[:2], "runs/hepi_arch_smoke"
    evals = [("train", [])] + [
        (e.split("=", 1)[0], e.split("=", 1)[1].split(";") if "=" in e else []) for e in args.extra_eval
    ]
    jobs = [(arch, algo, seed) for seed in args.seeds for algo in args.algos for arch in args.archs]
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:  # seeds outermost: a cut run compares them all
        done = list(pool.map(lambda j: one_run(args, *j, evals), jobs))
    results: dict[tuple[str, str], list[dict]] = {}
    for (arch, algo, _), out in zip(jobs, done, strict=True):
        if out is not None:
            results.setdefault((arch, algo), []).append(out)
    if not results:
        raise SystemExit("no finished run to report")
    labels = [label for label, _ in evals]
    table = summarize(results, labels, args.success_key)
    how = f"DAgger {args.dagger_rounds} x {args.dagger_steps} steps, then " if args.dagger_rounds else "pure RL, "
    print(f"\n{args.task}: {how}{args.steps:,} env steps ({args.num_envs} envs); seeds {args.seeds}; "
          f"{args.episodes} evaluation episodes of each final checkpoint\n")  # fmt: skip
    print(markdown(table, labels))
    out = Path(args.out) if args.out else ROOT / args.runs_root / args.task / "results.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "table": table}, indent=2, default=str))
    print(f"\nresults: {out}")


if __name__ == "__main__":
    main()
