"""Specs: what an environment's agent groups observe and do.

A spec is the single record of names, shapes, slices and units; the training code, the ONNX
metadata and the ROS policy node all read it instead of hard-coding indices.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch


@dataclass(frozen=True)
class ObsTerm:
    """A named slice of a flat observation vector (one time step, before history stacking)."""

    name: str
    size: int
    unit: str = ""
    frame: str = ""
    description: str = ""


@dataclass(frozen=True)
class ObsEntry:
    """One observation entry of a group, ``Tensor[num_envs, n_agents, *shape]``.

    ``terms`` lists the parts of one frame in concatenation order; with ``history > 1`` the entry
    holds ``history`` frames, oldest first, so ``shape[-1] == history * frame_size``.
    """

    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32
    terms: tuple[ObsTerm, ...] = ()
    history: int = 1

    @property
    def frame_size(self) -> int:
        return sum(t.size for t in self.terms)

    def slices(self) -> dict[str, slice]:
        """Name -> slice within one frame."""
        out, start = {}, 0
        for term in self.terms:
            out[term.name] = slice(start, start + term.size)
            start += term.size
        return out

    def to_dict(self) -> dict:
        """JSON-friendly layout (for ONNX metadata and the ROS node)."""
        return {
            "shape": list(self.shape),
            "dtype": str(self.dtype).removeprefix("torch."),
            "history": self.history,
            "terms": [asdict(t) for t in self.terms],
        }


@dataclass(frozen=True)
class GroupSpec:
    """An agent group: how many agents, what each observes, and its action space.

    Observation entry ``"policy"`` is what the actor sees; ``"state"`` is the privileged global
    state for a centralised critic. Actions are ``[num_envs, n_agents, action_dim]`` in [-1, 1];
    ``action_scale``/``action_names``/``action_units`` say what +-1 means physically.

    ``action_prior`` is an optional fixed linear map the task suggests to policies (residual
    learning): entries ``(obs_index, action_index, gain)`` of the ``policy`` observation, meaning
    ``action[action_index] += gain * obs[obs_index]`` before the learned part is added. Policies
    bake it into their actor (so exported models include it); the env itself never applies it.

    ``action_nvec`` marks a group whose actions are discrete choices: action ``k`` picks one of
    ``action_nvec[k]`` options, sent as the evenly spaced value ``-1 + 2 i / (n - 1)`` (still a
    float in [-1, 1], so the step contract is unchanged); :func:`choice_from_action` reads it back.
    """

    n_agents: int
    observations: dict[str, ObsEntry]
    action_dim: int
    action_names: tuple[str, ...]
    action_units: tuple[str, ...]
    action_scale: tuple[float, ...]
    action_low: float = -1.0
    action_high: float = 1.0
    action_prior: tuple[tuple[int, int, float], ...] = ()
    action_nvec: tuple[int, ...] = ()  # options per action for discrete choices; () = continuous

    def action_prior_matrix(self) -> torch.Tensor:
        """``action_prior`` as a dense ``[policy_obs_dim, action_dim]`` matrix (zeros when none)."""
        (obs_dim,) = self.observations["policy"].shape
        prior = torch.zeros(obs_dim, self.action_dim)
        for obs_index, action_index, gain in self.action_prior:
            prior[obs_index, action_index] += gain
        return prior

    @property
    def state_shape(self) -> tuple[int, ...]:
        return self.observations["state"].shape


@dataclass(frozen=True)
class EnvSpec:
    """Static description of a task instance."""

    task: str
    groups: dict[str, GroupSpec]
    control_dt: float  # s, one env.step
    physics_dt: float  # s, one physics integration step
    max_episode_steps: int
    metadata: dict = field(default_factory=dict)

    @property
    def control_hz(self) -> float:
        return 1.0 / self.control_dt


def choice_from_action(action: torch.Tensor, n: int) -> torch.Tensor:
    """A discrete action value in [-1, 1] -> the index (long) of one of ``n`` options (see GroupSpec)."""
    return torch.round((action.clamp(-1.0, 1.0) + 1.0) * (0.5 * (n - 1))).long()


def choices_from_actions(action: torch.Tensor, nvec: tuple[int, ...]) -> torch.Tensor:
    """``action [..., len(nvec)]`` in [-1, 1] -> option indices ``[..., len(nvec)]`` (long), head by head."""
    return torch.stack([choice_from_action(action[..., k], n) for k, n in enumerate(nvec)], -1)
