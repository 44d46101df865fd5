"""The PPO teacher term (training/teacher.py): its KL is the closed-form Gaussian KL, and a run with a trained
teacher pulls a fresh student's actions towards the teacher's (robot soccer's stage-2 distillation by RL)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from training.runner import Runner
from training.teacher import TeacherCfg

ROOT = Path(__file__).resolve().parents[1]


def test_teacher_kl_is_the_gaussian_kl() -> None:
    from training.teacher import Teacher

    t = Teacher.__new__(Teacher)  # the KL needs no checkpoint
    t.cfg, t._log_std_t = TeacherCfg(teacher_std=0.5), math.log(0.5)
    mean, log_std, target = torch.randn(7, 3), torch.randn(3) * 0.3 - 1.0, torch.randn(7, 3)
    ref = torch.distributions.kl_divergence(
        torch.distributions.Normal(mean, log_std.exp()), torch.distributions.Normal(target, torch.tensor(0.5))
    ).sum(-1)
    torch.testing.assert_close(t.kl(mean, log_std, target), ref)
    t.coef = 1.0
    t.cfg = TeacherCfg(kl_target=0.1, coef_decay=0.5)
    t.adapt(1.0)  # far above the target: x1.5, then the decay
    assert t.coef == pytest.approx(0.75)


def _run(tmp_path: Path, name: str, extra: list[str]) -> Runner:
    over = ["task=point_reach", "device=cpu", "torch_threads=1", "wandb.mode=disabled", "train.progress=false"]
    over += ["algo=ppo", "num_envs=32", "train.rollout_steps=16", "train.eval_every=0", "train.eval_envs=16"]
    over += ["algo.policy.actor_hidden=[32,32]", "algo.policy.critic_hidden=[32,32]", f"runs_dir={tmp_path / name}"]
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
        cfg = OmegaConf.to_container(compose(config_name="config", overrides=over + extra), resolve=True)
    runner = Runner(cfg)
    runner.learn()
    return runner


def test_teacher_term_pulls_the_student_to_the_teacher(tmp_path: Path) -> None:
    teacher = _run(tmp_path, "teacher", ["train.total_steps=512", "imitation.expert=task", "imitation.rounds=3",
                                         "imitation.steps=32", "imitation.epochs=20"])  # fmt: skip
    ckpt = teacher.run_dir / "checkpoints" / "imitation.pt"
    final = {}
    for coef in (0.0, 5.0):
        student = _run(tmp_path, f"student{coef}", ["train.total_steps=4096", f"algo.teacher.checkpoint={ckpt}",
                                                    f"algo.teacher.kl_coef={coef}"])  # fmt: skip
        rows = list(csv.DictReader((student.run_dir / "metrics.csv").open()))
        kl = [float(r["losses/teacher_kl"]) for r in rows if r.get("losses/teacher_kl")]
        assert len(kl) == len(rows)
        final[coef] = kl[-1]
    # PPO alone also learns point_reach, but the term is what makes the student act like its teacher.
    assert final[5.0] < 0.5 * final[0.0], final
    assert float(rows[-1]["charts/teacher_coef"]) == pytest.approx(5.0)


def test_teacher_without_a_matching_group_is_refused(tmp_path: Path) -> None:
    teacher = _run(tmp_path, "teacher", ["train.total_steps=512"])
    ckpt = teacher.run_dir / "checkpoints" / "latest.pt"
    with pytest.raises(ValueError, match="no actor for the trained groups"):
        _run(tmp_path, "other", ["task=memory_reach", "train.total_steps=512", f"algo.teacher.checkpoint={ckpt}"])
