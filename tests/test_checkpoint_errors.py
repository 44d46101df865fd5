"""A healthy file of the wrong kind is named for what it is, not called corrupt."""

from __future__ import annotations

from pathlib import Path

import pytest

from training.checkpoint import load_checkpoint

ONNX = Path(__file__).resolve().parents[1] / "assets" / "policies" / "pixel_reach" / "policy.onnx"


def test_an_onnx_model_given_as_a_checkpoint_says_so(tmp_path):
    renamed = tmp_path / "policy.pt"  # the content, not the suffix, tells
    renamed.write_bytes(ONNX.read_bytes())
    for path in (ONNX, renamed):
        with pytest.raises(ValueError, match="is an ONNX model") as err:
            load_checkpoint(path)
        assert "corrupt" not in str(err.value) and "\n" not in str(err.value)


def test_a_damaged_checkpoint_is_still_called_unreadable(tmp_path):
    bad = tmp_path / "best.pt"
    bad.write_bytes(b"PK\x03\x04 not a whole zip")
    with pytest.raises(ValueError, match="not a readable covey checkpoint"):
        load_checkpoint(bad)
