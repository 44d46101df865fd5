"""Moved to :mod:`covey_common.cli` (the simulator's entry points use it too); this name stays for existing
imports."""

from covey_common.cli import check_params_files, one_line, report

__all__ = ["check_params_files", "one_line", "report"]
