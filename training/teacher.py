"""A teacher term for PPO: RL that stays close to trained experts (robot soccer's stage 2, Tirumala et al. 2024).

The paper distils sub-skill experts into one vision agent by RL "with an adaptive KL penalty towards the experts".
With ``algo.teacher.checkpoint=<expert.pt>`` the PPO loss of every group the checkpoint has an actor for gains

    coef * KL( N(mu_student, sigma_student) || N(a_teacher, teacher_std) )      (summed over action dims)

where ``a_teacher`` is the expert's deterministic action on the same step (it reads the entries it was trained on,
e.g. the privileged ``state``, from the observation dict the student also gets; stored with the rollout). A proper
KL between Gaussians pulls the mean towards the teacher and the student's std towards ``teacher_std`` (no incentive
to inflate or collapse it). ``kl_target > 0`` adapts ``coef`` after every update (x1.5 when the KL is above twice the
target, /1.5 below half of it; the rule of PPO's adaptive KL penalty), and ``coef_decay`` anneals it so that RL can
go beyond the teacher. A resumed run restarts ``coef`` from ``kl_coef``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch import Tensor

from training.settings import TeacherCfg  # the settings dataclasses live there (a leaf module)

TEACHER_KEY = "teacher_action"  # the rollout storage entry holding the teacher's action


class Teacher:
    """The loaded teacher actors and the adaptive weight (see the module docstring)."""

    def __init__(self, cfg: TeacherCfg, groups: Mapping[str, int], device: torch.device) -> None:
        """``groups``: the trained groups and their action dims; the teacher must have an actor for at least one.

        Raises:
            ValueError: no matching group, an action-size mismatch, or a recurrent teacher.
        """
        from training.checkpoint import load_policy

        loaded = load_policy(cfg.checkpoint, device=device)
        self.cfg = cfg
        self.coef = cfg.kl_coef
        self.actors = {g: loaded.actors[g] for g in groups if g in loaded.actors}
        if not self.actors:
            raise ValueError(
                f"algo.teacher.checkpoint={cfg.checkpoint}: no actor for the trained groups {sorted(groups)} "
                f"(it has {sorted(loaded.actors)})"
            )
        for g, actor in self.actors.items():
            if hasattr(actor, "reset"):
                raise ValueError(
                    f"algo.teacher.checkpoint={cfg.checkpoint}: group {g!r} is recurrent; teachers are feed-forward"
                )
        self._log_std_t = math.log(cfg.teacher_std)

    @torch.no_grad()
    def action(self, group: str, obs: Mapping[str, Tensor]) -> Tensor:
        """The teacher's deterministic action ``[E, A, act_dim]`` for ``group``'s observation dict."""
        return self.actors[group](obs)

    def kl(self, mean: Tensor, log_std: Tensor, teacher_action: Tensor) -> Tensor:
        """``KL(N(mean, e^log_std) || N(teacher_action, teacher_std))`` summed over the last dim: ``[...]``."""
        lt = self._log_std_t
        var_ratio = torch.exp(2.0 * (log_std - lt))
        gap = (mean - teacher_action).square() * math.exp(-2.0 * lt)
        return (lt - log_std + 0.5 * (var_ratio + gap) - 0.5).sum(-1)

    def adapt(self, kl: float) -> None:
        """After an update: the adaptive rule (when ``kl_target > 0``), then the decay, within the bounds."""
        cfg = self.cfg
        if cfg.kl_target > 0:
            if kl > 2.0 * cfg.kl_target:
                self.coef *= 1.5
            elif kl < 0.5 * cfg.kl_target:
                self.coef /= 1.5
        self.coef = min(cfg.max_coef, max(cfg.min_coef, self.coef * cfg.coef_decay))
