"""vlm_driving: batched driving on procedural roads with background traffic, rewarded by a
vision-language model contrasting a positive and a negative language goal (VLM-RL).

One agent (group ``ego``) per env drives a car along a route of waypoints on a map from the bank of
:mod:`sim.tasks.vlm_driving.roads` (curves, an on-ramp merge, a crossing with a side road and a
right-turn route through it) among ``traffic.num_vehicles`` IDM/MOBIL cars
(:mod:`sim.tasks.vlm_driving.traffic`). The ego is a kinematic bicycle (or the linear-tyre dynamic
bicycle, ``ego_model=dynamic``; :mod:`sim.physics.vehicle`).

Actions ``[E, 1, 2]`` in [-1, 1]: steering (``+1`` = ``max_steer`` to the left) and a combined
throttle/brake pedal (``+1`` = full throttle, ``max_accel``; ``-1`` = full brake, ``max_brake``; the
command a robot receives is the pedal itself, as in CARLA), smoothed as in VLM-RL
(``applied = 0.75 previous + 0.25 new``).

Observations (VLM-RL's state set: steer, throttle, speed, waypoints, and a BEV):

    ego       [8 + 2 * num_waypoints]  speed/10, steer, throttle (the applied, smoothed commands),
              sin/cos of the heading error to the route, route and lane offsets, on-road flag, and
              the next ``num_waypoints`` route waypoints (``waypoint_spacing_m`` of arc length apart, interpolated
              between route points) in the ego frame / 20 m
    traffic   [7 * num_observed_vehicles]  nearest cars in the ego frame (x, y / 20 m, cos/sin of
              relative heading, relative velocity / 10 m/s, present), nearest first
    bev       (``observation=bev``) uint8 ``[B, B, 3 + bev_history]`` masks: road, markings, route,
              cars now and at past steps (:mod:`sim.tasks.vlm_driving.raster`)

``observation=state``: the actor and critic see ``ego`` + ``traffic``; ``bev``: the actor sees
``bev`` + ``ego`` (what a car's perception stack gives), the critic ``ego`` + ``traffic``.

Rewards (``reward=``):

    vlm               VLM-RL: r_CLG from the reward camera's frame (top-down RGB around the ego,
                      :func:`raster.render_camera`) against the two goal texts, every ``vlm.every_k``
                      steps (held in between), synthesised with speed, lane centring, heading and the
                      std of recent lateral offsets; -10 on termination (sim/rewards/vision_language.py)
    vlm_rm            the plain VLM-RM reward: cos(frame, positive goal)
    expert            the same synthesis with r_CLG replaced by a privileged safety term (the free gap
                      to the nearest car ahead, (gap - 5 m) / 15 m clipped to [0, 1]): a hand-written reward
    route_completion  CaRL's: metres of route progress x ``route_completion_scale``; infractions end it

Terminations: ``collision`` (the ego's box overlaps a car's), ``off_road`` (more than
``max_center_m`` from every lane centre), ``overspeed`` (> ``max_speed_kmh``), ``stalled``
(``stalled_s`` below 0.5 m/s), optionally ``wrong_lane``. Reaching the route's end
(``route_length_m``) does not end the episode: the route goes on and completion stays at 1.

This module keeps the state, the ego's step and the resets; its siblings: ``spec.py`` (observation and action
layout), ``derived.py`` (route tracking and what the observation, reward and termination read), ``observations.py``
(the entries, BEV and camera frames), ``rewards.py``, ``events.py`` (terminations, metrics), ``scripted.py``.
"""

from __future__ import annotations

import functools
from typing import ClassVar

import torch
from torch import Tensor

from sim.core.env import MultiAgentEnv, Obs
from sim.core.spec import EnvSpec
from sim.physics.traffic import IDMParams
from sim.physics.vehicle import VehicleParams, dynamic_bicycle_step, kinematic_bicycle_step
from sim.tasks.vlm_driving import derived, events, observations, raster, rewards, scripted
from sim.tasks.vlm_driving.config import DrivingCfg
from sim.tasks.vlm_driving.roads import RoadCfg, RoadMaps, build_maps, take
from sim.tasks.vlm_driving.spec import BEV_EGO_ROW, GROUP, build_spec
from sim.tasks.vlm_driving.traffic import Traffic

STALL_SPEED = 0.5  # m/s


@functools.lru_cache(maxsize=4)
def _maps(num_maps: int, seed: int) -> RoadMaps:
    """The map bank (CPU), generated once per process and setting."""
    return build_maps(num_maps, seed, RoadCfg())


class VLMDrivingEnv(MultiAgentEnv):
    """Batched driving with a vision-language reward; see the module docstring."""

    task_name = "vlm_driving"
    cfg_class = DrivingCfg
    best_metric = ("metrics/route_completion", "max")
    # Success: the route completed (its window is the last step) without a termination.
    success_criteria: ClassVar = {"route_left": 0.02}
    evaluation_window_s = 0.1
    renderer = "sim.tasks.vlm_driving.render:DrivingRenderer"

    def __init__(
        self, cfg: DrivingCfg, num_envs: int, device: str | torch.device = "cpu", seed: int = 0, compile: bool = False
    ) -> None:
        super().__init__(cfg, num_envs, device, seed, compile)
        E, dev = num_envs, self.device
        self.maps = _maps(cfg.num_maps, cfg.map_seed).to(dev)
        self.vehicle = VehicleParams()
        self.idm = IDMParams()
        self.map_id = torch.zeros(E, dtype=torch.long, device=dev)
        self.route_id = torch.zeros(E, dtype=torch.long, device=dev)
        self.route_start = torch.zeros(E, dtype=torch.long, device=dev)
        self.route_i = torch.zeros(E, dtype=torch.long, device=dev)
        self.ego = torch.zeros(E, 6, device=dev)  # x, y, yaw, vx, vy, yaw rate
        self.command = torch.zeros(E, 2, device=dev)  # applied (smoothed) steer, throttle in [-1, 1]
        self.lateral_hist = torch.zeros(E, cfg.lateral_std_window, device=dev)
        self.stalled_s = torch.zeros(E, device=dev)
        self.distance_m = torch.zeros(E, device=dev)  # driven this episode
        self.wrong_lane_steps = torch.zeros(E, device=dev)
        self.progress_prev = torch.zeros(E, device=dev)
        self.score = torch.ones(E, device=dev)  # the held language score
        self._steps = 0  # env steps since construction: the VLM scoring clock
        self.traffic = Traffic(cfg.traffic, self.maps, E, dev, self.rng, compile)
        self._draws = self.traffic.draw(E)
        V = cfg.traffic.num_vehicles
        self.car_history = torch.zeros(cfg.bev_history, E, V, 4, device=dev)  # x, y, yaw, present; newest first
        self._bev_pixels = raster.ego_frame_pixels(cfg.bev_size, cfg.bev_px_per_m, BEV_EGO_ROW, dev)
        self._camera_pixels = raster.ego_frame_pixels(cfg.camera_size, cfg.camera_size / cfg.camera_view_m, 0.5, dev)
        self.vlm = rewards.load_vlm(cfg, dev) if cfg.reward in ("vlm", "vlm_rm") else None
        self.derived: dict[str, Tensor] = {}
        # A reset re-derives the observation inputs of the envs it resets and observes; with compile=True that
        # pass is compiled too, with a symbolic env count (eager, over every env, it cost a third of a compiled
        # step at 4096 envs, where a few envs reset every step).
        self._reset_obs: Obs = {}
        after = self._observe_after_reset
        self._after_reset = torch.compile(after, dynamic=True) if compile else after
        # A reset's start poses, for the few envs that reset (a symbolic count when compiled).
        self._start_pose = torch.compile(self._start_pose_of, dynamic=True) if compile else self._start_pose_of
        self._derive()  # every key present before the first reset, which re-derives the envs it resets
        self.reset()

    # ----------------------------------------------------------------- spec
    def _build_spec(self) -> EnvSpec:
        return build_spec(self.cfg, self.task_name)

    # ----------------------------------------------------------------- reset
    def _reset_idx(self, env_ids: Tensor) -> None:
        maps, k, dev, g = self.maps, env_ids.numel(), self.device, self.rng
        mid = torch.randint(0, maps.num_maps, (k,), generator=g, device=dev)
        rid = torch.randint(0, maps.route_xy.shape[1], (k,), generator=g, device=dev)
        uniform = torch.stack([torch.rand(k, generator=g, device=dev) for _ in range(4)])  # start, lateral, yaw, v
        start, ego = self._start_pose(mid, rid, uniform)
        self.map_id[env_ids], self.route_id[env_ids], self.route_start[env_ids] = mid, rid, start
        self.route_i[env_ids] = start
        self.ego[env_ids] = ego
        self.command[env_ids] = 0.0
        self.lateral_hist[env_ids] = 0.0
        self.stalled_s[env_ids] = 0.0
        self.distance_m[env_ids] = 0.0
        self.wrong_lane_steps[env_ids] = 0.0
        self.progress_prev[env_ids] = 0.0
        self.score[env_ids] = 1.0
        self.traffic.reset(env_ids, self.map_id, self.ego[:, :2], self._route_ahead(env_ids))
        self._reset_obs = self._after_reset(env_ids)

    def _start_pose_of(self, mid: Tensor, rid: Tensor, uniform: Tensor) -> tuple[Tensor, Tensor]:
        """A new episode's start point ``long [k]`` on route ``rid`` of map ``mid`` and ego state ``[k, 6]``, from
        ``uniform [4, k]`` draws in [0, 1) (start, lateral offset, heading offset, speed)."""
        cfg, maps = self.cfg, self.maps
        route_s = take(maps.route_s, mid, rid)  # [k, Q]
        n_pts = take(maps.route_len, mid, rid)
        last_s = route_s.gather(1, (n_pts - 1).unsqueeze(-1))
        # Leave room for a whole episode at 1.2x the target speed beyond the start (the route goes on
        # past route_length_m: completion stays at 1 and the car keeps driving).
        spare = max(cfg.route_length_m, 1.2 * cfg.vlm.target_speed_kmh / 3.6 * cfg.episode_length_s) + 20.0
        latest = torch.searchsorted(route_s, (last_s - spare).contiguous()).squeeze(-1).clamp(min=6)
        start = (5 + uniform[0] * (latest - 5).float()).long()
        xy = take(maps.route_xy, mid, rid, start)
        yaw = take(maps.route_yaw, mid, rid, start)
        normal = torch.stack((-torch.sin(yaw), torch.cos(yaw)), -1)
        lateral = (uniform[1] - 0.5) * 1.0
        zero = torch.zeros_like(yaw)
        ego = torch.stack(
            (
                xy[:, 0] + lateral * normal[:, 0],
                xy[:, 1] + lateral * normal[:, 1],
                yaw + (uniform[2] - 0.5) * 0.2,
                uniform[3] * 6.0,
                zero,
                zero,
            ),
            -1,
        )
        return start, ego

    def _observe_after_reset(self, env_ids: Tensor) -> Obs:
        """Derive ``env_ids [k]`` (just reset) again, fill their car history with their cars now, observe all."""
        route_i, new = self._derived_of(env_ids)
        self.route_i = self.route_i.index_put((env_ids,), route_i)
        # Out of place: the step's info["final_obs"] and final metrics were built from the old tensors.
        self.derived = {key: value.index_put((env_ids,), new[key]) for key, value in self.derived.items()}
        history = self.car_history.clone()
        history[:, env_ids] = self._car_snapshot((new["cars_xy"], new["cars_yaw"]), env_ids).unsqueeze(0)
        self.car_history = history
        return self._observations()

    def _observations_after_reset(self) -> Obs:
        return self._reset_obs

    # ----------------------------------------------------------------- step
    def _apply_actions(self, actions: dict[str, Tensor]) -> None:
        a = actions[GROUP][:, 0].clamp(-1.0, 1.0)
        s = self.cfg.action_smoothing
        self.command = s * self.command + (1.0 - s) * a

    def _control_step(self) -> None:
        cfg, p, dt = self.cfg, self.vehicle, self.cfg.control_dt
        steer = self.command[:, 0] * p.max_steer
        throttle = self.command[:, 1]
        accel = torch.where(throttle >= 0, throttle * p.max_accel, throttle * p.max_brake)
        e = self.ego
        if cfg.ego_model == "dynamic":
            self.ego = dynamic_bicycle_step(e, steer, accel, dt, p)
        else:
            x, y, yaw, v = kinematic_bicycle_step(e[:, 0], e[:, 1], e[:, 2], e[:, 3], steer, accel, dt, p)
            self.ego = torch.stack((x, y, yaw, v, torch.zeros_like(v), torch.zeros_like(v)), -1)
        self.distance_m = self.distance_m + self.speed() * dt
        where = self.maps.locate(self.map_id, self.ego[:, :2])
        self.traffic.step(
            self.map_id, self.ego[:, :2], self.ego[:, 2], self.speed(), where, self._route_ahead(), dt, self._draws
        )

    def speed(self) -> Tensor:
        """``[E]`` m/s, the ego's ground speed."""
        return torch.linalg.vector_norm(self.ego[:, 3:5], dim=-1)

    def _route_ahead(self, env_ids: Tensor | None = None) -> Tensor:
        """``[E, ROUTE_AHEAD, 2]`` route points from the ego's on (:func:`derived.route_ahead`)."""
        return derived.route_ahead(self, env_ids)

    def _route_point_at(self, station: Tensor, route_ids: tuple[Tensor, Tensor, Tensor] | None = None) -> Tensor:
        """Route positions ``[E, K, 2]`` at arc lengths ``station [E, K]`` (:func:`derived.route_point_at`)."""
        return derived.route_point_at(self, station, route_ids)

    def _car_snapshot(self, poses: tuple[Tensor, Tensor] | None = None, rows: Tensor | None = None) -> Tensor:
        """``[E, V, 4]`` x, y, yaw, present of the cars (``poses``: already computed ``(xy, yaw)``; ``rows [k]``:
        of those envs only, ``[k, V, 4]``)."""
        xy, yaw = self.traffic.poses(self.map_id) if poses is None else poses
        present = self.traffic.present if rows is None else self.traffic.present[rows]
        return torch.cat((xy, yaw.unsqueeze(-1), present.unsqueeze(-1).float()), -1)

    def _derive(self) -> None:
        """Everything the observation, reward and termination read, from the current state."""
        self.route_i, self.derived = self._derived_of(None)

    def _derived_of(self, rows: Tensor | None) -> tuple[Tensor, dict[str, Tensor]]:
        """``(route point [k], derived values)`` of ``rows [k]``, all when None (:func:`derived.derived_of`)."""
        return derived.derived_of(self, rows)

    def _update_observation_buffers(self) -> None:
        dt = self.cfg.control_dt
        self._derive()
        snapshot = self._car_snapshot((self.derived["cars_xy"], self.derived["cars_yaw"]))
        self.car_history = torch.cat((snapshot.unsqueeze(0), self.car_history[:-1]), 0)
        self.lateral_hist = torch.cat(
            (self.lateral_hist[:, 1:], self.derived["where_lateral"].clamp(-5, 5).unsqueeze(-1)), -1
        )
        slow = self.speed() < STALL_SPEED
        self.stalled_s = torch.where(slow, self.stalled_s + dt, torch.zeros_like(self.stalled_s))
        self.wrong_lane_steps = self.wrong_lane_steps + self.derived["wrong_lane"].float()

    def _sample_step_noise(self) -> None:
        """The language score of this step's camera frames, every ``vlm.every_k`` steps (held in between),
        and the next step's random draws of the traffic spawner.

        Runs after the physics and outside compiled code (``compile=True`` compiles the control step and the
        observation pass; a rendering + encoder call, a Python step counter and generator draws do not
        belong in those graphs)."""
        if self.vlm is not None and self._steps % self.vlm.cfg.every_k == 0:
            self.score = self.vlm.score(self.camera_frames())
        self._steps += 1
        self._draws = self.traffic.draw(self.num_envs)  # the next step's spawn draws

    def camera_frames(self, env_ids: Tensor | None = None, pixels: Tensor | None = None) -> Tensor:
        """The reward camera's frames ``uint8 [k, S, S, 3]`` (:func:`observations.camera_frames`)."""
        return observations.camera_frames(self, env_ids, pixels)

    def bev(self, env_ids: Tensor | None = None, pixels: Tensor | None = None, px_per_m: float | None = None) -> Tensor:
        """The BEV mask stack ``uint8 [k, B, B, 3 + bev_history]`` (:func:`observations.bev`)."""
        return observations.bev(self, env_ids, pixels, px_per_m)

    # ----------------------------------------------------------------- observations
    def _observations(self) -> Obs:
        return observations.observe(self)

    # ----------------------------------------------------------------- rewards, terminations, metrics
    def _terminations(self) -> tuple[Tensor, dict[str, Tensor]]:
        return events.terminations(self)

    def reward_state(self, terminated: Tensor) -> dict[str, Tensor]:
        """The vehicle-state inputs of VLM-RL's synthesis (:func:`rewards.reward_state`), each ``[E]``."""
        return rewards.reward_state(self, terminated)

    def _rewards(self, terminated: Tensor) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        return rewards.rewards(self, terminated)

    def step_metrics(self) -> dict[str, Tensor]:
        return events.step_metrics(self)

    def _episode_metrics_per_env(self) -> dict[str, Tensor]:
        return {f"metrics/{k}": v for k, v in self.step_metrics().items() if k != "route_left"}

    @classmethod
    def evaluation_overrides(cls) -> dict:
        """Evaluations score every policy with the same hand-written reward (its ``return``), whatever reward
        it was trained with, and render no reward frames: the metrics (collisions, route completion, ...)
        do not depend on the reward."""
        return {"reward": "expert"}

    # ----------------------------------------------------------------- deployment
    def deployment_profile(self, group: str = GROUP) -> dict:
        """ROS deployment of a BEV policy (:mod:`sim.tasks.vlm_driving.deploy`); ``{}`` for state policies,
        which read the privileged traffic state."""
        from sim.tasks.vlm_driving.deploy import deployment_profile

        return deployment_profile(self.cfg)

    def deployment_constants(self, group: str = GROUP) -> dict:
        """What the robot-side ``ego`` builder needs to rebuild the observation."""
        cfg = self.cfg
        return {
            "action_smoothing": cfg.action_smoothing,
            "num_waypoints": cfg.num_waypoints,
            "waypoint_spacing_m": cfg.waypoint_spacing_m,
            "max_steer": self.vehicle.max_steer,
            "max_accel": self.vehicle.max_accel,
            "max_brake": self.vehicle.max_brake,
        }

    # ----------------------------------------------------------------- baseline
    def expert_policy(self):
        """The scripted driver: pure pursuit on the route, IDM on the free gap ahead (privileged)."""
        return lambda obs: {GROUP: self.scripted_actions()}

    def scripted_actions(self) -> Tensor:
        """``[E, 1, 2]``: the scripted driver's actions (:func:`scripted.scripted_actions`)."""
        return scripted.scripted_actions(self)
