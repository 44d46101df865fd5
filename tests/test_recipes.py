"""Each task brings its training recipe (configs/recipe/<task>.yaml, through the task's config node): the
algorithm, envs and budget that made its shipped policy. ``python train.py task=<name>`` runs it, the command
line still wins over it, and the training command in each shipped policy's README, composed over it, gives
the settings that run recorded (the policy's train_config.yaml) on every key that changes what is learnt."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

import sim
from training.config import CONFIG_DIR, CoveyCfg, check_config, compose, task_node

ROOT = Path(__file__).resolve().parents[1]
POLICIES = ROOT / "assets" / "policies"
TASKS = sim.registered_tasks()

# Keys a run records that do not change what it learns, with why; they are not compared.
RUN_SPECIFIC = {
    "runs_dir": "where the run directory was written",
    "resume": "continuing a stopped run (its budget continued)",
    "init_from": "a chain's previous run, a path on the machine that made it",
    "device": "the machine",
    "torch_threads": "threads: speed on the machine that made it",
    "update_threads": "threads: speed on the machine that made it",
    "distributed": "one process or several for the same PPO",
    "train.progress": "the console's progress bar",
    "sim.compile": "compiled or eager: the same physics (the schema's value was a bool then)",
    "sim.masked_resets": "resets by mask or by index: the env's choice now (the run reset by index)",
}
RUN_SPECIFIC_NODES = {"wandb": "logging only"}
# Keys newer than a recorded run are compared with the schema's defaults (the run had the behaviour the
# default keeps); keys of a node the run does not use are not compared (see inactive()).


def flat(node: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for key, val in node.items():
        if isinstance(val, dict):
            out.update(flat(val, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = tuple(val) if isinstance(val, list) else val
    return out


def inactive(cfg: dict[str, object]) -> set[str]:
    """Keys of the nodes this config does not use: settings there do not change the run."""
    off = set()
    if cfg.get("imitation.expert") == "none":  # no DAgger
        off |= {k for k in cfg if k.startswith("imitation.") and k != "imitation.expert"}
    if cfg.get("algo.policy.memory") == "none":  # no recurrent core
        off |= {k for k in cfg if k.startswith("algo.policy.memory_")}
    if cfg.get("algo.name") != "sac":
        off |= {k for k in cfg if k.startswith("sac.")}
    if cfg.get("runner") != "coselfplay":
        off |= {k for k in cfg if k.startswith("coselfplay.")}
    if cfg.get("runner") != "selfplay" and cfg.get("algo.name") != "selfplay":
        off |= {k for k in cfg if k.startswith("league.")}
    return off


def readme_commands(readme: Path) -> list[str]:
    """The ``python train.py ...`` commands of a README, continuation lines joined, comments dropped."""
    lines = readme.read_text().splitlines()
    out = []
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if line.startswith("python train.py"):
            while line.endswith("\\") and i + 1 < len(lines):
                i += 1
                line = line[:-1] + " " + lines[i].strip()
            out.append(line.split(" #")[0])
        i += 1
    return out


def command(readme: Path, *marks: str) -> list[str]:
    """The overrides of the one README command that holds every text of ``marks``."""
    (found,) = [c for c in readme_commands(readme) if all(m in c for m in marks)]
    return shlex.split(found)[2:]


@dataclass(frozen=True)
class Shipped:
    policy: str  # folder under assets/policies
    config: str  # the run's resolved config there
    marks: tuple[str, ...]  # texts that pick the README's command
    # a chain's final command: "python train.py ... <overrides>" continues the command of `marks`
    then: tuple[str, ...] = ()
    unmatched: tuple[tuple[str, str], ...] = ()  # (key, why) this command does not reproduce


SHIPPED = [
    Shipped("cable_load", "train_config.yaml", ("task=cable_load task.num_mavs=4",)),
    # HCSP is a pipeline of stages (each skill, the strategy, co-self-play); its stage commands, one each
    Shipped("drone_volleyball", "serve_train_config.yaml", ("stage=skills", "task.mode=serve")),
    Shipped("drone_volleyball", "set_train_config.yaml", ("stage=skills", "task.mode=set")),
    Shipped("drone_volleyball", "attack_train_config.yaml", ("stage=skills", "task.mode=attack")),
    Shipped(
        "drone_volleyball",
        "pass_train_config.yaml",
        ("task.mode=pass",),
        unmatched=(("train.max_minutes", "the run was resumed with a longer budget"),),
    ),
    Shipped("drone_volleyball", "strategy_train_config.yaml", ("stage=strategy", "train.total_steps=400000")),
    Shipped("hepi_cloth_hanging", "train_config.yaml", ("task=hepi_cloth_hanging",)),
    Shipped("hepi_insertion", "train_config.yaml", ("task=hepi_insertion",)),
    Shipped("hepi_rope_closing", "train_config.yaml", ("task=hepi_rope_closing",)),
    Shipped("memory_reach", "train_config.yaml", ("algo.policy.memory=gru",)),
    Shipped("memory_reach", "mlp_baseline_train_config.yaml", ("algo.policy.memory=none",)),
    Shipped("pixel_reach", "train_config.yaml", ("task=pixel_reach",)),
    # a DAgger chain of three runs, each from the previous student: the shipped policy is the third's
    Shipped("robot_soccer", "train_config.yaml", ("imitation.rounds=400",), then=("imitation.lr=2.5e-4",)),
    Shipped("robot_soccer_expert", "train_config.yaml", ("task=robot_soccer",)),
    Shipped("robot_soccer_humanoid_getup", "train_config.yaml", ("task.skill=getup",)),
    Shipped("robot_soccer_seen_expert", "train_config.yaml", ("task.observation=seen",)),
    Shipped("vlm_driving", "train_config.yaml", ("task=vlm_driving",)),
]
# Not compared: drone_volleyball's stage-3 configs (stage3_*, games_*) are the configs of one phase of the
# co-self-play runner, not of a command; its flat baselines (flat_*) have no training command in the README.


def overrides(case: Shipped) -> list[str]:
    readme = POLICIES / case.policy / "README.md"
    args = command(readme, *case.marks)
    if case.then:
        more = command(readme, "python train.py ...", *case.then)
        keys = {a.split("=", 1)[0] for a in more if "=" in a}
        args = [a for a in args if a.split("=", 1)[0] not in keys] + more
    # drop what RUN_SPECIFIC ignores (a chain's init_from=<run N>/... is no path here) and the words that are
    # no override ("...", the rest of "<run N>")
    keep = [a for a in args if "=" in a]
    return [a for a in keep if a.split("=", 1)[0] not in RUN_SPECIFIC]


def schema_defaults(task: str) -> dict[str, object]:
    root = OmegaConf.to_container(OmegaConf.structured(CoveyCfg))
    root["task"] = OmegaConf.to_container(task_node(task))
    return flat(root)


@pytest.mark.parametrize("case", SHIPPED, ids=lambda c: f"{c.policy}/{c.config}")
def test_readme_command_over_the_recipe_reproduces_the_shipped_run(case: Shipped) -> None:
    args = overrides(case)
    composed = flat(OmegaConf.to_container(compose(args), resolve=True))
    shipped = flat(yaml.safe_load((POLICIES / case.policy / case.config).read_text()))
    defaults = schema_defaults(str(composed["task.name"]))
    skip = set(RUN_SPECIFIC) | {k for k, _ in case.unmatched} | inactive(composed) & inactive(shipped)
    skip |= {k for k in composed | shipped if k.split(".")[0] in RUN_SPECIFIC_NODES}
    removed = sorted(k for k in shipped if k not in composed and k not in skip)
    assert not removed, f"keys of the run that the schema lost: {removed}"
    wrong = {
        key: (composed[key], shipped.get(key, f"<newer key; default {defaults.get(key)!r}>"))
        for key in sorted(composed)
        if key not in skip and composed[key] != shipped.get(key, defaults.get(key))
    }
    assert not wrong, f"python train.py {' '.join(args)}: (composed, shipped) differ: {wrong}"


# ----------------------------------------------------------------------------- python train.py task=<name>
# What each task's recipe runs, from the shipped run it reproduces (algo, lr, envs, env steps, rollout).
RECIPE_FROM = {
    "cable_load": "cable_load/train_config.yaml",
    # a pipeline (HCSP's three stages): its first run on the GPU budget, stage 1's serve skill (pipeline_stage)
    "drone_volleyball": "drone_volleyball/serve_train_config.yaml",
    "drone_volleyball_strategy": "drone_volleyball/strategy_train_config.yaml",  # stage 2
    "hepi_cloth_hanging": "hepi_cloth_hanging/train_config.yaml",
    "hepi_insertion": "hepi_insertion/train_config.yaml",
    "hepi_rope_closing": "hepi_rope_closing/train_config.yaml",
    "memory_reach": "memory_reach/train_config.yaml",
    "pixel_reach": "pixel_reach/train_config.yaml",
    "robot_soccer": "robot_soccer_expert/train_config.yaml",  # stage 1, the state expert the others start from
    "vlm_driving": "vlm_driving/train_config.yaml",
}
# Tasks without a policy of their own: their recipes, stated here.
RECIPE = {
    # (algo, lr, num_envs, total_steps, rollout_steps)
    "point_reach": ("mappo", 5e-5, 1024, 2_000_000, 64),
    # HCSP stage 3 (configs/stage/coselfplay.yaml): its runner sizes the phases (coselfplay.*)
    "drone_volleyball_coplay": ("hcsp", 3e-4, 256, 20_000_000, 32),
}
KEYS = ("algo.name", "algo.lr", "num_envs", "train.total_steps", "train.rollout_steps")


def test_every_task_has_a_recipe_and_every_recipe_a_task() -> None:
    recipes = {p.stem for p in (CONFIG_DIR / "recipe").glob("*.yaml")}
    assert recipes == set(TASKS)
    assert set(RECIPE_FROM) | set(RECIPE) == set(TASKS)


def pipeline_stage(task: str, index: int, budget: str) -> dict:
    """The resolved config of stage ``index`` of task ``task``'s pipeline (runner=pipeline) on ``budget``."""
    from sim.core.config import build_config
    from training.pipeline import pipeline_stages, stage_config, stage_overrides
    from training.settings import PipelineCfg

    pc = build_config(PipelineCfg, OmegaConf.to_container(compose([f"task={task}"]).pipeline), where="pipeline")
    stage = pipeline_stages(pc)[index]
    return stage_config(stage_overrides(task, stage, budget, Path("run"), ()), Path("run") / stage.name)


@pytest.mark.parametrize("task", TASKS)
def test_train_py_task_runs_the_tasks_recipe(task: str) -> None:
    cfg = OmegaConf.to_container(compose([f"task={task}"]), resolve=True)
    check_config(cfg)
    if cfg["runner"] == "pipeline":  # its runs are its stages': the first, on the budget of the shipped policies
        cfg = pipeline_stage(task, 0, "gpu")
    got = flat(cfg)
    if task in RECIPE:
        want = dict(zip(KEYS, RECIPE[task], strict=True))
    else:
        shipped = flat(yaml.safe_load((POLICIES / RECIPE_FROM[task]).read_text()))
        defaults = schema_defaults(task)  # keys the older runs did not record (pixel_reach's algo.lr)
        want = {k: shipped.get(k, defaults[k]) for k in KEYS}
    assert {k: got[k] for k in KEYS} == want


def test_the_command_line_wins_over_the_recipe() -> None:
    cfg = compose(["task=cable_load", "algo=ppo", "num_envs=8", "train.total_steps=100", "train.max_minutes=1"])
    assert (cfg.algo.name, cfg.algo.lr, cfg.num_envs, cfg.train.total_steps) == ("ppo", 3e-4, 8, 100)
    assert cfg.train.max_minutes == 1.0 and cfg.train.rollout_steps == 64  # the rest stays the recipe's
    cfg = compose(["task=drone_volleyball", "stage=strategy"])  # HCSP: another stage than the one it starts at
    assert (cfg.runner, cfg.task.name, cfg.num_envs) == ("selfplay", "drone_volleyball_strategy", 256)
    cfg = compose(["task=drone_volleyball", "algo=selfplay"])  # flat self-play: no stage
    assert (cfg.runner, cfg.algo.name, cfg.task.mode) == ("ppo", "selfplay", "3v3")


def test_a_task_without_a_recipe_trains_with_the_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A task without a recipe file gets no defaults list: algo=ppo (the root's) and the dataclasses' budget."""
    import training.config as typed

    assert "defaults" in typed.with_recipe(task_node("point_reach"), "point_reach")
    monkeypatch.setattr(typed, "recipe_path", lambda name: tmp_path / f"{name}.yaml")
    assert "defaults" not in typed.with_recipe(task_node("point_reach"), "point_reach")
