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

The scene around the rope (grippers, pole, connects) and the damped relaxation to rest are the
cloth's too: :mod:`sim.tasks.hepi.flex_model`. Node order = vertex order; gripper 0 holds node 0,
gripper 1 node ``n_links - 1``.

Canonical start frame: grippers at ``(+-grip_span / 2, 0, grip_height)``, the rope hanging at rest
in the plane y = 0 below them, the pole ahead on +y. The task turns and shifts this start as a
whole about the vertical, which keeps it at rest under gravity.
"""

from __future__ import annotations

import functools

import mujoco
import numpy as np

from sim.tasks.hepi.flex_model import FLEX_CONTACT, CapsuleTarget, FlexModel, flex_scene_mjcf, rest_flex_model
from sim.tasks.hepi.rope_config import RopeClosingCfg

ROPE = "rope"  # flexcomp name; its vertex bodies are rope_0 .. rope_{n-1}
HANGER = "hanger"
# Edge and connect constraints. A taut rope of 1.5 g vertices at dt = 0.01 s sits where MuJoCo's soft
# constraints trade stiffness for stability: with impedance 0.95-0.99 and critical damping (solref
# "0.02 1") it rests at ~6% stretch but, once shaken taut, keeps buzzing (vertices at ~0.5 m/s for
# seconds); default impedance (0.9-0.95) rests at ~25%. Impedance 0.95-0.99 with damping ratio 2
# rests at ~20% stretch and calms within a second (measured: tests/test_hepi_deformables.py).
SOLIMP = "0.95 0.99 0.001"
SOLREF = "0.02 2"


def rope_mjcf(cfg: RopeClosingCfg) -> str:
    """The scene XML: the straight rope along x centred at the grip height (its rest shape is
    found by :func:`build_rope_model`)."""
    n, L = cfg.n_links, cfg.rope_length
    z = cfg.grip_height
    below = cfg.pole_length - cfg.pole_top_above
    contype, conaffinity = FLEX_CONTACT
    rope = f"""    <flexcomp name="{ROPE}" type="grid" dim="1" count="{n} 1 1" spacing="{L / (n - 1)} 1 1" pos="0 0 {z}"
              radius="{cfg.rope_radius}" mass="{cfg.rope_mass}" rgba="0.8 0.5 0.2 1">
      <edge equality="true" solimp="{SOLIMP}" solref="{SOLREF}" damping="{cfg.rope_damping}"/>
      <contact contype="{contype}" conaffinity="{conaffinity}" selfcollide="none"
               friction="{cfg.friction} 0.005 0.0001"/>
    </flexcomp>"""
    return flex_scene_mjcf(
        "hepi_rope_closing",
        cfg,
        grip_x=L / 2,
        target=CapsuleTarget(HANGER, "pole", (0, 0, -below, 0, 0, cfg.pole_top_above), cfg.pole_radius),
        flexcomp=rope,
        held_bodies=(f"{ROPE}_0", f"{ROPE}_{n - 1}"),
        connect_attrs=f'solimp="{SOLIMP}" solref="{SOLREF}"',
    )


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
def build_rope_model(cfg: RopeClosingCfg) -> FlexModel:
    """Compile the scene and find the rope's rest shape under gravity by damped relaxation (the
    pole parked out of reach), starting from a U; cached per config."""
    n, half, z = cfg.n_links, cfg.grip_span / 2, cfg.grip_height
    return rest_flex_model(
        mujoco.MjModel.from_xml_string(rope_mjcf(cfg)),
        target=HANGER,
        grip=np.array([[-half, 0.0, z], [half, 0.0, z]]),
        grip_height=z,
        node_order=np.arange(n),
        held_nodes=(0, n - 1),
        start=_initial_u(cfg),
    )
