"""Peg cross-sections for hepi_insertion: 8 planar outlines with the same vertex count (numpy only).

MuJoCo collides convex geoms only, so a non-convex peg is a union of convex pieces. Every outline
here has :data:`N_OUTLINE` vertices (counter-clockwise, corners kept, extra vertices spread along
the longest edges) and a *kernel point* that sees the whole outline, so the fan of triangles
``(kernel, v_i, v_i+1)`` tiles it with ``N_OUTLINE`` positively oriented triangles. Extruded, they
are ``N_OUTLINE`` triangular prisms: every shape and size compiles to a model of the same size, and
one batched world holds them all (``sim.tasks.hepi.insertion_model``).

Outlines are centred on their area centroid and scaled to circumradius 1 (the farthest vertex);
a peg of size ``s`` m multiplies them by ``s``.
"""

from __future__ import annotations

import math

import numpy as np

N_OUTLINE = 12  # vertices per outline = prisms per peg = wall boxes per hole

SHAPES: tuple[str, ...] = ("plus", "pentagon", "star", "tee", "diamond", "heart", "hexagon", "triangle")


def _regular(n: int, phase: float = math.pi / 2) -> np.ndarray:
    a = phase + 2 * math.pi * np.arange(n) / n
    return np.stack((np.cos(a), np.sin(a)), -1)


def _corners(name: str) -> tuple[np.ndarray, np.ndarray]:
    """The shape's own corners (counter-clockwise, any count <= N_OUTLINE) and a kernel point."""
    if name == "plus":  # arms of half-width w out to 1
        w = 0.35
        q = np.array([[1, -w], [1, w], [w, w]])
        rot = np.array([[0.0, -1.0], [1.0, 0.0]])
        pts = [q @ np.linalg.matrix_power(rot, k).T for k in range(4)]
        return np.concatenate(pts), np.zeros(2)
    if name == "pentagon":
        return _regular(5), np.zeros(2)
    if name == "star":  # 5 tips at radius 1, inner vertices at 0.5
        r = np.where(np.arange(10) % 2 == 0, 1.0, 0.5)[:, None]
        return _regular(10) * r, np.zeros(2)
    if name == "tee":  # bar 1.6 x 0.5 on a stem 0.5 x 1.1
        bar, stem_w, stem_h = 0.5, 0.25, 1.1
        pts = np.array(
            [
                [-stem_w, -stem_h],
                [stem_w, -stem_h],
                [stem_w, 0.0],
                [0.8, 0.0],
                [0.8, bar],
                [-0.8, bar],
                [-0.8, 0.0],
                [-stem_w, 0.0],
            ]
        )
        return pts, np.array([0.0, 0.1])  # in the bar right above the stem: sees all of both
    if name == "diamond":
        return np.array([[0.0, -1.0], [0.65, 0.0], [0.0, 1.0], [-0.65, 0.0]]), np.zeros(2)
    if name == "heart":  # the classic parametric heart, sampled at N_OUTLINE points (cusp and tip kept)
        t = 2 * math.pi * np.arange(N_OUTLINE) / N_OUTLINE
        x = 16 * np.sin(t) ** 3
        y = 13 * np.cos(t) - 5 * np.cos(2 * t) - 2 * np.cos(3 * t) - np.cos(4 * t)
        pts = np.stack((-x, y), -1)  # clockwise in t: mirror x for counter-clockwise order
        # A shallower notch (cusp at y = 7.5, not 5): its sides meet at ~100 deg outside, so the
        # hole's wall boxes there need no trimming (insertion_model.wall_boxes).
        pts[0, 1] = 7.5
        return pts, np.array([0.0, 0.0])
    if name == "hexagon":
        return _regular(6, 0.0), np.zeros(2)
    if name == "triangle":
        return _regular(3), np.zeros(2)
    raise ValueError(f"unknown peg shape {name!r}; known: {list(SHAPES)}")


def resample(corners: np.ndarray, n: int = N_OUTLINE) -> np.ndarray:
    """Add vertices on the edges of a polygon ``[k, 2]`` (k <= n) until it has ``n``, ``[n, 2]``.

    Corners stay; each new vertex splits the edge whose pieces are currently longest, evenly.
    """
    k = len(corners)
    if k > n:
        raise ValueError(f"an outline of {k} corners does not fit {n} vertices")
    length = np.linalg.norm(np.roll(corners, -1, 0) - corners, axis=-1)
    pieces = np.ones(k, dtype=int)
    for _ in range(n - k):
        pieces[np.argmax(length / pieces)] += 1
    out = []
    for i in range(k):
        a, b = corners[i], corners[(i + 1) % k]
        out.extend(a + (b - a) * j / pieces[i] for j in range(pieces[i]))
    return np.asarray(out)


def polygon_area_centroid(poly: np.ndarray) -> tuple[float, np.ndarray]:
    """Signed area (> 0 counter-clockwise) and area centroid ``[2]`` of a polygon ``[n, 2]``."""
    x, y = poly[:, 0], poly[:, 1]
    xn, yn = np.roll(x, -1), np.roll(y, -1)
    cross = x * yn - xn * y
    area = 0.5 * cross.sum()
    centroid = np.array([((x + xn) * cross).sum(), ((y + yn) * cross).sum()]) / (6.0 * area)
    return float(area), centroid


def fan_areas(poly: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """Signed areas ``[n]`` of the fan triangles ``(kernel, v_i, v_i+1)``; all > 0 iff the kernel sees the outline."""
    a = poly - kernel
    b = np.roll(poly, -1, 0) - kernel
    return 0.5 * (a[:, 0] * b[:, 1] - a[:, 1] * b[:, 0])


def outline(name: str) -> tuple[np.ndarray, np.ndarray]:
    """``(vertices [N_OUTLINE, 2], kernel [2])`` of shape ``name``: counter-clockwise, centroid at
    the origin, circumradius 1 (unit size).

    Raises:
        ValueError: an unknown name, or an outline its kernel point does not see (a bug in a shape).
    """
    corners, kernel = _corners(name)
    poly = resample(np.asarray(corners, dtype=np.float64))
    area, centroid = polygon_area_centroid(poly)
    if area <= 0:
        raise ValueError(f"shape {name!r} is not counter-clockwise")
    poly, kernel = poly - centroid, kernel - centroid
    scale = np.linalg.norm(poly, axis=-1).max()
    poly, kernel = poly / scale, kernel / scale
    if (fan_areas(poly, kernel) <= 1e-4).any():
        raise ValueError(f"shape {name!r}: the kernel point does not see the whole outline")
    return poly, kernel


def offset_polygon(poly: np.ndarray, distance: float) -> np.ndarray:
    """The outline moved outward by ``distance`` (mitred corners), ``[n, 2]`` (counter-clockwise input).

    Each edge moves along its outward normal; a vertex goes to where its two moved edges meet:
    ``v + d (n1 + n2) / (1 + n1 . n2)``.
    """
    edge = np.roll(poly, -1, 0) - poly
    normal = np.stack((edge[:, 1], -edge[:, 0]), -1) / np.linalg.norm(edge, axis=-1, keepdims=True)
    n_prev, n_next = np.roll(normal, 1, 0), normal  # edges before and after each vertex
    denom = 1.0 + (n_prev * n_next).sum(-1, keepdims=True)
    return poly + distance * (n_prev + n_next) / denom


def point_in_polygon(points: np.ndarray, poly: np.ndarray) -> np.ndarray:
    """Even-odd rule: ``[m]`` bool, whether each of ``points [m, 2]`` lies inside ``poly [n, 2]``."""
    x, y = points[:, :1], points[:, 1:]
    x0, y0 = poly[None, :, 0], poly[None, :, 1]
    x1, y1 = np.roll(x0, -1, 1), np.roll(y0, -1, 1)
    crosses = (y0 > y) != (y1 > y)
    with np.errstate(divide="ignore", invalid="ignore"):
        x_at = x0 + (y - y0) * (x1 - x0) / (y1 - y0)
    return ((crosses & (x < x_at)).sum(-1) % 2) == 1
