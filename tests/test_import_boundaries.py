"""Imports point one way: every import statement of the packages (those inside functions too) is scanned.

    sim           never imports training or deploy_ros
    deploy_ros    never imports sim, training, policies or torch (it runs on a robot with onnxruntime)
    policies      never imports sim, training or deploy_ros
    covey_common  never imports sim, training, deploy_ros, policies or torch (both sides share it)
    training      never imports deploy_ros

A task's robot-side builder reaches the policy node as data (the ``"module:Class"`` in a model's
metadata, imported with importlib), which these rules allow.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FORBIDDEN: dict[str, set[str]] = {
    "sim": {"training", "deploy_ros"},
    "deploy_ros": {"sim", "training", "policies", "torch"},
    "policies": {"sim", "training", "deploy_ros"},
    "covey_common": {"sim", "training", "deploy_ros", "policies", "torch"},
    "training": {"deploy_ros"},
}


def imported_modules(source: str, module: str, is_package: bool = False) -> Iterator[tuple[int, str]]:
    """``(line, absolute module name)`` of every import in ``source``, the code of ``module`` (a dotted name;
    ``is_package``: an ``__init__.py``), relative imports resolved as Python does."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                yield node.lineno, ".".join([*base, *([node.module] if node.module else [])])
            elif node.module:
                yield node.lineno, node.module


def violations(source: str, module: str, is_package: bool = False) -> list[str]:
    """``"<module>:<line>: <imported>"`` for each import ``module``'s top-level package may not make."""
    banned = FORBIDDEN[module.split(".")[0]]
    found = imported_modules(source, module, is_package)
    return [f"{module}:{line}: {name}" for line, name in found if name.split(".")[0] in banned]


def _violations_in(path: Path) -> list[str]:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    return violations(path.read_text(), ".".join(parts[:-1] if is_package else parts), is_package)


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_point_one_way(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"no sources under {package}/"
    found = [v for f in files for v in _violations_in(f)]
    assert not found, f"{package} may not import {sorted(FORBIDDEN[package])}:\n" + "\n".join(found)


def test_the_scanner_flags_violations() -> None:
    """The scan can fail: a synthetic source with each kind of forbidden import is caught."""
    source = (
        "import numpy as np\n"
        "from training.rewards import vision_language\n"
        "def later():\n"
        "    import deploy_ros.messages\n"
        "    from torch import nn\n"
    )
    assert violations(source, "sim.tasks.x.env") == [
        "sim.tasks.x.env:2: training.rewards",
        "sim.tasks.x.env:4: deploy_ros.messages",
    ]
    assert [v.split(": ")[1] for v in violations(source, "covey_common.x")] == [
        "training.rewards",
        "deploy_ros.messages",
        "torch",
    ]
    # A relative import stays inside its top-level package (resolved as Python does).
    assert violations("from .messages import x\n", "deploy_ros.profile") == []
    assert violations("from .. import torch\n", "deploy_ros.launch", is_package=True) == []  # deploy_ros.torch
    assert list(imported_modules("from ..core import spec\n", "sim.tasks.x.env")) == [(1, "sim.tasks.core")]
    assert violations("import numpy, torch.nn\n", "deploy_ros.model") == ["deploy_ros.model:1: torch.nn"]


def test_robot_side_modules_import_without_torch_or_the_simulator() -> None:
    """In a fresh interpreter where torch, sim, training and policies cannot be imported, the shared layer and
    the policy node's modules still import (what a robot install needs)."""
    modules = [
        f"covey_common.{p.stem}" for p in sorted((ROOT / "covey_common").glob("*.py")) if p.stem != "__init__"
    ] + [
        "deploy_ros.cli",
        "deploy_ros.launch",
        "deploy_ros.messages",
        "deploy_ros.model",
        "deploy_ros.observation",
        "deploy_ros.profile",
        "deploy_ros.quaternion",
        "deploy_ros.selftest",
        "deploy_ros.sim_bridge",
    ]
    try:
        import rclpy  # noqa: F401

        modules.append("deploy_ros.policy_node")
    except ImportError:
        pass
    code = (
        "import importlib, sys\n"
        "for name in ('torch', 'sim', 'training', 'policies'): sys.modules[name] = None\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "from covey_common.messages import MESSAGE_TYPES\n"
        "from deploy_ros.messages import PARSERS\n"
        "assert set(PARSERS) == set(MESSAGE_TYPES), (sorted(PARSERS), MESSAGE_TYPES)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
