"""hepi: the HEPi task family (Hoang et al., ICLR 2025) on batched MuJoCo worlds.

Floating grippers move a rigid peg (``hepi_insertion``), a rope or a cloth; the policy sees a
heterogeneous scene graph of object points and actuators (:mod:`sim.tasks.hepi.graph`).
:class:`~sim.tasks.hepi.base.HepiEnv` is the tasks' common env. The names below load on first use
(importing the package imports no torch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim._lazy import lazy_exports

if TYPE_CHECKING:
    from sim.tasks.hepi.base import HepiEnv
    from sim.tasks.hepi.insertion import InsertionEnv
    from sim.tasks.hepi.insertion_config import InsertionCfg

_EXPORTS = {
    "HepiEnv": "sim.tasks.hepi.base",
    "InsertionCfg": "sim.tasks.hepi.insertion_config",
    "InsertionEnv": "sim.tasks.hepi.insertion",
}
__all__ = ["HepiEnv", "InsertionCfg", "InsertionEnv"]  # noqa: F822 - loaded by __getattr__
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
