"""The export commands the policy READMEs document are the ones that made the shipped ``.onnx`` files, and
running them never touches the shipped files: each command is run with ``out=`` in a temporary directory
and the written metadata must equal the shipped file's (the parity recording is shortened: it does not
enter the metadata)."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
POLICIES = ROOT / "assets" / "policies"
# `python export.py checkpoint=assets/policies/<name>/<file>.pt [key=value ...]` in a README, up to the closing
# backtick or the end of the line.
COMMAND = re.compile(r"python export\.py (checkpoint=assets/policies/[^`\n]*?)(?:`|$)", re.M)
# Keys of a command that choose where and how exactly parity is checked, not what is written.
NOT_METADATA = {"out", "overwrite", "record_steps", "record_envs", "atol"}
# Graph actors take 50-100 s to trace on 2 busy cores: one of the three runs by default, the others with -m slow.
SLOW = {"hepi_rope_closing", "hepi_cloth_hanging"}


def documented_exports() -> list[tuple[str, dict[str, str]]]:
    """``(readme name, {key: value})`` for every export command with a literal checkpoint in a policy README."""
    found = []
    for readme in sorted(POLICIES.glob("*/README.md")):
        for match in COMMAND.finditer(readme.read_text()):
            args = dict(a.split("=", 1) for a in shlex.split(match.group(1)) if "=" in a)
            found.append((readme.parent.name, args))
    return found


def covey_metadata(path: Path) -> dict:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return json.loads({p.key: p.value for p in model.metadata_props}["covey"])


@pytest.fixture(scope="module")
def export_cli():
    name = "covey_export_cli"  # the name the other tests load it under
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "export.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while building the class
        spec.loader.exec_module(module)
    return sys.modules[name]


def test_every_single_file_policy_documents_its_export():
    names = {name for name, _ in documented_exports()}
    shipped = {p.parent.name for p in POLICIES.glob("*/policy.onnx")}
    assert shipped <= names, f"shipped policy.onnx without a documented export command: {sorted(shipped - names)}"


@pytest.mark.parametrize(
    ("name", "args"),
    [pytest.param(n, a, id=n, marks=[pytest.mark.slow] if n in SLOW else []) for n, a in documented_exports()],
)
def test_documented_export_reproduces_shipped_metadata(export_cli, tmp_path, name, args):
    checkpoint = ROOT / args["checkpoint"]
    shipped = Path(args.get("out", checkpoint.with_suffix(".onnx")))
    shipped = shipped if shipped.is_absolute() else ROOT / shipped
    kwargs = {k: v for k, v in args.items() if k not in NOT_METADATA and k != "checkpoint"}
    out = tmp_path / shipped.name
    before = shipped.stat().st_mtime_ns
    export_cli.export_checkpoint(checkpoint, out=out, record_steps=4, record_envs=2, **kwargs)
    assert shipped.stat().st_mtime_ns == before, "the shipped file was touched"
    written, reference = covey_metadata(out), covey_metadata(shipped)
    differs = sorted(k for k in set(written) | set(reference) if written.get(k) != reference.get(k))
    assert not differs, f"{name}: the README's export command writes different metadata under {differs}"


def test_export_refuses_to_replace_a_file(export_cli, tmp_path):
    existing = tmp_path / "policy.onnx"
    existing.write_bytes(b"keep me")
    with pytest.raises(FileExistsError, match="overwrite=true"):
        export_cli.export_checkpoint(POLICIES / "pixel_reach" / "policy.pt", out=existing)
    assert existing.read_bytes() == b"keep me"


def test_the_export_cli_prints_its_result_and_nothing_else(tmp_path):
    import subprocess

    out = tmp_path / "pixel.onnx"
    done = subprocess.run(
        [sys.executable, "export.py", f"checkpoint={POLICIES / 'pixel_reach' / 'policy.pt'}", f"out={out}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.strip() == "", f"export printed noise: {done.stderr[:500]}"
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"robot: {out}") and json.loads(lines[1])["files"]
