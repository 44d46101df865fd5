"""The team launchers: one node set from one parameter file, for the pip-only runner and ros2 launch."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from deploy_ros.launch import node_commands, params_file

ROOT = Path(__file__).resolve().parents[1]


def test_cable_load_team_is_a_bridge_and_one_namespaced_policy_node_per_mav() -> None:
    cmds = node_commands(params_file("cable_load"), ["-p", "model:=x.onnx"])
    assert list(cmds) == ["sim_bridge", "mav0", "mav1", "mav2"]
    assert cmds["sim_bridge"][1:3] == ["-m", "sim.ros.bridge"]
    for i in range(3):
        cmd = cmds[f"mav{i}"]
        assert cmd[1:3] == ["-m", "deploy_ros.policy_node"]
        assert f"__ns:=/mav{i}" in cmd and f"agent_index:={i}" in cmd and "model:=x.onnx" in cmd
        assert str(params_file("cable_load")) in cmd
    no_bridge = node_commands(params_file("cable_load"), with_bridge=False)
    assert list(no_bridge) == ["mav0", "mav1", "mav2"]


def test_unknown_task_and_bad_parameter_file_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no parameter file for task 'nope'"):
        params_file("nope")
    bad = tmp_path / "bad.yaml"
    bad.write_text("covey_launch:\n  ros__parameters:\n    num_agents: 0\n")
    with pytest.raises(ValueError, match="num_agents"):
        node_commands(bad)
    bad.write_text("covey_launch:\n  ros__parameters:\n    num_agents: 2\n    namespace: robot\n")
    with pytest.raises(ValueError, match="namespace"):
        node_commands(bad)
    proc = subprocess.run([sys.executable, "-m", "deploy_ros.launch", "nope"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2 and "no parameter file" in proc.stderr


def test_namespaces_come_from_the_parameter_file(tmp_path: Path) -> None:
    params = tmp_path / "team.yaml"
    params.write_text("covey_launch:\n  ros__parameters:\n    num_agents: 2\n    namespace: /team_a/robot{i}\n")
    cmds = node_commands(params, with_bridge=False)
    assert list(cmds) == ["team_a_robot0", "team_a_robot1"]
    assert "__ns:=/team_a/robot1" in cmds["team_a_robot1"] and "agent_index:=1" in cmds["team_a_robot1"]


def test_ros2_launch_file_builds_its_nodes_from_the_shared_definition() -> None:
    """``launch``/``launch_ros`` are not on PyPI: check the file parses and uses node_commands."""
    source = (ROOT / "deploy_ros" / "launch" / "team.launch.py").read_text()
    tree = ast.parse(source)
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    funcs = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    assert "generate_launch_description" in funcs
    assert {"node_commands", "params_file", "ExecuteProcess"} <= names


def test_deploy_ros_code_names_no_task() -> None:
    """Tasks own their deployment (profile, builders, bridge adapter); deploy_ros's code (docstrings and
    the per-deployment parameter files aside) names none of them."""
    from sim.tasks import TASKS

    found = []
    for path in sorted((ROOT / "deploy_ros").rglob("*.py")):
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef) and ast.get_docstring(node) is not None
        }
        for node in ast.walk(tree):
            text = None
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                text = node.value
            elif isinstance(node, ast.Name | ast.alias):
                text = getattr(node, "id", None) or node.name
            found += [(path.name, task) for task in TASKS if text and task in text]
    assert found == []


def test_the_former_sim_bridge_entry_point_still_starts_the_bridge(tmp_path: Path) -> None:
    """``python -m deploy_ros.sim_bridge`` runs :mod:`sim.ros.bridge` (deploy_ros imports no sim module)."""
    missing = tmp_path / "none.onnx"
    cmd = [sys.executable, "-m", "deploy_ros.sim_bridge", "--ros-args", "-p", f"model:={missing}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and proc.stderr.startswith("sim_bridge:") and "does not exist" in proc.stderr
