"""The shipped hydra configs build the tasks they name, and every key in them is a real field."""

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import sim
from sim.core.config import build_config
from training.ppo import PPOCfg
from training.runner import TrainCfg, WandbCfg

ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = str(ROOT / "configs")
TASKS = sorted(p.stem for p in (Path(CONFIG_DIR) / "task").glob("*.yaml"))
ALGOS = sorted(p.stem for p in (Path(CONFIG_DIR) / "algo").glob("*.yaml"))


@pytest.mark.parametrize("task", TASKS)
def test_task_config_node_builds_the_task(task: str) -> None:
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name="config", overrides=[f"task={task}", "num_envs=2", "device=cpu"])
    env = sim.make(cfg.task, num_envs=cfg.num_envs, device=cfg.device, seed=cfg.seed, compile=cfg.sim.compile)
    assert env.spec.task == cfg.task.name
    assert env.num_envs == 2
    # Every value in the node reached the env's config (nothing silently dropped).
    for key, val in cfg.task.items():
        if key != "name" and not hasattr(val, "items"):
            assert getattr(env.cfg, key) == val, key


def test_every_registered_task_has_a_config() -> None:
    assert set(sim.registered_tasks()) <= set(TASKS)


def test_command_line_override_reaches_the_env() -> None:
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name="config", overrides=["task.num_mavs=5", "task.randomization.enabled=false"])
    env = sim.make(cfg.task, num_envs=1, device="cpu")
    assert env.cfg.num_mavs == 5 and env.spec.groups["mavs"].n_agents == 5
    assert env.cfg.randomization.enabled is False


def test_misspelt_key_in_a_node_fails_naming_it() -> None:
    with pytest.raises(ValueError, match="num_mav"):
        sim.make({"name": "cable_load", "num_mav": 4})


@pytest.mark.parametrize("algo", ALGOS)
def test_root_config_nodes_are_typed_configs(algo: str) -> None:
    """Every key of the algo, train and wandb nodes is a real field (build_config rejects others)."""
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name="config", overrides=[f"algo={algo}"])
    plain = OmegaConf.to_container(cfg, resolve=True)
    ppo = build_config(PPOCfg, plain["algo"])
    assert ppo.name == algo
    assert ppo.critic_input == {"mappo": "state", "ippo": "policy", "selfplay": "state", "hcsp": "state"}[algo]
    build_config(TrainCfg, plain["train"])
    assert build_config(WandbCfg, plain["wandb"]).mode == "offline"
    assert {"num_envs", "device", "seed", "resume", "torch_threads"} <= set(plain)
    assert set(plain["sim"]) == {"compile"}


def test_league_node_is_the_selfplay_config() -> None:
    from training.selfplay_runner import SelfPlayCfg

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name="config", overrides=["algo=selfplay", "league.meta_solver=pfsp"])
    node = OmegaConf.to_container(cfg, resolve=True)["league"]
    own = {k: node.pop(k) for k in ("learner_group", "opponents_per_iteration", "scripted_choice")}
    sp = build_config(SelfPlayCfg, {**own, "league": node})
    assert sp.league.meta_solver == "pfsp" and sp.learner_group == "team_a"


def test_top_level_overrides() -> None:
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(
            config_name="config",
            overrides=["num_envs=1024", "device=cpu", "algo.lr=3e-4", "seed=3", "sim.compile=true"],
        )
    assert (cfg.num_envs, cfg.device, cfg.algo.lr, cfg.seed, cfg.sim.compile) == (1024, "cpu", 3e-4, 3, True)


@pytest.mark.parametrize("stage", ["skills", "strategy", "coselfplay"])
def test_hcsp_stage_configs_select_task_runner_and_league(stage: str) -> None:
    from sim.tasks.drone_volleyball.strategy import RULE_BASED_CHOICE
    from training.selfplay_runner import SelfPlayCfg

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name="config", overrides=["task=drone_volleyball", "algo=hcsp", f"stage={stage}"])
    plain = OmegaConf.to_container(cfg, resolve=True)
    build_config(PPOCfg, plain["algo"])
    build_config(TrainCfg, plain["train"])
    env = sim.make(plain["task"], num_envs=2)
    if stage == "coselfplay":
        from training.coselfplay import CoSelfPlayCfg

        cs = build_config(CoSelfPlayCfg, plain["coselfplay"])
        assert plain["runner"] == "coselfplay" and plain["imitation"]["expert"] == "task"
        assert Path(cs.strategy).is_file() or (ROOT / cs.strategy).is_file()  # the shipped stage-2 strategy
        assert (
            sim.make({**plain["task"], "name": "drone_volleyball_coplay"}, num_envs=2).spec.groups["drones"].n_agents
            == 6
        )
    elif stage == "skills":
        assert plain["runner"] == "ppo" and env.task_name == "drone_volleyball" and env.cfg.mode == "serve"
        assert plain["imitation"]["expert"] == "task"
    else:
        assert plain["runner"] == "selfplay" and env.task_name == "drone_volleyball_strategy"
        node = plain["league"]
        own = {k: node.pop(k) for k in ("learner_group", "opponents_per_iteration", "scripted_choice")}
        sp = build_config(SelfPlayCfg, {**own, "league": node})
        assert sp.scripted_choice == RULE_BASED_CHOICE and sp.league.meta_solver == "psro_nash"
