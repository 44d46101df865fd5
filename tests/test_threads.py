"""training.threads: the default torch thread count of a run (torch_threads=0)."""

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
