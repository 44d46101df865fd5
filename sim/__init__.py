"""covey simulation: batched multi-agent tasks on torch tensors (any device)."""

from sim.core import evaluation_overrides, make, registered_tasks

__all__ = ["evaluation_overrides", "make", "registered_tasks"]
