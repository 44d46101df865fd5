"""covey simulation: batched multi-agent tasks on torch tensors (any device)."""

from sim.core import make, registered_tasks

__all__ = ["make", "registered_tasks"]
