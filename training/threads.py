"""The default number of torch intra-op threads for a run (``torch_threads=0``, printed in the run banner).

Measured on the 2-core reference machine (benchmarks/README.md): with 2 threads, torch's own default,
an env step runs 1.3x faster than with 1 on an idle machine, but 5-100x slower as soon as another
process wants a core, because OpenMP threads spin-wait on each other whenever one of them loses its
core. One thread stays stable under load. So the default leaves one core to everything else (the OS,
loggers, a second run, an evaluation), and takes fewer when the machine is already busy. On a GPU,
the CPU threads only launch kernels, and torch's default stays.
"""

from __future__ import annotations

import os

import torch


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity, where the OS tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def auto_torch_threads(device: torch.device, ranks: int = 1) -> tuple[int, str]:
    """``(threads, why)`` for ``torch_threads=0``.

    On a CPU device: the usable cores shared by ``ranks`` processes on this machine, minus one, and
    minus the load other processes already put on the machine (1-minute load average); at least 1.
    On other devices: torch's default.
    """
    if device.type != "cpu":
        return torch.get_num_threads(), f"torch's default on {device.type}"
    cores = usable_cores()
    try:
        busy = round(os.getloadavg()[0])
    except (AttributeError, OSError):
        busy = 0
    per_rank = max(1, cores // max(1, ranks))
    threads = max(1, min(per_rank - 1, cores - busy))
    return threads, f"auto: {cores} cores, load {busy}, {ranks} rank(s); torch_threads=N sets it"


def set_torch_threads(requested: int, device: torch.device, ranks: int = 1) -> str:
    """Apply ``torch_threads`` (0 = :func:`auto_torch_threads`); returns how the number was chosen."""
    if requested > 0:
        torch.set_num_threads(requested)
        return "torch_threads"
    threads, why = auto_torch_threads(device, ranks)
    torch.set_num_threads(threads)
    return why
