"""MJCF of hepi_rope_closing and its resting start state (numpy + mujoco, no torch).

The rope is a MuJoCo 1-D ``flexcomp`` (``n_links`` vertices joined by capsule edges of radius
``rope_radius``), not a chain of capsule bodies with ball joints: each vertex is a body on three
world-axis slide joints, so the mass matrix is diagonal and a step costs ~60 us on one core, where
a 40-body ball-joint chain (dense 123x123 mass matrix) costs ~500 us. Edge lengths are held by
flex edge equality constraints (inextensible, no bending stiffness: a soft rope). No plugin is
involved (the ``elasticity.cable`` plugin needs the body chain), so ``mujoco.rollout`` and state
save/restore see plain qpos/qvel.

Bodies (body order = mocap order): ``gripper0``, ``gripper1`` (mocap, visual only) pull the first
and last vertex through ``connect`` constraints (a vertex cannot turn, so a weld would add three
empty rows); ``hanger`` (mocap): the pole, a capsule along its local z from
``-(pole_length - pole_top_above)`` to ``pole_top_above``; the rope collides with it only.

Vertex ``i`` sits at ``vertex_origin[i] + qpos[3 i: 3 i + 3]`` (world frame) and moves with
``qvel[3 i: 3 i + 3]``: the task reads object nodes straight from the state, no sensors needed.

Canonical start frame: grippers at ``(+-grip_span / 2, 0, grip_height)``, the rope hanging at rest
in the plane y = 0 below them, the pole ahead on +y. The task turns and shifts this start as a
whole about the vertical, which keeps it at rest under gravity.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import mujoco
import numpy as np

from sim.tasks.hepi.rope_config import RopeClosingCfg

ROPE = "rope"  # flexcomp name; its vertex bodies are rope_0 .. rope_{n-1}
GRIPPERS = ("gripper0", "gripper1")
HANGER = "hanger"
ROPE_GROUP, HANGER_GROUP = 1, 2  # contype/conaffinity bits: rope-hanger contacts only
# Damped relaxation to the rest state: (physics steps, velocity kept per step) phases. Strong
# kinetic damping first, then weak: the stiff equality constraints need velocity to settle their
# last violation (one phase at 0.95 leaves ~0.5 mm of motion per control step).
SETTLE = ((1000, 0.95), (1000, 0.99))
# Edge and connect constraints. A taut rope of 1.5 g vertices at dt = 0.01 s sits where MuJoCo's soft
# constraints trade stiffness for stability: with impedance 0.95-0.99 and critical damping (solref
# "0.02 1") it rests at ~6% stretch but, once shaken taut, keeps buzzing (vertices at ~0.5 m/s for
# seconds); default impedance (0.9-0.95) rests at ~25%. Impedance 0.95-0.99 with damping ratio 2
# rests at ~20% stretch and calms within a second (measured: tests/test_hepi_deformables.py).
SOLIMP = "0.95 0.99 0.001"
SOLREF = "0.02 2"


@dataclass(frozen=True)
class RopeModel:
    """The compiled model and its canonical start.

    Attributes:
        model: the ``MjModel``.
        rest_qpos: ``[nq]`` the rope at rest in the canonical frame.
        vertex_origin: ``[n, 3]`` world position of each vertex at qpos = 0.
        rest_vertices: ``[n, 3]`` vertex positions at rest (canonical frame).
        grip_start: ``[2, 3]`` gripper positions at the start (canonical frame).
        gripper_mocap: mocap indices of the two grippers; ``hanger_mocap`` that of the pole.
    """

    model: mujoco.MjModel
    rest_qpos: np.ndarray
    vertex_origin: np.ndarray
    rest_vertices: np.ndarray
    grip_start: np.ndarray
    gripper_mocap: tuple[int, int]
    hanger_mocap: int


def rope_mjcf(cfg: RopeClosingCfg) -> str:
    """The scene XML: the straight rope along x centred at the grip height (its rest shape is
    found by :func:`build_rope_model`)."""
    n, L = cfg.n_links, cfg.rope_length
    z = cfg.grip_height
    below = cfg.pole_length - cfg.pole_top_above
    return f"""<mujoco model="hepi_rope_closing">
  <option timestep="{cfg.physics_dt}" integrator="implicitfast" solver="Newton" cone="pyramidal"
          viscosity="{cfg.air_viscosity}"
          iterations="{cfg.solver_iterations}" ls_iterations="6"/>
  <visual><global offwidth="640" offheight="480"/></visual>
  <worldbody>
    <light pos="0 0 2" dir="0 0 -1"/>
    <body name="{GRIPPERS[0]}" mocap="true" pos="{-L / 2} 0 {z}">
      <geom type="sphere" size="0.015" rgba="0.2 0.4 0.9 1" contype="0" conaffinity="0"/>
    </body>
    <body name="{GRIPPERS[1]}" mocap="true" pos="{L / 2} 0 {z}">
      <geom type="sphere" size="0.015" rgba="0.2 0.4 0.9 1" contype="0" conaffinity="0"/>
    </body>
    <body name="{HANGER}" mocap="true" pos="0 0.5 {z}">
      <geom name="pole" type="capsule" fromto="0 0 {-below} 0 0 {cfg.pole_top_above}" size="{cfg.pole_radius}"
            rgba="0.6 0.6 0.6 1" contype="{HANGER_GROUP}" conaffinity="{ROPE_GROUP}"
            friction="{cfg.friction} 0.005 0.0001"/>
    </body>
    <flexcomp name="{ROPE}" type="grid" dim="1" count="{n} 1 1" spacing="{L / (n - 1)} 1 1" pos="0 0 {z}"
              radius="{cfg.rope_radius}" mass="{cfg.rope_mass}" rgba="0.8 0.5 0.2 1">
      <edge equality="true" solimp="{SOLIMP}" solref="{SOLREF}" damping="{cfg.rope_damping}"/>
      <contact contype="{ROPE_GROUP}" conaffinity="{HANGER_GROUP}" selfcollide="none"
               friction="{cfg.friction} 0.005 0.0001"/>
    </flexcomp>
  </worldbody>
  <equality>
    <connect body1="{GRIPPERS[0]}" body2="{ROPE}_0" anchor="0 0 0" solimp="{SOLIMP}" solref="{SOLREF}"/>
    <connect body1="{GRIPPERS[1]}" body2="{ROPE}_{n - 1}" anchor="0 0 0" solimp="{SOLIMP}" solref="{SOLREF}"/>
  </equality>
</mujoco>
"""


def _initial_u(cfg: RopeClosingCfg) -> np.ndarray:
    """``[n, 3]`` a U of the right edge lengths between the start grip points: down, across, up
    (a guess the settling turns into the hanging shape)."""
    n, L, s = cfg.n_links, cfg.rope_length, cfg.grip_span
    arc = np.linspace(0.0, L, n)  # arc length of each vertex
    drop = (L - s) / 2  # the vertical legs
    pts = np.empty((n, 3))
    pts[:, 1] = 0.0
    left, right = arc <= drop, arc >= L - drop
    mid = ~(left | right)
    pts[left, 0], pts[left, 2] = -s / 2, -arc[left]
    pts[mid, 0], pts[mid, 2] = -s / 2 + (arc[mid] - drop), -drop
    pts[right, 0], pts[right, 2] = s / 2, -(L - arc[right])
    pts[:, 2] += cfg.grip_height
    return pts


@functools.lru_cache(maxsize=8)
def build_rope_model(cfg: RopeClosingCfg) -> RopeModel:
    """Compile the scene and find the rope's rest shape under gravity by damped relaxation (the
    pole parked out of reach); cached per config."""
    model = mujoco.MjModel.from_xml_string(rope_mjcf(cfg))
    n = cfg.n_links
    vert_bodies = model.flex_vertbodyid[:n]
    origin = model.body_pos[vert_bodies].copy()
    mocap = [int(model.body_mocapid[model.body(b).id]) for b in (*GRIPPERS, HANGER)]
    grip = np.array([[-cfg.grip_span / 2, 0.0, cfg.grip_height], [cfg.grip_span / 2, 0.0, cfg.grip_height]])

    data = mujoco.MjData(model)
    data.qpos[:] = (_initial_u(cfg) - origin).reshape(-1)
    data.mocap_pos[mocap[0]], data.mocap_pos[mocap[1]] = grip
    data.mocap_pos[mocap[2]] = (0.0, 10.0, cfg.grip_height)  # far away while settling
    for steps, decay in SETTLE:
        for _ in range(steps):
            mujoco.mj_step(model, data)
            data.qvel[:] *= decay
    data.qvel[:] = 0.0
    rest_qpos = data.qpos.copy()
    return RopeModel(
        model=model,
        rest_qpos=rest_qpos,
        vertex_origin=origin,
        rest_vertices=origin + rest_qpos.reshape(n, 3),
        grip_start=grip,
        gripper_mocap=(mocap[0], mocap[1]),
        hanger_mocap=mocap[2],
    )
