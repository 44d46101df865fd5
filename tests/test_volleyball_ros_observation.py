"""drone_volleyball's robot-side team (sim/tasks/drone_volleyball/robot_observation.py) against the simulator: recorded
match states go through the ROS messages the bridge publishes and the robot's parsers, and each drone's builder
(the team strategy, the rule layer, the skill observation) must give the env's own tensors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("rclpy")
pytest.importorskip("onnxruntime")

from builtin_interfaces.msg import Time  # noqa: E402

from covey_common.onnx import load_policy, runtime_session  # noqa: E402
from covey_common.profile import DeploymentProfile  # noqa: E402
from deploy_ros.messages import PARSERS  # noqa: E402
from sim.tasks.drone_volleyball.robot_observation import SkillObservation, interception_point, strategy_observation  # noqa: E402
from sim.tasks.drone_volleyball.ros_bridge import make_env, messages  # noqa: E402
from sim.tasks.drone_volleyball.rule_strategy import RuleBasedStrategy  # noqa: E402
from sim.tasks.drone_volleyball.strategy import strategy_observation as sim_strategy_observation  # noqa: E402
from sim.tasks.drone_volleyball.teams import scripted_team, strategy_team  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "assets" / "policies" / "drone_volleyball"
SKILLS, STRATEGY = FOLDER / "games_skills.onnx", FOLDER / "games_strategy.onnx"
TOL = 1e-5


def onnx_actor(path: Path):
    """An exported model as a torch actor ``[..., d] -> [..., act_dim]`` (its deterministic ``action``)."""
    session = runtime_session(path)

    def act(x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1]).numpy().astype(np.float32)
        out = session.run(["action"], {session.get_inputs()[0].name: flat})[0]
        return torch.from_numpy(out).reshape(*x.shape[:-1], -1)

    return act


def in_process_team(env):
    """The games team as ``evaluate.py`` plays it, on the exported models: strategy every decision step, rule layer,
    learned skills."""
    steps = int(env.cfg.strategy.decision_steps)
    return strategy_team(env, onnx_actor(STRATEGY), steps, onnx_actor(SKILLS))


def parsed(env, step: int, profile: DeploymentProfile) -> dict:
    """Source name -> parsed message of the env's state, as a policy node receives it."""
    msgs = messages(env, Time(sec=step // 50, nanosec=(step % 50) * 20_000_000))
    return {name: PARSERS[spec.msg](msgs[spec.topic]) for name, spec in profile.inputs.items()}


@pytest.mark.skipif(not SKILLS.is_file() or not STRATEGY.is_file(), reason="no shipped games team")
def test_robot_builders_reproduce_the_match_observations_from_messages() -> None:
    """Over a game's opening rallies (serves, a pass, a set and an attack, points), every drone of team A builds from
    the messages the skill observation its skills model reads in the simulator (to 1e-5), and the team strategy's
    observation matches at every decision step."""
    _, meta = load_policy(SKILLS)
    profile = DeploymentProfile.from_metadata(meta)
    spec = profile.observations["policy"]
    env = make_env(meta["task_cfg"], seed=1)  # team B serves; team A passes, sets and attacks
    team_a, team_b = in_process_team(env), scripted_team(env)
    n, steps = env.n, int(env.cfg.strategy.decision_steps)
    builders = [
        SkillObservation(meta, meta["inputs"][0], i, spec.sources, {"strategy_model": str(STRATEGY)}, str(SKILLS))
        for i in range(n)
    ]
    layer = RuleBasedStrategy(env)
    obs = env.observe()
    last = np.zeros((n, 4), np.float32)
    worst, decisions, skills_seen, restarts = 0.0, 0, set(), 0
    for t in range(700):
        inputs = parsed(env, t, profile)
        robot = np.stack([b.reset(inputs) if t == 0 else b.push(inputs, last[i]) for i, b in enumerate(builders)])
        if int(env.episode_step[0]) % steps == 0:  # a decision: the strategy's observation too
            mine = strategy_observation(
                builders[0].view(inputs), 0, interception_point(builders[0].view(inputs), builders[0].c), builders[0].c
            )
            sim_obs = sim_strategy_observation(env, layer.interception_point())[0, 0].numpy()
            np.testing.assert_allclose(mine, sim_obs, atol=TOL, err_msg=f"strategy observation, step {t}")
            decisions += 1
        restarts += float(env.rules.rally_time[0]) == 0.0
        act_a = team_a(env, obs, 0)  # sets team A's skill commands, as the strategy and rule layer decide
        sim_skill = env.observe()["team_a"]["skill"][0].numpy()
        np.testing.assert_allclose(robot, sim_skill, atol=TOL, err_msg=f"skill observation, step {t}")
        worst = max(worst, float(np.abs(robot - sim_skill).max()))
        skills_seen.update(env.skill_id[0, :n].tolist())
        last = act_a[0].clamp(-1.0, 1.0).numpy()
        obs, *_ = env.step({"team_a": act_a, "team_b": team_b(env, obs, 1)})
    print(f"worst |robot - sim| {worst:.2e}; {decisions} decisions; skills {sorted(skills_seen)}; {restarts} starts")
    assert decisions >= 700 // steps and restarts >= 2, (decisions, restarts)  # the run crossed a rally's restart
    assert skills_seen == set(range(5)), skills_seen  # every skill was commanded: goto, serve, pass, set, attack


@pytest.mark.skipif(not SKILLS.is_file() or not STRATEGY.is_file(), reason="no shipped games team")
def test_the_skills_builder_finds_its_strategy_beside_the_model_and_refuses_a_wrong_one(tmp_path: Path) -> None:
    """The profile's default ``strategy_model`` is read beside the skills file; a missing file or a model that is not a
    team strategy fails at construction (the node then refuses to start), and a builder parameter may not take the
    name of one of the node's own parameters."""
    _, meta = load_policy(SKILLS)
    profile = DeploymentProfile.from_metadata(meta)
    spec = profile.observations["policy"]
    default = dict(spec.params)
    assert default == {"strategy_model": STRATEGY.name}

    def build(strategy: str) -> SkillObservation:
        return SkillObservation(meta, meta["inputs"][0], 0, spec.sources, {"strategy_model": strategy}, str(SKILLS))

    assert build(default["strategy_model"]).strategy.nvec == (4, 2, 9, 3)
    with pytest.raises(FileNotFoundError):
        build(str(tmp_path / "none.onnx"))
    with pytest.raises(ValueError, match="not a team strategy"):
        build(str(SKILLS))
    raw = {
        **meta["ros"],
        "observations": {"policy": {**meta["ros"]["observations"]["policy"], "params": {"model": ""}}},
    }
    with pytest.raises(ValueError, match="clash with node parameters"):
        DeploymentProfile.parse(raw, ["policy"], 4)


@pytest.mark.skipif(not SKILLS.is_file(), reason="no shipped games team")
def test_the_shipped_skills_model_carries_the_current_profile(tmp_path: Path) -> None:
    """The profile and constants in ``games_skills.onnx`` are what ``deployment.py`` writes today (re-stamp it with
    ``python -m sim.tasks.drone_volleyball.deployment <file>`` after changing them), and stamping leaves the graph."""
    import shutil

    from sim.tasks.drone_volleyball.deployment import stamp_model

    _, shipped = load_policy(SKILLS)
    copy = tmp_path / SKILLS.name
    shutil.copy(SKILLS, copy)
    fresh = stamp_model(copy)
    assert fresh["ros"] == shipped["ros"] and fresh["deployment"] == shipped["deployment"]
    x = np.random.default_rng(0).normal(size=(16, 34)).astype(np.float32)
    before, after = (runtime_session(p).run(None, {"policy": x}) for p in (SKILLS, copy))
    assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))


@pytest.mark.skipif(not SKILLS.is_file(), reason="no shipped games team")
def test_export_writes_the_deployment_profile_of_the_skills_model(tmp_path: Path) -> None:
    """``export.py checkpoint=games_skills.pt`` gives a model the robot can fly as it is: the same profile and
    constants as the shipped (stamped) ``games_skills.onnx``, no stamping step after it (atol as the shipped
    export: README "ONNX")."""
    import importlib.util
    import sys

    name = "covey_export_cli"  # the name the other tests load it under
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).parents[1] / "export.py")
        sys.modules[name] = importlib.util.module_from_spec(spec)  # dataclasses look their module up
        spec.loader.exec_module(sys.modules[name])
    export = sys.modules[name]
    out = tmp_path / "games_skills.onnx"
    files = export.export_checkpoint(SKILLS.with_suffix(".pt"), out=out, record_steps=4, record_envs=2, atol=1e-4)[
        "files"
    ]
    (exported,) = files.values()
    _, meta = load_policy(Path(exported))
    _, shipped = load_policy(SKILLS)
    assert meta["ros"] == shipped["ros"] and meta["deployment"] == shipped["deployment"]
