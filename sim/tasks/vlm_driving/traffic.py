"""Background traffic of vlm_driving: ``V`` cars per env on the map's lanes, IDM + MOBIL, kept near the ego.

Each car lives in lane coordinates: ``lane``, ``u`` (float point index, increasing or decreasing
with the lane's direction), a lateral offset ``lat`` that runs back to 0 after a lane change, its
speed ``v`` and IDM desired speed ``v0``. One step, for all envs and cars at once:

1. Leaders and followers in the own lane and both neighbour lanes, from the signed along-lane
   distance of every pair (the ego counts as a car in the lane it is on), plus virtual standing
   obstacles: the end of a lane that ends in a wall (the on-ramp) and, for side-road cars while the
   junction is busy, their yield line.
2. IDM accelerations; MOBIL decides lane changes to either side (safe and worth it, with a cooldown).
3. Integration along the lane (``u += dir * v dt / metres-per-point``).
4. Cars that drove off their lane or are farther than ``recycle_radius_m`` from the ego respawn at a
   free spot ahead of the ego on its route (or near the junction): one per env per step, so two new
   cars never land on each other.

Shapes: E envs, V cars; the ego is column ``V`` of the pairwise tables.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from sim.physics.traffic import IDMParams, MOBILParams, idm_acceleration, leader_follower, mobil_lane_change
from sim.tasks.vlm_driving.config import TrafficCfg
from sim.tasks.vlm_driving.roads import RoadMaps, take

CAR_LENGTH, CAR_WIDTH = 4.5, 1.9
MAIN_KINDS = (0, 1)  # lane kinds of the main road (forward, oncoming)
SIDE_KIND, CONNECTOR_KIND = 3, 4


class Traffic:
    """State and step of the background cars (see the module docstring)."""

    def __init__(
        self,
        cfg: TrafficCfg,
        maps: RoadMaps,
        num_envs: int,
        device: torch.device,
        rng: torch.Generator,
        compile: bool = False,
    ):
        self.cfg, self.maps, self.rng, self.device = cfg, maps, rng, device
        # A reset's spawn rounds run on the reset envs only (a few per step): compiled with a symbolic count
        # (eager they cost ~6 ms of a ~40 ms compiled step at 4096 envs, whatever the count).
        self._spawn_rounds = torch.compile(spawn_rounds, dynamic=True) if compile else spawn_rounds
        E, V = num_envs, cfg.num_vehicles
        self.idm, self.mobil = IDMParams(), MOBILParams()
        self.lane = torch.zeros(E, V, dtype=torch.long, device=device)
        self.u = torch.zeros(E, V, device=device)
        self.v = torch.zeros(E, V, device=device)
        self.v0 = torch.ones(E, V, device=device)
        self.lat = torch.zeros(E, V, device=device)
        self.cooldown = torch.zeros(E, V, device=device)
        self.present = torch.zeros(E, V, dtype=torch.bool, device=device)
        self.colour = torch.zeros(E, V, 3, device=device)  # for the camera, 0-255

    # ----------------------------------------------------------------- queries
    def poses(self, map_id: Tensor, rows: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``(xy [E, V, 2], yaw [E, V])`` of every car (absent cars: wherever they were); with ``rows [k]``, the
        cars of those envs (``map_id [k]``, theirs)."""
        lane, u, lat, v = (
            (self.lane, self.u, self.lat, self.v)
            if rows is None
            else (self.lane[rows], self.u[rows], self.lat[rows], self.v[rows])
        )
        mid = map_id.unsqueeze(-1).expand_as(lane)
        xy, yaw = self.maps.lane_pose(mid, lane, u, lat)
        # Turned into the lane change: the lateral speed over the forward speed.
        lat_rate = -torch.sign(lat) * self.maps.lane_width / self.cfg.lane_change_s * (lat.abs() > 1e-3)
        yaw = yaw + torch.atan2(lat_rate, v.clamp(min=1.0))
        return xy, yaw

    def velocity(self, yaw: Tensor) -> Tensor:
        """World velocity ``[E, V, 2]`` of the cars with headings ``yaw [E, V]``."""
        return self.v.unsqueeze(-1) * torch.stack((torch.cos(yaw), torch.sin(yaw)), -1)

    # ----------------------------------------------------------------- step
    def step(
        self,
        map_id: Tensor,
        ego_xy: Tensor,
        ego_yaw: Tensor,
        ego_speed: Tensor,
        ego_where: dict[str, Tensor],
        ego_route_xy: Tensor,
        dt: float,
        draws: dict[str, Tensor] | None = None,
    ) -> None:
        """Advance every car by ``dt``; respawn far ones ahead along ``ego_route_xy [E, K, 2]``.

        ``ego_where`` is :meth:`RoadMaps.locate` of the ego (the ego is a car of its lane for the others).
        """
        maps, E, V = self.maps, *self.lane.shape
        mid = map_id.unsqueeze(-1)
        ego_lane = torch.where(ego_where["on_road"], ego_where["lane"], -2)  # -2: in no lane
        ego_sp = maps.spacing_at(map_id, ego_lane.clamp(min=0), ego_where["u"].float())
        ego_u = ego_where["u"].float() + ego_where["along"] / ego_sp
        ego_v = (ego_speed * torch.cos(ego_yaw - ego_where["yaw"])).clamp(min=0.0)  # along its lane
        lanes = torch.cat((self.lane, ego_lane.unsqueeze(-1)), -1)  # [E, V+1]
        u = torch.cat((self.u, ego_u.unsqueeze(-1)), -1)
        v = torch.cat((self.v, ego_v.unsqueeze(-1)), -1)
        present = torch.cat((self.present, ego_lane.unsqueeze(-1) >= 0), -1)
        v0 = torch.cat((self.v0, torch.full_like(ego_v, 25 / 3.6).unsqueeze(-1)), -1)
        safe_lane = lanes.clamp(min=0)
        direction = take(maps.lane_dir, mid, safe_lane).float()  # [E, V+1]
        sp = maps.spacing_at(mid.expand_as(safe_lane), safe_lane, u)
        not_self = ~torch.eye(V + 1, dtype=torch.bool, device=self.device)
        rel = direction.unsqueeze(-1) * (u.unsqueeze(-2) - u.unsqueeze(-1)) * sp.unsqueeze(-1)  # [E, i, j]

        busy = self._junction_busy(map_id, ego_xy)  # [E]: once per step, shared by the three lane queries

        def neighbours(query_lane: Tensor) -> dict[str, Tensor]:
            valid = (lanes.unsqueeze(-2) == query_lane.unsqueeze(-1)) & present.unsqueeze(-2) & not_self
            out = leader_follower(rel, valid, v, CAR_LENGTH)
            gap, lead_v = self._virtual_leaders(map_id, query_lane, u, direction, sp, busy)
            closer = gap < out["lead_gap"]
            out["lead_gap"] = torch.where(closer, gap, out["lead_gap"])
            out["lead_v"] = torch.where(closer, lead_v, out["lead_v"])
            out["lead_idx"] = torch.where(closer, -1, out["lead_idx"])
            return out

        own = neighbours(lanes)
        acc = idm_acceleration(v, v0, own["lead_gap"], own["lead_v"], self.idm)  # [E, V+1]
        acc = torch.where(present, acc, torch.zeros_like(acc))
        # MOBIL to the left and the right (cars only; the ego is column V).
        best_gain = torch.full((E, V), -math.inf, device=self.device)
        best_lane = self.lane.clone()
        best_side = torch.zeros(E, V, device=self.device)
        can_change = self.present & (self.cooldown <= 0) & (self.lat.abs() < 1e-3)
        for side, table in ((1.0, maps.lane_left), (-1.0, maps.lane_right)):
            target = table[mid, self.lane]  # [E, V]
            ok = can_change & (target >= 0)
            ok = ok & take(
                maps.lane_valid, mid, target.clamp(min=0), self.u.round().long().clamp(0, maps.lane_valid.shape[-1] - 1)
            )
            query = torch.cat((torch.where(ok, target, -3), torch.full_like(ego_lane, -3).unsqueeze(-1)), -1)
            new = neighbours(query)
            acc_self_target = idm_acceleration(v, v0, new["lead_gap"], new["lead_v"], self.idm)[..., :V]
            f_new = new["follow_idx"][..., :V]
            has_new = f_new >= 0
            fi = f_new.clamp(min=0)
            v_f, v0_f = v.gather(-1, fi), v0.gather(-1, fi)
            acc_newf_now = torch.where(has_new, acc.gather(-1, fi), 0.0)
            acc_newf_after = torch.where(
                has_new, idm_acceleration(v_f, v0_f, new["follow_gap"][..., :V], self.v, self.idm), 0.0
            )
            f_old = own["follow_idx"][..., :V]
            has_old = f_old >= 0
            oi = f_old.clamp(min=0)
            gap_old_after = own["follow_gap"][..., :V] + CAR_LENGTH + own["lead_gap"][..., :V]
            acc_oldf_now = torch.where(has_old, acc.gather(-1, oi), 0.0)
            acc_oldf_after = torch.where(
                has_old,
                idm_acceleration(v.gather(-1, oi), v0.gather(-1, oi), gap_old_after, own["lead_v"][..., :V], self.idm),
                0.0,
            )
            gain, go = mobil_lane_change(
                acc[..., :V],
                acc_self_target,
                acc_newf_now,
                acc_newf_after,
                acc_oldf_now,
                acc_oldf_after,
                self.mobil,
                side,
            )
            chosen = ok & go & (gain > best_gain)
            best_gain = torch.where(chosen, gain, best_gain)
            best_lane = torch.where(chosen, target, best_lane)
            best_side = torch.where(chosen, torch.full_like(best_side, side), best_side)
        changed = best_side != 0
        self.lane = best_lane
        # Moving left into the new lane means being on its right (negative lateral offset) at first.
        self.lat = torch.where(changed, -best_side * maps.lane_width, self.lat)
        self.cooldown = torch.where(changed, torch.full_like(self.cooldown, self.cfg.lane_change_s), self.cooldown - dt)
        # Integrate (IDM with the acceleration of the old lane this step; the new lane from the next).
        a = acc[..., :V]
        self.v = (self.v + a * dt).clamp(min=0.0)
        self.u = self.u + direction[..., :V] * self.v * dt / sp[..., :V]
        step_lat = maps.lane_width / self.cfg.lane_change_s * dt
        self.lat = torch.sign(self.lat) * (self.lat.abs() - step_lat).clamp(min=0.0)
        self._recycle(map_id, ego_xy, ego_route_xy, draws)

    def _virtual_leaders(
        self, map_id: Tensor, query_lane: Tensor, u: Tensor, direction: Tensor, sp: Tensor, busy: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Standing obstacles in ``query_lane [E, Q]`` ahead of ``u [E, Q]``: ``(gap m, speed 0)``."""
        maps = self.maps
        mid = map_id.unsqueeze(-1)
        lane = query_lane.clamp(min=0)
        inf = torch.full_like(u, math.inf)
        end_u = torch.where(
            direction > 0, take(maps.lane_range, mid, lane, 1).float(), take(maps.lane_range, mid, lane, 0).float()
        )
        gap_end = direction * (end_u - u) * sp - 0.5 * CAR_LENGTH
        gap = torch.where(take(maps.lane_end_blocked, mid, lane) & (query_lane >= 0), gap_end, inf)
        # Yield line of side-road lanes while a main-road car (or the ego) is near the junction.
        stop_u = take(maps.lane_stop_u, mid, lane)
        gap_stop = direction * (stop_u - u) * sp - 0.5 * CAR_LENGTH
        waits = busy.unsqueeze(-1) & (query_lane >= 0) & torch.isfinite(stop_u) & (gap_stop > -1.0)
        gap = torch.minimum(gap, torch.where(waits, gap_stop.clamp(min=0.1), inf))
        return gap, torch.zeros_like(u)

    def _junction_busy(self, map_id: Tensor, ego_xy: Tensor) -> Tensor:
        """``[E]`` bool: a main-road car or the ego within ``junction_busy_radius_m`` of the junction."""
        centre = take(self.maps.junction_xy, map_id)  # [E, 2]
        xy, _ = self.poses(map_id)
        kind = take(self.maps.lane_kind, map_id.unsqueeze(-1), self.lane)
        main = self.present & ((kind == MAIN_KINDS[0]) | (kind == MAIN_KINDS[1]))
        near = torch.linalg.vector_norm(xy - centre.unsqueeze(1), dim=-1) < self.cfg.junction_busy_radius_m
        ego_near = torch.linalg.vector_norm(ego_xy - centre, dim=-1) < self.cfg.junction_busy_radius_m
        return (main & near).any(-1) | ego_near

    # ----------------------------------------------------------------- spawning
    def _recycle(self, map_id: Tensor, ego_xy: Tensor, route_xy: Tensor, draws: dict[str, Tensor] | None) -> None:
        """Respawn (at most one per env) a car that is absent, off its lane or too far from the ego."""
        maps = self.maps
        mid = map_id.unsqueeze(-1)
        xy, _ = self.poses(map_id)
        p = maps.lane_valid.shape[-1]
        on_lane = take(maps.lane_valid, mid, self.lane, self.u.round().long().clamp(0, p - 1))
        on_lane = on_lane & (self.u >= 0) & (self.u <= p - 1)
        far = torch.linalg.vector_norm(xy - ego_xy.unsqueeze(1), dim=-1) > self.cfg.recycle_radius_m
        self.present = self.present & on_lane & ~far
        self.spawn_one(map_id, ego_xy, route_xy, draws, xy)

    def draw(self, num_envs: int, attempts: int = 4) -> dict[str, Tensor]:
        """The random numbers of one :meth:`spawn_one` call, drawn from the env's generator (outside
        compiled code: a generator argument breaks a compiled graph, and seeding stays exact)."""
        E, A, g, dev = num_envs, attempts, self.rng, self.device
        return {
            "ahead": torch.rand(E, A, generator=g, device=dev),
            "side": torch.randint(-3, 4, (E, A), generator=g, device=dev).float(),
            "angle": torch.rand(E, A, generator=g, device=dev),
            "radius": torch.rand(E, A, generator=g, device=dev),
            "junction": torch.rand(E, A, generator=g, device=dev),
            "v0": torch.rand(E, generator=g, device=dev),
            "colour": torch.rand(E, 3, generator=g, device=dev),
        }

    def spawn_one(
        self,
        map_id: Tensor,
        ego_xy: Tensor,
        route_xy: Tensor,
        draws: dict[str, Tensor] | None = None,
        xy: Tensor | None = None,
    ) -> None:
        """Place the first absent car of every env at a free spot (route ahead or the junction), if one
        of the random candidates (:meth:`draw`; drawn now when None) is free. ``xy [E, V, 2]``: the cars'
        positions when the caller has them (they do not depend on which cars are present)."""
        if self.lane.shape[1] == 0:
            return
        r = draws if draws is not None else self.draw(self.lane.shape[0])
        state = spawn(self.cfg, self.maps, self.state(), map_id, ego_xy, route_xy, r, xy)
        for name, value in state.items():
            setattr(self, name, value)

    def state(self) -> dict[str, Tensor]:
        """The cars' state tensors by name (``STATE``), each ``[E, V, ...]``."""
        return {name: getattr(self, name) for name in STATE}

    def reset(self, env_ids: Tensor, map_id: Tensor, ego_xy: Tensor, route_xy: Tensor) -> None:
        """Clear the cars of ``env_ids [k]`` and place up to 4 of them around the ego (the step's spawner adds the
        rest); ``map_id``, ``ego_xy``: all envs'; ``route_xy [k, K, 2]``: the route ahead of the reset envs."""
        self.present[env_ids] = False
        if self.cfg.num_vehicles == 0:
            return
        # A few rounds now (one car per round at most); the rest arrive one per step, 35-90 m ahead, so the
        # ego's surroundings fill within a second without a long loop on every reset. The draws come first
        # (the same stream as drawing before each round: the rounds draw nothing themselves).
        draws = [self.draw(env_ids.numel()) for _ in range(min(4, self.cfg.num_vehicles))]
        sub = {name: value[env_ids] for name, value in self.state().items()}
        sub = self._spawn_rounds(self.cfg, self.maps, sub, map_id[env_ids], ego_xy[env_ids], route_xy, draws)
        for name, value in sub.items():
            getattr(self, name)[env_ids] = value


STATE = ("lane", "u", "v", "v0", "lat", "cooldown", "present", "colour")


def _first_true(mask: Tensor) -> Tensor:
    """``long [...]``: the index of the first True along the (short) last dim of ``mask [..., n]``, -1 when none.
    A loop from the back: pointwise when compiled (an argmax over a dim of 4-9 is a slow reduction there)."""
    first = torch.full(mask.shape[:-1], -1, dtype=torch.long, device=mask.device)
    for j in range(mask.shape[-1] - 1, -1, -1):
        first = torch.where(mask[..., j], j, first)
    return first


def spawn(
    cfg: TrafficCfg,
    maps: RoadMaps,
    state: dict[str, Tensor],
    map_id: Tensor,
    ego_xy: Tensor,
    route_xy: Tensor,
    r: dict[str, Tensor],
    xy: Tensor | None = None,
) -> dict[str, Tensor]:
    """:meth:`Traffic.spawn_one` on a state dict (``STATE`` names, ``[E, V, ...]``): returns the new state.
    ``r``: one :meth:`Traffic.draw`; ``xy [E, V, 2]``: the cars' positions (computed when None)."""
    (E, V), dev = state["lane"].shape, state["lane"].device
    A = r["ahead"].shape[1]
    present = state["present"]
    slot = _first_true(~present)  # [E], -1: every slot taken
    k = route_xy.shape[1]
    rows = torch.arange(E, device=dev).unsqueeze(-1)
    lo, hi = cfg.spawn_ahead_m
    idx = (lo + (hi - lo) * r["ahead"]).long().clamp(max=k - 2)
    base = route_xy[rows, idx]  # route_xy holds points about 1 m apart, from the ego on
    nxt = route_xy[rows, idx + 1] - base
    normal = torch.stack((-nxt[..., 1], nxt[..., 0]), -1) / torch.linalg.vector_norm(nxt, dim=-1, keepdim=True).clamp(
        min=1e-6
    )
    cand = base + (r["side"] * maps.lane_width).unsqueeze(-1) * normal
    # Near the junction instead (side-road traffic), some of the time.
    centre = take(maps.junction_xy, map_id).unsqueeze(1)
    angle = 2 * math.pi * r["angle"]
    radius = 20.0 + 40.0 * r["radius"]
    around = centre + radius.unsqueeze(-1) * torch.stack((torch.cos(angle), torch.sin(angle)), -1)
    use_junction = (r["junction"] < cfg.side_road_share) & (
        torch.linalg.vector_norm(ego_xy - centre.squeeze(1), dim=-1) < 150.0
    ).unsqueeze(-1)
    cand = torch.where(use_junction.unsqueeze(-1), around, cand)
    mid = map_id.unsqueeze(-1).expand(E, A)
    where = maps.locate(mid, cand)
    lane = where["lane"].clamp(min=0)
    kind = take(maps.lane_kind, mid, lane)
    sp = maps.spacing_at(mid, lane, where["u"].float())
    u = where["u"].float() + where["along"] / sp
    pos, _ = maps.lane_pose(mid, lane, u)  # [E, A, 2]
    if xy is None:
        xy, _ = maps.lane_pose(map_id.unsqueeze(-1).expand_as(state["lane"]), state["lane"], state["u"], state["lat"])
    dist_cars = torch.full_like(pos[..., 0], math.inf)  # [E, A]: to the nearest present car
    for j in range(V):  # a loop over the few cars compiles to pointwise code (a short-dim reduction does not)
        d = torch.linalg.vector_norm(xy[:, j : j + 1] - pos, dim=-1)
        dist_cars = torch.minimum(dist_cars, torch.where(present[:, j : j + 1], d, math.inf))
    dist_ego = torch.linalg.vector_norm(pos - ego_xy.unsqueeze(1), dim=-1)
    ok = (
        (slot >= 0).unsqueeze(-1)
        & where["on_road"]
        & ~where["junction"]
        & (kind != CONNECTOR_KIND)
        & (torch.minimum(dist_cars, dist_ego) > cfg.spawn_clearance_m)
    )
    first = _first_true(ok)  # the first free candidate, -1 none
    found = first >= 0
    first = first.clamp(min=0).unsqueeze(-1)

    def pick(x: Tensor) -> Tensor:
        return x.gather(1, first).squeeze(1)

    lo_v, hi_v = cfg.desired_speed_kmh
    v0 = (lo_v + (hi_v - lo_v) * r["v0"]) / 3.6
    colour = 40 + 200 * r["colour"]
    # Branch-free writes (no data-dependent shapes: compilable, no host sync).
    write = found.unsqueeze(-1) & (torch.arange(V, device=dev) == slot.unsqueeze(-1))  # [E, V]
    return {
        "lane": torch.where(write, pick(lane).unsqueeze(-1), state["lane"]),
        "u": torch.where(write, pick(u).unsqueeze(-1), state["u"]),
        "v": torch.where(write, 0.8 * v0.unsqueeze(-1), state["v"]),
        "v0": torch.where(write, v0.unsqueeze(-1), state["v0"]),
        "lat": torch.where(write, 0.0, state["lat"]),
        "cooldown": torch.where(write, 0.0, state["cooldown"]),
        "present": present | write,
        "colour": torch.where(write.unsqueeze(-1), colour.unsqueeze(1), state["colour"]),
    }


def spawn_rounds(
    cfg: TrafficCfg,
    maps: RoadMaps,
    state: dict[str, Tensor],
    map_id: Tensor,
    ego_xy: Tensor,
    route_xy: Tensor,
    draws: list[dict[str, Tensor]],
) -> dict[str, Tensor]:
    """:func:`spawn` once per entry of ``draws`` (a reset's rounds)."""
    for r in draws:
        state = spawn(cfg, maps, state, map_id, ego_xy, route_xy, r)
    return state
