"""Synthetic captioned top-down driving frames: the stand-in for the simulator's camera in tests and
for training the image tower until real frames are at hand.

    frames, labels = synthetic_frames(512, size=64, generator=g)    # uint8 [512, 64, 64, 3], long [512]
    CLASSES[labels[0]]                                               # "clear" | "collision" | ...

A frame looks down on the ego car from above, centred on it (the VLM-RL camera): a grey road of 2-3
lanes with dashed white markings across green grass at a random angle, the ego and other cars as
coloured boxes with a dark windscreen at the front. The ground truth labels each frame:

    clear       the ego in a lane, other cars at least 9 m away
    collision   two cars overlap (the ego and another, or two others)
    near_miss   a car 0.4-2 m beside or behind / ahead of the ego, not touching
    off_road    the ego on the grass beside the road

The captions come in two disjoint sets per class: ``TRAIN_CAPTIONS`` to train on and
``HELDOUT_CAPTIONS`` (other phrasings) to measure zero-shot accuracy. Rendering is batched torch
maths (one inside-box test per car over the pixel grid), no loop over frames.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

CLASSES = ("clear", "collision", "near_miss", "off_road")
TRAIN_CAPTIONS: dict[str, tuple[str, ...]] = {
    "clear": (
        "a car driving alone on an empty road",
        "the lane ahead is free of traffic",
        "normal driving with plenty of space between vehicles",
        "a vehicle cruising safely in its lane",
        "light traffic, all cars far apart",
        "a safe road with no crash",
    ),
    "collision": (
        "a car crash on the road",
        "two vehicles smashed into each other",
        "an accident where cars are touching",
        "a collision between automobiles",
        "cars colliding on the street",
        "a wreck with two crashed cars",
    ),
    "near_miss": (
        "a car dangerously close to another car",
        "two vehicles almost hit each other",
        "a near miss in traffic",
        "cars driving very close together without touching",
    ),
    "off_road": (
        "a car that left the road and drives on the grass",
        "a vehicle off the road in the field",
        "the car drove off the pavement",
        "a car on the grass beside the street",
    ),
}
HELDOUT_CAPTIONS: dict[str, tuple[str, ...]] = {
    "clear": ("the street is open and traffic flows smoothly", "an uneventful drive on a quiet highway"),
    "collision": ("vehicles have crashed together", "a traffic accident has happened"),
    "near_miss": ("a close call between two cars", "vehicles nearly bump into each other"),
    "off_road": ("the automobile is driving across the meadow", "a car has veered off the roadway onto the lawn"),
}

VIEW_M = 24.0  # metres across the frame (the ego's 6.4 m-high camera sees about this much)
CAR_L, CAR_W = 4.5, 1.9  # m
LANE_W = 3.5  # m
MAX_CARS = 4  # ego + 3 others


def _uniform(n: int, low: float, high: float, g: torch.Generator | None) -> Tensor:
    return low + (high - low) * torch.rand(n, generator=g)


def _scene(labels: Tensor, g: torch.Generator | None) -> dict[str, Tensor]:
    """Road and car poses of each frame (metres, radians), in the frame of the image: x right, y up."""
    n = labels.numel()
    lanes = torch.randint(2, 4, (n,), generator=g)
    half = lanes * LANE_W / 2  # road half-width
    road_angle = _uniform(n, -0.6, 0.6, g)  # the road's direction against the image's up axis
    lane_idx = (torch.rand(n, generator=g) * lanes).long()
    ego_lat = -half + LANE_W * (lane_idx + 0.5) + _uniform(n, -0.5, 0.5, g)  # across the road
    off = labels == CLASSES.index("off_road")
    side = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0)
    ego_lat = torch.where(off, side * (half + _uniform(n, 1.8, 6.0, g)), ego_lat)
    ego_heading = road_angle + _uniform(n, -0.15, 0.15, g) + off * _uniform(n, -0.6, 0.6, g)
    # Others: (lateral, longitudinal) in road coordinates relative to the road centre / the ego, far away.
    n_others = torch.randint(0, MAX_CARS, (n,), generator=g)
    other_lane = (torch.rand(n, MAX_CARS - 1, generator=g) * lanes.unsqueeze(-1)).long()
    lat = -half.unsqueeze(-1) + LANE_W * (other_lane + 0.5) + 0.3 * torch.randn(n, MAX_CARS - 1, generator=g)
    lon = torch.where(torch.rand(n, MAX_CARS - 1, generator=g) < 0.5, -1.0, 1.0) * (
        9.0 + 8.0 * torch.rand(n, MAX_CARS - 1, generator=g)
    )
    rel_heading = 0.1 * torch.randn(n, MAX_CARS - 1, generator=g)
    present = torch.arange(MAX_CARS - 1).unsqueeze(0) < n_others.unsqueeze(-1)
    # Spread the other cars over different distances so that "clear" scenes hold no accidental contact.
    lon = lon + torch.sign(lon) * 6.0 * torch.arange(MAX_CARS - 1)
    ego_lon = torch.zeros(n)
    # Collision: car 1 overlaps the ego (half the time) or car 2 (placed near the ego) -- two cars touch.
    coll = labels == CLASSES.index("collision")
    pair_ego = coll & (torch.rand(n, generator=g) < 0.5)
    pair_other = coll & ~pair_ego
    d_lon, d_lat = _uniform(n, -3.2, 3.2, g), _uniform(n, -1.5, 1.5, g)
    d_head = torch.where(torch.rand(n, generator=g) < 0.5, _uniform(n, -0.5, 0.5, g), _uniform(n, 0.8, 2.3, g))
    lat[:, 0] = torch.where(coll, ego_lat + d_lat, lat[:, 0])
    lon[:, 0] = torch.where(pair_ego, d_lon, torch.where(pair_other, _uniform(n, 7.0, 9.0, g), lon[:, 0]))
    rel_heading[:, 0] = torch.where(coll, d_head, rel_heading[:, 0])
    # For a pair of others: car 2 overlaps car 1, ahead of the ego.
    lat[:, 1] = torch.where(pair_other, lat[:, 0] + _uniform(n, -1.5, 1.5, g), lat[:, 1])
    lon[:, 1] = torch.where(pair_other, lon[:, 0] + _uniform(n, -3.2, 3.2, g), lon[:, 1])
    rel_heading[:, 1] = torch.where(pair_other, _uniform(n, -0.4, 0.4, g), rel_heading[:, 1])
    present[:, 0] |= coll
    present[:, 1] |= pair_other
    lat[:, 0] = torch.where(pair_other, ego_lat + _uniform(n, -0.5, 0.5, g), lat[:, 0])
    # Near miss: car 1 beside the ego (gap 0.4-1.2 m) or behind / ahead of it (gap 0.6-2 m), same heading.
    near = labels == CLASSES.index("near_miss")
    beside = torch.rand(n, generator=g) < 0.5
    gap_side = CAR_W + _uniform(n, 0.4, 1.2, g)
    gap_lon = CAR_L + _uniform(n, 0.6, 2.0, g)
    sign = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0)
    lat[:, 0] = torch.where(near, ego_lat + torch.where(beside, sign * gap_side, 0.0), lat[:, 0])
    lon[:, 0] = torch.where(near, torch.where(beside, _uniform(n, -2.0, 2.0, g), sign * gap_lon), lon[:, 0])
    rel_heading[:, 0] = torch.where(near, 0.05 * torch.randn(n, generator=g), rel_heading[:, 0])
    present[:, 0] |= near
    # Poses: road coordinates (lat across, lon along) -> image coordinates, ego at the image centre.
    along = torch.stack([-torch.sin(road_angle), torch.cos(road_angle)], -1)  # unit vector along the road
    across = torch.stack([torch.cos(road_angle), torch.sin(road_angle)], -1)
    lat_all = torch.cat([ego_lat.unsqueeze(-1), lat], -1)  # [n, MAX_CARS]
    lon_all = torch.cat([ego_lon.unsqueeze(-1), lon], -1)
    rel_lat = (lat_all - ego_lat.unsqueeze(-1)).unsqueeze(-1)
    pos = rel_lat * across.unsqueeze(1) + lon_all.unsqueeze(-1) * along.unsqueeze(1)
    heading = torch.cat([ego_heading.unsqueeze(-1), road_angle.unsqueeze(-1) + rel_heading], -1)
    return {
        "pos": pos,  # [n, MAX_CARS, 2], ego first at (0, 0)
        "heading": heading,  # [n, MAX_CARS] rad against the image's up axis
        "present": torch.cat([torch.ones(n, 1, dtype=torch.bool), present], -1),
        "road_angle": road_angle,
        "road_offset": -ego_lat,  # the road centre's lateral position relative to the ego
        "half": half,
        "lanes": lanes,
    }


def _render(scene: dict[str, Tensor], size: int, g: torch.Generator | None) -> Tensor:
    """``uint8 [n, size, size, 3]`` of the scenes."""
    n = scene["pos"].shape[0]
    px = (torch.arange(size) + 0.5) / size * VIEW_M - VIEW_M / 2
    yy, xx = torch.meshgrid(-px, px, indexing="ij")  # image row 0 at the top: y up
    xy = torch.stack([xx, yy], -1)  # [S, S, 2]
    ang = scene["road_angle"].view(n, 1, 1)
    lat = xy[..., 0] * torch.cos(ang) + xy[..., 1] * torch.sin(ang) - scene["road_offset"].view(n, 1, 1)
    lon = -xy[..., 0] * torch.sin(ang) + xy[..., 1] * torch.cos(ang)
    on_road = lat.abs() < scene["half"].view(n, 1, 1)
    grass = torch.stack([_uniform(n, 40, 80, g), _uniform(n, 100, 150, g), _uniform(n, 30, 70, g)], -1)
    asphalt = _uniform(n, 70, 120, g).unsqueeze(-1).expand(n, 3)
    img = torch.where(on_road.unsqueeze(-1), asphalt.view(n, 1, 1, 3), grass.view(n, 1, 1, 3))
    # Lane markings: dashed lines between lanes, solid at the edges.
    rel = lat + scene["half"].view(n, 1, 1)  # 0 at the left edge
    to_line = (rel - LANE_W * torch.round(rel / LANE_W)).abs()
    dashed = (torch.remainder(lon, 6.0) < 3.0) | ((lat.abs() - scene["half"].view(n, 1, 1)).abs() < 0.2)
    marking = on_road.logical_or((lat.abs() - scene["half"].view(n, 1, 1)).abs() < 0.2) & (to_line < 0.15) & dashed
    img = torch.where(marking.unsqueeze(-1), torch.tensor(230.0), img)
    # Cars, the others first and the ego on top.
    colours = torch.rand(n, MAX_CARS, 3, generator=g) * 200 + 40
    order = [*range(1, MAX_CARS), 0]
    for k in order:
        c, h = scene["pos"][:, k].view(n, 1, 1, 2), scene["heading"][:, k].view(n, 1, 1)
        d = xy - c
        fwd = -d[..., 0] * torch.sin(h) + d[..., 1] * torch.cos(h)  # along the car
        side = d[..., 0] * torch.cos(h) + d[..., 1] * torch.sin(h)
        body = (fwd.abs() < CAR_L / 2) & (side.abs() < CAR_W / 2) & scene["present"][:, k].view(n, 1, 1)
        screen = body & (fwd > 0.15 * CAR_L) & (fwd < 0.35 * CAR_L) & (side.abs() < 0.4 * CAR_W)
        img = torch.where(body.unsqueeze(-1), colours[:, k].view(n, 1, 1, 3), img)
        img = torch.where(screen.unsqueeze(-1), torch.tensor(25.0), img)
    noise = 6.0 * torch.randn(img.shape, generator=g)
    return (img + noise).clamp(0, 255).to(torch.uint8)


def synthetic_frames(
    n: int, size: int = 64, generator: torch.Generator | None = None, labels: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """``(frames uint8 [n, size, size, 3], labels long [n])`` of random scenes (classes uniform unless given)."""
    if labels is None:
        labels = torch.randint(0, len(CLASSES), (n,), generator=generator)
    return _render(_scene(labels, generator), size, generator), labels


def caption_bank(heldout: bool = False) -> tuple[list[str], Tensor]:
    """All captions of one set and the class of each: ``(texts, class_of_text long [M])``."""
    bank = HELDOUT_CAPTIONS if heldout else TRAIN_CAPTIONS
    texts = [t for c in CLASSES for t in bank[c]]
    owner = torch.tensor([k for k, c in enumerate(CLASSES) for _ in bank[c]])
    return texts, owner


def roc_auc(positive: Tensor, negative: Tensor) -> float:
    """ROC-AUC of scores: the probability that a positive scores above a negative (ties count half)."""
    pos, neg = positive.flatten().double(), negative.flatten().double()
    greater = (pos.unsqueeze(-1) > neg.unsqueeze(0)).double().mean()
    ties = (pos.unsqueeze(-1) == neg.unsqueeze(0)).double().mean()
    return float(greater + 0.5 * ties) if math.isfinite(float(greater)) else math.nan
