"""Policy networks, distributions, observation normalisers and ONNX export (training issue)."""
