"""Shared fixtures: one intra-op thread for every test, multirotor models, a float64 angle helper, the
evaluate.py CLI module."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from sim.physics.multirotor import MultirotorModel, MultirotorParams
from training import config as _typed_config  # noqa: F401  (registers hydra's structured configs)


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    """Test batches are tiny: intra-op threads only add overhead (and stall badly on a busy 2-core box)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def evaluate_cli():
    """``evaluate.py`` as a module (the repository root is not on every test run's import path), loaded once."""
    name = "covey_evaluate_cli"  # the name test_evaluate.py loads it under
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "evaluate.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while building the class
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def falcon() -> MultirotorModel:
    return MultirotorModel(MultirotorParams.load("falcon"))


@pytest.fixture(scope="session")
def crazyflie() -> MultirotorModel:
    return MultirotorModel(MultirotorParams.load("crazyflie"))


def _quat_angle64(a, b) -> np.ndarray:
    """Angle (rad) between orientations ``a`` and ``b`` (``[..., 4]`` wxyz), computed in float64.

    ``2 atan2(|vec(a^-1 b)|, |w(a^-1 b)|)`` stays accurate for tiny angles, unlike ``acos`` of a dot
    product in float32 (whose resolution is ~7e-4 rad), so it can measure round-off-sized errors.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    a = a / np.linalg.norm(a, axis=-1, keepdims=True)
    b = b / np.linalg.norm(b, axis=-1, keepdims=True)
    aw, av = a[..., :1], -a[..., 1:]
    bw, bv = b[..., :1], b[..., 1:]
    w = aw * bw - (av * bv).sum(-1, keepdims=True)
    v = aw * bv + bw * av + np.cross(av, bv)
    return 2.0 * np.arctan2(np.linalg.norm(v, axis=-1), np.abs(w[..., 0]))


@pytest.fixture(scope="session")
def quat_angle64():
    """The float64 orientation-difference helper (see :func:`_quat_angle64`)."""
    return _quat_angle64


# --------------------------------------------------------------------------- measured errors
_MEASURED: list[tuple[str, float, float]] = []


@pytest.fixture
def check(request):
    """``check(label, measured, tol)``: assert ``measured <= tol`` and record both for the summary.

    ``pytest -v`` prints every recorded error next to its tolerance at the end of the run, so the
    margins behind each tolerance stay visible when the physics changes.
    """

    def _check(label: str, measured: float, tol: float) -> None:
        measured = float(measured)
        _MEASURED.append((f"{request.node.name}: {label}", measured, tol))
        assert measured <= tol, f"{label}: measured {measured:.3g} exceeds tolerance {tol:.3g}"

    return _check


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not _MEASURED or config.option.verbose < 1:
        return
    terminalreporter.section("measured error / tolerance")
    width = max(len(label) for label, _, _ in _MEASURED)
    for label, measured, tol in _MEASURED:
        terminalreporter.write_line(f"{label:<{width}}  {measured:10.3g} / {tol:<9.3g} ({measured / tol:6.1%})")
