"""sim.core.native.normal: counter-based standard normals (normal.c), reproducible from a key at any thread count
and equal to an ulp across vector widths."""

from __future__ import annotations

import math

import pytest
import torch

from sim.core import native

pytestmark = pytest.mark.skipif(not native.normal_available(), reason="needs a C compiler")
BUILDS = [
    pytest.param(isa, marks=pytest.mark.skipif(not native.simd_runs(isa), reason=f"no {isa} here"))
    for isa, *_ in native.SIMD_BUILDS
]


@pytest.mark.parametrize("isa", BUILDS)
def test_standard_normal_moments_tails_and_independence(isa: str, monkeypatch) -> None:
    monkeypatch.setattr(native, "ISA_CAP", isa)
    z = native.normal((4096, 3, 50), key=12345).flatten().double()
    n = z.numel()
    assert abs(float(z.mean())) < 4 / math.sqrt(n)
    assert abs(float(z.std()) - 1) < 4 * math.sqrt(0.5 / n)
    kurtosis = float(((z - z.mean()) ** 4).mean() / z.var() ** 2)
    assert abs(kurtosis - 3) < 0.05  # a uniform or a clipped draw would miss it by far more
    beyond = float((z.abs() > 3).double().mean())  # 0.0027 for a normal
    assert 0.0022 < beyond < 0.0032
    # Neighbours across pairs, the two numbers of a Box-Muller pair, and two keys: uncorrelated.
    for a, b in ((z[1:-1:2], z[2::2]), (z[0::2], z[1::2])):
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


def test_every_width_gives_the_same_numbers_to_an_ulp(monkeypatch) -> None:
    """The widths call different vector logs and cosines (libmvec's AVX-512 and AVX2 ones, libm lane by lane), so
    the numbers may differ by an ulp or so, never more."""
    runs = [isa for isa, *_ in native.SIMD_BUILDS if native.simd_runs(isa)]
    draws = {}
    for isa in runs:
        monkeypatch.setattr(native, "ISA_CAP", isa)
        draws[isa] = native.normal((1001, 7), key=77)
    for isa in runs[1:]:
        torch.testing.assert_close(draws[isa], draws[runs[0]], atol=2e-6, rtol=1e-6)


@pytest.mark.parametrize("isa", BUILDS)
def test_the_torch_twin_gives_the_same_numbers(isa: str, monkeypatch) -> None:
    """torch_normal (the GPU's, and a CPU's without a compiler or inside a compiled graph) is normal.c's generator
    in torch: the same numbers to the ulps of the logs and cosines, for keys over all 64 bits and an odd count."""
    monkeypatch.setattr(native, "ISA_CAP", isa)
    for key in (0, 123, 2**62 - 1, -5, 2**63 - 1, -(2**63)):
        k = torch.tensor([key])
        torch.testing.assert_close(
            native.torch_normal((333, 3, 7), k), native.normal((333, 3, 7), k), atol=3e-6, rtol=0
        )
    assert native.torch_normal((5,), torch.tensor([9])).shape == (5,)


def test_without_a_compiler_the_torch_twin_draws(monkeypatch, tmp_path) -> None:
    expected = native.normal((64,), key=7)
    monkeypatch.setattr(native, "_LOADED", {})
    monkeypatch.setenv("COVEY_NATIVE_CACHE", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    assert not native.normal_available()
    torch.testing.assert_close(native.normal((64,), key=7), expected, atol=3e-6, rtol=0)


def test_a_vector_build_that_fails_falls_back_to_the_generic_one(monkeypatch, tmp_path, caplog) -> None:
    """Without libmvec (here: a vector build that cannot link) the plain build runs, and says which it is."""
    monkeypatch.setattr(native, "_LOADED", {})
    monkeypatch.setenv("COVEY_NATIVE_CACHE", str(tmp_path))
    broken = tuple(
        (name, needs, flags, libs if name == "generic" else ("-lno-such-library",))
        for name, needs, flags, libs in native.SIMD_BUILDS
    )
    monkeypatch.setattr(native, "SIMD_BUILDS", broken)
    lib = native.load_simd(native.NORMAL_SOURCE)
    assert lib is not None and lib.isa == "generic"
    if native.simd_isa() != "generic":
        assert "could not build normal.c" in caplog.text
