"""robot_soccer's named evaluation cases (``evaluate.py scenario=<name>``): model variants a real robot would bring.

robot_soccer already runs on MuJoCo, so its sim-to-sim check changes the model, not the engine: each case is the
nominal model with one change beyond the training randomisation (:class:`.config.RandomizationCfg`: friction
x0.7-1.3, masses x0.85-1.15, servo gains x0.8-1.2, camera pitch +-3 deg, height +-1 cm), applied through
:class:`.config.ModelScaleCfg` and the camera mount. Randomisation is off in every case (camera jitter, frame
latency and the opponent's speed included: the chaser plays at full speed), so a case differs from ``nominal`` by
its stated change alone. Rows and their measurements: docs/sim_to_sim.md ("robot_soccer and hepi: model variants").
"""

from __future__ import annotations

from sim.core.env import Scenario
from sim.tasks.robot_soccer.config import CameraCfg, RobotCfg

CAMERA_PITCH_OFFSET_DEG = 6.0  # twice the randomised +-3 deg: a head camera remounted a little off
CAMERA_HEIGHT_OFFSET_M = 0.03  # three times the randomised +-1 cm


def scenarios() -> dict[str, Scenario]:
    """``nominal`` (the training model, no randomisation) and one case per model change, plus ``sim2real``, the
    changes of a heavier, softer-driven robot with a remounted camera on a slippery pitch together."""
    camera = {
        "camera": {"pitch_deg": CameraCfg().pitch_deg + CAMERA_PITCH_OFFSET_DEG},
        "robot": {"head_height": RobotCfg().head_height + CAMERA_HEIGHT_OFFSET_M},
    }
    cases = {
        "nominal": ("the training model, randomisation off", {}),
        "friction_low": ("floor, ball and robot friction x0.5", {"model_scale": {"friction": 0.5}}),
        "friction_high": ("floor, ball and robot friction x2", {"model_scale": {"friction": 2.0}}),
        "mass_light": ("robots and ball x0.7 mass", {"model_scale": {"mass": 0.7}}),
        "mass_heavy": ("robots and ball x1.3 mass", {"model_scale": {"mass": 1.3}}),
        "gain_low": ("servo gains and force limits x0.7 (drive, yaw, kicker)", {"model_scale": {"gain": 0.7}}),
        "gain_high": ("servo gains and force limits x1.3 (drive, yaw, kicker)", {"model_scale": {"gain": 1.3}}),
        "camera_pose": (
            f"head camera pitched {CAMERA_PITCH_OFFSET_DEG:g} deg further down and {CAMERA_HEIGHT_OFFSET_M * 100:g} "
            "cm higher",
            camera,
        ),
        "sim2real": (
            "friction x0.5, masses x1.3, servo gains x0.7 and the camera_pose offset together",
            {"model_scale": {"friction": 0.5, "mass": 1.3, "gain": 0.7}, **camera},
        ),
    }
    off = {"randomization": {"enabled": False}}
    return {name: Scenario(about, {**off, **overrides}) for name, (about, overrides) in cases.items()}
