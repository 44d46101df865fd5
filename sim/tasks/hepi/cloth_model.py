"""MJCF of hepi_cloth_hanging and its resting start state (numpy + mujoco, no torch).

The cloth is a MuJoCo 2-D ``flexcomp`` grid of ``n_side x n_side`` vertices, each vertex a body on
three world-axis slide joints (diagonal mass matrix), edge lengths held by flex edge equality
constraints: an inextensible cloth without bending stiffness. Flex elasticity (``<elasticity>``)
needs ``integrator="discrete"`` (several times slower) or explicit Euler with a small step in
MuJoCo 4; no plugin is involved, so ``mujoco.rollout`` and state save/restore see plain qpos/qvel.

Collisions: the flex's own contacts are off; each vertex body carries a massless sphere of radius
``cloth_radius`` that collides with the bar. Flex-triangle contacts cost 2-3 contact points per
triangle touching the bar (~85 points, ~400 rows, for a draped 6 x 6 cloth) and made a draped step
~3x dearer than a free one; one sphere per vertex gives ~1.5x the control steps per CPU-second.
The spheres nearly touch (spacing > 2 radius) and ``cloth_radius + bar_radius`` exceeds half a
cell diagonal, so the bar cannot pass between them.

Bodies (body order = mocap order): ``gripper0``, ``gripper1`` (mocap, visual only) pull the two top
corners through ``connect`` constraints; ``bar`` (mocap): a capsule along its local x axis; the
cloth collides with it only.

Vertex ``i`` sits at ``vertex_origin[i] + qpos[3 i: 3 i + 3]`` and moves with ``qvel[3 i: 3 i + 3]``.
Graph nodes go row by row from the held (top) edge down: ``node_order [n_side^2]`` gives the vertex
of node ``row * n_side + column``; row 0 is the held edge, its columns 0 and n_side - 1 (nodes 0 and
``n_side - 1``) the held corners. The scene around the cloth (grippers, bar, connects) and the damped
relaxation to rest are the rope's too: :mod:`sim.tasks.hepi.flex_model`.

Canonical start frame: the cloth hanging at rest in the plane y = 0 below grippers at
``(+-cloth_size / 2, 0, grip_height)``, the bar ahead on +y. The task turns and shifts the start
as a whole about the vertical, which keeps it at rest under gravity.
"""

from __future__ import annotations

import functools

import mujoco
import numpy as np

from sim.tasks.hepi.cloth_config import ClothHangingCfg
from sim.tasks.hepi.flex_model import FLEX_CONTACT, CapsuleTarget, FlexModel, flex_scene_mjcf, rest_flex_model

CLOTH = "cloth"  # flexcomp name; vertex bodies cloth_0 .. cloth_{n^2-1} (flexcomp's own order)
BAR = "bar"
SOLIMP = "0.95 0.99 0.001"  # stiffer than the default 0.9: the top edges carry the cloth's weight


def _grid(cfg: ClothHangingCfg) -> np.ndarray:
    """``[n^2, 3]`` flexcomp's vertex positions of the flat grid in the x-y plane centred at the
    origin, read from a compiled bare copy (so the row order does not rely on flexcomp's numbering)."""
    n, sp = cfg.n_side, cfg.cloth_size / (cfg.n_side - 1)
    xml = f"""<mujoco><worldbody><flexcomp name="c" type="grid" dim="2" count="{n} {n} 1"
      spacing="{sp} {sp} {sp}" radius="{cfg.cloth_radius}"><edge equality="true"/></flexcomp></worldbody></mujoco>"""
    m = mujoco.MjModel.from_xml_string(xml)
    return m.body_pos[m.flex_vertbodyid[: n * n]].copy()


def cloth_mjcf(cfg: ClothHangingCfg) -> str:
    """The scene XML: the flat cloth in the vertical plane y = 0, top edge at the grip height."""
    n, s = cfg.n_side, cfg.cloth_size
    sp = s / (n - 1)
    top0, top1 = _corner_vertices(cfg)
    L = cfg.bar_length
    cloth = f"""    <flexcomp name="{CLOTH}" type="grid" dim="2" count="{n} {n} 1" spacing="{sp} {sp} {sp}"
              pos="0 0 {cfg.grip_height - s / 2}" euler="90 0 0" radius="{cfg.cloth_radius}" mass="{cfg.cloth_mass}"
              rgba="0.3 0.7 0.4 1">
      <edge equality="true" solimp="{SOLIMP}"/>
      <contact contype="0" conaffinity="0" selfcollide="none"/>
    </flexcomp>"""
    return flex_scene_mjcf(
        "hepi_cloth_hanging",
        cfg,
        grip_x=s / 2,
        target=CapsuleTarget(BAR, "bar", (-L / 2, 0, 0, L / 2, 0, 0), cfg.bar_radius),
        flexcomp=cloth,
        held_bodies=(f"{CLOTH}_{top0}", f"{CLOTH}_{top1}"),
        connect_attrs=f'solimp="{SOLIMP}"',
    )


def _rows(cfg: ClothHangingCfg) -> np.ndarray:
    """``[n, n]`` vertex index of (row, column) once the grid is turned upright by ``euler="90 0 0"``
    (grid y becomes world z): row 0 = the largest grid y (top), column 0 = the smallest x."""
    g = _grid(cfg)
    n = cfg.n_side
    order = np.lexsort((g[:, 0], -g[:, 1]))  # sort by -y (rows from the top), then x
    return order.reshape(n, n)


def _corner_vertices(cfg: ClothHangingCfg) -> tuple[int, int]:
    rows = _rows(cfg)
    return int(rows[0, 0]), int(rows[0, -1])


@functools.lru_cache(maxsize=8)
def build_cloth_model(cfg: ClothHangingCfg) -> FlexModel:
    """Compile the scene and let the cloth come to rest below the grippers by damped relaxation
    (the bar parked out of reach), starting flat; cached per config."""
    n2 = cfg.n_side**2
    spec = mujoco.MjSpec.from_string(cloth_mjcf(cfg))
    for i in range(n2):  # one massless collision sphere per vertex (see the module docstring)
        g = spec.body(f"{CLOTH}_{i}").add_geom()
        g.type = mujoco.mjtGeom.mjGEOM_SPHERE
        g.size = [cfg.cloth_radius, 0.0, 0.0]
        g.mass = 0.0
        g.contype, g.conaffinity = FLEX_CONTACT
        g.friction = [cfg.friction, 0.005, 0.0001]
        g.rgba = [0.3, 0.7, 0.4, 0.0]  # invisible: the flex draws the cloth
    rows = _rows(cfg)
    return rest_flex_model(
        spec.compile(),
        target=BAR,
        grip_height=cfg.grip_height,
        node_order=rows.reshape(-1),
        held_nodes=(0, cfg.n_side - 1),  # row 0 (the held edge), its first and last column
    )
