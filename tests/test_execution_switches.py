"""How the simulation executes is two switches in one place, the ``sim`` node (``sim.compile``, ``sim.kernels``);
the env chooses the rest (the control loop's layout, resets by index). The retired switches fail as new overrides,
saying what replaced them, while stored configs that hold them (checkpoints, shipped train configs) still load."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from omegaconf import OmegaConf

import sim
from sim.core import native
from sim.core.config import ConfigError
from sim.physics.components import COMPONENTS_MIN_ENVS
from training.config import check_config, compose
from training.eval_sources import load_checkpoint_source, resolve_task_cfg

ROOT = Path(__file__).resolve().parents[1]
VOLLEYBALL = ROOT / "assets" / "policies" / "drone_volleyball"
needs_c = pytest.mark.skipif(not native.normal_available(), reason="needs a C compiler")


@pytest.mark.parametrize("task", ["cable_load", "drone_volleyball", "point_reach"])
def test_the_sim_node_holds_exactly_the_two_execution_switches(task: str) -> None:
    cfg = OmegaConf.to_container(compose([f"task={task}"]), resolve=True)
    check_config(cfg)
    assert cfg["sim"] == {"compile": "auto", "kernels": "auto"}
    assert not {"layout", "cpu_kernels"} & set(cfg["task"])


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("task.cpu_kernels=torch", "now sim.kernels"),
        ("task.layout=rows", "the env chooses it"),
        ("sim.masked_resets=true", "envs reset by index"),
    ],
)
def test_a_retired_switch_fails_as_an_override_saying_what_replaced_it(override: str, says: str, evaluate_cli) -> None:
    key = override.split("=")[0]
    with pytest.raises(ConfigError, match=f"^{key}: is no setting any more: .*{says}"):
        compose(["task=cable_load", override])
    if key.startswith("task."):  # evaluate.py's task.* too, and sim.make's keyword overrides
        with pytest.raises(ConfigError, match=f"^{key}: is no setting any more: .*{says}"):
            evaluate_cli.parse_args(["task=cable_load", override])
        with pytest.raises(ValueError, match=f"{key} is no setting any more"):
            sim.make("cable_load", **{key.removeprefix("task."): override.split("=")[1]})


def test_sim_kernels_is_checked_and_reaches_the_training_and_evaluation_envs(tmp_path, evaluate_cli) -> None:
    from training.runner import Runner
    from training.setup import build_run

    with pytest.raises(ConfigError, match="kernels must be one of"):
        check_config(compose(["task=cable_load", "sim.kernels=fast"]))
    with pytest.raises(ConfigError, match="kernels must be one of"):
        evaluate_cli.parse_args(["task=cable_load", "kernels=fast"])
    over = ["task=cable_load", "num_envs=4", "sim.kernels=torch", "train.total_steps=64", f"runs_dir={tmp_path}"]
    run = build_run(OmegaConf.to_container(compose(over), resolve=True))
    assert run.env.kernels == "torch"
    assert Runner(run)._get_eval_env().kernels == "torch"  # the in-training evaluations step as training does


@needs_c
def test_a_stored_task_config_with_the_old_keys_still_builds_its_env() -> None:
    """A checkpoint's task config may hold ``layout`` (dropped: it resolves the same) and ``cpu_kernels`` (read as
    ``kernels`` where the caller chooses none; an explicit choice wins, as ``compile``'s does)."""
    stored = {"name": "cable_load", "layout": "components", "cpu_kernels": "torch"}
    env = sim.make(stored, num_envs=4)
    assert (env.kernels, env.layout) == ("torch", "rows")
    assert sim.make(stored, num_envs=4, kernels="native").kernels == "native"
    assert sim.make({"name": "cable_load", "layout": "auto"}, num_envs=COMPONENTS_MIN_ENVS).layout == "components"


@needs_c
def test_the_shipped_checkpoints_and_train_configs_with_task_layout_load(evaluate_cli) -> None:
    """games_skills.pt (the co-play skills level) recorded ``layout: auto``: evaluate.py's path (checkpoint -> task
    config -> env) builds it, and its actors act; so do the shipped train configs' task nodes."""
    source = load_checkpoint_source(str(VOLLEYBALL / "games_skills.pt"), "cpu")
    assert source.task_cfg["layout"] == "auto"
    args, overrides, _ = evaluate_cli.parse_args([f"checkpoint={VOLLEYBALL / 'games_skills.pt'}"])
    env = sim.make(resolve_task_cfg(source.task_cfg, args, overrides), num_envs=2, kernels=args.kernels)
    assert env.task_name == "drone_volleyball_coplay" and env.match.layout == "rows"
    obs = source.make_policy(env)(env.reset())
    assert all(torch.isfinite(a).all() for a in obs.values())
    for path in sorted(VOLLEYBALL.glob("*_train_config.yaml")):
        task = yaml.safe_load(path.read_text())["task"]
        assert sim.make(task, num_envs=2).spec, path.name


@needs_c
@pytest.mark.parametrize("task", ["drone_volleyball_strategy", "drone_volleyball_coplay"])
def test_sim_kernels_reaches_the_match_inside_a_volleyball_level(task: str) -> None:
    """The strategy and co-play levels step a match inside them: the kernels choice is the match's."""
    assert sim.make(task, num_envs=2, kernels="torch").match.kernels == "torch"
    assert sim.make(task, num_envs=2).match.kernels == "native"  # auto, on a machine with a C compiler
