"""Procedural road networks for vlm_driving: lanes as polylines with headings, and lookup grids.

Each map is one main road plus a crossing side road, generated from a seed:

    main road     a reference polyline of straights and arcs (curves left and right), with
                  ``n_forward`` lanes in the direction of travel and ``n_backward`` oncoming lanes
    merge         an on-ramp on the right that swings in from 15 m out, runs beside the rightmost
                  lane as an acceleration lane and ends: its cars must change into the main road
    intersection  a straight side road crossing the main road at right angles (one lane each way;
                  its cars yield: they stop at the line while the junction is busy), and a right-turn
                  connector (a cubic Bezier) from the rightmost main lane onto the side road
    routes        route 0 follows a main lane straight through the junction; route 1 turns right
                  at the junction onto the side road

Every lane of a road is an offset of the road's reference polyline sampled at the same stations,
so point ``u`` of two neighbouring lanes is the same cross-section of the road: a vehicle's lane
coordinate ``u`` (float point index) carries over when it changes lanes. A lane is valid on a range
of points (the ramp exists on part of the road only); oncoming lanes are travelled towards lower
``u`` (``lane_dir = -1``).

The runtime lookup is two grids per map (``cell`` m): the nearest lane and its nearest point of
every cell near a road, built by splatting lane cross-sections. With them a world point becomes
``(lane, station, lateral offset, heading)`` in one gather and a few products: on/off road,
distance to the lane centre, wrong-way driving and exact lane markings at any image resolution.

Shapes: M maps, L lanes (padded), P points per lane (padded), R routes, Q route points.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

LINE_NONE, LINE_DASHED, LINE_SOLID = 0, 1, 2


def flat_index(shape: tuple[int, ...] | torch.Size, *index: Tensor | int) -> Tensor:
    """The flat index of ``[i0, i1, ...]`` (broadcastable index tensors) into the leading dims of ``shape``, by
    broadcasting as it goes: a small leading index (a map id ``[N, 1, 1]`` of an image) is scaled before it is
    spread over the pixels, so each step is one pass over the full size."""
    flat = index[0]
    for i, size in zip(index[1:], shape[1 : len(index)], strict=False):
        flat = flat * size + i
    return torch.as_tensor(flat)


def take_flat(table: Tensor, flat: Tensor, dims: int) -> Tensor:
    """``table[...]`` at :func:`flat_index` ``flat`` over its first ``dims`` dims (trailing dims kept)."""
    rest = table.shape[dims:]
    if not rest:
        return torch.take(table, flat)
    return table.reshape(-1, *rest).index_select(0, flat.reshape(-1)).view(*flat.shape, *rest)


def take(table: Tensor, *index: Tensor | int) -> Tensor:
    """``table[i0, i1, ...]`` for broadcastable index tensors, as one flat gather.

    Multi-tensor advanced indexing costs 3-8x more than a single flat gather on the CPU (measured:
    [4096, 9] lookups into [8, 8, 700] 425 us vs 55 us), and the road lookups are most of a step.
    """
    idx = [torch.as_tensor(i, device=table.device) for i in index]
    return take_flat(table, flat_index(table.shape, *idx), len(idx))  # broadcast to every index's shape


@dataclass(frozen=True)
class RoadCfg:
    """Road generation settings (m, rad)."""

    lane_width: float = 3.5
    spacing: float = 1.0  # m between reference points
    cell: float = 0.5  # m: lookup grid resolution
    extent: float = 640.0  # m: each map lies in [0, extent]^2
    ramp_offset: float = 15.0  # m: how far right of its final position the on-ramp starts


@dataclass
class RoadMaps:
    """A bank of ``M`` maps as padded tensors (see the module docstring for the layout)."""

    lane_xy: Tensor  # [M, L, P, 2] lane centre points, m
    lane_yaw: Tensor  # [M, L, P] direction of travel, rad
    lane_s: Tensor  # [M, L, P] arc length from point 0 along increasing u, m
    lane_valid: Tensor  # [M, L, P] bool: the lane exists at this point
    lane_junction: Tensor  # [M, L, P] bool: inside the intersection (no markings drawn)
    lane_dir: Tensor  # [M, L] +1 travel towards higher u, -1 towards lower u
    lane_left: Tensor  # [M, L] long: the neighbour lane on the left in the direction of travel, -1 none
    lane_right: Tensor  # [M, L] long, likewise on the right
    lane_beside: Tensor  # [M, L, 2] long: the lanes touching the left / right edge (also across the centre line,
    # sharing the point index u); -1 none
    lane_line_left: Tensor  # [M, L] long LINE_*: the marking on the lane's left edge
    lane_line_right: Tensor  # [M, L] long LINE_*
    lane_end_blocked: Tensor  # [M, L] bool: the lane ends in a wall (the ramp): cars brake for its end
    lane_range: Tensor  # [M, L, 2] long: first and last valid point
    lane_stop_u: Tensor  # [M, L] float: the yield line (point index) of side-road lanes, nan none
    lane_kind: Tensor  # [M, L] long: 0 main forward, 1 main oncoming, 2 ramp, 3 side road, 4 connector
    junction_xy: Tensor  # [M, 2] the intersection centre
    junction_half: Tensor  # [M] half size of the junction box, m
    grid_lane: Tensor  # [M, H, W] int16 nearest lane, -1 none (row = y index, column = x index)
    grid_point: Tensor  # [M, H, W] int16 its nearest point
    route_xy: Tensor  # [M, R, Q, 2]
    route_yaw: Tensor  # [M, R, Q]
    route_s: Tensor  # [M, R, Q] arc length, m
    route_len: Tensor  # [M, R] number of valid points
    route_lane_lo: Tensor  # [M, R, L] long: the route uses lane l on points [lo, hi] (lo > hi: not at all)
    route_lane_hi: Tensor  # [M, R, L] long
    cfg: RoadCfg
    lane_width: float
    snapshot_constant: ClassVar[bool] = True  # generated from a seed, never changed: not in env snapshots

    @property
    def num_maps(self) -> int:
        return self.lane_xy.shape[0]

    def to(self, device: torch.device | str) -> RoadMaps:
        out = {k: (v.to(device) if isinstance(v, Tensor) else v) for k, v in vars(self).items()}
        return RoadMaps(**out)

    # ----------------------------------------------------------------- lookups (batched, no loops)
    def locate(self, map_id: Tensor, xy: Tensor) -> dict[str, Tensor]:
        """Where points are on their map's lanes.

        Args:
            map_id: ``long [...]`` the map of each point (or any shape that broadcasts to it, e.g. ``[N, 1, 1]``
                for images ``[N, S, S, 2]``).
            xy: ``[..., 2]`` world positions, m.

        Returns:
            ``lane`` long [...] (-1 off every lane), ``u`` long [...] nearest point, ``lateral``
            [...] signed offset from the lane centre (m, + left of the travel direction),
            ``along`` [...] m past point ``u`` in the travel direction, ``yaw`` [...] the lane's
            direction of travel there, ``on_road`` bool [...] (within half a lane width of a lane
            centre), ``junction`` bool [...], ``point`` long [...] the flat index of ``(map, lane, u)`` into
            the ``[M, L, P]`` lane tables (lane 0 off every lane; :func:`take_flat`).
        """
        lane, u = self.cell_lookup(map_id, xy)
        return self.refine(map_id, xy, lane, u)

    def cell_lookup(self, map_id: Tensor, xy: Tensor) -> tuple[Tensor, Tensor]:
        """The first half of :meth:`locate`: the lookup grids' ``(lane, u)`` (long ``[...]``, lane -1: no lane
        near) of the cells of ``xy``."""
        cfg = self.cfg
        m = self.grid_lane.shape[0]
        h, w = self.grid_lane.shape[-2:]
        ix = (xy[..., 0] / cfg.cell).long().clamp(0, w - 1)
        iy = (xy[..., 1] / cfg.cell).long().clamp(0, h - 1)
        inside = (xy[..., 0] >= 0) & (xy[..., 0] < w * cfg.cell) & (xy[..., 1] >= 0) & (xy[..., 1] < h * cfg.cell)
        # Flat indices computed once and shared by the tables of the same shape (one gather each).
        cell = flat_index((m, h, w), map_id, iy, ix)
        lane = torch.where(inside, take_flat(self.grid_lane, cell, 3).long(), -1)
        return lane, take_flat(self.grid_point, cell, 3).long()

    def refine(self, map_id: Tensor, xy: Tensor, lane: Tensor, u: Tensor) -> dict[str, Tensor]:
        """The second half of :meth:`locate`: exact geometry against the cells' lane points (and the lane
        beside), from :meth:`cell_lookup`'s ``lane, u``. Point by point: a subset of points gives the
        same values as the whole."""
        n_lanes, p = self.lane_yaw.shape[1:]
        safe = lane.clamp(min=0)
        map_lanes = map_id * n_lanes  # [...] (as small as map_id)

        def relative(lane_idx: Tensor) -> tuple[Tensor, Tensor, Tensor]:
            point = (map_lanes + lane_idx) * p + u
            yaw = take_flat(self.lane_yaw, point, 3)
            d = xy - take_flat(self.lane_xy, point, 3)
            cos, sin = torch.cos(yaw), torch.sin(yaw)
            return d[..., 0] * cos + d[..., 1] * sin, -d[..., 0] * sin + d[..., 1] * cos, yaw

        along, lateral, yaw = relative(safe)
        # A cell holds the lane nearest to most of it: near the line between two lanes the point may lie
        # in the lane beside (same station u), so try that one too and keep the nearer.
        side = torch.where(lateral > 0, 0, 1)
        beside = take_flat(self.lane_beside, (map_lanes + safe) * 2 + side, 3)
        beside_safe = beside.clamp(min=0)
        ok = (
            (lane >= 0)
            & (beside >= 0)
            & take_flat(self.lane_valid, (map_lanes + beside_safe) * p + u.clamp(max=p - 1), 3)
        )
        along2, lateral2, yaw2 = relative(beside_safe)
        swap = ok & (lateral2.abs() < lateral.abs())
        lane = torch.where(swap, beside, lane)
        along, lateral, yaw = (
            torch.where(swap, along2, along),
            torch.where(swap, lateral2, lateral),
            torch.where(swap, yaw2, yaw),
        )
        safe = lane.clamp(min=0)
        found = lane >= 0
        on_road = found & (lateral.abs() <= 0.5 * self.lane_width)
        point = (map_lanes + safe) * p + u
        return {
            "lane": lane,
            "u": u,
            "lateral": torch.where(found, lateral, torch.full_like(lateral, 1e3)),
            "along": along,
            "yaw": yaw,
            "on_road": on_road,
            "junction": found & take_flat(self.lane_junction, point, 3),
            "point": point,
        }

    def lane_pose(
        self, map_id: Tensor, lane: Tensor, u: Tensor, lateral: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """World pose of lane coordinates: ``(xy [..., 2], yaw [...])`` at float point index ``u``
        (linear interpolation), shifted ``lateral`` m to the left of the travel direction."""
        p = self.lane_xy.shape[2]
        u0 = u.floor().long().clamp(0, p - 2)
        frac = (u - u0).clamp(0.0, 1.0).unsqueeze(-1)
        a, b = take(self.lane_xy, map_id, lane, u0), take(self.lane_xy, map_id, lane, u0 + 1)
        xy = a + (b - a) * frac
        yaw = take(self.lane_yaw, map_id, lane, u0)
        if lateral is not None:
            xy = xy + lateral.unsqueeze(-1) * torch.stack((-torch.sin(yaw), torch.cos(yaw)), -1)
        return xy, yaw

    def lane_station(self, map_id: Tensor, lane: Tensor, u: Tensor) -> Tensor:
        """Arc length ``[...]`` (m) of float point index ``u`` on ``lane``, interpolated."""
        p = self.lane_s.shape[2]
        u0 = u.floor().long().clamp(0, p - 2)
        frac = (u - u0).clamp(0.0, 1.0)
        s0, s1 = take(self.lane_s, map_id, lane, u0), take(self.lane_s, map_id, lane, u0 + 1)
        return s0 + (s1 - s0) * frac

    def spacing_at(self, map_id: Tensor, lane: Tensor, u: Tensor) -> Tensor:
        """Metres per unit of ``u`` at ``u`` (lanes on the inside of a curve are shorter)."""
        p = self.lane_s.shape[2]
        u0 = u.floor().long().clamp(0, p - 2)
        return (take(self.lane_s, map_id, lane, u0 + 1) - take(self.lane_s, map_id, lane, u0)).clamp(min=0.05)


# --------------------------------------------------------------------- generation (CPU, once)
def _reference(segments: list[tuple[float, float]], start: tuple[float, float, float], spacing: float) -> Tensor:
    """Points ``[N, 2]`` of a path of (length m, curvature 1/m) pieces from ``(x, y, yaw)``."""
    curv = torch.cat([torch.full((max(1, round(length / spacing)),), k) for length, k in segments])
    yaw = start[2] + torch.cumsum(torch.cat((torch.zeros(1), curv[:-1])) * spacing, 0)
    # Midpoint heading per step (second-order exact on arcs).
    mid = yaw + 0.5 * curv * spacing
    step = spacing * torch.stack((torch.cos(mid), torch.sin(mid)), -1)
    xy = torch.cat((torch.zeros(1, 2), torch.cumsum(step, 0)[:-1]))
    return xy + torch.tensor(start[:2])


def _headings(xy: Tensor) -> Tensor:
    """Heading ``[N]`` of a polyline ``[N, 2]`` by central differences."""
    d = torch.zeros_like(xy)
    d[1:-1] = xy[2:] - xy[:-2]
    d[0], d[-1] = xy[1] - xy[0], xy[-1] - xy[-2]
    return torch.atan2(d[:, 1], d[:, 0])


def _offset(ref: Tensor, offset: Tensor) -> Tensor:
    """A polyline ``offset [N]`` m to the left of ``ref [N, 2]``."""
    yaw = _headings(ref)
    return ref + offset.unsqueeze(-1) * torch.stack((-torch.sin(yaw), torch.cos(yaw)), -1)


def _bezier(a: Tensor, yaw_a: float, b: Tensor, yaw_b: float, spacing: float) -> Tensor:
    """A cubic Bezier ``[N, 2]`` from ``a`` leaving at ``yaw_a`` to ``b`` arriving at ``yaw_b``."""
    dist = float(torch.linalg.vector_norm(b - a))
    c1 = a + 0.55 * dist * torch.tensor([math.cos(yaw_a), math.sin(yaw_a)])
    c2 = b - 0.55 * dist * torch.tensor([math.cos(yaw_b), math.sin(yaw_b)])
    t = torch.linspace(0, 1, 400).unsqueeze(-1)
    curve = (1 - t) ** 3 * a + 3 * (1 - t) ** 2 * t * c1 + 3 * (1 - t) * t**2 * c2 + t**3 * b
    seg = torch.linalg.vector_norm(curve[1:] - curve[:-1], dim=-1)
    s = torch.cat((torch.zeros(1), torch.cumsum(seg, 0)))
    n = max(2, round(float(s[-1]) / spacing) + 1)
    targets = torch.linspace(0, float(s[-1]), n)
    idx = torch.searchsorted(s, targets).clamp(1, len(s) - 1)
    frac = ((targets - s[idx - 1]) / (s[idx] - s[idx - 1]).clamp(min=1e-9)).unsqueeze(-1)
    return curve[idx - 1] + (curve[idx] - curve[idx - 1]) * frac


@dataclass
class _Lane:
    xy: Tensor  # [N, 2] in the direction of increasing u
    valid: Tensor  # [N] bool
    direction: int
    kind: int
    line_left: int
    line_right: int
    end_blocked: bool = False
    stop_u: float = math.nan
    left: int = -1
    right: int = -1
    beside: tuple[int, int] = (-1, -1)


def _generate_map(
    cfg: RoadCfg, g: torch.Generator
) -> tuple[list[_Lane], list[list[tuple[int, int, int]]], Tensor, float]:
    """Lanes, routes (lists of (lane, first u, last u) pieces), junction centre and half size of one map."""

    def rand(lo: float, hi: float) -> float:
        return lo + (hi - lo) * float(torch.rand((), generator=g))

    w, sp = cfg.lane_width, cfg.spacing
    n_fwd = int(torch.randint(2, 4, (), generator=g))
    n_bwd = int(torch.randint(1, 3, (), generator=g))

    def arc() -> tuple[float, float]:
        radius, angle = rand(60.0, 160.0), math.radians(rand(20.0, 60.0))
        sign = 1.0 if float(torch.rand((), generator=g)) < 0.5 else -1.0
        return radius * angle, sign / radius

    ramp_zone, junction_zone = rand(170.0, 200.0), rand(120.0, 150.0)
    segments = [
        (rand(60.0, 90.0), 0.0),
        arc(),
        (ramp_zone, 0.0),
        arc(),
        (junction_zone, 0.0),
        arc(),
        (rand(80.0, 120.0), 0.0),
    ]
    ref = _reference(segments, (0.0, 0.0, rand(-math.pi, math.pi)), sp)
    n = ref.shape[0]
    # Stations (point indices) of the zones along the reference.
    seg_pts = [max(1, round(length / sp)) for length, _ in segments]
    starts = [sum(seg_pts[:i]) for i in range(len(seg_pts))]
    ramp_a, ramp_b = starts[2] + 10, starts[2] + seg_pts[2] - 10
    junction_u = starts[4] + seg_pts[4] // 2

    lanes: list[_Lane] = []
    all_valid = torch.ones(n, dtype=torch.bool)
    # Forward lanes: index 0 is the innermost (next to the centre line), offsets to the right (negative).
    fwd_ids = []
    for k in range(n_fwd):
        left_line = LINE_SOLID if k == 0 else LINE_DASHED
        right_line = LINE_SOLID if k == n_fwd - 1 else LINE_DASHED
        fwd_ids.append(len(lanes))
        lanes.append(
            _Lane(_offset(ref, torch.full((n,), -(k + 0.5) * w)), all_valid.clone(), 1, 0, left_line, right_line)
        )
    bwd_ids = []
    for k in range(n_bwd):  # oncoming: travelled towards lower u; their left is the centre line
        left_line = LINE_SOLID if k == 0 else LINE_DASHED
        right_line = LINE_SOLID if k == n_bwd - 1 else LINE_DASHED
        bwd_ids.append(len(lanes))
        lanes.append(
            _Lane(_offset(ref, torch.full((n,), (k + 0.5) * w)), all_valid.clone(), -1, 1, left_line, right_line)
        )
    for ids in (fwd_ids, bwd_ids):
        for a, b in zip(ids[:-1], ids[1:], strict=True):
            lanes[a].right, lanes[b].left = b, a
    for ln in lanes:
        ln.beside = (ln.left, ln.right)
    # Across the centre line: the innermost lanes of the two directions touch with their left edges.
    lanes[fwd_ids[0]].beside = (bwd_ids[0], lanes[fwd_ids[0]].right)
    lanes[bwd_ids[0]].beside = (fwd_ids[0], lanes[bwd_ids[0]].right)
    # On-ramp: swings in from ramp_offset m further out over the first 70 m, then runs beside the
    # rightmost lane (a dashed line between them: merging allowed) and ends in a wall.
    u = torch.arange(n, dtype=torch.float32)
    swing = ((u - ramp_a) / 70.0).clamp(0, 1)
    extra = cfg.ramp_offset * (1 - (3 * swing**2 - 2 * swing**3))
    ramp_valid = (u >= ramp_a) & (u <= ramp_b)
    ramp = _Lane(_offset(ref, -(n_fwd + 0.5) * w - extra), ramp_valid, 1, 2, LINE_DASHED, LINE_SOLID, end_blocked=True)
    ramp_id = len(lanes)
    ramp.left = fwd_ids[-1]
    ramp.beside = (fwd_ids[-1], -1)
    lanes[fwd_ids[-1]].beside = (lanes[fwd_ids[-1]].beside[0], len(lanes))
    lanes.append(ramp)
    # Side road: a straight crossing at junction_u, one lane each way, 140 m to the right and 80 m to the left.
    centre = ref[junction_u]
    main_yaw = float(_headings(ref)[junction_u])
    side_yaw = main_yaw - math.pi / 2  # pointing to the right of the main road
    side_dir = torch.tensor([math.cos(side_yaw), math.sin(side_yaw)])
    side_u = torch.arange(-80.0, 140.0 + sp, sp)
    side_ref = centre + side_u.unsqueeze(-1) * side_dir
    n_side = side_ref.shape[0]
    road_half_main = max(n_fwd, n_bwd) * w + 1.0  # the side road's stop lines lie this far from the centre
    half = road_half_main
    zero_u = int(torch.argmin(side_u.abs()))
    side_valid = torch.ones(n_side, dtype=torch.bool)
    stop_out = zero_u - round(half / sp)  # towards the main road from the left (increasing u)
    stop_in = zero_u + round(half / sp)  # from the right, travelling towards lower u
    side_out_id = len(lanes)  # travels +u: away to the right after crossing
    lanes.append(
        _Lane(
            _offset(side_ref, torch.full((n_side,), -0.5 * w)),
            side_valid,
            1,
            3,
            LINE_SOLID,
            LINE_SOLID,
            stop_u=float(stop_out),
        )
    )
    lanes.append(
        _Lane(
            _offset(side_ref, torch.full((n_side,), 0.5 * w)),
            side_valid.clone(),
            -1,
            3,
            LINE_SOLID,
            LINE_SOLID,
            stop_u=float(stop_in),
        )
    )
    # Right-turn connector: from the rightmost forward lane before the junction onto side_out beyond it.
    turn_from = junction_u - round((half + 4.0) / sp)
    a = lanes[fwd_ids[-1]].xy[turn_from]
    b_u = zero_u + round((half + 4.0) / sp)
    b = lanes[side_out_id].xy[b_u]
    lanes[side_out_id].beside = (side_out_id + 1, -1)
    lanes[side_out_id + 1].beside = (side_out_id, -1)
    conn_xy = _bezier(a, main_yaw, b, side_yaw, sp)
    conn_id = len(lanes)
    lanes.append(_Lane(conn_xy, torch.ones(conn_xy.shape[0], dtype=torch.bool), 1, 4, LINE_NONE, LINE_NONE))
    routes = [
        [(fwd_ids[k], 0, n - 1)]
        for k in range(n_fwd)  # straight through, one per forward lane
    ]
    turn_route = [(fwd_ids[-1], 0, turn_from), (conn_id, 0, conn_xy.shape[0] - 1), (side_out_id, b_u, n_side - 1)]
    routes = [routes[0], turn_route] if n_fwd else routes
    del ramp_id
    return lanes, routes, centre, half


def build_maps(num_maps: int, seed: int, cfg: RoadCfg | None = None, routes_per_map: int = 2) -> RoadMaps:
    """Generate ``num_maps`` maps from ``seed`` (deterministic) into a :class:`RoadMaps` on the CPU."""
    cfg = cfg or RoadCfg()
    g = torch.Generator().manual_seed(seed)
    maps = []
    while len(maps) < num_maps:
        lanes, routes, centre, half = _generate_map(cfg, g)
        pts = torch.cat([ln.xy for ln in lanes])
        lo, hi = pts.min(0).values, pts.max(0).values
        margin = 20.0
        if float((hi - lo).max()) + 2 * margin > cfg.extent:
            continue  # too large for the grid: draw again
        # Centre the map in [0, extent]^2.
        shift = cfg.extent / 2 - (lo + hi) / 2
        for ln in lanes:
            ln.xy = ln.xy + shift
        maps.append((lanes, routes, centre + shift, half))
    n_lanes = max(len(m[0]) for m in maps)
    n_pts = max(ln.xy.shape[0] for m in maps for ln in m[0])
    cells = round(cfg.extent / cfg.cell)
    M = num_maps
    lane_xy = torch.zeros(M, n_lanes, n_pts, 2)
    lane_yaw = torch.zeros(M, n_lanes, n_pts)
    lane_s = torch.zeros(M, n_lanes, n_pts)
    lane_valid = torch.zeros(M, n_lanes, n_pts, dtype=torch.bool)
    lane_junction = torch.zeros(M, n_lanes, n_pts, dtype=torch.bool)
    long_fields = {
        k: torch.full((M, n_lanes), -1, dtype=torch.long) for k in ("dir", "left", "right", "ll", "lr", "kind")
    }
    lane_end_blocked = torch.zeros(M, n_lanes, dtype=torch.bool)
    lane_beside = torch.full((M, n_lanes, 2), -1, dtype=torch.long)
    lane_range = torch.zeros(M, n_lanes, 2, dtype=torch.long)
    lane_stop_u = torch.full((M, n_lanes), math.nan)
    junction_xy = torch.zeros(M, 2)
    junction_half = torch.zeros(M)
    n_route_pts = max(sum(b - a + 1 for _, a, b in r) for m in maps for r in m[1])  # an upper bound
    R = max(len(m[1]) for m in maps)
    route_xy = torch.zeros(M, R, n_route_pts, 2)
    route_yaw = torch.zeros(M, R, n_route_pts)
    route_s = torch.zeros(M, R, n_route_pts)
    route_len = torch.zeros(M, R, dtype=torch.long)
    route_lane_lo = torch.full((M, R, n_lanes), 1, dtype=torch.long)
    route_lane_hi = torch.zeros(M, R, n_lanes, dtype=torch.long)
    grid_lane = torch.full((M, cells, cells), -1, dtype=torch.int16)
    grid_point = torch.zeros(M, cells, cells, dtype=torch.int16)
    for m, (lanes, routes, centre, half) in enumerate(maps):
        junction_xy[m], junction_half[m] = centre, half
        for i, ln in enumerate(lanes):
            k = ln.xy.shape[0]
            yaw = _headings(ln.xy) + (math.pi if ln.direction < 0 else 0.0)
            seg = torch.linalg.vector_norm(ln.xy[1:] - ln.xy[:-1], dim=-1)
            lane_xy[m, i, :k], lane_yaw[m, i, :k] = ln.xy, torch.atan2(torch.sin(yaw), torch.cos(yaw))
            lane_s[m, i, :k] = torch.cat((torch.zeros(1), torch.cumsum(seg, 0)))
            lane_s[m, i, k:] = lane_s[m, i, k - 1] + torch.arange(1, n_pts - k + 1) * cfg.spacing
            lane_valid[m, i, :k] = ln.valid
            idx = ln.valid.nonzero().squeeze(-1)
            lane_range[m, i] = torch.stack((idx.min(), idx.max()))
            lane_junction[m, i, :k] = torch.linalg.vector_norm(ln.xy - centre, dim=-1) < half
            for key, val in zip(
                ("dir", "left", "right", "ll", "lr", "kind"),
                (ln.direction, ln.left, ln.right, ln.line_left, ln.line_right, ln.kind),
                strict=True,
            ):
                long_fields[key][m, i] = val
            lane_end_blocked[m, i] = ln.end_blocked
            lane_beside[m, i] = torch.tensor(ln.beside)
            lane_stop_u[m, i] = ln.stop_u
        for r, pieces in enumerate(routes):
            # Each piece starts where the one before ended: its first point is dropped.
            xy = torch.cat([lanes[lane].xy[a + (i > 0) : b + 1] for i, (lane, a, b) in enumerate(pieces)])
            q = xy.shape[0]
            seg = torch.linalg.vector_norm(xy[1:] - xy[:-1], dim=-1)
            route_xy[m, r, :q], route_yaw[m, r, :q] = xy, _headings(xy)
            route_xy[m, r, q:], route_yaw[m, r, q:] = xy[-1], route_yaw[m, r, q - 1]
            route_s[m, r, :q] = torch.cat((torch.zeros(1), torch.cumsum(seg, 0)))
            route_s[m, r, q:] = route_s[m, r, q - 1]
            route_len[m, r] = q
            for lane, a, b in pieces:
                route_lane_lo[m, r, lane], route_lane_hi[m, r, lane] = a, b
        _splat(grid_lane[m], grid_point[m], lane_xy[m], lane_yaw[m], lane_valid[m], cfg)
    return RoadMaps(
        lane_xy=lane_xy,
        lane_yaw=lane_yaw,
        lane_s=lane_s,
        lane_valid=lane_valid,
        lane_junction=lane_junction,
        lane_dir=long_fields["dir"],
        lane_left=long_fields["left"],
        lane_right=long_fields["right"],
        lane_beside=lane_beside,
        lane_line_left=long_fields["ll"].clamp(min=0),
        lane_line_right=long_fields["lr"].clamp(min=0),
        lane_end_blocked=lane_end_blocked,
        lane_range=lane_range,
        lane_stop_u=lane_stop_u,
        lane_kind=long_fields["kind"],
        junction_xy=junction_xy,
        junction_half=junction_half,
        grid_lane=grid_lane,
        grid_point=grid_point,
        route_xy=route_xy,
        route_yaw=route_yaw,
        route_s=route_s,
        route_len=route_len,
        route_lane_lo=route_lane_lo,
        route_lane_hi=route_lane_hi,
        cfg=cfg,
        lane_width=cfg.lane_width,
    )


def _splat(grid_lane: Tensor, grid_point: Tensor, xy: Tensor, yaw: Tensor, valid: Tensor, cfg: RoadCfg) -> None:
    """Fill one map's grids: every cell within half a lane width + 1 m of a valid lane point gets
    the lane and point whose centre line is nearest (cross-section samples, scatter-min of a key)."""
    n_lanes, n_pts = valid.shape
    reach = 0.5 * cfg.lane_width + 1.0
    across = torch.arange(-reach, reach + 1e-6, cfg.cell / 2)
    along = torch.arange(-0.5 * cfg.spacing, 0.5 * cfg.spacing + 1e-6, cfg.cell / 2)
    lane_idx, pt_idx = valid.nonzero(as_tuple=True)
    p, th = xy[lane_idx, pt_idx], yaw[lane_idx, pt_idx]
    tangent = torch.stack((torch.cos(th), torch.sin(th)), -1)
    normal = torch.stack((-torch.sin(th), torch.cos(th)), -1)
    a, c = torch.meshgrid(along, across, indexing="ij")
    a, c = a.reshape(-1), c.reshape(-1)
    pts = p[:, None] + a[None, :, None] * tangent[:, None] + c[None, :, None] * normal[:, None]  # [K, S, 2]
    cells = grid_lane.shape[0]
    ix = (pts[..., 0] / cfg.cell).floor().long()
    iy = (pts[..., 1] / cfg.cell).floor().long()
    ok = (ix >= 0) & (ix < cells) & (iy >= 0) & (iy < cells)
    dist = (c.abs() + 0.25 * a.abs()).expand_as(ix)  # nearest centre line first, then nearest point
    key = (dist * 1000).round().long() * (1 << 32) + lane_idx[:, None] * (1 << 16) + pt_idx[:, None]
    flat = (iy * cells + ix)[ok]
    best = torch.full((cells * cells,), torch.iinfo(torch.long).max, dtype=torch.long)
    best.scatter_reduce_(0, flat, key[ok], reduce="amin")
    hit = best != torch.iinfo(torch.long).max
    lane = torch.where(hit, (best >> 16) & 0xFFFF, torch.full_like(best, -1))
    point = torch.where(hit, best & 0xFFFF, torch.zeros_like(best))
    grid_lane.copy_(lane.view(cells, cells).to(torch.int16))
    grid_point.copy_(point.view(cells, cells).to(torch.int16))
