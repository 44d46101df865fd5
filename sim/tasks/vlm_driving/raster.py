"""Batched rasterisers of vlm_driving: the bird's-eye-view mask stack (observation) and the top-down
RGB camera (the vision-language reward's input), both in the ego frame, heading up.

Both look up the road at every pixel as :meth:`RoadMaps.locate` does (one gather per pixel into the
map's lane grid, then exact geometry against the lane's centre point, for the pixels near a lane only),
so lane edges and markings are sharp at any resolution; cars are oriented boxes. Every frame of a call
is rendered in one batch: no Python loop over envs or cars.

BEV (VLM-RL / Roach style, ``uint8 [E, B, B, 3 + history]``, 0 or 255; the ego sits on the centre
column, 3/4 of the way down):

    0 road          within half a lane width of a lane centre
    1 markings      lane edges (solid lines, dashed lines on their dashes)
    2 route         the lanes of the ego's route, on the stretches the route uses
    3.. vehicles    the background cars now, one step ago, ... (their past poses in today's ego frame)

Camera (``uint8 [N, S, S, 3]``, the ego at the centre, ``camera_view_m`` across): grass, asphalt,
white markings, cars as coloured boxes with a dark windscreen at the front, the ego in white; the
look of a camera 6.4 m above the ego looking straight down (VLM-RL's reward camera).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from sim.tasks.vlm_driving.roads import LINE_DASHED, LINE_NONE, RoadMaps, flat_index, take_flat

LINE_HALF_WIDTH = 0.12  # m: half the width of a painted line
DASH, GAP = 3.0, 3.0  # m: dashed lines
GRASS = (62.0, 124.0, 52.0)
ASPHALT = (92.0, 92.0, 96.0)
PAINT = 232.0
EGO_COLOUR = (245.0, 245.0, 245.0)


def ego_frame_pixels(size: int, px_per_m: float, ego_row: float, device: torch.device) -> Tensor:
    """Ego-frame coordinates ``[S, S, 2]`` (x forward, y left, m) of the pixel centres; the ego is at
    column ``S/2`` and row ``ego_row * S`` (row 0 at the top = ahead)."""
    idx = torch.arange(size, device=device, dtype=torch.float32) + 0.5
    forward = (ego_row * size - idx) / px_per_m  # rows
    left = (size / 2 - idx) / px_per_m  # columns
    f, lft = torch.meshgrid(forward, left, indexing="ij")
    return torch.stack((f, lft), -1)


def to_world(pixels: Tensor, ego_xy: Tensor, ego_yaw: Tensor) -> Tensor:
    """World positions ``[N, S, S, 2]`` of ego-frame pixels ``[S, S, 2]`` for poses ``[N, 2]``, ``[N]``."""
    c, s = torch.cos(ego_yaw)[:, None, None], torch.sin(ego_yaw)[:, None, None]
    f, lft = pixels[..., 0], pixels[..., 1]
    x = ego_xy[:, 0, None, None] + f * c - lft * s
    y = ego_xy[:, 1, None, None] + f * s + lft * c
    return torch.stack((x, y), -1)


def road_layers(maps: RoadMaps, map_id: Tensor, world: Tensor, route_id: Tensor | None = None) -> dict[str, Tensor]:
    """Per pixel of ``world [N, S, S, 2]`` (frame ``i`` on map ``map_id[i]``): ``road`` and ``marking`` bool
    ``[N, S, S]``, and with ``route_id [N]`` ``route`` (on a lane of the route, on the stretch it uses).

    Only the pixels whose lookup cell holds a lane (all the road and its markings) get the exact lane geometry
    (:meth:`RoadMaps.refine`, gathered into one flat batch over all frames); the others are grass."""
    n = world.shape[0]
    lane, u = maps.cell_lookup(map_id.view(n, 1, 1), world)
    idx = (lane >= 0).view(-1).nonzero().squeeze(-1)  # [Q] pixels near a lane, over all frames
    frame = idx // lane[0].numel()
    mid = map_id[frame]
    where = maps.refine(mid, world.reshape(-1, 2).index_select(0, idx), lane.view(-1)[idx], u.view(-1)[idx])
    lat, w = where["lateral"], 0.5 * maps.lane_width
    station = take_flat(maps.lane_s, where["point"], 3) + where["along"]
    dash_on = torch.remainder(station, DASH + GAP) < DASH
    lane_of = flat_index(maps.lane_line_left.shape, mid, where["lane"].clamp(min=0))
    left_type = take_flat(maps.lane_line_left, lane_of, 2)
    right_type = take_flat(maps.lane_line_right, lane_of, 2)
    on_left = (lat - w).abs() < LINE_HALF_WIDTH
    on_right = (lat + w).abs() < LINE_HALF_WIDTH
    painted = lambda kind: (kind != LINE_NONE) & ((kind != LINE_DASHED) | dash_on)  # noqa: E731
    marking = (
        (where["lane"] >= 0) & ~where["junction"] & ((on_left & painted(left_type)) | (on_right & painted(right_type)))
    )
    layers = {"road": where["on_road"] | marking, "marking": marking}
    if route_id is not None:
        route_lane = flat_index(maps.route_lane_lo.shape, mid, route_id[frame], where["lane"].clamp(min=0))
        lo, hi = take_flat(maps.route_lane_lo, route_lane, 3), take_flat(maps.route_lane_hi, route_lane, 3)
        layers["route"] = where["on_road"] & (where["u"] >= lo) & (where["u"] <= hi)
    out = {}
    for name, values in layers.items():  # back onto the images: False off the lanes
        full = torch.zeros(lane.numel(), dtype=torch.bool, device=world.device)
        full[idx] = values
        out[name] = full.view(lane.shape)
    return out


CAR_MARGIN_PX = 2  # pixels beyond a car's bounding circle that draw_cars still tests


def _in_box(d: Tensor, c: Tensor, s: Tensor, half_length: float, half_width: float) -> Tensor:
    """Inside an oriented box: offsets ``d [..., 2]`` from its centre, ``c``/``s`` its heading's cosine/sine."""
    fwd = d[..., 0] * c + d[..., 1] * s
    side = -d[..., 0] * s + d[..., 1] * c
    return (fwd.abs() < half_length) & (side.abs() < half_width)


def draw_cars(
    world: Tensor,
    pixels: Tensor,
    ego_xy: Tensor,
    ego_yaw: Tensor,
    xy: Tensor,
    yaw: Tensor,
    present: Tensor,
    length: float,
    width: float,
) -> tuple[Tensor, Tensor]:
    """Cars in a camera image: ``(top long [N, S, S], screen bool [N, S, S])``.

    ``top`` is 1 + the index of the last car (of ``xy [N, K, 2]``, ``yaw [N, K]``, ``present [N, K]``) whose
    body covers the pixel (later cars are drawn over earlier ones), 0 for none; ``screen``: the pixel lies on
    that car's windscreen (a band across the front half). ``world [N, S, S, 2]`` are the pixels' world
    positions, ``pixels [S, S, 2]`` the regular ego-frame grid they came from (:func:`ego_frame_pixels`), of
    the ego ``ego_xy [N, 2]``, ``ego_yaw [N]``.

    Each car in view is tested on a window of pixels around it only (its bounding circle plus
    ``CAR_MARGIN_PX``), all cars of all frames in one batch; the test is the point-in-oriented-box test on
    the same world coordinates, so the result equals testing every pixel against every car.
    """
    N, S = world.shape[:2]
    dev = world.device
    f0, l0 = float(pixels[0, 0, 0]), float(pixels[0, 0, 1])
    step_r = (f0 - float(pixels[-1, 0, 0])) / (S - 1) if S > 1 else 1.0  # m per row (forward decreases)
    step_c = (l0 - float(pixels[0, -1, 1])) / (S - 1) if S > 1 else 1.0  # m per column (left decreases)
    radius = math.hypot(length / 2, width / 2)
    h_r = math.ceil(radius / step_r) + CAR_MARGIN_PX
    h_c = math.ceil(radius / step_c) + CAR_MARGIN_PX
    w_r, w_c = min(2 * h_r + 1, S), min(2 * h_c + 1, S)
    # Per car (as the full test computes them): heading, and the windscreen's centre.
    c, s = torch.cos(yaw), torch.sin(yaw)
    screen_xy = xy + 0.25 * length * torch.stack((c, s), -1)
    local, _ = to_ego_frame(xy, yaw, ego_xy, ego_yaw)
    row = (f0 - local[..., 0]) / step_r
    col = (l0 - local[..., 1]) / step_c
    visible = present & (row > -h_r) & (row < S - 1 + h_r) & (col > -h_c) & (col < S - 1 + h_c)
    n_i, k_i = visible.nonzero(as_tuple=True)  # [P] the cars to draw
    r0 = (row[n_i, k_i].round().long() - h_r).clamp(0, S - w_r)
    c0 = (col[n_i, k_i].round().long() - h_c).clamp(0, S - w_c)
    rows = r0.unsqueeze(-1) + torch.arange(w_r, device=dev)  # [P, w_r]
    cols = c0.unsqueeze(-1) + torch.arange(w_c, device=dev)
    flat = (n_i.view(-1, 1, 1) * S + rows.unsqueeze(-1)) * S + cols.unsqueeze(-2)  # [P, w_r, w_c] into N*S*S
    pts = world.reshape(-1, 2).index_select(0, flat.reshape(-1)).view(*flat.shape, 2)
    cp, sp = c[n_i, k_i].view(-1, 1, 1), s[n_i, k_i].view(-1, 1, 1)
    body = _in_box(pts - xy[n_i, k_i].view(-1, 1, 1, 2), cp, sp, length / 2, width / 2)
    screen = _in_box(pts - screen_xy[n_i, k_i].view(-1, 1, 1, 2), cp, sp, 0.1 * length, 0.4 * width)
    order = (k_i + 1).view(-1, 1, 1)
    top = torch.zeros(N * S * S, dtype=torch.long, device=dev)
    top.scatter_reduce_(0, flat.reshape(-1), (body * order).reshape(-1), "amax")
    on = screen & (top[flat] == order)  # on the windscreen of the car drawn on top there
    on_screen = torch.zeros(N * S * S, dtype=torch.bool, device=dev)
    on_screen[flat[on]] = True
    return top.view(N, S, S), on_screen.view(N, S, S)


def splat_boxes(
    size: int,
    px_per_m: float,
    ego_row: float,
    centre: Tensor,
    yaw: Tensor,
    present: Tensor,
    length: float,
    width: float,
) -> Tensor:
    """Occupancy ``[E, S, S]`` bool of cars (``centre [E, K, 2]``, ``yaw [E, K]`` in the ego frame: x
    forward, y left) by writing sample points of each box into the grid (cheaper than testing
    every pixel against every car when S is large)."""
    E, K = yaw.shape
    dev = yaw.device
    step = 0.5 / px_per_m
    along = torch.arange(-length / 2, length / 2 + 1e-6, step, device=dev)
    across = torch.arange(-width / 2, width / 2 + 1e-6, step, device=dev)
    a, b = torch.meshgrid(along, across, indexing="ij")
    a, b = a.reshape(-1), b.reshape(-1)
    c, s = torch.cos(yaw).unsqueeze(-1), torch.sin(yaw).unsqueeze(-1)
    fx = centre[..., 0:1] + a * c - b * s  # [E, K, P] forward
    fy = centre[..., 1:2] + a * s + b * c  # left
    row = (ego_row * size - fx * px_per_m).floor().long()
    col = (size / 2 - fy * px_per_m).floor().long()
    ok = (row >= 0) & (row < size) & (col >= 0) & (col < size) & present.unsqueeze(-1)
    flat = torch.where(ok, row * size + col, size * size)  # out of the image: a dump cell
    base = (torch.arange(E, device=dev) * (size * size + 1)).view(E, 1, 1)
    grid = torch.zeros(E * (size * size + 1), dtype=torch.bool, device=dev)
    grid[(flat + base).reshape(-1)] = True
    return grid.view(E, size * size + 1)[:, : size * size].view(E, size, size)


def to_ego_frame(xy: Tensor, yaw: Tensor, ego_xy: Tensor, ego_yaw: Tensor) -> tuple[Tensor, Tensor]:
    """Poses ``[E, K, 2]``, ``[E, K]`` in the world -> the ego frame of ``[E, 2]``, ``[E]``."""
    d = xy - ego_xy.unsqueeze(1)
    c, s = torch.cos(ego_yaw).unsqueeze(-1), torch.sin(ego_yaw).unsqueeze(-1)
    fwd = d[..., 0] * c + d[..., 1] * s
    left = -d[..., 0] * s + d[..., 1] * c
    return torch.stack((fwd, left), -1), yaw - ego_yaw.unsqueeze(-1)


def render_bev(
    maps: RoadMaps,
    map_id: Tensor,
    route_id: Tensor,
    ego_xy: Tensor,
    ego_yaw: Tensor,
    car_history: list[tuple[Tensor, Tensor, Tensor]],
    pixels: Tensor,
    px_per_m: float,
    ego_row: float,
    length: float,
    width: float,
) -> Tensor:
    """The BEV mask stack ``uint8 [E, B, B, 3 + len(car_history)]`` (module docstring).

    ``car_history``: ``(xy [E, V, 2], yaw [E, V], present [E, V])`` in the world, newest first.
    """
    size = pixels.shape[0]
    world = to_world(pixels, ego_xy, ego_yaw)
    layers = road_layers(maps, map_id, world, route_id)
    channels = [layers["road"], layers["marking"], layers["route"]]
    for xy, yaw, present in car_history:
        local, local_yaw = to_ego_frame(xy, yaw, ego_xy, ego_yaw)
        channels.append(splat_boxes(size, px_per_m, ego_row, local, local_yaw, present, length, width))
    return torch.stack(channels, -1).to(torch.uint8) * 255


def render_camera(
    maps: RoadMaps,
    map_id: Tensor,
    ego_xy: Tensor,
    ego_yaw: Tensor,
    cars_xy: Tensor,
    cars_yaw: Tensor,
    cars_present: Tensor,
    cars_colour: Tensor,
    pixels: Tensor,
    length: float,
    width: float,
) -> Tensor:
    """The reward camera's RGB frames ``uint8 [N, S, S, 3]`` (module docstring); cars ``[N, V, ...]``,
    colours ``[N, V, 3]`` 0-255, the ego drawn last (on top) in white."""
    dev = ego_xy.device
    world = to_world(pixels, ego_xy, ego_yaw)
    layers = road_layers(maps, map_id, world)
    n = ego_xy.shape[0]
    all_xy = torch.cat((cars_xy, ego_xy.unsqueeze(1)), 1)
    all_yaw = torch.cat((cars_yaw, ego_yaw.unsqueeze(1)), 1)
    all_present = torch.cat((cars_present, torch.ones(n, 1, dtype=torch.bool, device=dev)), 1)
    top, on_screen = draw_cars(world, pixels, ego_xy, ego_yaw, all_xy, all_yaw, all_present, length, width)
    # Each pixel is one colour of its frame's palette: grass, asphalt, paint, the K cars (the ego last), windscreen.
    k = all_xy.shape[1]
    fixed = torch.tensor((GRASS, ASPHALT, (PAINT,) * 3), device=dev).expand(n, 3, 3)
    screen = torch.full((n, 1, 3), 25.0, device=dev)
    palette = torch.cat((fixed, cars_colour, torch.tensor(EGO_COLOUR, device=dev).expand(n, 1, 3), screen), 1)
    palette = palette.clamp(0, 255).to(torch.uint8).view(-1, 3)  # [n * (k + 4), 3]
    ground = layers["road"].long() + layers["marking"].long()  # 0 grass, 1 asphalt, 2 paint (markings are road)
    index = torch.where(top > 0, torch.where(on_screen, k + 3, top + 2), ground)
    index = index + (torch.arange(n, device=dev) * (k + 4)).view(n, 1, 1)
    return palette.index_select(0, index.view(-1)).view(*index.shape, 3)
