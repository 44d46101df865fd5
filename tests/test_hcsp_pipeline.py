"""``python train.py task=drone_volleyball`` runs HCSP's whole pipeline (training/pipeline.py, its stages in
configs/stage/hcsp/drone_volleyball.yaml): stage 1's skills, stage 2's strategy, stage 3 in games to 5, one run
directory, resumable stage by stage; its team plays matches in ``evaluate.py``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from sim.core.config import ConfigError, build_config
from training.config import compose
from training.pipeline import pipeline_stages, shared_overrides, stage_config, stage_overrides
from training.settings import BUDGETS, PipelineCfg

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "assets" / "policies" / "drone_volleyball"
TASK = "drone_volleyball"


def _pipeline() -> PipelineCfg:
    cfg = compose([f"task={TASK}"])
    assert cfg.runner == "pipeline"
    return build_config(PipelineCfg, OmegaConf.to_container(cfg.pipeline), where="pipeline")


def _products(run: Path, name: str, stage: str) -> set[str]:
    """Where a stage's products land: co-self-play's files in <run>/<name>/, any other run's <run>/<name>.pt."""
    if stage == "coselfplay":
        return {str(run / name / "skills.pt"), str(run / name / "strategy.pt")}
    return {str(run / f"{name}.pt")}


@pytest.mark.parametrize("budget", BUDGETS)
def test_every_stage_composes_and_reads_only_what_an_earlier_stage_made(budget: str) -> None:
    pc, run = _pipeline(), Path("/r")
    made: set[str] = set()
    for stage in pipeline_stages(pc):
        overrides = stage_overrides(TASK, stage, budget, run, ())
        cfg = stage_config(overrides, run / stage.name)
        assert cfg["runs_dir"] == str(run / stage.name) and cfg["resume"] is None
        for arg in overrides:
            for path in re.findall(r"=(/r/\S+)", arg):
                assert path in made, f"{stage.name}: {arg} names no earlier stage's product"
        made |= _products(run, stage.name, stage.stage)
    assert {str(run / p) for p in pc.team} <= made and len(pc.team) == 2  # strategy@skills


def test_the_gpu_budget_runs_the_shipped_stage_settings() -> None:
    """Stages 1 and 2 on budget=gpu are the runs of the shipped skills and strategy (what changes what is learnt)."""
    keys = ("algo.lr", "algo.gamma", "num_envs", "train.total_steps", "train.rollout_steps", "imitation.rounds")
    shipped = {"skills/serve": "serve", "skills/set": "set", "skills/attack": "attack", "strategy": "strategy"}
    stages = {s.name: s for s in pipeline_stages(_pipeline())}
    for name, policy in shipped.items():
        cfg = stage_config(stage_overrides(TASK, stages[name], "gpu", Path("r"), ()), Path("r"))
        run = yaml.safe_load((SHIPPED / f"{policy}_train_config.yaml").read_text())
        for key in keys:
            got, want = cfg, run
            for part in key.split("."):
                got, want = got[part], want.get(part, {})
            assert want == {} or got == want, (name, key)  # {}: a key the older run did not record


def test_only_the_run_wide_keys_of_the_command_line_reach_the_stages() -> None:
    argv = ["task=drone_volleyball", "budget=smoke", "seed=3", "torch_threads=1", "wandb.mode=disabled"]
    assert shared_overrides(argv) == ["seed=3", "torch_threads=1", "wandb.mode=disabled"]
    with pytest.raises(ConfigError, match="train.max_minutes"):
        shared_overrides([*argv, "train.max_minutes=5"])
    assert compose([f"task={TASK}", "stage=skills"]).runner == "ppo"  # one stage alone, as before
    assert compose([f"task={TASK}", "budget=gpu"]).pipeline.budget == "gpu"


def _train(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "train.py", f"task={TASK}", "budget=smoke", "torch_threads=1", "wandb.mode=disabled"]
    proc = subprocess.run([*cmd, "train.progress=false", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.mark.slow
def test_the_smoke_pipeline_makes_a_team_that_plays_and_resumes_by_stage(tmp_path: Path) -> None:
    """~3 min on 2 loaded cores: every stage once, one again after it is marked interrupted, 2 games."""
    _train(f"runs_dir={tmp_path}")
    (run,) = (tmp_path / TASK).iterdir()
    record = json.loads((run / "pipeline.json").read_text())
    names = [s.name for s in pipeline_stages(_pipeline())]
    assert [r["name"] for r in record["stages"]] == names and {r["state"] for r in record["stages"]} == {"done"}
    assert record["team"] == f"{run}/team/strategy.pt@{run}/team/skills.pt"
    for row in record["stages"]:  # each stage ran in its own folder of the run
        assert Path(row["run_dir"]).is_relative_to(run / row["name"]) and row["products"]

    proc = subprocess.run(
        [sys.executable, "evaluate.py", f"match={record['team']},scripted", "games=2", "seed=0"]
        + ["task.rules.points_to_win=1", "task.episode_length_s=4", "task.rules.rally_time_limit_s=3.5"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["games"] == 2 and report["team_b"] == "scripted" and report["hits_per_rally"] > 0

    # An interrupted last stage: resume runs it alone again and keeps every finished stage's products.
    record["stages"][-1]["state"] = "interrupted"
    (run / "pipeline.json").write_text(json.dumps(record))
    before = {p: Path(p).read_bytes() for r in record["stages"][:-1] for p in r["products"]}
    proc = _train(f"resume={run}")
    assert proc.stdout.count("done before, skipped") == len(names) - 1
    assert all(Path(p).read_bytes() == b for p, b in before.items())
    last = json.loads((run / "pipeline.json").read_text())["stages"][-1]
    assert last["state"] == "done" and last["run_dir"] != record["stages"][-1]["run_dir"]
    assert len(list((run / names[-1]).glob("*/*"))) == 2  # the interrupted run's folder and the new one
