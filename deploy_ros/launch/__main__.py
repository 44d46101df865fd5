"""Pip-only launcher: ``python -m deploy_ros.launch <task> [--no-bridge] [--ros-args ...]``.

    python -m deploy_ros.launch cable_load                         # sim bridge + 3 policy nodes
    python -m deploy_ros.launch cable_load --no-bridge             # on the robots: policies only
    python -m deploy_ros.launch cable_load --ros-args -p model:=runs/other.onnx

Starts the nodes of :func:`deploy_ros.launch.node_commands` as child processes (the same set the
ROS 2 launch file ``team.launch.py`` starts), prefixes their output with the node name, and stops them all on
Ctrl-C or when one exits with an error.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

from deploy_ros.launch import node_commands, params_file


def _pump(name: str, stream) -> None:
    for line in iter(stream.readline, ""):
        sys.stdout.write(f"[{name}] {line}")
        sys.stdout.flush()


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print(__doc__)
        return 2
    task, rest = argv[0], argv[1:]
    with_bridge = None
    if "--no-bridge" in rest:
        rest.remove("--no-bridge")
        with_bridge = False
    extra = rest[1:] if rest[:1] == ["--ros-args"] else rest
    try:
        cmds = node_commands(params_file(task), extra, with_bridge)
    except ValueError as err:
        print(f"deploy_ros.launch: {err}", file=sys.stderr)
        return 2
    procs = {}
    for name, cmd in cmds.items():
        procs[name] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        threading.Thread(target=_pump, args=(name, procs[name].stdout), daemon=True).start()
    code = 0
    try:
        while all(p.poll() is None for p in procs.values()):
            time.sleep(0.2)
        failed = {n: p.returncode for n, p in procs.items() if p.returncode not in (None, 0)}
        code = 1 if failed else 0
        if failed:
            print(f"deploy_ros.launch: node(s) exited with errors: {failed}", file=sys.stderr)
    except KeyboardInterrupt:
        pass
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 5.0
        for p in procs.values():
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
