"""``info["final_obs"]`` after a step that auto-reset some envs: built where it is read, not in every step.

A step that resets ``k`` of ``num_envs`` envs returns two observations that differ only in those ``k`` rows: the
new episodes' first one (``obs``) and the finished episodes' last one (``info["final_obs"]``). Building the second
as full tensors copies every observation entry on every such step (cable_load at 4096 envs: 11 MB, ~10% of a
2-thread step), while PPO reads only the critic's entries of it and a throughput benchmark nothing.
:class:`FinalObs` keeps the returned ``obs`` and the ``k`` rows as they were before the reset, and builds an
entry's full tensor at its first read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from torch import Tensor

Obs = dict[str, dict[str, Tensor]]


def take_envs(obs: Mapping[str, Mapping[str, Tensor]], env_ids: Tensor) -> Obs:
    """The rows ``env_ids [k]`` of every entry, as copies ``[k, ...]``."""
    return {g: {key: v.index_select(0, env_ids) for key, v in entries.items()} for g, entries in obs.items()}


class FinalObs(Mapping[str, Mapping[str, Tensor]]):
    """The observation before a step's auto-reset: ``final[group][entry]`` is ``Tensor[num_envs, ...]``, equal to
    the step's returned ``obs`` except at the reset envs, where it holds their finished episode's last observation.

    Args:
        obs: the observation ``step`` returns (after the reset). Its tensors are never written after ``step``
            returns them (the :class:`sim.core.env.MultiAgentEnv` contract), so reading this later is exact.
        env_ids: ``[k]`` the envs the step reset.
        rows: ``rows[group][entry] [k, ...]``: those envs' observation before the reset.

    An entry is built (``obs`` with the ``k`` rows put back: a full copy) at its first read and cached, so
    reading it twice copies once. It reads like the plain ``dict`` of dicts it replaces (``Mapping``).
    """

    def __init__(self, obs: Mapping[str, Mapping[str, Tensor]], env_ids: Tensor, rows: Obs) -> None:
        self.obs, self.env_ids, self.rows = obs, env_ids, rows
        self._groups = {g: _FinalGroup(entries, env_ids, rows[g]) for g, entries in obs.items()}

    def map(self, fn: Callable[[Obs], Obs], obs: Obs | None = None) -> FinalObs:
        """This final observation through ``fn``, a function of an observation that works env by env (regrouping
        agents, say), still built where read; ``obs``: ``fn(self.obs)``, where the caller has computed it already."""
        return FinalObs(fn(self.obs) if obs is None else obs, self.env_ids, fn(self.rows))

    def __getitem__(self, group: str) -> Mapping[str, Tensor]:
        return self._groups[group]

    def __iter__(self) -> Iterator[str]:
        return iter(self._groups)

    def __len__(self) -> int:
        return len(self._groups)

    def __repr__(self) -> str:
        return f"FinalObs({ {g: list(entries) for g, entries in self._groups.items()} })"


class _FinalGroup(Mapping[str, Tensor]):
    """One group of :class:`FinalObs`: each entry built at its first read."""

    def __init__(self, obs: Mapping[str, Tensor], env_ids: Tensor, rows: Mapping[str, Tensor]) -> None:
        self._obs, self._env_ids, self._rows = obs, env_ids, rows
        self._built: dict[str, Tensor] = {}

    def __getitem__(self, key: str) -> Tensor:
        built = self._built.get(key)
        if built is None:
            built = self._built[key] = self._obs[key].index_copy(0, self._env_ids, self._rows[key])
        return built

    def __iter__(self) -> Iterator[str]:
        return iter(self._obs)

    def __len__(self) -> int:
        return len(self._obs)
