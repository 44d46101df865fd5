"""Specs: what an environment's agent groups observe and do.

A spec is the single record of names, shapes, slices and units; the training code, the ONNX
metadata and the ROS policy node all read it instead of hard-coding indices.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

from covey_common.spec import GRAPH_DTYPE_NAMES, GRAPH_ROLES, OBS_KINDS, ObsTerm, choice_from_action

_GRAPH_DTYPES = {role: getattr(torch, name) for role, name in GRAPH_DTYPE_NAMES.items()}  # role -> torch dtype


@dataclass(frozen=True)
class ObsEntry:
    """One observation entry of a group, ``Tensor[num_envs, n_agents, *shape]``.

    ``kind`` says what the entry is, and so which encoder a policy gives it:

    * ``"vector"``: float32 ``[D]``. ``terms`` lists the parts of one frame in concatenation order;
      with ``history > 1`` the entry holds ``history`` frames, oldest first
      (``shape[-1] == history * frame_size``).
    * ``"image"``: uint8 ``[H, W, C]`` (C = 3 for RGB, 1 for grey, any other count for a stack of
      masks such as a bird's-eye view), 0-255, row 0 at the top; kept uint8 through storage and
      export (the policy scales it).
    * ``"graph"``: one part (``role``, one of :data:`GRAPH_ROLES`) of a graph named ``graph``, a
      fixed-size padded tensor: ``node_features [N, F]``, ``node_vectors [N, V, 3]``, ``node_types [N]``,
      ``node_mask [N]``, ``edge_index [E, 2]``, ``edge_types [E]``, ``edge_mask [E]``; a graph
      encoder gets all parts of one graph together.

    ``units`` and ``description`` are free text for the ONNX metadata and the ROS side.
    """

    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32
    terms: tuple[ObsTerm, ...] = ()
    history: int = 1
    kind: str = "vector"
    graph: str = ""  # graph entries: the graph this part belongs to
    role: str = ""  # graph entries: one of GRAPH_ROLES
    units: str = ""
    description: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        if self.kind not in OBS_KINDS:
            raise ValueError(f"observation kind must be one of {OBS_KINDS}, got {self.kind!r}")
        if self.kind == "vector" and (len(self.shape) != 1 or self.dtype != torch.float32):
            raise ValueError(f"a vector entry is float32 [D], got {self.dtype} {self.shape}")
        if self.kind == "image" and (len(self.shape) != 3 or self.dtype != torch.uint8 or self.shape[2] < 1):
            raise ValueError(f"an image entry is uint8 [H, W, C], got {self.dtype} {self.shape}")
        if self.kind == "graph":
            if not self.graph or self.role not in GRAPH_ROLES:
                raise ValueError(f"a graph entry needs a graph name and a role in {GRAPH_ROLES}, got {self.role!r}")
            if self.dtype != _GRAPH_DTYPES[self.role]:
                raise ValueError(f"graph part {self.role!r} has dtype {_GRAPH_DTYPES[self.role]}, got {self.dtype}")

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
        out = {
            "shape": list(self.shape),
            "dtype": dtype_name(self.dtype),
            "kind": self.kind,
            "history": self.history,
            "terms": [asdict(t) for t in self.terms],
        }
        if self.kind == "graph":
            out.update(graph=self.graph, role=self.role)
        if self.units:
            out["units"] = self.units
        if self.description:
            out["description"] = self.description
        return out


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``"float32"`` (the name numpy, ONNX metadata and the ROS side use)."""
    return str(dtype).removeprefix("torch.")


@dataclass(frozen=True)
class GroupSpec:
    """An agent group: how many agents, what each observes, and its action space.

    ``actor_obs`` names the observation entries the actor sees (default: the one vector
    ``"policy"``); ``critic_obs`` those of a centralised/privileged critic (default: ``"state"``,
    the global state). An IPPO critic (``algo.critic_input=policy``) sees ``actor_obs`` instead.
    Actions are ``[num_envs, n_agents, action_dim]`` in [-1, 1];
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
    actor_obs: tuple[str, ...] = ("policy",)
    critic_obs: tuple[str, ...] = ("state",)

    def __post_init__(self) -> None:
        for which in ("actor_obs", "critic_obs"):
            missing = [k for k in getattr(self, which) if k not in self.observations]
            if missing:
                entries = sorted(self.observations)
                raise ValueError(f"GroupSpec.{which} names {missing}, not among the entries {entries}")

    def action_prior_matrix(self) -> torch.Tensor:
        """``action_prior`` as a dense ``[obs_dim, action_dim]`` matrix over the first actor entry
        (zeros when none; ``[0, action_dim]`` when that entry is not a vector)."""
        first = self.observations[self.actor_obs[0]]
        obs_dim = first.shape[0] if first.kind == "vector" else 0
        if self.action_prior and not obs_dim:
            raise ValueError(f"an action prior needs a vector as the first actor entry, got {first.kind}")
        prior = torch.zeros(obs_dim, self.action_dim)
        for obs_index, action_index, gain in self.action_prior:
            prior[obs_index, action_index] += gain
        return prior

    @property
    def state_shape(self) -> tuple[int, ...]:
        return self.observations["state"].shape

    def inputs(self, which: str) -> dict[str, ObsEntry]:
        """The entries of ``"actor"`` or ``"critic"`` (name -> entry, in order)."""
        names = self.actor_obs if which == "actor" else self.critic_obs
        return {k: self.observations[k] for k in names}


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


def choices_from_actions(action: torch.Tensor, nvec: tuple[int, ...]) -> torch.Tensor:
    """``action [..., len(nvec)]`` in [-1, 1] -> option indices ``[..., len(nvec)]`` (long), head by head."""
    return torch.stack([choice_from_action(action[..., k], n) for k, n in enumerate(nvec)], -1)
