"""The step's numerical guard: envs whose observations or rewards hold NaN/inf end at once, rewarded 0, and are
reset (reason ``nonfinite``); logged, then counted in ``info["nonfinite_reset"]``."""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from sim.core.env import MultiAgentEnv, Obs

_LOG = logging.getLogger("covey.sim")


def nonfinite_envs(obs: Obs, reward: dict[str, Tensor], num_envs: int, device: torch.device) -> Tensor:
    """``Tensor[num_envs]`` bool: envs whose float observation entries or rewards hold NaN or inf.

    One sum per env over every float value: NaN and inf survive a sum, and it costs one pass
    (``isfinite().all()`` costs ~25x more on CPU); values so large that their sum overflows float32 (~1e38)
    count as non-finite too. No device sync.
    """
    total = torch.zeros(num_envs, device=device)
    for entries in obs.values():
        for value in entries.values():
            if value.is_floating_point():
                total = total + value.reshape(num_envs, -1).sum(-1)
    for r in reward.values():
        total = total + r.reshape(num_envs, -1).sum(-1)
    return ~torch.isfinite(total)


def zero_rewards_where(
    bad: Tensor, reward: dict[str, Tensor], terms: dict[str, Tensor]
) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """``reward`` (``[num_envs, n_agents]`` each) and ``terms`` (``[num_envs]`` each) with 0 where ``bad``:
    branch-free, so it compiles into the post-physics pass."""
    reward = {name: torch.where(bad.unsqueeze(-1), 0.0, r) for name, r in reward.items()}
    terms = {name: torch.where(bad, 0.0, t) for name, t in terms.items()}
    return reward, terms


def report_nonfinite(env: MultiAgentEnv, bad: Tensor | None, n_bad: int) -> None:
    """Log the envs reset for a non-finite state: every time for the first 10, then at powers of 10
    (``bad`` None: the count since the last check, from masked resets, which know no env indices)."""
    env.nonfinite_resets_total += n_bad
    total = env.nonfinite_resets_total
    if total - n_bad < 10 or math.floor(math.log10(total)) > math.floor(math.log10(max(total - n_bad, 1))):
        envs = bad.nonzero().squeeze(-1)[:5].tolist() if bad is not None else "since the last check"
        _LOG.warning(
            "%s: non-finite state in %d env(s) (first: %s), reset; %d so far (counted in info['nonfinite_reset'])",
            env.task_name,
            n_bad,
            envs,
            total,
        )
