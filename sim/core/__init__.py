"""Environment API: specs, the batched multi-agent base class, configs and the task registry."""

from sim.core.env import MultiAgentEnv, Obs, Scenario
from sim.core.registry import evaluation_overrides, make, register, registered_tasks, task_class
from sim.core.spec import EnvSpec, GroupSpec, ObsEntry, ObsTerm

__all__ = [
    "EnvSpec",
    "GroupSpec",
    "MultiAgentEnv",
    "Obs",
    "ObsEntry",
    "ObsTerm",
    "Scenario",
    "evaluation_overrides",
    "make",
    "register",
    "registered_tasks",
    "task_class",
]
