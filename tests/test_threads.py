"""training.threads: the default torch thread count of a run (torch_threads=0) and the update's (update_threads)."""

from __future__ import annotations

import pytest
import torch

from training import threads


@pytest.mark.parametrize(
    "cores, load, ranks, expected",
    [
        (2, 0.0, 1, 1),  # the reference machine, idle: one core left to everything else
        (2, 1.7, 1, 1),  # busy: never 0
        (16, 0.2, 1, 15),
        (16, 3.4, 1, 13),  # three cores already taken by others
        (16, 0.0, 2, 7),  # two torchrun ranks share the machine
        (1, 0.0, 1, 1),
    ],
)
def test_auto_threads_leave_a_core_and_the_current_load_free(monkeypatch, cores, load, ranks, expected):
    monkeypatch.setattr(threads, "usable_cores", lambda: cores)
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (load, load, load))
    n, why = threads.auto_torch_threads(torch.device("cpu"), ranks)
    assert n == expected
    assert f"{cores} cores" in why


def test_an_explicit_count_wins_and_a_gpu_keeps_torchs_default(monkeypatch):
    before = torch.get_num_threads()
    try:
        assert threads.set_torch_threads(3, torch.device("cpu")) == "torch_threads"
        assert torch.get_num_threads() == 3
        n, why = threads.auto_torch_threads(torch.device("cuda"))
        assert n == torch.get_num_threads() and "cuda" in why
    finally:
        torch.set_num_threads(before)


class _FakeWork:
    """A job whose duration depends on the thread count and on a load we switch (a fake clock)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.seconds = {1: 6.4, 2: 4.0}  # quiet machine: the measured cable_load update

    def run(self, tuner: threads.ThreadTuner) -> int:
        with tuner:
            used = torch.get_num_threads()
            self.now += self.seconds[used]
        return used


def test_update_threads_follow_the_faster_count_as_the_load_changes():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        work = _FakeWork()
        tuner = threads.ThreadTuner([1, 2], probe_every=5, clock=lambda: work.now)
        used = [work.run(tuner) for _ in range(17)]
        assert torch.get_num_threads() == 1  # the rollout's count is back after every update
        assert used[:2] == [2, 1]  # each count timed once, the largest first
        # The faster; the other tried again after 5 runs, then (confirmed) after 10, the longest wait.
        assert used[2:] == [2] * 3 + [1] + [2] * 9 + [1] + [2]
        work.seconds = {1: 6.6, 2: 8.5}  # another process takes a core: 2 threads now lose
        used = [work.run(tuner) for _ in range(8)]
        assert used == [2, 1, 1, 1, 1, 2, 1, 1]  # one slow run shows it; then 1 thread, 2 probed 5 runs later
        assert tuner.current == 1
        work.seconds = {1: 6.4, 2: 4.0}  # the other process ends: the next probe of 2 takes it back
        used = [work.run(tuner) for _ in range(11)]
        assert used == [1] * 7 + [2] * 4  # the probe 10 runs after the last one
    finally:
        torch.set_num_threads(before)


def test_no_probe_in_the_last_runs_of_a_known_length():
    """A probe only pays off in the runs after it: none in the last probe_every // 2 runs."""
    before = torch.get_num_threads()
    try:
        work = _FakeWork()
        tuner = threads.ThreadTuner([1, 2], probe_every=10, clock=lambda: work.now, total_runs=31)
        used = [work.run(tuner) for _ in range(31)]
        # The main job's 31 updates: the first two tries and one probe (run 10); the next (run 30) is skipped.
        assert [i for i, c in enumerate(used) if c == 1] == [1, 10]
        assert tuner.probes == 1
    finally:
        torch.set_num_threads(before)


def test_update_threads_are_fixed_by_default_and_timed_only_when_asked(monkeypatch):
    """0 (the default) keeps the run's torch_threads, so a run repeats bit for bit and a resume continues it
    exactly; -1 asks for the timed choice (on a CPU, in runs long enough for probes to pay)."""
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        monkeypatch.setattr(threads, "usable_cores", lambda: 4)
        cpu, long = torch.device("cpu"), threads.TUNED_UPDATE_MIN_ITERATIONS
        assert threads.update_thread_tuner(3, cpu, long).candidates == [3]
        assert threads.update_thread_tuner(0, cpu, long).candidates == [1]
        assert threads.update_thread_tuner(0, cpu, long).describe() == "fixed"
        assert threads.update_thread_tuner(-1, cpu, long).candidates == [1, 4]
        assert threads.update_thread_tuner(-1, cpu, long, ranks=2).candidates == [1, 2]
        assert threads.update_thread_tuner(-1, cpu, long - 1).candidates == [1]  # too short for probes to pay
        assert threads.update_thread_tuner(-1, torch.device("cuda"), long).candidates == [1]
        with pytest.raises(ValueError, match=">= -1"):
            threads.update_thread_tuner(-2, cpu, long)
        with pytest.raises(ValueError, match=">= 1"):
            threads.ThreadTuner([0, 2])
    finally:
        torch.set_num_threads(before)


def test_a_resume_reuses_the_recorded_torch_threads_unless_the_config_names_a_count(monkeypatch):
    """torch_threads=0 follows the machine's load at start: a resume takes the count the checkpoint records."""
    before = torch.get_num_threads()
    try:
        monkeypatch.setattr(threads, "usable_cores", lambda: 16)
        monkeypatch.setattr(threads.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
        why = threads.set_torch_threads(0, torch.device("cpu"), recorded=3)
        assert torch.get_num_threads() == 3 and "the run resumed" in why
        assert threads.set_torch_threads(2, torch.device("cpu"), recorded=3) == "torch_threads"
        assert torch.get_num_threads() == 2
        threads.set_torch_threads(0, torch.device("cpu"), recorded=None)
        assert torch.get_num_threads() == 15  # auto: 16 cores, one left free
    finally:
        torch.set_num_threads(before)


def test_glibc_accepts_the_allocator_settings_of_training_runs():
    """glibc takes every setting of training.allocator (mallopt answers 0 for a value it refuses)."""
    import platform

    from training.allocator import keep_freed_memory

    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc only")
    assert keep_freed_memory() == "allocator: freed memory kept (glibc)"
