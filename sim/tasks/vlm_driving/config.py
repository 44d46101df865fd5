"""Configuration of vlm_driving (VLM-RL's setting, arXiv 2412.15544, on covey's batched road simulator)."""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.core.config import at_least, fraction, non_negative, positive
from sim.rewards.vision_language import VLMRewardCfg

REWARDS = ("vlm", "vlm_rm", "expert", "route_completion")
OBSERVATIONS = ("state", "bev")
EGO_MODELS = ("kinematic", "dynamic")


@dataclass(frozen=True)
class TrafficCfg:
    """Background traffic: IDM car following with MOBIL lane changes (sim.physics.traffic)."""

    num_vehicles: int = at_least(0, 8)  # background cars kept around the ego
    desired_speed_kmh: tuple[float, float] = positive(
        (20.0, 40.0), ordered=True
    )  # each car's IDM desired speed, drawn per spawn
    recycle_radius_m: float = positive(90.0)  # cars farther than this from the ego respawn near it
    spawn_ahead_m: tuple[float, float] = positive((35.0, 90.0), ordered=True)  # along the route ahead of the ego
    spawn_clearance_m: float = positive(12.0)  # no spawn closer than this to another car or the ego
    lane_change_s: float = positive(3.0)  # duration of a lane change (lateral move), also its cooldown
    junction_busy_radius_m: float = positive(60.0)  # side-road cars wait while a main-road car is this close
    side_road_share: float = fraction(0.3)  # share of respawns near the junction (side-road traffic)


@dataclass(frozen=True)
class DrivingCfg:
    """Task settings; override any field through ``sim.make(..., **overrides)`` or hydra ``task.*``."""

    num_maps: int = at_least(1, 8)  # procedural maps in the bank (each env draws one per episode)
    map_seed: int = 0
    control_dt: float = positive(0.1)  # s (10 Hz; VLM-RL ran CARLA at 15 fps)
    episode_length_s: float = positive(60.0)
    route_length_m: float = positive(250.0)  # route completion = progress / this
    ego_model: str = "kinematic"  # kinematic | dynamic (linear-tyre bicycle)
    action_smoothing: float = non_negative(0.75)  # VLM-RL: applied = s * previous + (1 - s) * new
    observation: str = "state"  # state (vectors, fast) | bev (VLM-RL's mask stack as an image entry)
    bev_size: int = at_least(16, 48)  # pixels; VLM-RL 192 at 5 px/m (same 38.4 m span)
    bev_px_per_m: float = positive(1.25)
    bev_history: int = at_least(1, 3)  # vehicle masks at the current and past steps (3 -> 6 channels)
    num_waypoints: int = at_least(1, 15)  # next route waypoints in the ego frame (VLM-RL: 15)
    waypoint_spacing_m: float = positive(2.0)
    num_observed_vehicles: int = at_least(0, 6)  # nearest cars in the state observation
    camera_size: int = at_least(16, 224)  # the reward camera (VLM-RL: 224x224, 6.4 m above the ego)
    camera_view_m: float = positive(24.0)  # ground span of the camera frame
    reward: str = "vlm"  # vlm (contrasting language goals) | vlm_rm | expert | route_completion
    # clg_margin: the raw contrast (cos(img, negative) - cos(img, positive)) at which r_CLG reaches 0. VLM-RL's 0.03
    # is CLIP ViT-bigG's scale; the shipped dual encoder's spans about -0.45 (clear road) to +0.24 (collision) on
    # held-out simulator frames, with near misses and off-road frames at +0.10 and ordinary traffic at -0.29 to
    # +0.25 (10th-90th percentile), so 0.03 would make r_CLG a 0/1 switch on half of normal driving: 0.25.
    vlm: VLMRewardCfg = field(default_factory=lambda: VLMRewardCfg(clg_margin=0.25))
    lateral_std_window: int = at_least(2, 10)  # steps of lateral offsets in f_std
    route_completion_scale: float = positive(0.1)  # route_completion reward per metre of progress
    max_center_m: float = positive(3.0)  # terminate farther than this from any lane centre
    max_speed_kmh: float = positive(35.0)  # terminate above
    stalled_s: float = positive(20.0)  # terminate after this long below 0.5 m/s (VLM-RL: 90 s episodes)
    wrong_lane_terminates: bool = False  # driving against a lane's direction: a metric, or also the end
    traffic: TrafficCfg = field(default_factory=TrafficCfg)

    def __post_init__(self) -> None:
        for name, value, allowed in (
            ("reward", self.reward, REWARDS),
            ("observation", self.observation, OBSERVATIONS),
            ("ego_model", self.ego_model, EGO_MODELS),
        ):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
