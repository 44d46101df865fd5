"""MJCF of hepi_insertion: one model per (shape, size), all of the same size signature (numpy + mujoco).

Frames and bodies (body order = mocap order):

* ``gripper0`` (``gripper1``): mocap bodies, visual only, welded to the peg at its grasp points (the
  top centre, or two points ``+-grasp_offset * size`` along the peg's x axis on its top face).
* ``hole``: a mocap body (its pose is sampled per env, so it lives in the state, not the model).
  Frame: origin at the opening's centre, z out of the hole. :data:`N_OUTLINE` wall boxes stand on
  the outline offset by ``clearance`` (inner faces on the offset outline, thickness outward), from
  ``-hole_depth`` to 0, on a floor plate.
* ``peg``: a free body, origin at the outline's centroid on its BOTTOM face (z along its axis),
  made of :data:`N_OUTLINE` triangular prisms (the outline's fan from its kernel point,
  :mod:`sim.tasks.hepi.shapes`); ``gravcomp=1``: the grippers carry its weight. The origin is off
  the centre of mass on purpose: a symmetric peg with its origin at the centre of mass is a
  "simple" body (diagonal mass matrix, other sparsity sizes ``nC``), and ``mujoco.rollout`` steps
  variants of different sparsity with one ``MjData`` into garbage.

Peg keypoints: the outline vertices on the bottom and top faces, ``[2 N_OUTLINE, 3]`` in the peg
frame. Inserted pose (the target): the peg axis on the hole axis, outlines aligned, bottom face on
the floor: peg origin at ``(0, 0, -hole_depth)`` in the hole frame.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mujoco
import numpy as np

from sim.tasks.hepi.insertion_config import InsertionCfg
from sim.tasks.hepi.shapes import N_OUTLINE, offset_polygon, outline

FLOOR_THICKNESS = 0.005  # m
GEOM_MARGIN = 0.0  # m: contacts only on touch (margins of both geoms add up and would eat the clearance)
SOLVER = 'iterations="20" ls_iterations="6"'  # a small rigid peg converges in a few iterations


@dataclass(frozen=True)
class Variant:
    """One compiled peg/hole pair: ``shape``, ``size`` (m, circumradius), ``keypoints [2 N, 3]`` in the
    peg frame, ``grasp [n_actuators, 3]`` grasp points in the peg frame, ``outline [N, 2]`` (m)."""

    shape: str
    size: float
    model: mujoco.MjModel
    keypoints: np.ndarray
    grasp: np.ndarray
    outline: np.ndarray


def _v(x) -> str:
    return " ".join(f"{float(a):.7g}" for a in np.ravel(x))


def grasp_points(cfg: InsertionCfg, size: float) -> np.ndarray:
    """Grasp points ``[n_actuators, 3]`` (m, peg frame) on the top face."""
    top = cfg.peg_height
    if cfg.n_actuators == 1:
        return np.array([[0.0, 0.0, top]])
    d = cfg.grasp_offset * size
    return np.array([[-d, 0.0, top], [d, 0.0, top]])


def peg_keypoints(poly: np.ndarray, height: float) -> np.ndarray:
    """Outline vertices ``[N, 2]`` on the bottom then the top face: ``[2 N, 3]`` (peg frame)."""
    n = len(poly)
    bottom = np.concatenate((poly, np.zeros((n, 1))), -1)
    top = np.concatenate((poly, np.full((n, 1), height)), -1)
    return np.concatenate((bottom, top))


def wall_boxes(wall: np.ndarray, thickness: float) -> list[tuple[float, float, np.ndarray, float]]:
    """One box per edge of the wall outline ``[N, 2]`` (counter-clockwise): ``(start, end, centre [2],
    yaw)``, the box spanning ``[start, end]`` along the edge (m from its first vertex), ``thickness``
    outward from it.

    At a reflex corner sharper than 90 degrees (the heart's cusp) a full-length box would reach past
    the neighbouring edge into the hole, so it starts (ends) where its outer face meets that edge's
    line: ``s0 = t (-n . n') / (d . n')`` with ``d`` the edge direction, ``n`` its outward normal and
    ``n'`` the neighbour's.
    """
    edges = np.roll(wall, -1, 0) - wall
    lengths = np.linalg.norm(edges, axis=-1)
    dirs = edges / lengths[:, None]
    normals = np.stack((dirs[:, 1], -dirs[:, 0]), -1)
    out = []
    for i in range(len(wall)):
        d, n, length = dirs[i], normals[i], float(lengths[i])
        n_prev, n_next = normals[i - 1], normals[(i + 1) % len(wall)]
        start = thickness * -(n @ n_prev) / (d @ n_prev) if d @ n_prev > 1e-9 and n @ n_prev < 0 else 0.0
        end_trim = thickness * -(n @ n_next) / -(d @ n_next) if -(d @ n_next) > 1e-9 and n @ n_next < 0 else 0.0
        end = length - end_trim
        if end - start < 0.1 * length:
            raise ValueError(f"wall {i}: a corner too sharp for walls {thickness} m thick")
        centre = wall[i] + 0.5 * (start + end) * d + 0.5 * thickness * n
        out.append((float(start), float(end), centre, math.atan2(d[1], d[0])))
    return out


def variant_parts(cfg: InsertionCfg, shape: str, size: float, prefix: str = "") -> dict:
    """The MJCF pieces of one variant, names prefixed by ``prefix``: ``meshes``, ``peg_geoms``,
    ``hole_geoms`` (lists of XML elements), ``outline [N, 2]`` and ``kernel [2]`` (m)."""
    unit, kernel_unit = outline(shape)
    poly, kernel = unit * size, kernel_unit * size
    h, depth, t = cfg.peg_height, cfg.hole_depth, cfg.wall_thickness

    meshes, peg_geoms = [], []
    for i in range(N_OUTLINE):
        tri = np.stack((kernel, poly[i], poly[(i + 1) % N_OUTLINE]))
        verts = np.concatenate(
            (np.concatenate((tri, np.zeros((3, 1))), -1), np.concatenate((tri, np.full((3, 1), h)), -1))
        )
        meshes.append(f'<mesh name="{prefix}prism{i}" vertex="{_v(verts)}"/>')
        # Only prism 0 touches the floor (contype bit 2): the weld holds the peg's attitude, and twelve
        # coplanar prisms on the floor would be ~36 contacts, most of a step's cost.
        bits = ' contype="3" conaffinity="3"' if i == 0 else ""
        peg_geoms.append(
            f'<geom name="{prefix}peg{i}" type="mesh" mesh="{prefix}prism{i}" class="contact"{bits}'
            ' rgba="0.85 0.45 0.15 1"/>'
        )

    # Walls: inner face on the offset outline's edge, thickness outward, from the floor to the opening.
    wall = offset_polygon(poly, cfg.clearance)
    hole_geoms = []
    for i, (start, end, centre, yaw) in enumerate(wall_boxes(wall, t)):
        hole_geoms.append(
            f'<geom name="{prefix}wall{i}" type="box" class="contact" pos="{_v(centre)} {-0.5 * depth:.7g}"'
            f' euler="0 0 {yaw:.7g}" size="{0.5 * (end - start):.7g} {0.5 * t:.7g} {0.5 * depth:.7g}"'
            ' rgba="0.4 0.4 0.45 1"/>'
        )
    reach = float(np.linalg.norm(wall, axis=-1).max()) + t
    hole_geoms.append(
        f'<geom name="{prefix}floor" type="box" class="contact" contype="2" conaffinity="2"'
        f' pos="0 0 {-depth - 0.5 * FLOOR_THICKNESS:.7g}"'
        f' size="{reach:.7g} {reach:.7g} {0.5 * FLOOR_THICKNESS:.7g}" rgba="0.3 0.3 0.35 1"/>'
    )
    return {"meshes": meshes, "peg_geoms": peg_geoms, "hole_geoms": hole_geoms, "outline": poly, "kernel": kernel}


def defaults_xml(cfg: InsertionCfg) -> str:
    """The ``<default>`` classes ``contact`` (peg and hole) and ``visual`` (no collision, no mass)."""
    return f"""<default>
    <default class="contact"><geom contype="1" conaffinity="1" condim="3" friction="{cfg.friction:.4g} 0.005 0.0001"
      margin="{GEOM_MARGIN}" solref="0.02 1" density="1000"/></default>
    <default class="visual"><geom contype="0" conaffinity="0" mass="0" density="0"/></default>
  </default>"""


def gripper_body(name: str, pos: np.ndarray | tuple[float, ...] = (0.0, 0.0, 0.0)) -> str:
    """A visual-only mocap gripper body."""
    return (
        f'<body name="{name}" mocap="true" pos="{_v(pos)}">'
        '<geom type="box" size="0.006 0.006 0.004" pos="0 0 0.004" class="visual" rgba="0.2 0.6 0.9 1"/></body>'
    )


def insertion_mjcf(cfg: InsertionCfg, shape: str, size: float) -> tuple[str, np.ndarray, np.ndarray]:
    """``(xml, outline [N, 2] m, kernel [2] m)`` of one variant."""
    parts = variant_parts(cfg, shape, size)
    meshes, peg_geoms, hole_geoms = parts["meshes"], parts["peg_geoms"], parts["hole_geoms"]
    poly, kernel = parts["outline"], parts["kernel"]

    grippers = [gripper_body(f"gripper{k}", p) for k, p in enumerate(grasp_points(cfg, size))]
    # The weld's reference pose is the relative pose in this reference configuration (relpose unset).
    welds = [f'<weld body1="gripper{k}" body2="peg" solref="0.02 1"/>' for k in range(cfg.n_actuators)]

    xml = f"""<mujoco model="hepi_insertion">
  <compiler angle="radian"/>
  <option timestep="{cfg.physics_dt:.7g}" integrator="implicitfast" cone="pyramidal" {SOLVER}/>
  {defaults_xml(cfg)}
  <asset>
    {chr(10).join(meshes)}
  </asset>
  <worldbody>
    {chr(10).join(grippers)}
    <body name="hole" mocap="true" pos="0 0 -0.2">
      {chr(10).join(hole_geoms)}
    </body>
    <body name="peg" gravcomp="1">
      <freejoint name="peg"/>
      {chr(10).join(peg_geoms)}
    </body>
  </worldbody>
  <equality>
    {chr(10).join(welds)}
  </equality>
</mujoco>
"""
    return xml, poly, kernel


def size_signature(model: mujoco.MjModel) -> dict[str, int]:
    """Every integer size of a model (``nq``, ``nv``, ``ngeom``, ``nC``, ...): variants stepped in one
    batched world must agree on all of them."""
    return {k: v for k in dir(model) if k.startswith("n") and isinstance(v := getattr(model, k), int)}


def build_variants(cfg: InsertionCfg) -> list[Variant]:
    """Every (shape in ``cfg.shapes``, size) pair compiled, shapes outer, sizes evenly over ``size_range``.

    Raises:
        RuntimeError: two variants differ in a model size (they could not share one batched world).
    """
    lo, hi = cfg.size_range
    sizes = np.linspace(lo, hi, cfg.n_sizes) if cfg.n_sizes > 1 else np.array([0.5 * (lo + hi)])
    out = []
    for shape in cfg.shapes:
        for size in sizes:
            xml, poly, _ = insertion_mjcf(cfg, shape, float(size))
            model = mujoco.MjModel.from_xml_string(xml)
            out.append(
                Variant(shape, float(size), model, peg_keypoints(poly, cfg.peg_height), grasp_points(cfg, size), poly)
            )
    first = size_signature(out[0].model)
    for v in out[1:]:
        diff = {k: (first[k], n) for k, n in size_signature(v.model).items() if first.get(k) != n}
        if diff:
            raise RuntimeError(f"variant {v.shape} {v.size:.4f} m differs in model sizes {diff} from the first")
    return out
