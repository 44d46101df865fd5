"""Moved to :mod:`covey_common.onnx` (the one runner of exported models); this name stays for existing imports."""

from covey_common.onnx import DTYPES, ONNX_METADATA_KEY, OnnxPolicy, load_policy

__all__ = ["DTYPES", "ONNX_METADATA_KEY", "OnnxPolicy", "load_policy"]
