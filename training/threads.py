"""The default number of torch intra-op threads for a run (``torch_threads=0``, printed in the run banner).

Measured on the 2-core reference machine (benchmarks/README.md): with 2 threads, torch's own default,
an env step runs 1.3x faster than with 1 on an idle machine, but 5-100x slower as soon as another
process wants a core, because OpenMP threads spin-wait on each other whenever one of them loses its
core. One thread stays stable under load. So the default leaves one core to everything else (the OS,
loggers, a second run, an evaluation), and takes fewer when the machine is already busy. On a GPU,
the CPU threads only launch kernels, and torch's default stays.

The PPO update is different: a few large matrix products, which a second thread speeds up 1.6x on an idle
machine, and which lose far less than small ops when a core is taken. :class:`ThreadTuner` times it with
both counts where asked (``update_threads=-1``). Not by default: 1 and 2 threads round a few reductions
differently, so a choice by timing makes two runs of the same config differ in the last bits, and a
resumed run differ from one that never stopped. By default (``update_threads=0``) the update keeps the
run's ``torch_threads``, and a resume reuses the count the checkpoint records, so a run repeats bit for bit.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence

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


def set_torch_threads(requested: int, device: torch.device, ranks: int = 1, recorded: int | None = None) -> str:
    """Apply ``torch_threads`` (0 = the count ``recorded`` by the run being resumed, else
    :func:`auto_torch_threads`); returns how the number was chosen."""
    if requested > 0:
        torch.set_num_threads(requested)
        return "torch_threads"
    if recorded:
        torch.set_num_threads(int(recorded))
        return f"torch_threads=0: {int(recorded)}, the count of the run resumed, so that it continues bit for bit"
    threads, why = auto_torch_threads(device, ranks)
    torch.set_num_threads(threads)
    return why


class ThreadTuner:
    """The intra-op thread count of a job repeated at a constant size (the PPO update), chosen by timing it.

    Measured on the 2-core reference machine (cable_load, 1024 envs, benchmarks/README.md): the update's
    matrix products run 1.6x faster with 2 threads than with 1 on a quiet machine, and 1.3x slower beside
    another busy process. Neither count is right everywhere, and the load changes during a run, so the
    tuner times every run of the job and keeps the count with the shortest latest time. A count that slows
    down (another process took a core) loses at once to the others' older times; a count that would speed up
    again (the other process ended) shows it only when tried, so the tuner probes the other counts, first
    after ``probe_every`` runs. A probe costs the difference (~1.7 s of a 2.3 s cable_load update), so each
    probe that confirms the choice doubles the wait for the next, up to ``2 * probe_every``; a change of choice
    starts over. No probe in the last ``probe_every // 2`` runs of ``total_runs`` (when given): nothing would
    be left to gain from it. The caller's thread count is restored after each run, so rollouts keep
    ``torch_threads`` (small ops, where a second thread gains little and collapses first).

    Use: ``with tuner: update()``; ``tuner.current`` is the count of the last run.
    """

    def __init__(
        self,
        candidates: Sequence[int],
        probe_every: int = 10,
        clock: Callable[[], float] = time.perf_counter,
        total_runs: int | None = None,
    ) -> None:
        counts = sorted({int(c) for c in candidates})
        if not counts or counts[0] < 1:
            raise ValueError(f"thread counts must be >= 1, got {list(candidates)}")
        if probe_every < 2:
            raise ValueError(f"probe_every must be >= 2, got {probe_every}")
        self.candidates = counts
        self.probe_every = probe_every
        self.total_runs = total_runs
        self.seconds: dict[int, float] = {}  # latest time of each count
        self.runs = 0
        self.probes = 0
        self.current = counts[-1]
        self._interval = probe_every  # runs from one probe to the next
        self._next_probe = probe_every  # the run index of the next probe
        self._probing = False
        self._chosen = counts[-1]  # the fastest count after the last run
        self._clock = clock
        self._started = 0.0
        self._outer = 0

    def _best(self) -> int:
        return min(self.candidates, key=self.seconds.__getitem__)

    def choose(self) -> int:
        """The count for the next run: each untried one first (the largest first: the faster one on a machine
        that is idle, the usual case), then the fastest, with the probes."""
        for c in reversed(self.candidates):
            if c not in self.seconds:
                return c
        best = self._best()
        others = [c for c in self.candidates if c != best]
        left = None if self.total_runs is None else self.total_runs - self.runs
        if others and self.runs >= self._next_probe and (left is None or left > self.probe_every // 2):
            return others[self.probes % len(others)]  # round-robin over the other counts
        return best

    def __enter__(self) -> ThreadTuner:
        self._outer = torch.get_num_threads()
        self.current = self.choose()
        self._probing = len(self.seconds) == len(self.candidates) and self.current != self._best()
        torch.set_num_threads(self.current)
        self._started = self._clock()
        return self

    def __exit__(self, *exc: object) -> None:
        elapsed = self._clock() - self._started
        torch.set_num_threads(self._outer)
        if exc[0] is not None:
            return
        self.seconds[self.current] = elapsed
        self.runs += 1
        if len(self.seconds) < len(self.candidates):
            return
        best = self._best()
        if self._probing:
            self.probes += 1
            confirmed = best == self._chosen
            self._interval = min(2 * self._interval, 2 * self.probe_every) if confirmed else self.probe_every
            self._next_probe = self.runs - 1 + self._interval  # counted from this run
        elif best != self._chosen and self.runs > len(self.candidates):
            # The choice changed without a probe (the chosen count slowed down): the load moves, probe sooner.
            self._interval = self.probe_every
            self._next_probe = self.runs - 1 + self._interval
        self._chosen = best

    def describe(self) -> str:
        return "fixed" if len(self.candidates) == 1 else f"timed among {self.candidates}"

    def describe_count(self) -> str:
        """The count in use: ``"2"``, or ``"2 of [1, 2]"`` while tuned."""
        return str(self.current) if len(self.candidates) == 1 else f"{self.current} of {self.candidates}"


# Runs shorter than this keep ``torch_threads`` in the update even with update_threads=-1: probing needs
# iterations to pay.
TUNED_UPDATE_MIN_ITERATIONS = 20
TIMED = -1  # update_threads=-1: chosen by timing (ThreadTuner)


def update_thread_tuner(requested: int, device: torch.device, iterations: int, ranks: int = 1) -> ThreadTuner:
    """The tuner for ``update_threads``: N fixes it; 0 (the default) fixes it at the current count (the run's
    ``torch_threads``: a run repeats bit for bit); -1 on a CPU, for a run of at least
    :data:`TUNED_UPDATE_MIN_ITERATIONS` iterations, times the run's ``torch_threads`` against every usable
    core of this process's share of the machine (else the current count, fixed)."""
    if requested > 0:
        return ThreadTuner([requested])
    if requested < TIMED:
        raise ValueError(f"update_threads must be >= -1 (-1: timed, 0: torch_threads), got {requested}")
    current = torch.get_num_threads()
    if requested == 0 or device.type != "cpu" or iterations < TUNED_UPDATE_MIN_ITERATIONS:
        return ThreadTuner([current])
    return ThreadTuner([current, max(current, usable_cores() // max(1, ranks))], total_runs=iterations)
