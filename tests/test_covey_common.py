"""covey_common, the numpy layer both sides of the robot boundary share: atomic writes, spec records, choice
decoding (the same indices for torch and numpy)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from covey_common.files import atomic_path, atomic_write
from covey_common.files import tmp_path as tmp_name
from covey_common.spec import ObsTerm, choice_from_action, terms_from_dicts
from sim.core.spec import ObsEntry


def test_atomic_write_replaces_the_file_whole_or_not_at_all(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    with atomic_write(path, "w") as f:
        f.write("one")
    assert path.read_text() == "one" and not tmp_name(path).exists()
    with pytest.raises(RuntimeError), atomic_write(path, "w") as f:
        f.write("half")
        raise RuntimeError("killed mid-write")
    assert path.read_text() == "one"  # the previous version stays


def test_atomic_path_renames_on_success_and_removes_the_temporary_on_failure(tmp_path: Path) -> None:
    path = tmp_path / "model.bin"
    with atomic_path(path) as tmp:
        assert tmp == tmp_name(path)
        tmp.write_bytes(b"ok")
    assert path.read_bytes() == b"ok"
    with pytest.raises(ValueError), atomic_path(path, unique=True) as tmp:
        assert tmp.parent == path.parent and tmp != tmp_name(path)
        tmp.write_bytes(b"bad")
        raise ValueError("parity failed")
    assert path.read_bytes() == b"ok" and sorted(p.name for p in tmp_path.iterdir()) == ["model.bin"]


def test_choice_from_action_gives_the_same_indices_for_torch_and_numpy() -> None:
    a = torch.linspace(-1.3, 1.3, 261)
    for n in (1, 2, 3, 5, 8):
        ref = torch.round((a.clamp(-1.0, 1.0) + 1.0) * (0.5 * (n - 1))).long()
        got = choice_from_action(a, n)
        assert got.dtype == torch.int64 and torch.equal(got, ref)
        assert np.array_equal(choice_from_action(a.numpy(), n), ref.numpy())


def test_entry_terms_round_trip_through_the_metadata_dict() -> None:
    terms = (ObsTerm("pos", 3, "m", "world"), ObsTerm("last_action", 2))
    entry = ObsEntry((10,), terms=terms, history=2)
    assert terms_from_dicts(entry.to_dict()["terms"]) == terms
