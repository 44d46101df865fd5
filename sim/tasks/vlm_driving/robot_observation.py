"""vlm_driving's ``ego`` entry rebuilt on a car from odometry, the route and the lane localisation (numpy only).

The terms of ``VLMDrivingEnv._observations`` (``ego``, ``8 + 2 * num_waypoints`` values):

    speed          |v| / 10 m/s, from the odometry twist
    steer          the applied (smoothed) steering command: ``a = s * a + (1 - s) * last_action`` every control
    throttle       step with ``s = action_smoothing``, from 0 at a (re)start, as the env smooths the actions
    heading_error  sin, cos of (ego yaw - route yaw at the tracked route point)
    route_offset   signed distance left of the tracked route point / 3 m, clipped to [-3, 3]
    lane_offset    lateral offset from the lane centre (the ``lane`` message) / 2 m, clipped to [-3, 3]
    on_road        the ``lane`` message's flag
    waypoints      the route positions every ``waypoint_spacing_m`` of arc length ahead (``num_waypoints``), in the ego
                   frame (x forward, y left) / 20 m

Route tracking as the env does it: at a (re)start, or when the route changes, the nearest route point of the whole
route; then each step the nearest in a window of points from 2 behind to 15 ahead of the last one (a point more than
:data:`RELOCALISE_M` away: the car was moved, e.g. a new episode in the simulator, so search the whole route again).
Waypoints are the route positions at the target arc lengths ``s + k * spacing``, interpolated between the two route
points around each (a search within 64 points of the tracked one), as the env computes them.

The route arc lengths are recomputed here in float32 as the map builder computes them (``roads.build_maps``:
torch's float32 segment norm, a float64 running sum).

No torch here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from covey_common.messages import InvalidInput, OdometryState
from covey_common.observation import ObservationBuilder, TermContext
from covey_common.quaternion import quat_yaw

TRACK_WINDOW = np.arange(-2, 16)  # route points searched around the last tracked one (the env's window)
WAYPOINT_WINDOW = 64  # route points searched for the waypoints (the env's _route_point_at)
LANE_OFFSET_LIMIT_M = 1e3  # a lane offset beyond this is a broken localisation, not a position
RELOCALISE_M = 10.0  # tracked point farther than this: search the whole route
CONSTANTS = ("action_smoothing", "num_waypoints", "waypoint_spacing_m")


@dataclass(frozen=True)
class DrivingInputs:
    """One tick's inputs: parsed odometry, the route ``[N, 3]`` (x, y, yaw) and the lane message ``[2]``."""

    odom: OdometryState
    route: np.ndarray
    lane: np.ndarray


def norm32(d: np.ndarray) -> np.ndarray:
    """``|d|`` of float32 ``[..., 2]`` vectors, rounded as torch's CPU ``vector_norm`` rounds them: ``x*x`` in float32,
    then ``fma(y, y, x*x)`` (one rounding, done here in float64) and a float32 square root."""
    d = np.asarray(d, np.float32)
    xx = d[..., 0] * d[..., 0]
    return np.sqrt((xx.astype(np.float64) + np.square(d[..., 1].astype(np.float64))).astype(np.float32))


def route_stations(xy: np.ndarray) -> np.ndarray:
    """Arc length ``float32 [N]`` (m) of the route points ``float32 [N, 2]``, bit-equal to ``RoadMaps.route_s``."""
    seg = norm32(np.diff(xy, axis=0))
    return np.concatenate(([0.0], np.cumsum(seg, dtype=np.float64))).astype(np.float32)


def _frame_state(ctx: TermContext) -> dict[str, Any]:
    """Route tracking and the applied commands of this frame, computed once per frame (``ctx.cache``); the
    tracked index, the smoothed commands and the route's stations persist in ``ctx.memory``."""
    if "frame" in ctx.cache:
        return ctx.cache["frame"]
    inputs: DrivingInputs = ctx.inputs
    mem, dep = ctx.memory, ctx.deployment
    route = inputs.route
    same = "route" in mem and np.array_equal(mem["route"], route)
    if not same:
        xy = route[:, :2].astype(np.float32)
        mem.update(route=route.copy(), xy=xy, s=route_stations(xy), index=None)
    xy_route, s_route, n = mem["xy"], mem["s"], len(route)
    ego_xy = inputs.odom.pos[:2].astype(np.float32)
    yaw = float(quat_yaw(inputs.odom.quat))
    # Applied commands: the env's smoothing of the actions, from 0 at a (re)start.
    applied = mem.get("applied", np.zeros(2, np.float32))
    if ctx.advance:
        s = np.float32(dep["action_smoothing"])
        action = np.clip(ctx.last_action.astype(np.float32), -1.0, 1.0)
        applied = s * applied + np.float32(1.0 - float(dep["action_smoothing"])) * action
    mem["applied"] = applied
    # The nearest route point: in the window ahead of the last one, or on the whole route.
    i = mem["index"]
    if i is not None:
        window = np.clip(i + TRACK_WINDOW, 0, n - 1)
        dist = norm32(xy_route[window] - ego_xy)
        k = int(np.argmin(dist))
        i = int(window[k]) if dist[k] <= RELOCALISE_M else None
    if i is None:
        i = int(np.argmin(norm32(xy_route - ego_xy)))
    mem["index"] = i
    # Waypoints: the first route point at or past each target station, within WAYPOINT_WINDOW points.
    k_wp = int(dep["num_waypoints"])
    spacing = np.float32(dep["waypoint_spacing_m"])
    targets = s_route[i] + spacing * np.arange(1, k_wp + 1, dtype=np.float32)
    window = np.clip(i + np.arange(WAYPOINT_WINDOW), 0, n - 1)
    s_win = s_route[window]
    pos = np.clip(np.searchsorted(s_win, targets, side="left"), 1, WAYPOINT_WINDOW - 1)
    s0, s1 = s_win[pos - 1], s_win[pos]
    frac = np.clip((targets - s0) / np.maximum(s1 - s0, np.float32(1e-6)), 0.0, 1.0).astype(np.float32)[:, None]
    a, b = xy_route[window[pos - 1]], xy_route[window[pos]]
    out = {"index": i, "yaw": yaw, "xy": ego_xy, "applied": applied, "waypoints": a + (b - a) * frac}
    ctx.cache["frame"] = out
    return out


def _heading_error(ctx: TermContext) -> np.ndarray:
    r = _frame_state(ctx)
    err = r["yaw"] - float(ctx.inputs.route[r["index"], 2])
    return np.array([np.sin(err), np.cos(err)])


def _route_offset(ctx: TermContext) -> np.ndarray:
    r = _frame_state(ctx)
    d = (r["xy"] - ctx.memory["xy"][r["index"]]).astype(np.float64)
    r_yaw = float(ctx.inputs.route[r["index"], 2])
    return np.array([np.clip((-d[0] * np.sin(r_yaw) + d[1] * np.cos(r_yaw)) / 3.0, -3.0, 3.0)])


def _waypoints(ctx: TermContext) -> np.ndarray:
    r = _frame_state(ctx)
    d = r["waypoints"].astype(np.float64) - r["xy"].astype(np.float64)  # [K, 2] world
    c, s = np.cos(r["yaw"]), np.sin(r["yaw"])
    local = np.stack((d[:, 0] * c + d[:, 1] * s, -d[:, 0] * s + d[:, 1] * c), axis=-1)
    return (local / 20.0).reshape(-1)


TERMS = {
    "speed": lambda ctx: np.array([np.linalg.norm(ctx.inputs.odom.vel[:2]) / 10.0]),
    "steer": lambda ctx: _frame_state(ctx)["applied"][:1],
    "throttle": lambda ctx: _frame_state(ctx)["applied"][1:],
    "heading_error": _heading_error,
    "route_offset": _route_offset,
    "lane_offset": lambda ctx: np.clip(ctx.inputs.lane[:1] / 2.0, -3.0, 3.0),
    "on_road": lambda ctx: (ctx.inputs.lane[1:] > 0.5).astype(np.float64),
    "waypoints": _waypoints,
}
NEUTRAL = DrivingInputs(
    OdometryState(np.zeros(3), np.array([1.0, 0.0, 0.0, 0.0]), np.zeros(3), np.zeros(3)),
    np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]]),
    np.zeros(2, np.float32),
)


class EgoObservation:
    """The ``ego`` entry builder the ROS node drives: odometry, route and lane in (the profile's ``from``, in that
    order), ``float32 [8 + 2 * num_waypoints]`` out. Constants from the metadata's ``deployment``:
    ``action_smoothing``, ``num_waypoints``, ``waypoint_spacing_m``."""

    def __init__(self, metadata: Mapping[str, Any], entry: Mapping[str, Any], agent_index: int, sources: Sequence[str]):
        if len(sources) != 3:
            raise ValueError(
                f"vlm_driving's ego observation reads 3 inputs (odometry, route, lane), got {list(sources)}"
            )
        deployment = metadata.get("deployment") or {}
        missing = [k for k in CONSTANTS if k not in deployment]
        if missing:
            raise ValueError(f"metadata deployment lacks {missing} (the env's deployment_constants)")
        self.sources = tuple(sources)
        self.builder = ObservationBuilder(metadata, agent_index, TERMS, NEUTRAL, layout=entry)

    def _inputs(self, inputs: Mapping[str, Any]) -> DrivingInputs:
        odom_key, route_key, lane_key = self.sources
        odom, route, lane = inputs[odom_key], np.asarray(inputs[route_key]), np.asarray(inputs[lane_key])
        if not isinstance(odom, OdometryState):
            raise InvalidInput(f"{odom_key} is not odometry")
        if route.ndim != 2 or route.shape[1] != 3 or len(route) < 2:
            raise InvalidInput(f"{route_key}: a route needs at least 2 poses, got shape {route.shape}")
        if lane.shape != (2,):
            raise InvalidInput(f"{lane.size} values on {lane_key}, expected 2 (lateral offset m, on_road 0/1)")
        if not (abs(float(lane[0])) < LANE_OFFSET_LIMIT_M and -0.01 <= float(lane[1]) <= 1.01):
            raise InvalidInput(f"{lane_key}: lateral offset {lane[0]:.3g} m or on_road flag {lane[1]:.3g} out of range")
        return DrivingInputs(odom, route, lane)

    def reset(self, inputs: Mapping[str, Any]) -> np.ndarray:
        return self.builder.reset(self._inputs(inputs))

    def push(self, inputs: Mapping[str, Any], last_action: np.ndarray, dt: float | None = None) -> np.ndarray:
        return self.builder.push(self._inputs(inputs), last_action, dt=dt)
