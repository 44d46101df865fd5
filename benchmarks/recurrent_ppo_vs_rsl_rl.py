"""covey's recurrent PPO against rsl_rl's on memory_reach: the same task, budget and settings.

    pip install rsl-rl-lib==5.5.1          # not a covey dependency; only this cross-check needs it
    python benchmarks/recurrent_ppo_vs_rsl_rl.py                        # 2 x 1.0M env steps, ~10 min
    python benchmarks/recurrent_ppo_vs_rsl_rl.py --iterations 4 --every 2 --num-envs 32   # smoke run

Both learners train a GRU actor (128 units, MLP [128, 128] after it; observation normalisation)
on the 5-value ``policy`` entry and a feed-forward critic (MLP [128, 128]) on the privileged
``state`` entry, with the same PPO settings (covey's ``PPOCfg`` defaults: lr 3e-4 with the
KL-adaptive schedule, 5 epochs x 4 minibatches, clip 0.2, gamma 0.99, lambda 0.95, entropy 0.003,
initial action std e^-1), ``--num-envs`` envs x ``--rollout-steps`` steps per iteration. rsl_rl sees
the task through a minimal ``VecEnv`` adapter defined here (the full adapters are in sim/adapters/).
Every ``--every`` iterations each policy is evaluated deterministically on 256 fresh episodes
(success: the final distance below 0.1 m). The two learners alternate blocks of iterations, so
machine load hits both alike. The last line is ``final_success covey=<x> rsl_rl=<y>``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

EVAL_EPISODES = 256


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iterations", type=int, default=120, help="PPO iterations per learner")
    p.add_argument("--every", type=int, default=10, help="iterations between evaluations")
    p.add_argument("--num-envs", type=int, default=256)
    p.add_argument("--rollout-steps", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--torch-threads", type=int, default=1)
    args = p.parse_args(argv)
    if min(args.iterations, args.every, args.num_envs, args.rollout_steps) < 1:
        p.error("all sizes must be >= 1")
    return args


class MemoryReachVecEnv:
    """memory_reach as an rsl_rl ``VecEnv``: observation groups ``policy`` and ``critic`` (the
    privileged ``state``), actions ``[E, 2]``, rewards and dones ``[E]``, ``time_outs`` in extras."""

    def __init__(self, env) -> None:
        from tensordict import TensorDict

        self._td = TensorDict
        self.env = env
        self.num_envs = env.num_envs
        self.num_actions = 2
        self.max_episode_length = env.max_episode_steps
        self.device = env.device
        self.cfg: dict = {}
        self._obs = env.reset()

    @property
    def episode_length_buf(self) -> torch.Tensor:
        return self.env.episode_step

    @episode_length_buf.setter
    def episode_length_buf(self, value: torch.Tensor) -> None:
        self.env.episode_step = value.to(self.env.episode_step)

    def _wrap(self, obs: dict):
        group = obs["robot"]
        return self._td({"policy": group["policy"][:, 0], "critic": group["state"][:, 0]}, batch_size=[self.num_envs])

    def get_observations(self):
        return self._wrap(self._obs)

    def step(self, actions: torch.Tensor):
        self._obs, reward, terminated, truncated, info = self.env.step({"robot": actions.clamp(-1, 1).unsqueeze(1)})
        extras = {"time_outs": truncated, "log": {}}
        if "episode" in info:
            extras["log"]["/success"] = info["episode"]["metrics/success"]
        return self._wrap(self._obs), reward["robot"][:, 0], terminated | truncated, extras


def rsl_rl_cfg(args: argparse.Namespace) -> dict:
    import math

    std = math.exp(-1.0)  # covey's PolicyCfg.init_log_std
    return {
        "num_steps_per_env": args.rollout_steps,
        "save_interval": 10**9,
        "obs_groups": {"actor": ["policy"], "critic": ["critic"]},
        "check_for_nan": True,
        "algorithm": {
            "class_name": "rsl_rl.algorithms.PPO",
            "num_learning_epochs": 5,
            "num_mini_batches": 4,
            "clip_param": 0.2,
            "gamma": 0.99,
            "lam": 0.95,
            "value_loss_coef": 1.0,
            "entropy_coef": 0.003,
            "learning_rate": 3e-4,
            "max_grad_norm": 1.0,
            "use_clipped_value_loss": True,
            "schedule": "adaptive",
            "desired_kl": 0.01,
        },
        "actor": {
            "class_name": "rsl_rl.models.RNNModel",
            "hidden_dims": [128, 128],
            "activation": "elu",
            "obs_normalization": True,
            "rnn_type": "gru",
            "rnn_hidden_dim": 128,
            "rnn_num_layers": 1,
            "distribution_cfg": {"class_name": "rsl_rl.modules.GaussianDistribution", "init_std": std},
        },
        "critic": {
            "class_name": "rsl_rl.models.MLPModel",
            "hidden_dims": [128, 128],
            "activation": "elu",
            "obs_normalization": True,
        },
    }


def evaluate_covey(runner) -> float:
    metrics, _ = runner.evaluate()
    return float(metrics.get("metrics/success", float("nan")))


@torch.inference_mode()
def evaluate_rsl(actor, seed: int) -> float:
    import sim

    env = sim.make("memory_reach", num_envs=EVAL_EPISODES, seed=seed)
    wrapped = MemoryReachVecEnv(env)
    env.reset(seed=seed)
    wrapped._obs = env.observe()
    # The training rollout's hidden state is set aside (the eval batch has other envs) and restored.
    saved = actor.get_hidden_state()
    actor.reset()
    was_training = actor.training
    actor.eval()
    obs = wrapped.get_observations()
    for _ in range(env.max_episode_steps - 1):  # the last sample: the state before the final action
        obs, *_ = wrapped.step(actor(obs))
    success = (env.distance() < env.cfg.success_radius).float().mean()
    actor.reset(hidden_state=saved)
    actor.train(was_training)
    return float(success)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.torch_threads)
    torch.manual_seed(args.seed)
    from rsl_rl.runners import OnPolicyRunner

    import sim
    from training.config import compose
    from training.runner import Runner

    tmp = tempfile.mkdtemp(prefix="covey_rsl_")
    overrides = [
        "task=memory_reach",
        "algo=ppo",
        "algo.policy.memory=gru",
        "algo.policy.memory_critic=false",
        f"num_envs={args.num_envs}",
        f"seed={args.seed}",
        f"train.rollout_steps={args.rollout_steps}",
        f"train.total_steps={args.iterations * args.num_envs * args.rollout_steps}",
        f"train.eval_envs={EVAL_EPISODES}",
        "train.random_episode_start=true",
        "train.progress=false",
        "wandb.mode=disabled",
        f"runs_dir={tmp}",
    ]
    from omegaconf import OmegaConf

    covey = Runner(OmegaConf.to_container(compose(overrides), resolve=True))
    obs = covey.env.reset()
    obs = covey.env.randomize_episode_progress()

    rsl_env = MemoryReachVecEnv(sim.make("memory_reach", num_envs=args.num_envs, seed=args.seed))
    rsl = OnPolicyRunner(rsl_env, rsl_rl_cfg(args), log_dir=None, device="cpu")
    first = True

    print(f"memory_reach, {args.num_envs} envs x {args.rollout_steps} steps per iteration, GRU 128, 1 thread")
    print(f"{'env steps':>10s} {'covey success':>14s} {'rsl_rl success':>15s} {'covey s':>8s} {'rsl_rl s':>9s}")
    times = {"covey": 0.0, "rsl": 0.0}
    done = 0
    final = (float("nan"), float("nan"))
    while done < args.iterations:
        block = min(args.every, args.iterations - done)
        t0 = time.perf_counter()
        for _ in range(block):
            obs, _ = covey.train_iteration(obs)
        times["covey"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        rsl.learn(block, init_at_random_ep_len=first)
        first = False
        times["rsl"] += time.perf_counter() - t0
        done += block
        final = (evaluate_covey(covey), evaluate_rsl(rsl.alg.get_policy(), args.seed + 10_000))
        steps = done * args.num_envs * args.rollout_steps
        print(f"{steps:10,d} {final[0]:14.3f} {final[1]:15.3f} {times['covey']:8.1f} {times['rsl']:9.1f}", flush=True)
    print(f"final_success covey={final[0]:.4f} rsl_rl={final[1]:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
