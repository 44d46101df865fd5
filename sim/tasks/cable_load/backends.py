"""What runs cable_load's step: the torch code (the reference, any device) or the C kernels (CPU), chosen once at
construction from ``kernels`` (``sim.kernels``; :func:`select_backend`), installed with ``MultiAgentEnv.use_backend``.

Both implement :class:`CableLoadBackend`: the core's :class:`~sim.core.backend.StepBackend` (apply actions, the
control loop, the post-physics pass, the reset of a few envs, the observations after a reset) plus the step's
observation noise and the reuse of the pass's load errors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import torch
from torch import Tensor

from sim.core.backend import StepBackend
from sim.core.compiled import TorchBackend
from sim.core.native import check_kernels
from sim.tasks.cable_load.config import GROUP
from sim.tasks.cable_load.native import NativeControlLoop, NativePostPhysics, NativeReset
from sim.tasks.cable_load.native import kernels as native_kernels

if TYPE_CHECKING:
    from sim.core.env import Obs
    from sim.tasks.cable_load.env import CableLoadEnv


class CableLoadBackend(StepBackend, Protocol):
    """:class:`~sim.core.backend.StepBackend` plus what cable_load's hooks ask of it.

    ``name``: "torch" or "native" (``CableLoadEnv.kernels``).
    ``step_noise(shape)``: the step's observation noise ``[E, N, frame]`` as a key (int64 ``[1]``, :func:`noise_key`),
    the same on both backends: the torch pass turns it into ``sim.core.native.normal(shape, key)``, the C pass draws
    those numbers in place.
    ``cached_errors()``: the load's position and orientation errors ``([E], [E])`` as the last pass computed them,
    while the state they came from is unchanged, else None. ``forget_errors()``: the state was written in place.
    """

    name: str

    def step_noise(self, shape: torch.Size) -> Tensor: ...

    def cached_errors(self) -> tuple[Tensor, Tensor] | None: ...

    def forget_errors(self) -> None: ...


def noise_key(env: CableLoadEnv) -> Tensor:
    """The step's observation noise as one int64 key drawn from the env's generator (``[1]``, on its device): the
    numbers are ``sim.core.native.normal(shape, key)``'s, which the torch code (on any device) and the C pass (any
    build) compute alike to ~1e-6, so a seed gives the same episodes whichever backend steps (a ``randn`` tensor
    would cost the C pass ~2x the time it takes to draw the numbers in place)."""
    return torch.randint(0, 2**62, (1,), generator=env.rng, device=env.device)


class TorchPhysics(TorchBackend):
    """The torch hooks of :class:`~sim.tasks.cable_load.env.CableLoadEnv` (compiled with ``compile``)."""

    name = "torch"

    def step_noise(self, shape: torch.Size) -> Tensor:
        return noise_key(self.env)

    def cached_errors(self) -> None:
        return None  # the torch pass keeps no errors: env.errors() computes them

    def forget_errors(self) -> None:
        pass


class NativePhysics:
    """The C kernels (:mod:`sim.tasks.cable_load.native`): ``advance`` is the :class:`NativeControlLoop` (which also
    applies the actions), ``evaluate`` the :class:`NativePostPhysics`, ``reset`` the :class:`NativeReset`."""

    name = "native"
    snapshot_constant = True  # configuration, not episode state (state_snapshot)

    def __init__(self, env: CableLoadEnv, loop: NativeControlLoop, post: NativePostPhysics, reset: NativeReset) -> None:
        self.env = env
        self.advance, self.evaluate, self.reset = loop, post, reset

    def apply_actions(self, actions: dict[str, Tensor]) -> None:
        self.advance.apply_actions(actions)

    def reset_rows(self, env_ids: Tensor) -> None:
        self.reset.reset_idx(env_ids)

    def observations_after_reset(self) -> Obs:
        """The state from the C pass (~0.4 ms at 4096 envs, ~3x faster than the compiled ``_state``); in a step's
        auto-reset only the reset envs' rows, written into the state that step's pass made."""
        env, post = self.env, self.evaluate
        ids, state = env._auto_reset_ids, post.last_state
        if ids is None or state is None:
            state = post.state()
        else:
            post.state(ids, state)
        return {GROUP: {"policy": env.history.flatten(2), "state": state}}

    def step_noise(self, shape: torch.Size) -> Tensor:
        return noise_key(self.env)  # the C pass draws the numbers in place

    def cached_errors(self) -> tuple[Tensor, Tensor] | None:
        return self.evaluate.cached_errors()

    def forget_errors(self) -> None:
        self.evaluate.forget_errors()


def select_backend(env: CableLoadEnv, kernels: str) -> CableLoadBackend:
    """The backend ``kernels`` (``sim.kernels``) asks for: ``"auto"`` the C kernels wherever they can run (CPU
    tensors, a C compiler; with or without ``compile``: the vectorised C loop runs ~3.8x faster than inductor's,
    benchmarks/README.md), ``"native"`` always (ValueError where they cannot run), ``"torch"`` the torch code."""
    choice = check_kernels(kernels)
    if choice == "torch":
        return TorchPhysics(env)
    found = native_kernels(env)
    if isinstance(found, str):
        if choice == "native":
            raise ValueError(f"cable_load: kernels='native' cannot run here: {found}")
        return TorchPhysics(env)
    return NativePhysics(env, *found)
