"""Checks shared by the tests of robot-side graph builders (imported by test modules; not a test file)."""

from __future__ import annotations

import numpy as np


def assert_same_edge_index(built: np.ndarray, sim_part: np.ndarray, positions: np.ndarray, k: int) -> None:
    """Two scene-graph ``edge_index`` parts ``[M, 2]`` agree: the fixed edges after the object kNN block
    exactly, the kNN block (first ``n * k`` rows, ``n = len(positions)``) by distance, since ties may
    swap neighbours. ``positions [n, 3]``: the object nodes' positions."""
    n = len(positions)
    assert (built[n * k :] == sim_part[n * k :]).all()
    d = np.linalg.norm(positions[:, None] - positions[None], axis=-1)
    for part in (built, sim_part):
        senders = part[: n * k, 0].reshape(n, k)
        np.testing.assert_allclose(
            np.sort(d[np.arange(n)[:, None], senders], -1), np.sort(d + np.eye(n) * 1e9, -1)[:, :k], atol=1e-5
        )
