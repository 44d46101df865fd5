"""ONNX export (policies.export, export.py): parity with torch, metadata, refusal to write bad models."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")
pytest.importorskip("onnxscript")

import sim  # noqa: E402
from policies import ActorCritic, GroupDims, PolicyCfg  # noqa: E402
from policies.export import ExportError, export_onnx, onnx_runtime_session, read_metadata  # noqa: E402
from sim.core.registry import registered_tasks  # noqa: E402
from training.checkpoint import FORMAT, save_checkpoint  # noqa: E402
from training.runner import group_dims  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _export_cli():
    spec = importlib.util.spec_from_file_location("covey_export_cli_v2", ROOT / "export.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses (ExportArgs) look their module up while building the class
    spec.loader.exec_module(module)
    return module


record_observations = _export_cli().record_observations


def fresh_models(env, sharing: str = "shared", **policy) -> dict[str, ActorCritic]:
    """Freshly initialised actor-critics for every group, output layer scaled so actions are not ~0."""
    torch.manual_seed(0)
    models = {}
    for name, g in env.spec.groups.items():
        dims = group_dims(g)
        cfg = PolicyCfg(sharing=sharing, actor_hidden=(64, 64), critic_hidden=(32,), **policy)
        ac = ActorCritic(dims, cfg)
        ac.set_action_prior(g.action_prior_matrix())
        with torch.no_grad():
            ac.actor[-1].weight.mul_(50.0)
        models[name] = ac.eval()
    return models


def recorded(env, models, steps: int = 20) -> dict[str, torch.Tensor]:
    """The single-input groups' ``policy`` observations ``{group: [steps * E, A, dim]}``."""
    obs = env.reset()
    out = {g: [] for g in models}
    with torch.no_grad():
        for _ in range(steps):
            for g in models:
                out[g].append(obs[g]["policy"])
            obs, *_ = env.step({g: m.act_deterministic(obs[g]["policy"]) for g, m in models.items()})
    return {g: torch.cat(v) for g, v in out.items()}


@pytest.mark.parametrize("memory", ["none", "gru", "lstm"])
@pytest.mark.parametrize("task", registered_tasks())
def test_fresh_policy_of_every_task_exports_with_parity(task: str, memory: str, tmp_path: Path) -> None:
    """Every task's inputs (vectors, images...) with and without memory: one ONNX input per entry,
    parity on random and recorded inputs, and a dynamic batch size."""
    if memory != "none" and task != "memory_reach":
        pytest.skip("memory is checked on memory_reach (the exporter does not depend on the task)")
    env = sim.make(task, num_envs=4, seed=0)
    models = fresh_models(env, memory=memory, memory_hidden=16)
    actors = {g: ac.deterministic_actor() for g, ac in models.items()}
    obs = record_observations(env, actors, 20)
    for group, ac in models.items():
        path = tmp_path / f"{group}.onnx"
        spec = env.spec.groups[group]
        scale = torch.tensor(spec.action_scale)
        rec = {k: v.flatten(0, 1) for k, v in obs[group].items()}
        report = export_onnx(ac, path, {"task": task, "group": group}, scale, recorded_obs=rec)
        assert report.max_action < 1e-5 and report.recorded_action is not None
        # A batch size never seen at export time (dynamic axis); every output.
        feed = {k: v[:7].numpy() for k, v in rec.items()}
        outputs = onnx_runtime_session(path).run(None, feed)
        action, command = outputs[:2]
        with torch.no_grad():
            entries = [torch.from_numpy(feed[k]) for k in spec.actor_obs]
            if ac.recurrent:
                state = torch.cat([torch.from_numpy(feed[k]) for k in feed if k not in spec.actor_obs], -1)
                expected, next_state = ac.act_deterministic(entries, state)
                np.testing.assert_allclose(np.concatenate(outputs[2:], -1), next_state.numpy(), atol=1e-5)
            else:
                expected = ac.act_deterministic(entries)
        assert action.shape == (7, spec.action_dim)
        np.testing.assert_allclose(action, expected.numpy(), atol=1e-5)
        np.testing.assert_allclose(command, (expected * scale).numpy(), atol=1e-5 * float(scale.max()))
        assert np.abs(expected.numpy()).max() > 0.05, "the check must see non-trivial actions"
        meta = read_metadata(path)
        assert meta["task"] == task and meta["group"] == group and meta["format"] == "covey-onnx-v2"
        assert [i["name"] for i in meta["inputs"]] == list(spec.actor_obs)
        assert [i["dtype"] for i in meta["inputs"]] == [str(spec.observations[k].dtype)[6:] for k in spec.actor_obs]
        assert bool(meta["memory"]) == (memory != "none")


def test_per_agent_weights_export_with_an_agent_axis(tmp_path: Path) -> None:
    env = sim.make("cable_load", num_envs=2, seed=0)
    ac = fresh_models(env, sharing="per_agent")["mavs"]
    obs = recorded(env, {"mavs": ac})["mavs"]
    path = tmp_path / "mavs.onnx"
    report = export_onnx(ac, path, {}, torch.tensor(env.spec.groups["mavs"].action_scale), recorded_obs=obs)
    assert report.max_action < 1e-5
    (action,) = onnx_runtime_session(path).run(["action"], {"policy": obs[:5].numpy()})
    with torch.no_grad():
        np.testing.assert_allclose(action, ac.act_deterministic(obs[:5]).numpy(), atol=1e-5)


def test_a_model_failing_parity_is_not_written(tmp_path: Path) -> None:
    env = sim.make("point_reach", num_envs=2, seed=0)
    ac = fresh_models(env)["agents"]
    path = tmp_path / "bad.onnx"
    with pytest.raises(ExportError, match="parity"):
        export_onnx(ac, path, {}, torch.ones(env.spec.groups["agents"].action_dim), atol=-1.0)
    assert not path.exists() and not list(tmp_path.iterdir())


@pytest.fixture(scope="module")
def cable_checkpoint(tmp_path_factory) -> Path:
    env = sim.make("cable_load", num_envs=1, action_prior_kp=2.0, action_prior_kd=2.0)
    models = torch.nn.ModuleDict(fresh_models(env))
    g = env.spec.groups["mavs"]
    dims = GroupDims(g.n_agents, g.observations["policy"].shape[-1], g.state_shape[-1], g.action_dim)
    path = tmp_path_factory.mktemp("ckpt") / "policy.pt"
    policy_cfg = {"actor_hidden": [64, 64], "critic_hidden": [32]}
    save_checkpoint(
        path,
        {
            "format": FORMAT,
            "task_cfg": {"name": "cable_load", "action_prior_kp": 2.0, "action_prior_kd": 2.0},
            "algo_cfg": {"policy": policy_cfg},
            "model": models.state_dict(),
            "optimizer": {},
            "normalizers": {},
            "global_step": 4321,
            "iteration": 1,
            "rng": {},
            "meta": {"run_id": "test-run", "groups": {"mavs": dims.to_dict()}},
            "metrics": {},
        },
    )
    return path


def test_export_cli_writes_a_checked_model_with_full_metadata(cable_checkpoint: Path, tmp_path: Path) -> None:
    out = tmp_path / "cable.onnx"
    args = [f"checkpoint={cable_checkpoint}", f"out={out}", "record_steps=20", "record_envs=2"]
    proc = subprocess.run([sys.executable, "export.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["files"] == {"mavs": str(out)}
    assert report["parity"]["mavs"]["max_abs_diff_recorded"] < 1e-5
    meta = read_metadata(out)
    assert meta["task"] == "cable_load" and meta["run_id"] == "test-run" and meta["global_step"] == 4321
    assert meta["control_hz"] == pytest.approx(100.0)
    assert meta["action"]["names"] == ["acc_x", "acc_y", "acc_z", "roll_rate", "pitch_rate"]
    assert meta["action"]["scale"] == [4.0, 4.0, 4.0, 2.0, 2.0]
    terms = [t["name"] for t in meta["observation"]["terms"]]
    assert terms[0] == "goal_pos_rel" and "own_slot_rel" in terms and meta["observation"]["history"] == 3
    assert len(meta["deployment"]["nominal_offset"]) == 3 and meta["task_cfg"]["action_prior_kp"] == 2.0


def test_export_for_a_scenario_records_that_team_and_its_geometry(cable_checkpoint: Path, tmp_path: Path) -> None:
    """A policy trained on one case deploys on another: ``scenario=`` records the named case's task config,
    agent count and per-MAV geometry (the shared actor is the same), with parity on that case's env."""
    export_checkpoint = _export_cli().export_checkpoint
    four = {"name": "cable_load", "num_mavs": 4, "fault": {"enabled": True}}
    payload = torch.load(cable_checkpoint, weights_only=False)
    payload["task_cfg"] = {**payload["task_cfg"], **four}
    payload["meta"]["groups"]["mavs"]["n_agents"] = 4
    trained = tmp_path / "four.pt"
    save_checkpoint(trained, payload)
    small = {"record_steps": 5, "record_envs": 1}
    as_trained = read_metadata(export_checkpoint(trained, tmp_path / "four.onnx", **small)["files"]["mavs"])
    nominal = export_checkpoint(trained, tmp_path / "three.onnx", scenario="nominal", **small)
    nominal = read_metadata(nominal["files"]["mavs"])
    assert as_trained["n_agents"] == 4 and len(as_trained["deployment"]["nominal_offset"]) == 4
    assert as_trained["task_cfg"]["fault"]["enabled"] and as_trained["scenario"] is None
    assert nominal["n_agents"] == 3 and len(nominal["deployment"]["nominal_offset"]) == 3
    assert nominal["task_cfg"]["num_mavs"] == 3 and not nominal["task_cfg"]["fault"]["enabled"]
    assert nominal["scenario"] == "nominal" and nominal["task_cfg"]["action_prior_kp"] == 2.0
    with pytest.raises(ValueError, match="no scenario 'no_such_case'; known: .*'mav_loss'"):
        export_checkpoint(trained, tmp_path / "x.onnx", scenario="no_such_case", **small)
    assert not (tmp_path / "x.onnx").exists()


def test_the_exported_graph_includes_the_action_prior(tmp_path: Path) -> None:
    from training.evaluation import prior_policy

    env = sim.make("cable_load", num_envs=3, seed=1, action_prior_kp=2.0, action_prior_kd=2.0)
    ac = fresh_models(env)["mavs"]
    with torch.no_grad():
        ac.actor[-1].weight.zero_()  # the learned residual is exactly 0: the model is the prior
        ac.actor[-1].bias.zero_()
    obs = env.reset()
    path = tmp_path / "prior.onnx"
    export_onnx(ac, path, {}, torch.tensor(env.spec.groups["mavs"].action_scale))
    (action,) = onnx_runtime_session(path).run(["action"], {"policy": obs["mavs"]["policy"].flatten(0, 1).numpy()})
    expected = prior_policy(env)(obs)["mavs"].flatten(0, 1)
    assert expected.abs().max() > 0.05
    np.testing.assert_allclose(action, expected.numpy(), atol=1e-5)


def test_export_cli_rejects_a_missing_checkpoint(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "export.py", f"checkpoint={tmp_path / 'nope.pt'}"], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 1 and "no complete checkpoint" in proc.stderr


@pytest.mark.parametrize(
    "encoder, layer",
    [
        ({"cnn": "resnet", "cnn_channels": (8, 16)}, "_ResidualBlock"),
        ({"cnn": "spatial", "cnn_channels": (8, 16, 16), "cnn_strides": (2, 1, 1)}, "SpatialSoftmax"),
    ],
)
def test_cnn_lstm_image_policy_exports_with_parity(tmp_path: Path, encoder: dict, layer: str) -> None:
    """The robot soccer paper's agent shape (ResNet -> LSTM -> MLP) on an image task: IMPALA residual stages (padded
    convolutions, max-pooling), or a spatial softmax, and explicit LSTM state survive the ONNX export."""
    env = sim.make("pixel_reach", num_envs=4, seed=0)
    models = fresh_models(env, memory="lstm", memory_hidden=16, **encoder)
    ac = models["robot"]
    assert any(type(m).__name__ == layer for m in ac.modules())
    obs = record_observations(env, {"robot": ac.deterministic_actor()}, 12)
    rec = {k: v.flatten(0, 1) for k, v in obs["robot"].items()}
    scale = torch.tensor(env.spec.groups["robot"].action_scale)
    report = export_onnx(ac, tmp_path / "cnn.onnx", {"task": "pixel_reach", "group": "robot"}, scale, recorded_obs=rec)
    assert report.max_action < 1e-5 and report.recorded_action < 1e-5
