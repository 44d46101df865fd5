"""Tasks own their metadata: the lazy registry, each task's metadata through its class, and generic
layers (training/, evaluate.py, export.py, deploy_ros/, covey_common/, sim/core, sim/render, sim/ros) that name
no task.

Import checks run in a fresh interpreter (``python -c``), so what this test process already
imported does not hide an eager import.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

import sim
from sim.core import registry
from sim.core.config import build_config
from sim.tasks import TASKS

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = sorted(p.name for p in (ROOT / "sim" / "tasks").iterdir() if (p / "__init__.py").is_file())


def _python(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _family(target: str) -> str:
    """``"sim.tasks.<family>.env:Class"`` -> ``<family>``."""
    return target.split(":")[0].split(".")[2]


def test_importing_sim_and_the_task_packages_imports_no_task_module_and_no_torch() -> None:
    out = _python(
        "import sys; sys.modules['torch'] = None\n"  # any torch import fails
        "import sim, sim.tasks\n"
        f"for family in {FAMILIES!r}: __import__('sim.tasks.' + family)\n"
        "print(sorted(m for m in sys.modules if m.startswith('sim.')))"
    )
    loaded = eval(out)  # a printed list of module names
    assert "sim.tasks.cable_load.env" not in loaded
    assert not [m for m in loaded if m.count(".") > 2], loaded  # packages only, no module inside a family


def test_registered_tasks_lists_the_table_without_importing_it() -> None:
    inside = "[m for m in sys.modules if m.startswith('sim.tasks.') and m.count('.') > 2]"
    out = _python(f"import sys, sim; print(sim.registered_tasks()); print({inside})")
    names, envs = (eval(line) for line in out.splitlines())
    assert names == sorted(TASKS) and envs == []  # no module inside a family


@pytest.mark.parametrize("task", sorted(TASKS))
def test_metadata_is_reached_through_the_class_without_importing_other_families(task: str) -> None:
    code = f"""
import dataclasses, json, sys
import sim
cls = sim.task_class({task!r})
teams = cls.match_teams()
print(json.dumps({{
    "task_name": cls.task_name,
    "cfg_class": cls.cfg_class.__module__ + ":" + cls.cfg_class.__qualname__,
    "best_metric": list(cls.best_metric),
    "success_criteria": dict(cls.success_criteria),
    "renderer": cls.renderer,
    "evaluation_overrides": cls.evaluation_overrides(),
    "match_teams": type(teams).__name__ if teams is not None else None,
    "families": sorted({{m.split(".")[2] for m in sys.modules if m.startswith("sim.tasks.") and m.count(".") >= 2}}),
}}))
"""
    meta = json.loads(_python(code).splitlines()[-1])
    assert meta["task_name"] == task
    assert meta["families"] == [_family(TASKS[task])], "loading one task imported another family"
    metric, mode = meta["best_metric"]
    assert isinstance(metric, str) and metric and mode in ("min", "max")
    assert all(isinstance(v, float) for v in meta["success_criteria"].values())
    assert meta["renderer"] is None or ":" in meta["renderer"]
    # The class's config and evaluation overrides build a valid config together.
    cls = sim.task_class(task)
    assert dataclasses.is_dataclass(cls.cfg_class)
    build_config(cls.cfg_class, cls.evaluation_overrides())
    assert sim.evaluation_overrides(task) == cls.evaluation_overrides()


def test_a_broken_task_module_breaks_only_its_own_task(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry._EXTRA, "broken_task", "sim.tasks.no_such_family.env:BrokenEnv")
    assert "broken_task" in sim.registered_tasks()
    with pytest.raises(ValueError, match="broken_task.*ModuleNotFoundError") as err:
        sim.make("broken_task")
    assert "\n" not in str(err.value)
    env = sim.make("point_reach", num_envs=2)  # every other task still builds
    assert env.task_name == "point_reach"


def test_the_table_and_the_class_agree_on_the_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry._EXTRA, "alias_of_point_reach", "sim.tasks.point_reach.env:PointReachEnv")
    with pytest.raises(ValueError, match="task_name = 'alias_of_point_reach'"):
        sim.make("alias_of_point_reach")
    with pytest.raises(ValueError, match="module:Class"):
        registry.register("bad_target", "sim.tasks.point_reach.env.PointReachEnv")
    with pytest.raises(ValueError, match="registered twice"):
        registry.register("point_reach", "sim.tasks.point_reach.env:PointReachEnv")


def test_success_criteria_and_best_metric_come_from_the_task_class() -> None:
    from training.evaluation import success_criteria

    cls = sim.task_class("cable_load")
    assert success_criteria("cable_load") == dict(cls.success_criteria) == success_criteria(cls)
    assert success_criteria("point_reach") == {}
    assert sim.task_class("point_reach").best_metric == ("metrics/final_dist_m", "min")


# --------------------------------------------------------------------------- generic layers name no task
GENERIC = (
    sorted((ROOT / "training").glob("*.py"))
    + [ROOT / "evaluate.py", ROOT / "export.py"]
    + sorted((ROOT / "deploy_ros").rglob("*.py"))
    + sorted((ROOT / "sim" / "core").glob("*.py"))
    + sorted((ROOT / "sim" / "render").glob("*.py"))
    + sorted((ROOT / "sim" / "ros").glob("*.py"))
    + sorted((ROOT / "covey_common").glob("*.py"))
)


def _task_mentions(path: Path, names: set[str]) -> list[str]:
    """Code (not docstrings or comments) of ``path`` that names a task: an import from
    ``sim.tasks.<family>``, a string literal, or an identifier containing a task or family name."""
    tree = ast.parse(path.read_text())
    docs = set()  # bare string statements: module, class and function docstrings (usage examples live there)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        for stmt in body if isinstance(body, list) else []:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                docs.add(id(stmt.value))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            modules = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
            found += [f"{path.name}:{node.lineno} imports {m}" for m in modules if m.startswith("sim.tasks.")]
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            text = node.value
        elif isinstance(node, ast.Name):
            text = node.id
        elif isinstance(node, ast.Attribute):
            text = node.attr
        else:
            continue
        found += [f"{path.name}:{node.lineno} names {n!r}" for n in names if n in text]
    return found


def test_generic_layers_name_no_task() -> None:
    names = set(TASKS) | set(FAMILIES)
    assert len(GENERIC) > 20  # the globs found the files
    found = [hit for path in GENERIC for hit in _task_mentions(path, names)]
    assert not found, "\n".join(found)


def test_the_scan_sees_imports_strings_and_names_but_not_docstrings(tmp_path: Path) -> None:
    src = tmp_path / "x.py"
    src.write_text(
        '"""Usage: python evaluate.py task=cable_load"""\n'
        "from sim.tasks.cable_load import CableLoadEnv\n"
        "def f():\n"
        '    """sim.make("cable_load")"""\n'
        '    return {"cable_load": 1}, cable_load_cfg  # cable_load\n'
    )
    hits = _task_mentions(src, {"cable_load"})
    assert len(hits) == 3 and {h.split(" ")[1] for h in hits} == {"imports", "names"}, hits


def test_task_configs_are_dataclasses_of_their_class() -> None:
    for name in TASKS:
        cls = sim.task_class(name)
        assert dataclasses.is_dataclass(cls.cfg_class), name
        assert cls.cfg_class.__module__.startswith(f"sim.tasks.{_family(TASKS[name])}."), name
