"""The code that runs a task's part of each step, behind one declared interface.

A task's torch hooks are the reference and run everywhere; :class:`sim.core.compiled.TorchBackend` runs them
(through ``torch.compile`` with ``compile=True``) and is every env's backend unless the task selects another, once,
at the end of its ``__init__`` (:meth:`sim.core.env.MultiAgentEnv.use_backend`): cable_load's C kernels
(its ``backends.py``) do. The core calls the backend and never looks inside it.

An engine is another backend a task declares for stepping its bodies elsewhere (its env class's ``engines``,
e.g. MuJoCo for a sim-to-sim check): :func:`use_engine` installs one by name (``sim.make(..., engine=)``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from torch import Tensor

if TYPE_CHECKING:
    from sim.core.env import MultiAgentEnv, Obs

# The engine every task has: covey's own physics (the task's torch code or C kernels).
DEFAULT_ENGINE = "covey"

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


def task_engines(env_cls: type) -> dict[str, str]:
    """The other engines a task can step in, ``name -> "module:Class"`` (its env class's ``engines``; none if it
    declares none). The class takes the env and returns a :class:`StepBackend`."""
    return dict(env_cls.engines)


def use_engine(env: MultiAgentEnv, engine: str) -> None:
    """Step ``env`` in ``engine``: :data:`DEFAULT_ENGINE` keeps its own backend, ``<name>`` or ``<name>:<option>``
    installs the task's engine of that name (:func:`task_engines`; built as ``Class(env)`` or ``Class(env, option)``),
    which takes over from the env's current state.

    Raises:
        ValueError: the task has no engine of that name (the message lists the ones it has), or the engine refuses
            the option or the env's config.
    """
    if engine == DEFAULT_ENGINE:
        return
    name, _, option = engine.partition(":")
    known = task_engines(type(env))
    if name not in known:
        raise ValueError(f"task {env.task_name!r} has no engine {name!r}; it has: {[DEFAULT_ENGINE, *sorted(known)]}")
    module_name, _, cls_name = known[name].partition(":")
    cls = getattr(importlib.import_module(module_name), cls_name)
    env.use_backend(cls(env, option) if option else cls(env))
