"""Moved to :mod:`covey_common.observation` (task builders import it from there); this name stays for existing
imports."""

from covey_common.observation import ObservationBuilder, TermBuilder, TermContext, check_agent_index

__all__ = ["ObservationBuilder", "TermBuilder", "TermContext", "check_agent_index"]
