"""evaluate.py and training.evaluation: CI maths, how episodes are measured, policy sources, the CLI.

Short episodes (``episode_length_s`` 1 s, 0.5 s windows) keep every cable_load run under a second.
The checkpoint fixture is a real covey checkpoint (``training.checkpoint.save_checkpoint``) of a
small untrained actor-critic whose output layer is scaled up so that its actions are not ~0.
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import imageio.v3 as iio
import pytest
import torch

import sim
from policies import GroupDims, PolicyCfg, build_actor_critics
from sim.core import EnvSpec, GroupSpec, MultiAgentEnv, ObsEntry
from sim.render import RenderUnavailableError, gl_backend
from training.checkpoint import FORMAT, save_checkpoint
from training.evaluation import (
    actor_policy,
    mean_ci95,
    run_episodes,
    success_criteria,
    summarize,
    wilson_ci95,
    zero_policy,
)

ROOT = Path(__file__).resolve().parents[1]
SHORT = {"episode_length_s": 1.0}
SHORT_ARGS = ["task.episode_length_s=1.0", "window_s=0.5"]
REQUIRED = ("pos_err_m", "ori_err_deg", "success_rate", "terminated_rate", "mean_tension_n")


def _load_cli():
    spec = importlib.util.spec_from_file_location("covey_evaluate_cli", ROOT / "evaluate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while building the class
    spec.loader.exec_module(module)
    return module


cli = _load_cli()


def run_cli(capsys, *argv: str) -> tuple[int, dict | None, str]:
    """``(exit code, the JSON of the last stdout line or None, stderr)`` of ``evaluate.main``."""
    code = cli.main(list(argv))
    out = capsys.readouterr()
    lines = out.out.strip().splitlines()
    report = json.loads(lines[-1]) if code == 0 else None
    return code, report, out.err


def cable_env(num_envs: int = 4, seed: int = 0, **overrides) -> MultiAgentEnv:
    return sim.make("cable_load", num_envs=num_envs, seed=seed, **{**SHORT, **overrides})


class ConstantActor(torch.nn.Module):
    """Stand-in actor ``obs[group] -> [E, A, act_dim]`` returning one fixed action."""

    def __init__(self, action: list[float]) -> None:
        super().__init__()
        self.register_buffer("action", torch.tensor(action))

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.action.expand(*obs["policy"].shape[:-1], -1)


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    env = sim.make("cable_load", num_envs=1)
    g = env.spec.groups["mavs"]
    dims = {"mavs": GroupDims(g.n_agents, g.observations["policy"].shape[-1], g.state_shape[-1], g.action_dim)}
    policy_cfg = {"actor_hidden": [32], "critic_hidden": [32]}
    torch.manual_seed(0)
    models = build_actor_critics(dims, PolicyCfg.from_dict(policy_cfg))
    with torch.no_grad():
        models["mavs"].actor[-1].weight.mul_(30.0)  # actions of order 0.1-1 instead of ~0.01
    path = tmp_path_factory.mktemp("ckpt") / "latest.pt"
    save_checkpoint(
        path,
        {
            "format": FORMAT,
            "task_cfg": {"name": "cable_load", "num_mavs": 3, "randomization": {"enabled": True}},
            "algo_cfg": {"policy": policy_cfg},
            "model": models.state_dict(),
            "optimizer": {},
            "normalizers": {},
            "global_step": 1234,
            "iteration": 1,
            "rng": {},
            "meta": {"run_id": "test-run", "groups": {k: d.to_dict() for k, d in dims.items()}},
            "metrics": {},
        },
    )
    return path


@pytest.fixture(scope="module")
def onnx_file(checkpoint, tmp_path_factory) -> Path:
    """The checkpoint exported by export.py's code path (policies.export, with ``covey`` metadata)."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    pytest.importorskip("onnxscript")
    from policies.export import export_onnx
    from training.checkpoint import build_models_from_checkpoint, load_checkpoint

    payload = load_checkpoint(checkpoint)
    ac = build_models_from_checkpoint(payload)["mavs"]
    path = tmp_path_factory.mktemp("onnx") / "actor.onnx"
    export_onnx(ac, path, {"task_cfg": payload["task_cfg"], "group": "mavs"}, torch.ones(ac.dims.action_dim))
    return path


# --------------------------------------------------------------------------- confidence intervals
def test_mean_ci95_matches_hand_computation() -> None:
    # mean 2.5, sample sd sqrt(5/3) = 1.290994, half width 1.959964 * 1.290994 / 2 = 1.265152
    mean, lo, hi = mean_ci95([1.0, 2.0, 3.0, 4.0])
    assert mean == 2.5
    assert lo == pytest.approx(2.5 - 1.265152, abs=1e-6) and hi == pytest.approx(2.5 + 1.265152, abs=1e-6)
    assert mean_ci95([0.7]) == (0.7, None, None)  # one episode: no interval
    assert mean_ci95(torch.full((5,), 3.0)) == (3.0, 3.0, 3.0)


@pytest.mark.parametrize(
    ("k", "n", "lo", "hi"),
    [(0, 10, 0.0, 0.277533), (5, 10, 0.236593, 0.763407), (10, 10, 0.722467, 1.0), (3, 100, 0.010255, 0.084519)],
)
def test_wilson_interval_matches_hand_computation(k: int, n: int, lo: float, hi: float) -> None:
    # Wilson: (p + z^2/2n +- z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n), z = 1.959964
    rate, low, high = wilson_ci95(k, n)
    assert rate == k / n
    assert low == pytest.approx(lo, abs=1e-6) and high == pytest.approx(hi, abs=1e-6)


# --------------------------------------------------------------------------- the runner's bookkeeping
class ClockEnv(MultiAgentEnv):
    """A fake task: metric ``clock`` = the episode step; env ``i`` terminates on reaching step
    ``die_at[i]`` (0: never); reward 1 per step; 0.1 s control steps."""

    def __init__(self, die_at: list[int], steps: int) -> None:
        self._steps = steps
        self.die_at = torch.tensor(die_at)
        super().__init__(cfg=None, num_envs=len(die_at))

    def _build_spec(self) -> EnvSpec:
        entry = ObsEntry((1,))
        group = GroupSpec(1, {"policy": entry, "state": entry}, 1, ("a",), ("",), (1.0,))
        return EnvSpec("clock", {"g": group}, control_dt=0.1, physics_dt=0.1, max_episode_steps=self._steps)

    def _reset_idx(self, env_ids: torch.Tensor) -> None:
        pass

    def _apply_actions(self, actions: dict[str, torch.Tensor]) -> None:
        pass

    def _control_step(self) -> None:
        pass

    def _update_observation_buffers(self) -> None:
        pass

    def _observations(self) -> dict:
        obs = self.episode_step.float().view(-1, 1, 1)
        return {"g": {"policy": obs, "state": obs}}

    def _rewards(self, terminated: torch.Tensor) -> tuple[dict, dict]:
        return {"g": torch.ones(self.num_envs, 1)}, {}

    def _terminations(self) -> tuple[torch.Tensor, dict]:
        hit = self.episode_step == self.die_at
        return hit, {"boom": hit}

    def step_metrics(self) -> dict[str, torch.Tensor]:
        return {"clock": self.episode_step.float()}


def test_window_means_and_terminated_episodes_hold_their_terminal_sample() -> None:
    # T = 10 steps, W = 4 samples. Samples are s_0..s_9 (before each action), so a survivor's
    # window is clock 6, 7, 8, 9. An env terminating on step k has samples 0..k-1 and holds its
    # terminal sample k (read before the auto-reset).
    env = ClockEnv(die_at=[0, 8, 3], steps=10)
    res = run_episodes(env, zero_policy(env), episodes=5, seed=0, window_s=0.4)  # 2 rounds, 2 of 3 kept
    assert res.window_steps == 4 and res.episode_steps == 10
    torch.testing.assert_close(res.metrics["clock"], torch.tensor([7.5, 7.25, 3.0, 7.5, 7.25], dtype=torch.float64))
    assert res.terminated.tolist() == [False, True, True, False, True]
    assert res.reasons["boom"].tolist() == res.terminated.tolist()
    torch.testing.assert_close(res.survival_s, torch.tensor([1.0, 0.8, 0.3, 1.0, 0.8], dtype=torch.float64))
    torch.testing.assert_close(res.returns, torch.tensor([10.0, 8.0, 3.0, 10.0, 8.0], dtype=torch.float64))

    # Once every episode is over the runner stops stepping; the held samples fill the window.
    early = ClockEnv(die_at=[5, 150], steps=400)
    res_early = run_episodes(early, zero_policy(early), episodes=2, seed=0, window_s=0.4)
    torch.testing.assert_close(res_early.metrics["clock"], torch.tensor([5.0, 150.0], dtype=torch.float64))

    summary = summarize(res, {"clock": 8.0})  # success: not terminated and window mean < 8
    assert summary["success_rate"] == 0.4 and summary["terminated_rate"] == 0.6
    assert summary["termination"] == {"boom": 0.6}
    assert summary["episodes"] == 5
    assert "success_rate" not in summarize(res, {})  # no criteria, no success rate
    with pytest.raises(ValueError, match="nope"):
        summarize(res, {"nope": 1.0})


class TallyEnv(ClockEnv):
    """A ClockEnv whose episodes report touch outcomes as drone_volleyball's skills in matches do: the successes over
    the ended episodes' attempts and the attempts per ended episode. Env ``i``'s every episode has ``tries[i]``
    attempts of which ``wins[i]`` succeed."""

    def __init__(self, die_at: list[int], steps: int, tries: list[float], wins: list[float]) -> None:
        super().__init__(die_at, steps)
        self.tries, self.wins = torch.tensor(tries), torch.tensor(wins)
        self.ended = torch.zeros(len(die_at))

    def _episode_metrics(self, env_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        self.ended[env_ids] += 1
        tried = self.tries[env_ids]
        return {
            "metrics/hit_success": self.wins[env_ids].sum() / tried.sum().clamp(min=1.0),
            "metrics/hit_attempts": tried.mean(),
        }


def test_touch_outcomes_are_pooled_over_every_ended_episode() -> None:
    # Per-step rates would weigh a step where one env ended like one where two did; pooling counts each attempt once.
    env = TallyEnv(die_at=[2, 3, 9], steps=10, tries=[4.0, 2.0, 10.0], wins=[1.0, 2.0, 9.0])
    summary = summarize(run_episodes(env, zero_policy(env), episodes=3, seed=0), {})
    won, tried = (env.ended * env.wins).sum().item(), (env.ended * env.tries).sum().item()
    assert env.ended.tolist()[2] == 1 and env.ended[0] > 1  # env 0 ended several episodes in the round
    assert summary["hit_attempts_pooled"] == round(tried)
    assert summary["hit_success_pooled"] == pytest.approx(won / tried, rel=1e-5)
    lo, hi = summary["hit_success_pooled_ci95"]
    assert lo < won / tried < hi
    plain = ClockEnv(die_at=[2], steps=4)  # no outcomes reported, none pooled
    assert "hit_success_pooled" not in summarize(run_episodes(plain, zero_policy(plain), episodes=1, seed=0), {})


# --------------------------------------------------------------------------- cable_load
def test_zero_actor_reproduces_the_zero_baseline_exactly() -> None:
    env = cable_env(num_envs=3)
    crit = success_criteria("cable_load")
    base = run_episodes(env, zero_policy(env), episodes=5, seed=7, window_s=0.5)
    actor = run_episodes(env, actor_policy({"mavs": ConstantActor([0.0] * 5)}, env), episodes=5, seed=7, window_s=0.5)
    for key, val in base.metrics.items():
        assert torch.equal(val, actor.metrics[key]), key
    assert summarize(base, crit) == summarize(actor, crit)
    assert set(REQUIRED) <= set(summarize(base, crit))


def test_full_down_acceleration_crashes_more_than_the_baseline() -> None:
    env = cable_env(num_envs=4, episode_length_s=1.5)
    crit = success_criteria("cable_load")
    base = summarize(run_episodes(env, zero_policy(env), episodes=4, seed=0, window_s=0.5), crit)
    down = actor_policy({"mavs": ConstantActor([0.0, 0.0, -1.0, 0.0, 0.0])}, env)
    bad = summarize(run_episodes(env, down, episodes=4, seed=0, window_s=0.5), crit)
    assert bad["terminated_rate"] > base["terminated_rate"]
    assert bad["termination"]["load_ground"] > 0 or bad["termination"]["crash"] > 0
    assert bad["survival_s"] < base["survival_s"]


def test_actor_groups_must_match_the_env() -> None:
    env = cable_env(num_envs=1)
    with pytest.raises(ValueError, match="mavs"):
        actor_policy({"team_a": ConstantActor([0.0] * 5)}, env)


@pytest.mark.parametrize("task", sim.registered_tasks())
def test_every_registered_task_evaluates(task: str) -> None:
    env = sim.make(task, num_envs=2, seed=0)
    if hasattr(env.cfg, "episode_length_s"):
        env = sim.make(task, num_envs=2, seed=0, episode_length_s=min(env.cfg.episode_length_s, 1.0))
    summary = summarize(run_episodes(env, zero_policy(env), episodes=2, seed=0, window_s=0.5), success_criteria(task))
    assert 0.0 <= summary["terminated_rate"] <= 1.0 and summary["episodes"] == 2
    assert all(math.isfinite(v) for v in summary.values() if isinstance(v, float))


# --------------------------------------------------------------------------- the CLI
def test_checkpoint_report_is_deterministic_and_names_its_settings(capsys, checkpoint, tmp_path) -> None:
    args = [f"checkpoint={checkpoint}", "episodes=3", "seed=3", *SHORT_ARGS]
    code, report, _ = run_cli(capsys, *args, f"report={tmp_path / 'r.json'}")
    assert code == 0
    assert report["source"] == "torch" and report["checkpoint"] == str(checkpoint)
    assert report["seed"] == 3 and report["episodes"] == 3 and report["eval_mode"] is False
    assert report["policy_meta"] == {"run_id": "test-run", "global_step": 1234}
    assert report["task_cfg"]["randomization"]["enabled"] is True  # as trained
    for key in REQUIRED:
        assert key in report and key in report["baseline"]
        assert len(report[f"{key}_ci95"]) == 2
    assert report["pos_err_m"] != report["baseline"]["pos_err_m"]  # the actor acts
    assert json.loads((tmp_path / "r.json").read_text()) == report

    assert run_cli(capsys, *args)[1] == report
    assert run_cli(capsys, *args[:2], "seed=4", *SHORT_ARGS)[1]["pos_err_m"] != report["pos_err_m"]


def test_eval_mode_switches_noise_and_randomisation_off(capsys, checkpoint) -> None:
    code, report, _ = run_cli(
        capsys, f"checkpoint={checkpoint}", "episodes=2", "eval_mode=true", "baseline=false", *SHORT_ARGS
    )
    assert code == 0 and report["eval_mode"] is True and report["baseline"] is None
    assert report["task_cfg"]["randomization"]["enabled"] is False
    assert report["task_cfg"]["obs_noise"]["enabled"] is False


def test_onnx_model_gives_the_torch_numbers(capsys, checkpoint, onnx_file) -> None:
    common = ["episodes=3", "baseline=false", *SHORT_ARGS]
    _, torch_report, _ = run_cli(capsys, f"checkpoint={checkpoint}", *common)
    code, onnx_report, _ = run_cli(capsys, f"onnx={onnx_file}", *common)
    assert code == 0 and onnx_report["source"] == "onnx"
    assert onnx_report["task_cfg"] == torch_report["task_cfg"]  # from the ONNX metadata
    for key in REQUIRED:
        assert onnx_report[key] == pytest.approx(torch_report[key], rel=1e-3, abs=1e-4), key


def test_cli_in_a_subprocess_prints_json_last(checkpoint) -> None:
    cmd = [sys.executable, "evaluate.py", f"checkpoint={checkpoint}", "episodes=2", *SHORT_ARGS]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    for key in REQUIRED:
        assert key in report and key in report["baseline"]
    assert report["episodes"] == 2 and report["source"] == "torch" and report["seed"] == 0


def test_video_of_env_0(capsys, checkpoint, tmp_path) -> None:
    try:
        gl_backend()
    except RenderUnavailableError as err:
        pytest.skip(f"no offscreen GL backend: {err}")
    video = tmp_path / "eval.gif"
    argv = [f"checkpoint={checkpoint}", "episodes=1", "baseline=false", *SHORT_ARGS, f"video={video}"]
    code, _, err = run_cli(capsys, *argv, "video_width=64", "video_height=48", "video_fps=10")
    assert code == 0, err
    assert len(iio.imread(video, index=None)) == 10  # 1 s at 10 fps (unless env 0 terminated)
    code, _, err = run_cli(capsys, f"checkpoint={checkpoint}", "video=clip.avi")
    assert code == 2 and "cannot write video clip.avi" in err


def test_zero_policy_alone(capsys) -> None:
    code, report, _ = run_cli(capsys, "policy=zero", "task=cable_load", "episodes=2", *SHORT_ARGS)
    assert code == 0 and report["source"] == "zero" and report["baseline"] is None
    assert report["terminated_rate"] == 0.0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["policy=zero", "task=cable_load", "episods=3"], "episods: unknown argument"),
        (["policy=zero", "task=cable_load", "task.num_mav=4"], "num_mav"),
        (["policy=zero", "task=cable_load", "episodes=many"], "episodes: expects an int"),
        (["policy=zero", "episodes=3"], "task="),
        (["episodes"], "key=value"),
        (["policy=zero", "task=cable_load", "success.pos_err=0.1", *SHORT_ARGS], "pos_err"),
        (["checkpoint=does/not/exist.pt"], "checkpoint not found: does/not/exist.pt"),
        (["onnx=does/not/exist.onnx"], "ONNX file not found"),
        (["policy=zero", "task=cable_load", "commander=x.pt", *SHORT_ARGS], "'cable_load' is not one"),
    ],
)
def test_bad_arguments_fail_with_a_clear_message(capsys, argv: list[str], message: str) -> None:
    code, _, err = run_cli(capsys, *argv)
    assert code == 2
    assert message in err


def test_corrupt_checkpoint_fails_with_a_clear_message(capsys, tmp_path) -> None:
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"definitely not a checkpoint")
    code, _, err = run_cli(capsys, f"checkpoint={bad}", "episodes=1")
    assert code == 2
    assert f"cannot load checkpoint {bad}" in err and "corrupt" in err
    assert "Traceback" not in err


# --------------------------------------------------------------------------- scenarios (task-named cases)
def test_every_scenario_builds_and_evaluate_applies_its_overrides_and_bar(tmp_path):
    from sim.core.registry import task_class

    main = cli.main

    scenarios = task_class("cable_load").scenarios()
    assert {"nominal", "mav_loss", "heterogeneous", "disturbance", "tilt45"} <= set(scenarios)
    for name, scen in scenarios.items():
        assert scen.about, name
        sim.make("cable_load", num_envs=2, **scen.overrides)
    report = tmp_path / "r.json"
    args = ["policy=zero", "task=cable_load", "scenario=mav_loss", "episodes=2", "task.episode_length_s=0.5"]
    assert main([*args, f"report={report}"]) == 0
    out = json.loads(report.read_text())
    assert out["scenario"] == "mav_loss" and out["task_cfg"]["fault"]["enabled"] is True
    assert out["success_criteria"]["pos_err_m"] == 0.3
    # The command line still wins over the scenario.
    assert main([*args, "task.fault.cable=released", "success.pos_err_m=0.2", f"report={report}"]) == 0
    out = json.loads(report.read_text())
    assert out["task_cfg"]["fault"]["cable"] == "released" and out["success_criteria"]["pos_err_m"] == 0.2


def test_an_unknown_scenario_is_one_line_naming_the_known_ones(capsys):
    main = cli.main
    assert main(["policy=zero", "task=cable_load", "scenario=windy", "episodes=1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "windy" in err and "mav_loss" in err
