"""Hierarchical low level: one skill policy per skill, chosen per agent by the skill id in its observation.

    low = SkillDispatcher({"pass": pass_actor, "set": set_actor}, skill_names=SKILLS,
                          skill_slice=slice(27, 32), fallback=None)
    action = low(skill_obs)          # skill_obs [E, A, obs_dim] -> action [E, A, act_dim]

The observation carries the commanded skill as a one-hot (``skill_slice``); every skill actor runs
on the whole batch and each agent takes the action of its own skill (a masked sum, no Python
control flow on values), so the dispatcher exports to ONNX as one graph. Agents whose skill has no
actor get ``fallback(skill_obs)``, or zeros without one. Used by drone volleyball (HCSP's skill
layer), where a strategy writes the skill and its target into the observation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor, nn


class SkillDispatcher(nn.Module):
    """Per-agent choice among skill actors by the one-hot skill id in the observation."""

    def __init__(
        self,
        actors: Mapping[str, nn.Module],
        skill_names: Sequence[str],
        skill_slice: slice,
        action_dim: int,
        fallback: nn.Module | None = None,
    ) -> None:
        super().__init__()
        unknown = sorted(set(actors) - set(skill_names))
        if unknown:
            raise ValueError(f"actors for unknown skills {unknown}; skills are {list(skill_names)}")
        if skill_slice.stop - skill_slice.start != len(skill_names):
            raise ValueError(f"skill_slice {skill_slice} does not hold {len(skill_names)} one-hot entries")
        self.skill_names = tuple(skill_names)
        self.skill_slice = skill_slice
        self.action_dim = action_dim
        self.actors = nn.ModuleDict(dict(actors))
        self.fallback = fallback

    def forward(self, obs: Tensor) -> Tensor:
        """``obs [..., obs_dim]`` -> ``action [..., action_dim]`` of each agent's commanded skill."""
        onehot = obs[..., self.skill_slice]  # [..., K]
        covered = torch.zeros_like(onehot[..., :1])
        out = torch.zeros(*obs.shape[:-1], self.action_dim, dtype=obs.dtype, device=obs.device)
        for k, name in enumerate(self.skill_names):  # a fixed set of skills: unrolled in the graph
            if name in self.actors:
                w = onehot[..., k : k + 1]
                out = out + w * self.actors[name](obs)
                covered = covered + w
        if self.fallback is not None:
            out = out + (1.0 - covered) * self.fallback(obs)
        return out
