"""Configuration of the cable_load task (decentralised MAVs carrying a cable-suspended load).

Defaults follow the TU Delft decentralised aerial manipulation paper (arXiv 2508.01522): three
0.6 kg Falcon MAVs (25 N each), a 1.4 kg load, policy at 100 Hz, INDI controller at 300 Hz, 20 s episodes, goals
within +-1 m in xy, 0.5-1.5 m up, roll/pitch up to 30 deg here (the paper samples +-45 deg), any yaw.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from sim.core.config import at_least, bounded, fraction, non_negative, positive


@dataclass(frozen=True)
class RandomizationCfg:
    """Per-episode domain randomisation. ``enabled=False`` uses nominal values everywhere.

    Each range is ``(low, high)``; a range with ``low == high`` pins that parameter.
    """

    enabled: bool = True
    load_mass: tuple[float, float] = positive((1.2, 1.6), ordered=True)  # kg
    load_inertia_scale: tuple[float, float] = positive((0.8, 1.2), ordered=True)
    cable_length_scale: tuple[float, float] = positive((0.95, 1.05), ordered=True)
    motor_thrust_scale: tuple[float, float] = positive((0.95, 1.05), ordered=True)  # per MAV, unknown to the controller
    motor_tau_scale: tuple[float, float] = positive((0.8, 1.2), ordered=True)  # per MAV
    action_delay_steps: tuple[int, int] = non_negative((0, 1), ordered=True)  # control steps, uniform int, inclusive
    # Heterogeneous teams (each MAV drawn on its own; unknown to the controller and the policy). The mass
    # scale also scales the inertia; the thrust-limit scale caps the rotor speed at sqrt(scale) x the max.
    mav_mass_scale: tuple[float, float] = positive((1.0, 1.0), ordered=True)
    thrust_limit_scale: tuple[float, float] = positive((1.0, 1.0), ordered=True)


@dataclass(frozen=True)
class ObsNoiseCfg:
    """Zero-mean Gaussian noise on the policy observation (std per quantity)."""

    enabled: bool = True
    position: float = non_negative(0.005)  # m
    rotation: float = non_negative(0.01)  # on 6D rotation entries
    velocity: float = non_negative(0.02)  # m/s
    angular_velocity: float = non_negative(0.02)  # rad/s


GROUP = "mavs"  # the task's one agent group: its observations, actions and rewards are keyed by it
FAULT_CABLE_MODES = ("attached", "released")


@dataclass(frozen=True)
class FaultCfg:
    """One MAV is lost in flight at a random time: its rotors stop for good (a dead motor
    controller or battery). Nothing tells the policies: they see it only through the load.

    ``cable``: ``attached`` (default): the cable stays on; the failed MAV falls, swings and hangs
    from the load as dead weight (the paper's hardware has fixed cables and no release, so this is
    what a power loss does); ``released``: its cable lets go of the load at the fault (a team with
    a release hook). The failed MAV keeps its physics (it can hit the ground) but no longer ends the
    team's episode: its crash, tilt, proximity and cable contacts are not terminations.
    """

    enabled: bool = False
    probability: float = fraction(1.0)  # per episode
    time_range: tuple[float, float] = non_negative((2.0, 15.0), ordered=True)  # s
    cable: str = "attached"

    def __post_init__(self) -> None:
        if self.cable not in FAULT_CABLE_MODES:
            raise ValueError(f"fault.cable must be one of {FAULT_CABLE_MODES}, got {self.cable!r}")


@dataclass(frozen=True)
class DisturbanceCfg:
    """An unknown external force on the load (wind, a snag), drawn per episode: a uniformly random
    direction and a magnitude uniform in ``[0, max_fraction]`` of the load's weight (the paper: 15.4%).
    ``period_s`` 0: constant; else it varies slowly, ``F(t) = F0 (1 + sin(2 pi t / period_s + phi)) / 2``
    (random phase), so it never exceeds the drawn magnitude."""

    enabled: bool = False
    max_fraction: float = non_negative(0.154)
    period_s: float = non_negative(0.0)


REWARD_PROFILES = ("residual", "plain")
PENALTY_TERMS = ("action_smoothness", "body_rate", "cable_force", "formation")  # RewardCfg's shaping penalties
# The plain policy's preset (no action prior: it starts far from the goal and falls often). Wide kernels give the
# tracking terms a gradient from the start, the alive term and the bounded penalties make every step's reward >= 0,
# so ending an episode early never scores better than flying on (sim/tasks/cable_load/README.md, "Reward profiles").
PLAIN_REWARDS = {
    "position_sigma": 1.0,
    "orientation_sigma": 1.0,
    "formation": -1.0,
    "alive": 1.0,
    "penalty_bound": 1.0,
    # Dying costs the living reward still to earn: discounted at the recipe's gamma 0.99, 1 / (1 - 0.99) = 100
    # steps of the alive term.
    "termination": -100.0,
}


@dataclass(frozen=True)
class RewardCfg:
    """Reward = sum of named raw terms times these scales (per control step).

    ``profile``: ``residual`` (default; the shipped policy's reward, these fields as written) or ``plain`` (for
    the plain policy, no action prior): the fields of ``PLAIN_REWARDS`` left at their residual defaults take the
    preset's values, a field given explicitly keeps its value. With ``penalty_bound`` > 0 the per-MAV sum of the
    penalty terms ``P <= 0`` becomes ``penalty_bound * (exp(P / penalty_bound) - 1)``, in ``(-penalty_bound, 0]``
    (unchanged to first order for small ``P``), and ``alive >= penalty_bound`` is required: every step's reward
    before the termination term is then >= 0.
    """

    profile: str = "residual"
    position: float = 1.5  # exp(-|e_p| / position_sigma)
    orientation: float = 1.5  # exp(-e_theta / orientation_sigma)
    action_smoothness: float = -0.5  # |a_t - a_{t-1}|^2 (normalised actions)
    body_rate: float = -0.05  # |omega|^2 (rad/s)^2
    cable_force: float = -0.5  # ((T - T_hover) / T_hover)^2
    # |R_load^T (p_i - p_load) - d_i|^2 (m^2), d_i the MAV's hover offset in the load frame. Not in the
    # paper: it kept the team spread while plain policies learned (INDI holds acceleration, not position,
    # and the cables pull the MAVs inward). Off: the action prior keeps the team spread, and a level-load
    # formation fights tilted goals (-1.0 for a policy without the prior).
    formation: float = 0.0
    termination: float = -10.0  # once, on a terminal step
    alive: float = non_negative(0.0)  # per MAV and step while flying (the plain profile's)
    penalty_bound: float = non_negative(0.0)  # 0: penalties unbounded; else their per-MAV sum stays above -this
    # Sharp: the action prior brings the load near the goal, the policy refines (the shipped policy's).
    position_sigma: float = positive(0.25)  # m
    orientation_sigma: float = positive(0.3)  # rad

    def __post_init__(self) -> None:
        if self.profile not in REWARD_PROFILES:
            raise ValueError(f"rewards.profile must be one of {REWARD_PROFILES}, got {self.profile!r}")
        if self.profile == "plain":
            defaults = {f.name: f.default for f in fields(self)}
            for name, value in PLAIN_REWARDS.items():
                if getattr(self, name) == defaults[name]:
                    object.__setattr__(self, name, value)  # frozen: the preset is part of construction
        if self.penalty_bound > 0 and self.alive < self.penalty_bound:
            raise ValueError(
                f"rewards.alive ({self.alive}) must be >= rewards.penalty_bound ({self.penalty_bound}): "
                "else a step can score below 0 and ending the episode early pays"
            )


@dataclass(frozen=True)
class TerminationCfg:
    """Thresholds of the terminal conditions."""

    drone_min_height: float = non_negative(0.1)  # m, centre above ground
    drone_max_tilt_deg: float = positive(80.0)
    load_min_clearance: float = non_negative(0.02)  # m, load bottom above ground
    drone_min_distance: float = non_negative(0.45)  # m, between MAV centres
    cable_min_distance: float = non_negative(0.15)  # m, MAV centre to another MAV's cable
    bounds_xy: float = positive(3.0)  # m, |xy| of MAVs and load from the env origin
    bounds_z: float = positive(5.0)  # m


@dataclass(frozen=True)
class CableLoadCfg:
    """Task settings; override any field through ``sim.make(..., **overrides)`` or hydra
    (``python train.py task=cable_load task.<field>=...``). These defaults are what both give: the
    settings the shipped policy (assets/policies/cable_load) was trained with."""

    num_mavs: int = 3
    multirotor: str = "falcon"  # assets/multirotors/<name>.yaml
    # Load: a box hung from attachment points on a circle on its top face.
    load_mass: float = positive(1.4)  # kg (nominal; randomised by randomization.load_mass)
    load_size: tuple[float, float, float] = positive((0.3, 0.3, 0.1))  # m
    load_attach_radius: float = positive(0.15)  # m
    # Cables: tension-only spring-dampers.
    cable_length: float = positive(1.0)  # m (nominal)
    cable_stiffness: float = positive(3000.0)  # N/m
    cable_damping: float = non_negative(8.0)  # N s/m
    cable_angle_deg: float = bounded(30.0, ge=0.0, le=80.0)  # angle of each cable from vertical at the start hover
    # Timing: policy 100 Hz, controller 300 Hz, physics at controller rate x substeps.
    control_dt: float = positive(0.01)
    decimation: int = at_least(1, 3)  # INDI controller 300 Hz
    physics_substeps: int = at_least(1, 1)  # 300 Hz physics, the paper's sim.dt; stable for these cables
    episode_length_s: float = positive(20.0)
    # Start and goals (goal offsets relative to the start pose of the load).
    start_height: float = positive(1.5)  # m, load centre: room for early policies that sink
    start_xy_range: float = non_negative(0.0)  # m, uniform +- around the origin
    goal_xy_range: float = non_negative(1.0)  # m
    goal_z_range: tuple[float, float] = bounded((0.5, 1.5), ordered=True)  # m above the start
    goal_tilt_deg: float = non_negative(30.0)  # roll and pitch uniform in +-
    goal_yaw_deg: float = non_negative(180.0)
    # Policy interface.
    history_len: int = at_least(1, 3)
    action_acc_scale: float = positive(4.0)  # m/s^2 at |action| = 1
    action_rate_scale: float = positive(2.0)  # rad/s at |action| = 1
    # Residual learning on a linear PID action prior suggested to policies (GroupSpec.action_prior):
    # acc += kp * own_slot_rel - kd * own_vel + ki * own_attach_err_int, read from the newest
    # observation frame; the policy learns the residual. All 0 = the paper's plain ACCBR policy. A PD
    # to the slot alone flies translation and yaw goals but leaves tilted goals ~20 deg off; the
    # integral of the attachment point's error closes that. It lets a 2-core CPU train in minutes
    # what the paper trained on 1.5B samples.
    slot_yaw_lead_deg: float = non_negative(30.0)  # own_slot_rel: the goal heading at most this far ahead of the load's
    action_prior_kp: float = non_negative(2.0)  # (m/s^2) / m
    action_prior_kd: float = non_negative(2.0)  # (m/s^2) / (m/s)
    action_prior_ki: float = non_negative(2.0)  # (m/s^2) / (m s), on own_attach_err_int
    # own_attach_err_int: leaky integral of the own attachment point's error to the goal pose.
    # No leak by default: the clamps (integral_err_clip, integral_limit) are the anti-windup.
    integral_tau_s: float = non_negative(0.0)  # leak time constant (s); 0 = no leak
    integral_err_clip: float = positive(0.2)  # m, per-axis clip of the integrated error (far from the goal: no windup)
    integral_limit: float = positive(1.0)  # m s, per-axis clamp of the integral
    rewards: RewardCfg = field(default_factory=RewardCfg)
    terminations: TerminationCfg = field(default_factory=TerminationCfg)
    randomization: RandomizationCfg = field(default_factory=RandomizationCfg)
    obs_noise: ObsNoiseCfg = field(default_factory=ObsNoiseCfg)
    fault: FaultCfg = field(default_factory=FaultCfg)
    disturbance: DisturbanceCfg = field(default_factory=DisturbanceCfg)

    def __post_init__(self) -> None:
        if not 2 <= self.num_mavs <= 6:
            raise ValueError(f"num_mavs must be in [2, 6], got {self.num_mavs}")


def evaluation_overrides() -> dict:
    """Overrides that switch off noise and randomisation, for evaluation and deployment."""
    return {"randomization": {"enabled": False}, "obs_noise": {"enabled": False}}
