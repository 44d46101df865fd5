"""cable_load's named evaluation cases (``evaluate.py scenario=<name>``): the robustness rows of its policy report."""

from __future__ import annotations

from dataclasses import asdict

from sim.core.config import deep_merge
from sim.core.env import Scenario
from sim.tasks.cable_load.config import CableLoadCfg


def scenarios() -> dict[str, Scenario]:
    """The robustness rows of the policy report (``evaluate.py scenario=<name>``).

    Each pins the whole case, so policies trained on other cases compare on the same one: the
    default team (3 MAVs; ``task.num_mavs=<n>`` on the command line wins), goal tilt, faults,
    disturbance and team heterogeneity at the task defaults, then the scenario's own changes.
    Randomisation and noise stay as the policy was trained."""
    d = CableLoadCfg()
    hetero = ("mav_mass_scale", "thrust_limit_scale", "cable_length_scale", "motor_tau_scale")
    base = {
        "num_mavs": d.num_mavs,
        "goal_tilt_deg": d.goal_tilt_deg,
        "fault": asdict(d.fault),
        "disturbance": asdict(d.disturbance),
        "randomization": {k: getattr(d.randomization, k) for k in hetero},
    }
    lost = {"enabled": True, "probability": 1.0, "time_range": (3.0, 10.0)}
    # After a MAV loss the bar is keeping the load up and bringing it back near the goal: 0.3 m
    # over the last 5 s, any orientation (a team one short cannot always hold the goal's tilt).
    recovered = {"pos_err_m": 0.3, "ori_err_deg": 180.0}
    cases = {
        "nominal": ("the default task", {}, {}),
        "mav_loss": (
            "one MAV's rotors stop for good at 3-10 s, unannounced; its cable stays on the load",
            {"fault": lost},
            recovered,
        ),
        "mav_loss_released": (
            "as mav_loss, but the lost MAV's cable lets go of the load",
            {"fault": {**lost, "cable": "released"}},
            recovered,
        ),
        "heterogeneous": (
            "each MAV's mass and thrust limit x0.85-1.15, cable length x0.8-1.2, motor lag x0.7-1.3",
            {
                "randomization": {
                    "mav_mass_scale": (0.85, 1.15),
                    "thrust_limit_scale": (0.85, 1.15),
                    "cable_length_scale": (0.8, 1.2),
                    "motor_tau_scale": (0.7, 1.3),
                }
            },
            {},
        ),
        "disturbance": (
            "a constant unknown force on the load, up to 15.4% of its weight, any direction",
            {"disturbance": {"enabled": True}},
            {},
        ),
        "disturbance_varying": (
            "the same force varying slowly between 0 and its amplitude (period 5 s)",
            {"disturbance": {"enabled": True, "period_s": 5.0}},
            {},
        ),
        "tilt45": ("goals tilted up to +-45 deg (the paper's range; trained on +-30)", {"goal_tilt_deg": 45.0}, {}),
    }
    return {name: Scenario(about, deep_merge(base, over), bar) for name, (about, over, bar) in cases.items()}
