"""MuJoCo-backed models: MJCF generated from covey's own parameters (validation, rendering, benchmarks)."""
