"""Task families. Importing this package registers every built-in task with ``sim.make``."""

from sim.tasks import cable_load, drone_volleyball, point_reach  # noqa: F401
