"""How long ``export.py`` takes for each shipped policy: wall and CPU seconds of the whole command (imports,
the env, the recorded parity check, the ONNX trace), each into a temporary directory.

    OMP_NUM_THREADS=1 python benchmarks/export_time.py [--only hepi_insertion/policy ...]

CPU seconds are the figure to compare on a shared machine: wall time grows with other processes' load.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
POLICIES = ROOT / "assets" / "policies"
# The checkpoint of every shipped .onnx, and the options its README exports it with.
SHIPPED = {
    "cable_load/policy": ["scenario=nominal"],
    "pixel_reach/policy": [],
    "memory_reach/policy": [],
    "hepi_insertion/policy": [],
    "hepi_rope_closing/policy": [],
    "hepi_cloth_hanging/policy": [],
    "robot_soccer/policy": ["atol=1e-4"],
    "vlm_driving/policy": [],
    "drone_volleyball/serve": [],
    "drone_volleyball/strategy": [],
    "drone_volleyball/games_strategy": [],
}


def time_export(name: str, options: list[str], out_dir: Path) -> tuple[float, float]:
    """(wall s, CPU s of the child) of one export."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = out_dir / f"{name.replace('/', '_')}.onnx"
    cmd = [sys.executable, "export.py", f"checkpoint={POLICIES / name}.pt", f"out={out}"]
    subprocess.run([*cmd, *options], cwd=ROOT, check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="*", default=None, help="policies to time (default: every shipped one)")
    names = p.parse_args().only or list(SHIPPED)
    print("| policy | wall s | CPU s |\n|---|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            wall, cpu = time_export(name, SHIPPED.get(name, []), Path(tmp))
            print(f"| {name} | {wall:.1f} | {cpu:.1f} |", flush=True)


if __name__ == "__main__":
    main()
