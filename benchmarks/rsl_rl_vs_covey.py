"""rsl_rl's OnPolicyRunner through sim.adapters.RslRlVecEnv against covey's MAPPO on cable_load.

    pip install -e .[adapters]                                   # rsl-rl-lib (and the other peers)
    python benchmarks/rsl_rl_vs_covey.py                         # 2 x 60 iterations of 256 x 64 steps
    python benchmarks/rsl_rl_vs_covey.py --iterations 2 --num-envs 16 --rollout-steps 16 --eval-episodes 4  # smoke

Same task, budget and settings for both learners: ``--num-envs`` envs x ``--rollout-steps`` steps per
iteration, shared-weight actor MLP [128, 128] ELU on the 150-value ``policy`` entry plus cable_load's fixed
PID action prior (covey's actor adds it; rsl_rl gets it from the adapter, ``action_prior=True``), a
centralised critic MLP [128, 128] on the privileged ``state``, observation normalisation, covey's
``algo=mappo`` PPO settings (lr 5e-5, 3 epochs x 4 minibatches, clip 0.1, value clip 0.1, entropy 0.001,
gamma 0.99, lambda 0.95, grad norm 1, initial action std e^-2.5) with two changes that rsl_rl cannot
follow: a constant learning rate (covey's default is linear decay) and no value-target normalisation.
rsl_rl's networks are re-initialised as covey's are (orthogonal, gain sqrt 2 hidden, 0.01 at the actor's
output, 1 at the critic's, zero biases): with PyTorch's default init the actor's first residuals are
large and rsl_rl starts far from the prior.

At the end each policy, the zero action and the prior alone run ``--eval-episodes`` full evaluation
episodes (noise and randomisation off, the same seeds), scored as ``evaluate.py`` scores them: load
position / orientation error averaged over the last 5 s. The last line is
``final_pos_err_m covey=<x> rsl_rl=<y> zero=<z> prior=<p>``.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TASK = "cable_load"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iterations", type=int, default=60, help="PPO iterations per learner")
    p.add_argument("--num-envs", type=int, default=256)
    p.add_argument("--rollout-steps", type=int, default=64)
    p.add_argument("--eval-episodes", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--torch-threads", type=int, default=1)
    args = p.parse_args(argv)
    if min(args.iterations, args.num_envs, args.rollout_steps, args.eval_episodes) < 1:
        p.error("all sizes must be >= 1")
    return args


def check_same_settings(ppo_cfg, rsl_cfg: dict) -> None:
    """Stop if configs/algo/mappo.yaml and the rsl_rl builder's defaults (sim.adapters.rsl_rl_train_cfg) drift apart."""
    alg, actor = rsl_cfg["algorithm"], rsl_cfg["actor"]
    pairs = {
        "lr": (ppo_cfg.lr, alg["learning_rate"]),
        "epochs": (ppo_cfg.epochs, alg["num_learning_epochs"]),
        "minibatches": (ppo_cfg.minibatches, alg["num_mini_batches"]),
        "clip": (ppo_cfg.clip, alg["clip_param"]),
        "value_clip": (ppo_cfg.value_clip, alg["clip_param"]),
        "entropy_coef": (ppo_cfg.entropy_coef, alg["entropy_coef"]),
        "gamma": (ppo_cfg.gamma, alg["gamma"]),
        "lam": (ppo_cfg.lam, alg["lam"]),
        "max_grad_norm": (ppo_cfg.max_grad_norm, alg["max_grad_norm"]),
        "init_std": (math.exp(ppo_cfg.policy.init_log_std), actor["distribution_cfg"]["init_std"]),
        "actor_hidden": (list(ppo_cfg.policy.actor_hidden), actor["hidden_dims"]),
        "critic_hidden": (list(ppo_cfg.policy.critic_hidden), rsl_cfg["critic"]["hidden_dims"]),
    }
    differ = {k: v for k, v in pairs.items() if not (v[0] == v[1] or isinstance(v[0], float) and math.isclose(*v))}
    if differ:
        raise SystemExit(f"covey's algo=mappo and rsl_rl_train_cfg differ (covey, rsl_rl): {differ}")


def init_like_covey(model: torch.nn.Module, out_gain: float) -> None:
    """Orthogonal init as ``policies.mlp.build_mlp``: gain sqrt 2 on hidden layers, ``out_gain`` on the last."""
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    with torch.no_grad():
        for i, layer in enumerate(linears):
            torch.nn.init.orthogonal_(layer.weight, gain=out_gain if i == len(linears) - 1 else math.sqrt(2))
            torch.nn.init.zeros_(layer.bias)


def covey_runner(args: argparse.Namespace, tmp: str):
    from omegaconf import OmegaConf

    from training.config import compose
    from training.runner import Runner

    overrides = [
        f"task={TASK}",
        "algo=mappo",
        "algo.schedule=constant",
        "algo.normalize_value=false",
        f"num_envs={args.num_envs}",
        f"seed={args.seed}",
        f"train.rollout_steps={args.rollout_steps}",
        f"train.total_steps={args.iterations * args.num_envs * args.rollout_steps}",
        "train.max_minutes=0",
        "train.eval_every=0",
        "train.random_episode_start=true",
        "train.progress=false",
        "wandb.mode=disabled",
        f"runs_dir={tmp}",
    ]
    return Runner(OmegaConf.to_container(compose(overrides), resolve=True))


class RslPolicy:
    """rsl_rl's deterministic actor (plus the adapter's prior) as an ``obs -> {group: actions}`` policy."""

    def __init__(self, actor: torch.nn.Module, prior: torch.Tensor) -> None:
        from tensordict import TensorDict

        self.actor, self.prior, self._td = actor, prior, TensorDict

    def __call__(self, obs: dict) -> dict[str, torch.Tensor]:
        policy = obs["mavs"]["policy"]  # [E, A, D]
        rows = self._td(
            {"policy": policy.reshape(-1, policy.shape[-1])}, batch_size=[policy.shape[0] * policy.shape[1]]
        )
        learned = self.actor(rows).reshape(*policy.shape[:2], -1)
        return {"mavs": (policy @ self.prior + learned).clamp(-1.0, 1.0)}


def evaluate(policies: dict, args: argparse.Namespace) -> dict[str, dict]:
    import sim
    from training.evaluation import run_episodes, success_criteria, summarize

    env = sim.make(TASK, num_envs=args.eval_episodes, seed=args.seed, **sim.evaluation_overrides(TASK))
    success = success_criteria(env)
    out = {}
    for name, make_policy in policies.items():
        out[name] = summarize(run_episodes(env, make_policy(env), args.eval_episodes, seed=args.seed + 10_000), success)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.torch_threads)
    torch.manual_seed(args.seed)
    from rsl_rl.runners import OnPolicyRunner

    import sim
    from sim.adapters import RslRlVecEnv, rsl_rl_train_cfg
    from training.evaluation import actor_policy, prior_policy, zero_policy

    covey = covey_runner(args, tempfile.mkdtemp(prefix="covey_rsl_"))
    obs = covey.env.reset()
    obs = covey.env.randomize_episode_progress()

    rsl_env = RslRlVecEnv(sim.make(TASK, num_envs=args.num_envs, seed=args.seed), action_prior=True)
    rsl_cfg = rsl_rl_train_cfg(rsl_env.obs_groups, num_steps_per_env=args.rollout_steps)  # covey's mappo settings
    check_same_settings(covey.ppo_cfg, rsl_cfg)
    rsl = OnPolicyRunner(rsl_env, rsl_cfg, log_dir=None, device="cpu")
    init_like_covey(rsl.alg.actor.mlp, 0.01)
    init_like_covey(rsl.alg.critic.mlp, 1.0)

    steps = args.iterations * args.num_envs * args.rollout_steps
    size = f"{args.num_envs} envs x {args.rollout_steps} steps"
    print(f"{TASK}: {args.iterations} iterations of {size} ({steps:,} env steps) per learner")
    t0 = time.perf_counter()
    for _ in range(args.iterations):
        obs, _ = covey.train_iteration(obs)
    t_covey = time.perf_counter() - t0
    t0 = time.perf_counter()
    rsl.learn(args.iterations, init_at_random_ep_len=True)
    t_rsl = time.perf_counter() - t0
    print(f"training time: covey {t_covey:.0f} s, rsl_rl {t_rsl:.0f} s")

    rsl_actor = rsl.get_inference_policy()
    prior = rsl_env.spec.action_prior_matrix()
    policies = {
        "covey": lambda env: actor_policy({g: ac.deterministic_actor() for g, ac in covey.models.items()}, env),
        "rsl_rl": lambda env: RslPolicy(rsl_actor, prior),
        "zero": zero_policy,
        "prior": prior_policy,
    }
    with torch.inference_mode():
        results = evaluate(policies, args)
    keys = ("pos_err_m", "ori_err_deg", "success_rate", "terminated_rate", "episode_return")
    print(f"{'policy':8s} " + " ".join(f"{k:>26s}" for k in keys))
    for name, res in results.items():
        cells = []
        for k in keys:
            lo, hi = res.get(f"{k}_ci95", [None, None])
            cells.append(
                f"{res.get(k, float('nan')):10.4g} [{lo:.4g}, {hi:.4g}]" if lo is not None else f"{res[k]:26.4g}"
            )
        print(f"{name:8s} " + " ".join(f"{c:>26s}" for c in cells))
    line = " ".join(f"{name}={res['pos_err_m']:.4f}" for name, res in results.items())
    print(f"final_pos_err_m {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
