"""Launching a team: the node set of a task, started from its parameter file.

``python -m deploy_ros.launch <task>`` (pip-only, see ``__main__``) and
``ros2 launch deploy_ros/launch/team.launch.py task:=<task>`` (full ROS 2 install) start the same
nodes from ``deploy_ros/params/<task>.yaml``; :func:`node_commands` is the one definition of that
set. The parameter file is the deployment's data (the model, topics, timeouts, how many robots and
their namespaces ``covey_launch.namespace``, e.g. ``/mav{i}``); the code here names no task.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import yaml

PARAMS_DIR = Path(__file__).resolve().parents[1] / "params"


def params_file(task: str) -> Path:
    """``deploy_ros/params/<task>.yaml``; ValueError listing the known ones when there is none."""
    path = PARAMS_DIR / f"{task}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in PARAMS_DIR.glob("*.yaml"))
        raise ValueError(f"no parameter file for task {task!r} ({path}); known: {known}")
    return path


def node_commands(
    params: str | Path, extra_args: list[str] | None = None, with_bridge: bool | None = None
) -> dict[str, list[str]]:
    """``{name: argv}`` of every node: the sim bridge (unless off) and one policy node per agent,
    named after its namespace (``/mav0`` -> ``mav0``).

    ``extra_args`` are appended to every node's ``--ros-args`` (e.g. ``["-p", "model:=x.onnx"]``).
    """
    params = Path(params)
    try:
        doc = yaml.safe_load(params.read_text()) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ValueError(f"{params}: not a readable YAML parameter file ({' '.join(str(exc).split())})") from exc
    if not isinstance(doc, dict):
        raise ValueError(f"{params}: a parameter file is a YAML mapping of node names, got {type(doc).__name__}")
    launch = (doc.get("covey_launch") or {}).get("ros__parameters") or {}
    try:
        n = int(launch.get("num_agents", 0))
    except (TypeError, ValueError):
        raise ValueError(f"{params}: covey_launch.ros__parameters.num_agents must be an integer") from None
    if n < 1:
        raise ValueError(f"{params}: covey_launch.ros__parameters.num_agents must be >= 1")
    bridge = launch.get("with_bridge", True) if with_bridge is None else with_bridge
    pattern = str(launch.get("namespace", "/agent{i}"))
    if "{i}" not in pattern or not pattern.startswith("/"):
        raise ValueError(f"{params}: covey_launch.ros__parameters.namespace must be absolute and contain {{i}}")
    common = ["--ros-args", "--params-file", str(params), *(extra_args or [])]
    cmds: dict[str, list[str]] = {}
    if bridge:
        cmds["sim_bridge"] = [sys.executable, "-m", "sim.ros.bridge", *common]  # the simulator side (torch)
    for i in range(n):
        namespace = pattern.replace("{i}", str(i))
        ns = ["-r", f"__ns:={namespace}", "-r", "__node:=covey_policy", "-p", f"agent_index:={i}"]
        cmds[namespace.strip("/").replace("/", "_")] = [sys.executable, "-m", "deploy_ros.policy_node", *common, *ns]
    return cmds


@contextmanager
def running_nodes(
    cmds: Mapping[str, list[str]],
    log_dir: str | Path,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
) -> Iterator[dict[str, subprocess.Popen]]:
    """Start every node of ``cmds`` (:func:`node_commands`) as a child process writing ``<log_dir>/<name>.log``;
    on leaving the block, stop the ones still running (terminate, kill after 10 s) and close the logs. For SITL
    tests and soaks, which watch the nodes themselves (the ``__main__`` launcher pumps their output instead)."""
    log_dir = Path(log_dir)
    logs = {name: open(log_dir / f"{name}.log", "w") for name in cmds}  # noqa: SIM115 - closed in finally
    procs: dict[str, subprocess.Popen] = {}
    try:
        for name, cmd in cmds.items():
            procs[name] = subprocess.Popen(
                cmd, cwd=cwd, env=None if env is None else dict(env), stdout=logs[name], stderr=subprocess.STDOUT
            )
        yield procs
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.terminate()
        for p in procs.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        for f in logs.values():
            f.close()
