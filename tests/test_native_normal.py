"""sim.core.native.normal: counter-based standard normals (normal.c), reproducible from a key at any thread count."""

from __future__ import annotations

import math

import pytest
import torch

from sim.core import native

pytestmark = pytest.mark.skipif(not native.normal_available(), reason="needs AVX2, FMA and a C compiler")


def test_standard_normal_moments_tails_and_independence() -> None:
    z = native.normal((4096, 3, 50), key=12345).flatten().double()
    n = z.numel()
    assert abs(float(z.mean())) < 4 / math.sqrt(n)
    assert abs(float(z.std()) - 1) < 4 * math.sqrt(0.5 / n)
    kurtosis = float(((z - z.mean()) ** 4).mean() / z.var() ** 2)
    assert abs(kurtosis - 3) < 0.05  # a uniform or a clipped draw would miss it by far more
    beyond = float((z.abs() > 3).double().mean())  # 0.0027 for a normal
    assert 0.0022 < beyond < 0.0032
    # Neighbours, the two halves (a Box-Muller pair) and two keys: uncorrelated.
    for a, b in ((z[:-1], z[1:]), (z[: n // 2], z[n // 2 :])):
        assert abs(float(torch.corrcoef(torch.stack((a, b)))[0, 1])) < 0.01
    other = native.normal((4096, 3, 50), key=12346).flatten().double()
    assert abs(float(torch.corrcoef(torch.stack((z, other)))[0, 1])) < 0.01


def test_the_same_key_gives_the_same_numbers_at_any_thread_count() -> None:
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = native.normal((1001, 7), key=2**63 + 5)  # an odd count: the last pair keeps one number
        torch.set_num_threads(2)
        two = native.normal((1001, 7), key=2**63 + 5)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, two) and torch.isfinite(one).all()
    five = native.normal((1001, 7), key=5)
    assert not torch.equal(one, five)
    # A key tensor (what an env draws from its generator, with no host conversion) is the same key.
    assert torch.equal(native.normal((1001, 7), key=torch.tensor([5])), five)
    assert torch.equal(native.normal((1001, 7), key=torch.tensor([-(2**63) + 5])), one)


def test_where_it_cannot_run_it_says_so(monkeypatch) -> None:
    monkeypatch.setattr(native, "_cpu_has", lambda *features: False)
    assert not native.normal_available()
    with pytest.raises(RuntimeError, match="AVX2"):
        native.normal((4,), key=0)
