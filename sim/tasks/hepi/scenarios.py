"""The hepi tasks' named evaluation cases (``evaluate.py scenario=<name>``): model variants a real setup would bring.

The hepi tasks already run on MuJoCo and train without any physics randomisation, so their sim-to-sim check changes
the model, not the engine: each case is the nominal model with one change a real peg, rope or cloth would make
(friction x0.5 and x2, masses x0.7 and x1.3, damping, a tighter hole), plus ``sim2real``, several together. Rows
and their measurements: docs/sim_to_sim.md ("robot_soccer and hepi: model variants").
"""

from __future__ import annotations

from sim.core.env import Scenario
from sim.tasks.hepi.cloth_config import ClothHangingCfg
from sim.tasks.hepi.insertion_config import InsertionCfg
from sim.tasks.hepi.rope_config import RopeClosingCfg

ROPE_AIR_VISCOSITY = RopeClosingCfg().air_viscosity  # Pa s: the cloth's air_drag case takes the rope's


def _cases(cases: dict[str, tuple[str, dict]]) -> dict[str, Scenario]:
    return {"nominal": Scenario("the training model")} | {
        name: Scenario(about, overrides) for name, (about, overrides) in cases.items()
    }


def insertion_scenarios() -> dict[str, Scenario]:
    """The peg is held gravity-compensated by its weld, so its mass hardly acts; what a real peg and hole change is
    the contact: friction and the clearance (a machined hole is rarely as loose as 1.5 mm a side)."""
    d = InsertionCfg()
    tight = round(d.clearance * 2 / 3, 6)
    return _cases(
        {
            "friction_low": ("peg-hole friction x0.5", {"friction": d.friction * 0.5}),
            "friction_high": ("peg-hole friction x2", {"friction": d.friction * 2}),
            "clearance_tight": (f"hole clearance {tight * 1e3:g} mm a side (x2/3)", {"clearance": tight}),
            "sim2real": (
                "friction x2 and the tight clearance together",
                {"friction": d.friction * 2, "clearance": tight},
            ),
        }
    )


def rope_scenarios() -> dict[str, Scenario]:
    d = RopeClosingCfg()

    def damping(k: float) -> dict:
        return {"rope_damping": d.rope_damping * k, "air_viscosity": d.air_viscosity * k}

    return _cases(
        {
            "friction_low": ("rope-pole friction x0.5", {"friction": d.friction * 0.5}),
            "friction_high": ("rope-pole friction x2", {"friction": d.friction * 2}),
            "mass_light": ("rope mass x0.7", {"rope_mass": d.rope_mass * 0.7}),
            "mass_heavy": ("rope mass x1.3", {"rope_mass": d.rope_mass * 1.3}),
            "damping_low": ("rope edge damping and air drag x0.5", damping(0.5)),
            "damping_high": ("rope edge damping and air drag x2", damping(2.0)),
            "sim2real": (
                "friction x2, mass x1.3, damping x0.5 together",
                {"friction": d.friction * 2, "rope_mass": d.rope_mass * 1.3, **damping(0.5)},
            ),
        }
    )


def cloth_scenarios() -> dict[str, Scenario]:
    d = ClothHangingCfg()
    return _cases(
        {
            "friction_low": ("cloth-bar friction x0.5", {"friction": d.friction * 0.5}),
            "friction_high": ("cloth-bar friction x2", {"friction": d.friction * 2}),
            "mass_light": ("cloth mass x0.7", {"cloth_mass": d.cloth_mass * 0.7}),
            "mass_heavy": ("cloth mass x1.3", {"cloth_mass": d.cloth_mass * 1.3}),
            "air_drag": (
                f"air drag on the cloth's vertices ({ROPE_AIR_VISCOSITY:g} Pa s, the rope's; none in training)",
                {"air_viscosity": ROPE_AIR_VISCOSITY},
            ),
            "sim2real": (
                "friction x0.5, mass x1.3 and the air drag together",
                {"friction": d.friction * 0.5, "cloth_mass": d.cloth_mass * 1.3, "air_viscosity": ROPE_AIR_VISCOSITY},
            ),
        }
    )
