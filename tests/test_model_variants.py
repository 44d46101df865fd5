"""The model-variant scenarios of the MuJoCo-backed tasks (robot_soccer, hepi): each changes the compiled MuJoCo
model as its name states, beyond the training randomisation, and ``nominal`` is the training model."""

from __future__ import annotations

from dataclasses import replace

import mujoco
import numpy as np
import pytest

from sim.core.config import build_config
from sim.core.registry import apply_scenario, task_class
from sim.tasks.hepi.cloth_model import CLOTH, build_cloth_model
from sim.tasks.hepi.insertion_model import build_variants
from sim.tasks.hepi.rope_model import ROPE, build_rope_model
from sim.tasks.robot_soccer.config import RobotSoccerCfg
from sim.tasks.robot_soccer.model import build_model, model_variants


def scenario_cfg(task: str, name: str, base: dict | None = None):
    """The task config of scenario ``name`` merged over ``base`` (the trained config's overrides)."""
    merged = apply_scenario({"name": task, **(base or {})}, name)
    merged.pop("name")
    return build_config(task_class(task).cfg_class, merged, where="task")


# --------------------------------------------------------------------------- robot_soccer
def soccer_numbers(m: mujoco.MjModel) -> dict[str, np.ndarray]:
    """The parts of a soccer model the variants change: friction, masses, servo gains and limits, the camera."""
    floor = [i for i in range(m.ngeom) if m.geom_type[i] == mujoco.mjtGeom.mjGEOM_PLANE]
    geoms = [*floor, m.geom("ball").id, m.geom("a0_body").id]
    acts = [m.actuator(f"a0_{a}").id for a in ("x", "yaw", "kick")]
    return {
        "friction": np.append(m.geom_friction[geoms, 0], m.geom_friction[m.geom("ball").id, 2]),  # sliding; rolling
        "mass": m.body_mass[[m.body("ball").id, m.body("a0").id]],
        "gain": np.concatenate((m.actuator_gainprm[acts, 0], m.actuator_forcerange[acts, 1])),
        "camera": m.cam_pos[m.camera("a0_head").id],
    }


SOCCER_SCALES = {  # scenario -> the model_scale it states
    "friction_low": {"friction": 0.5},
    "friction_high": {"friction": 2.0},
    "mass_light": {"mass": 0.7},
    "mass_heavy": {"mass": 1.3},
    "gain_low": {"gain": 0.7},
    "gain_high": {"gain": 1.3},
    "sim2real": {"friction": 0.5, "mass": 1.3, "gain": 0.7},
}


def test_soccer_nominal_is_the_training_model_without_randomisation():
    trained = RobotSoccerCfg()
    cfg = scenario_cfg("robot_soccer", "nominal")
    assert cfg == replace(trained, randomization=replace(trained.randomization, enabled=False))
    (nominal,) = model_variants(cfg, np.random.default_rng(0))
    for key, value in soccer_numbers(build_model(trained)).items():
        np.testing.assert_array_equal(soccer_numbers(nominal)[key], value, err_msg=key)


def test_soccer_randomised_training_models_are_unchanged_by_the_fixed_scale():
    """With ``model_scale`` at its default the randomised variants are the draws of the model builder alone."""
    cfg = RobotSoccerCfg()
    models = model_variants(cfg, np.random.default_rng(3))
    rng, r = np.random.default_rng(3), cfg.randomization
    for m in models[1:]:
        draw = {k: rng.uniform(*rng_range) for k, rng_range in
                (("friction", r.friction_scale), ("mass", r.mass_scale), ("gain", r.gain_scale))}  # fmt: skip
        want = soccer_numbers(build_model(cfg, draw))
        for key, value in soccer_numbers(m).items():
            np.testing.assert_array_equal(value, want[key], err_msg=key)


@pytest.mark.parametrize("name", sorted(SOCCER_SCALES))
def test_soccer_variant_scales_the_compiled_model_as_stated(name: str):
    nominal = soccer_numbers(model_variants(scenario_cfg("robot_soccer", "nominal"), np.random.default_rng(0))[0])
    cfg = scenario_cfg("robot_soccer", name, {"observation": "vision"})
    assert not cfg.randomization.enabled
    (model,) = model_variants(cfg, np.random.default_rng(0))
    got = soccer_numbers(model)
    scale = {"friction": 1.0, "mass": 1.0, "gain": 1.0, **SOCCER_SCALES[name]}
    for key in ("friction", "gain"):
        np.testing.assert_allclose(got[key], nominal[key] * scale[key], rtol=1e-12, err_msg=key)
    # The ball and the robot's box scale; the robot's head and kicker plate keep their mass.
    scaled = np.array([cfg.ball.mass, cfg.robot.mass])
    np.testing.assert_allclose(got["mass"] - nominal["mass"], scaled * (scale["mass"] - 1.0), atol=1e-12)
    for key in ("friction", "mass", "gain"):
        lo, hi = getattr(RobotSoccerCfg().randomization, f"{key}_scale")
        assert scale[key] == 1.0 or not lo <= scale[key] <= hi, f"{key} x{scale[key]} is inside the randomisation"


@pytest.mark.parametrize("name", ["camera_pose", "sim2real"])
def test_soccer_camera_pose_moves_the_head_camera_beyond_its_jitter(name: str):
    trained = RobotSoccerCfg()
    cfg = scenario_cfg("robot_soccer", name)
    (model,) = model_variants(cfg, np.random.default_rng(0))
    lift = soccer_numbers(model)["camera"][2] - soccer_numbers(build_model(trained))["camera"][2]
    assert lift == pytest.approx(cfg.robot.head_height - trained.robot.head_height)
    assert abs(lift) > trained.randomization.camera_height_m
    tilt = cfg.camera.pitch_deg - trained.camera.pitch_deg
    assert abs(tilt) > trained.randomization.camera_pitch_deg


# --------------------------------------------------------------------------- hepi
def flex_numbers(model: mujoco.MjModel, flex: str) -> dict[str, float]:
    """Friction of every geom and the flex, the flex's vertex mass, its edge damping and the air viscosity."""
    verts = [i for i in range(model.nbody) if (model.body(i).name or "").startswith(f"{flex}_")]
    contact = [i for i in range(model.ngeom) if model.geom_contype[i] or model.geom_conaffinity[i]]
    return {
        "friction": float(np.max(model.geom_friction[contact, 0])),
        "flex_friction": float(model.flex_friction[0, 0]),
        "mass": float(model.body_mass[verts].sum()),
        "damping": float(model.flex_edgedamping[0]),
        "viscosity": float(model.opt.viscosity),
    }


HEPI_FLEX = {  # task -> (flex name, model builder, scenario -> the stated factor of each changed number)
    "hepi_rope_closing": (
        ROPE,
        build_rope_model,
        {
            "friction_low": {"friction": 0.5, "flex_friction": 0.5},
            "friction_high": {"friction": 2.0, "flex_friction": 2.0},
            "mass_light": {"mass": 0.7},
            "mass_heavy": {"mass": 1.3},
            "damping_low": {"damping": 0.5, "viscosity": 0.5},
            "damping_high": {"damping": 2.0, "viscosity": 2.0},
            "sim2real": {"friction": 2.0, "flex_friction": 2.0, "mass": 1.3, "damping": 0.5, "viscosity": 0.5},
        },
    ),
    "hepi_cloth_hanging": (
        CLOTH,
        build_cloth_model,
        {
            "friction_low": {"friction": 0.5},
            "friction_high": {"friction": 2.0},
            "mass_light": {"mass": 0.7},
            "mass_heavy": {"mass": 1.3},
            "air_drag": {},
            "sim2real": {"friction": 0.5, "mass": 1.3},
        },
    ),
}


@pytest.mark.parametrize(
    ("task", "name"), [(t, n) for t, (_, _, cases) in HEPI_FLEX.items() for n in ["nominal", *cases]]
)
def test_flex_variant_changes_the_compiled_model_as_stated(task: str, name: str):
    flex, build, cases = HEPI_FLEX[task]
    trained = task_class(task).cfg_class()
    nominal = flex_numbers(build(trained).model, flex)
    cfg = scenario_cfg(task, name)
    got = flex_numbers(build(cfg).model, flex)
    if name == "nominal":
        assert cfg == trained
        assert got == nominal
        return
    want = {k: v * cases[name].get(k, 1.0) for k, v in nominal.items()}
    if task == "hepi_cloth_hanging" and name in ("air_drag", "sim2real"):
        assert nominal["viscosity"] == 0.0 and got["viscosity"] > 0.0  # no air drag in training
        want["viscosity"] = got["viscosity"]
    assert got == pytest.approx(want, rel=1e-9)
    assert got != nominal


def hole_wall_radii(model: mujoco.MjModel) -> np.ndarray:
    """Horizontal distance of each hole wall box's centre from the hole axis (m)."""
    walls = [i for i in range(model.ngeom) if "wall" in (model.geom(i).name or "")]
    return np.linalg.norm(model.geom_pos[walls, :2], axis=-1)


@pytest.mark.parametrize("name", ["nominal", "friction_low", "friction_high", "clearance_tight", "sim2real"])
def test_insertion_variant_changes_the_compiled_model_as_stated(name: str):
    trained = task_class("hepi_insertion").cfg_class(shapes=("plus",), n_sizes=1)
    nominal = build_variants(trained)[0].model
    cfg = scenario_cfg("hepi_insertion", name, {"shapes": ["plus"], "n_sizes": 1})
    model = build_variants(cfg)[0].model
    friction = {"friction_high": 2.0, "sim2real": 2.0, "friction_low": 0.5}.get(name, 1.0)
    contact = [i for i in range(model.ngeom) if model.geom_contype[i] or model.geom_conaffinity[i]]
    np.testing.assert_allclose(model.geom_friction[contact, 0], nominal.geom_friction[contact, 0] * friction)
    inward = hole_wall_radii(nominal) - hole_wall_radii(model)  # m: how much closer each wall stands
    if name in ("clearance_tight", "sim2real"):
        assert cfg.clearance < trained.clearance
        assert inward.min() > 0 and inward.mean() == pytest.approx(trained.clearance - cfg.clearance, rel=0.3)
    else:
        assert cfg.clearance == trained.clearance and not inward.any()
    if name == "nominal":
        assert cfg == trained


def test_every_variant_is_a_named_case_of_its_task():
    """The rows the tests check are the task's scenarios: none is missing, none unchecked."""
    assert set(task_class("robot_soccer").scenarios()) == {"nominal", "camera_pose", *SOCCER_SCALES}
    for task, (_, _, cases) in HEPI_FLEX.items():
        assert set(task_class(task).scenarios()) == {"nominal", *cases}
    assert set(task_class("hepi_insertion").scenarios()) == {
        "nominal", "friction_low", "friction_high", "clearance_tight", "sim2real"
    }  # fmt: skip
