"""What the models of hepi_rope_closing and hepi_cloth_hanging share (numpy + mujoco, no torch).

Both scenes are a MuJoCo ``flexcomp`` (rope: 1-D, cloth: 2-D) whose vertices are bodies on three
world-axis slide joints, two mocap grippers (visual only) pulling two of its vertices through
``connect`` constraints, and one mocap target (the rope's pole, the cloth's bar): a capsule the flex
collides with, and nothing else. :func:`flex_scene_mjcf` writes that scene around the task's own
flexcomp; :func:`rest_flex_model` finds the flex's resting start under gravity.

Body order = mocap order: ``gripper0``, ``gripper1``, the target. Vertex ``i`` (flexcomp order) sits
at ``vertex_origin[i] + qpos[3 i: 3 i + 3]`` and moves with ``qvel[3 i: 3 i + 3]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mujoco
import numpy as np

GRIPPERS = ("gripper0", "gripper1")
FLEX_GROUP, TARGET_GROUP = 1, 2  # contype/conaffinity bits: flex-target contacts only
FLEX_CONTACT = (FLEX_GROUP, TARGET_GROUP)  # (contype, conaffinity) of the flex's collision parts
# Damped relaxation to the rest state: (physics steps, velocity kept per step) phases. Strong
# kinetic damping first, then weak: the stiff equality constraints need velocity to settle their
# last violation (one phase at 0.95 leaves ~0.5 mm of motion per control step).
SETTLE = ((1000, 0.95), (1000, 0.99))
PARKED_Y = 10.0  # m: the target sits this far ahead while the flex settles (out of reach)


@dataclass(frozen=True)
class FlexModel:
    """A compiled flex scene and its canonical start (the flex at rest below the grippers).

    Attributes:
        model: the ``MjModel``.
        rest_qpos: ``[nq]`` the flex at rest in the canonical frame.
        vertex_origin: ``[n, 3]`` world position of each vertex at qpos = 0 (flexcomp order).
        rest_vertices: ``[n, 3]`` vertex positions at rest (flexcomp order, canonical frame).
        grip_start: ``[2, 3]`` gripper positions at the start (canonical frame).
        node_order: ``[n]`` the flexcomp vertex of each graph object node.
        held_nodes: the object nodes held by gripper 0 and gripper 1.
        gripper_mocap: mocap indices of the two grippers; ``target_mocap`` that of the target.
    """

    model: mujoco.MjModel
    rest_qpos: np.ndarray
    vertex_origin: np.ndarray
    rest_vertices: np.ndarray
    grip_start: np.ndarray
    node_order: np.ndarray
    held_nodes: tuple[int, int]
    gripper_mocap: tuple[int, int]
    target_mocap: int


@dataclass(frozen=True)
class CapsuleTarget:
    """The mocap target's body and its one capsule geom (local frame, m)."""

    body: str
    geom: str
    fromto: tuple[float, ...]  # the capsule's axis end points (6)
    radius: float


def flex_scene_mjcf(
    name: str,
    cfg: Any,
    *,
    grip_x: float,
    target: CapsuleTarget,
    flexcomp: str,
    held_bodies: tuple[str, str],
    connect_attrs: str,
) -> str:
    """The scene XML of model ``name``: grippers at ``(+-grip_x, 0, cfg.grip_height)``, ``target``
    1/2 m ahead at that height, the task's ``flexcomp`` element (its XML, indented for the
    worldbody), and a ``connect`` from each gripper to its held vertex body with ``connect_attrs``
    (the constraints' solver attributes). ``cfg`` supplies ``physics_dt``, ``air_viscosity``,
    ``solver_iterations``, ``grip_height`` and the flex-target ``friction``."""
    z = cfg.grip_height
    fromto = " ".join(str(v) for v in target.fromto)
    return f"""<mujoco model="{name}">
  <option timestep="{cfg.physics_dt}" integrator="implicitfast" solver="Newton" cone="pyramidal"
          viscosity="{cfg.air_viscosity}"
          iterations="{cfg.solver_iterations}" ls_iterations="6"/>
  <visual><global offwidth="640" offheight="480"/></visual>
  <worldbody>
    <light pos="0 0 2" dir="0 0 -1"/>
    <body name="{GRIPPERS[0]}" mocap="true" pos="{-grip_x} 0 {z}">
      <geom type="sphere" size="0.015" rgba="0.2 0.4 0.9 1" contype="0" conaffinity="0"/>
    </body>
    <body name="{GRIPPERS[1]}" mocap="true" pos="{grip_x} 0 {z}">
      <geom type="sphere" size="0.015" rgba="0.2 0.4 0.9 1" contype="0" conaffinity="0"/>
    </body>
    <body name="{target.body}" mocap="true" pos="0 0.5 {z}">
      <geom name="{target.geom}" type="capsule" fromto="{fromto}" size="{target.radius}"
            rgba="0.6 0.6 0.6 1" contype="{TARGET_GROUP}" conaffinity="{FLEX_GROUP}"
            friction="{cfg.friction} 0.005 0.0001"/>
    </body>
{flexcomp}
  </worldbody>
  <equality>
    <connect body1="{GRIPPERS[0]}" body2="{held_bodies[0]}" anchor="0 0 0" {connect_attrs}/>
    <connect body1="{GRIPPERS[1]}" body2="{held_bodies[1]}" anchor="0 0 0" {connect_attrs}/>
  </equality>
</mujoco>
"""


def vertex_origin(model: mujoco.MjModel, n: int) -> np.ndarray:
    """``[n, 3]`` world position of each of the ``n`` flexcomp vertices at qpos = 0 (flexcomp order)."""
    return model.body_pos[model.flex_vertbodyid[:n]].copy()


def rest_flex_model(
    model: mujoco.MjModel,
    *,
    target: str,
    grip_height: float,
    node_order: np.ndarray,
    held_nodes: tuple[int, int],
    grip: np.ndarray | None = None,
    start: np.ndarray | None = None,
) -> FlexModel:
    """The :class:`FlexModel` of a compiled flex scene: the flex relaxed to rest (:data:`SETTLE`)
    under gravity, held at ``grip [2, 3]`` (m, canonical frame; default: where the held vertices
    sit in the model), from ``start [n, 3]`` vertex positions (default: the model's own), the mocap
    ``target`` body parked out of reach."""
    n = len(node_order)
    origin = vertex_origin(model, n)
    if grip is None:
        grip = origin[node_order[list(held_nodes)]]
    mocap = [int(model.body_mocapid[model.body(b).id]) for b in (*GRIPPERS, target)]
    data = mujoco.MjData(model)
    if start is not None:
        data.qpos[:] = (start - origin).reshape(-1)
    data.mocap_pos[mocap[0]], data.mocap_pos[mocap[1]] = grip
    data.mocap_pos[mocap[2]] = (0.0, PARKED_Y, grip_height)
    for steps, decay in SETTLE:
        for _ in range(steps):
            mujoco.mj_step(model, data)
            data.qvel[:] *= decay
    rest_qpos = data.qpos.copy()
    return FlexModel(
        model=model,
        rest_qpos=rest_qpos,
        vertex_origin=origin,
        rest_vertices=origin + rest_qpos.reshape(n, 3),
        grip_start=grip,
        node_order=node_order,
        held_nodes=held_nodes,
        gripper_mocap=(mocap[0], mocap[1]),
        target_mocap=mocap[2],
    )
