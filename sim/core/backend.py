"""The code that runs a task's part of each step, behind one declared interface.

A task's torch hooks are the reference and run everywhere; :class:`sim.core.compiled.TorchBackend` runs them
(through ``torch.compile`` with ``compile=True``) and is every env's backend unless the task selects another, once,
at the end of its ``__init__`` (:meth:`sim.core.env.MultiAgentEnv.use_backend`): cable_load's C kernels
(its ``backends.py``) do. The core calls the backend and never looks inside it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from torch import Tensor

if TYPE_CHECKING:
    from sim.core.env import Obs

# The post-physics pass's result: (obs, reward[group] [E, A], weighted terms name -> [E], terminated [E] bool,
# reasons name -> [E] bool, bad [E] bool: the envs the non-finite guard ended).
PostPhysics = tuple["Obs", dict[str, Tensor], dict[str, Tensor], Tensor, dict[str, Tensor], Tensor]


@runtime_checkable
class StepBackend(Protocol):
    """What runs the task's work in ``reset`` and ``step``; each member may be a method or a callable attribute.

    ``apply_actions(actions)``: take the validated actions (``[E, A, D]`` per group) once per control step.
    ``advance()``: the ``decimation`` control ticks (controllers and physics) of one step.
    ``evaluate()``: the post-physics pass, :data:`PostPhysics` (observations, rewards, terminations, guard).
    ``reset_rows(env_ids)``: reset the task state of the envs ``env_ids [k]`` (the core's bookkeeping is done).
    ``observations_after_reset()``: every env's observations right after a reset.
    """

    def apply_actions(self, actions: dict[str, Tensor]) -> None: ...

    def advance(self) -> None: ...

    def evaluate(self) -> PostPhysics: ...

    def reset_rows(self, env_ids: Tensor) -> None: ...

    def observations_after_reset(self) -> Obs: ...
