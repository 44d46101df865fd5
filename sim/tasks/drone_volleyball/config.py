"""Configuration of drone_volleyball: multi-drone volleyball (VolleyBots / HCSP settings).

``mode`` picks the variant: solo skill tasks (one drone of team A: ``goto``, ``serve``, ``pass``,
``set``, ``attack``) or matches (``1v1``, ``2v2``, ``3v3``: groups ``team_a`` and ``team_b``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.core.config import at_least, bounded, fraction, non_negative, positive
from sim.physics.ball import BallParams
from sim.tasks.drone_volleyball.court import CourtCfg
from sim.tasks.drone_volleyball.rules import RulesCfg

SKILLS = ("goto", "serve", "pass", "set", "attack")
SKILL_IDS = {name: i for i, name in enumerate(SKILLS)}  # skill name -> the id in observations and commands
MATCHES = {"1v1": 1, "2v2": 2, "3v3": 3}
GROUPS = ("team_a", "team_b")  # agent groups of a match; solo skills have team_a only
MODES = SKILLS + tuple(MATCHES)


@dataclass(frozen=True)
class SkillRewardCfg:
    """Solo skill rewards (per control step unless noted)."""

    hit: float = 2.0  # once, on the first valid hit
    approach: float = 0.05  # exp(-|paddle - ball| / 1 m) before the hit (serve/pass/set/attack); goto: to the target
    delivery: float = 10.0  # once, at the end of the ball's flight: exp(-miss / delivery_sigma)
    delivery_sigma: float = positive(1.0)  # m
    in_court: float = 5.0  # once: serve/attack ball landed in the opponent court
    fault: float = -5.0  # once: the rally ended with a fault of the drone's team
    crash: float = -10.0  # once: the drone crashed or left the arena
    upright: float = 0.02  # body z up (cos of the tilt), keeps the drone from tumbling
    ang_vel: float = -0.002  # |omega|^2


@dataclass(frozen=True)
class MatchRewardCfg:
    """Match rewards (VolleyBots 3v3: game 100, hit 10, shaping 0.5; scaled down by 10)."""

    point: float = 10.0  # +point to the scoring team's drones, -point to the other team's
    hit: float = 1.0  # a valid hit by the drone
    approach: float = 0.05  # exp(-|drone - ball|) for the drone of the team in possession nearest the ball
    crash: float = -5.0  # the drone crashed or left the arena (on top of losing the point)


@dataclass(frozen=True)
class LaunchCfg:
    """Where the skill tasks' balls come from (uniform ranges, team A's frame: own half x < 0)."""

    # serve: the ball is dropped this far above the server's paddle (m), from serve_x. A 0.5 m drop
    # from the back line caps the ball's exit speed near 6 m/s with a TWR 2.3 drone: too slow to clear
    # the net 5 m away (7.5 m/s); a 1.5-2 m toss (~5.5 m/s at impact) makes the serve feasible.
    serve_height: tuple[float, float] = positive((1.5, 2.0), ordered=True)
    serve_x: float = -4.5  # m, the server's start (own half, 1.5 m inside the back line)
    incoming_from_x: tuple[float, float] = bounded((3.0, 5.0), ordered=True)  # pass: ball launched in team B's half...
    incoming_to_x: tuple[float, float] = bounded((-4.5, -2.5), ordered=True)  # ...to land (without a hit) here
    incoming_apex: tuple[float, float] = positive((4.0, 5.5), ordered=True)  # m, apex of the incoming ball
    set_from: tuple[float, float] = bounded((-4.0, -3.0), ordered=True)  # set: a teammate's pass from this x...
    attack_from: tuple[float, float] = bounded((-2.0, -1.0), ordered=True)  # attack: a set rising to ~3.6 m by the net
    lateral: float = non_negative(2.0)  # |y| range of launch and landing points
    pass_target: tuple[float, float, float] = (-1.5, 0.0, 3.5)  # pass: deliver the ball here (setter)
    set_target: tuple[float, float, float] = (-1.0, 0.0, 3.6)  # set: to the attack point near the net
    landing_x: tuple[float, float] = bounded((2.0, 5.0), ordered=True)  # serve/attack landing targets in team B's half
    goto_box: tuple[float, float, float, float, float, float] = (-5.5, -0.5, -2.5, 2.5, 1.0, 4.0)  # x/y/z ranges


@dataclass(frozen=True)
class ObsNoiseCfg:
    enabled: bool = False
    position: float = non_negative(0.01)  # m
    velocity: float = non_negative(0.02)  # m/s


@dataclass(frozen=True)
class RandomizationCfg:
    """Per-episode randomisation. Off by default, and then nothing is drawn: the default random streams are those
    of a build without it."""

    # Command latency (the link to the drones: a real court's, or ROS's): each episode (a game in matches) delays
    # the delayed drones' actions by a whole number of control steps, uniform in [lo, hi] (inclusive), applied
    # through sim.core.randomization.DelayBuffer. (0, 0): none. A fixed delay (lo == hi) draws nothing either.
    action_delay_steps: tuple[int, int] = non_negative((0, 0), ordered=True)
    # Matches: whose actions are delayed. "a": team A's only (the learned team that flies over the link; team B, the
    # opponent a run trains or evaluates against, acts at once); "both": every drone. Solo skills: the one drone.
    action_delay_teams: str = "a"

    def __post_init__(self) -> None:
        if self.action_delay_teams not in ("a", "both"):
            raise ValueError(f"action_delay_teams must be 'a' or 'both', got {self.action_delay_teams!r}")


@dataclass(frozen=True)
class StrategyLevelCfg:
    """HCSP's high level (task ``drone_volleyball_strategy``): a team strategy over frozen skills."""

    decision_steps: int = at_least(1, 10)  # control steps per decision (0.2 s at 50 Hz)
    win_reward: float = 1.0  # +- to the team that wins / loses the rally (or game)
    # drone_volleyball_coplay (HCSP stage 3's skills phase): the share of decisions drawn uniformly
    # at random instead of by the team's strategy, so the skills meet every command (a deterministic
    # strategy alone serves to few targets, and skills trained under it fail other teams' commands).
    # training.coselfplay sets it (coselfplay.random_choice_prob); 0 here: commands come from the strategies.
    random_choice_prob: float = fraction(0.0)
    # drone_volleyball_strategy over learned skills (set_skills): what team B's drones fly. "same": the
    # learned skills, like team A's (HCSP: both teams on one skill set); "scripted": the scripted skills,
    # so that a strategy over learned skills trains against opponents as strong as the scripted team
    # (trained only against learned-skill opponents, a stage-3 strategy exploited their flaws and lost
    # to the scripted team).
    team_b_skills: str = "same"

    def __post_init__(self) -> None:
        if self.team_b_skills not in ("same", "scripted"):
            raise ValueError(f"team_b_skills must be 'same' or 'scripted', got {self.team_b_skills!r}")


@dataclass(frozen=True)
class VolleyballCfg:
    """Task settings; override any field through ``sim.make(..., **overrides)`` or hydra."""

    mode: str = "3v3"
    multirotor: str = "iris"
    # Timing: VolleyBots runs the policy at 50 Hz (sim.dt 0.02); our rate loop and physics at 200 Hz.
    control_dt: float = positive(0.02)
    decimation: int = at_least(1, 4)  # rate loop and physics 200 Hz
    episode_length_s: float = positive(10.0)
    action: str = "ctbr"  # "ctbr": collective thrust + body rates (rate PID) | "rotor": normalised rotor speeds
    max_body_rate: float = positive(6.0)  # rad/s at |action| = 1 (roll, pitch); yaw uses half
    paddle_radius: float = positive(0.25)  # m, the hitting disc on top of the drone
    paddle_offset: float = non_negative(0.08)  # m above the centre of mass, normal = body z
    serve_height: float = positive(2.0)  # m, drones start hovering at this height
    court: CourtCfg = field(default_factory=CourtCfg)
    # Rally limit below the 10 s episode: a long rally ends as a TIMEOUT (no point), not a truncation.
    rules: RulesCfg = field(default_factory=lambda: RulesCfg(rally_time_limit_s=9.5))
    # Which drone of the serving team serves a game's first rally (matches): "first" its first drone,
    # "random" any of its drones. A game rotates the serve through every drone, but one-rally episodes
    # with "first" only ever show drone 0 serving, and teams trained on them lose the rotated rallies.
    opening_server: str = "first"
    # VolleyBots' ball (5 g, r 0.1 m) with C_D 0.01: PhysX applies no air drag there, and with a
    # sphere's C_D 0.47 this ball's terminal speed is 2.3 m/s (a balloon that cannot cross the court).
    ball: BallParams = field(default_factory=lambda: BallParams(drag_coeff=0.01))
    launch: LaunchCfg = field(default_factory=LaunchCfg)
    skill_rewards: SkillRewardCfg = field(default_factory=SkillRewardCfg)
    match_rewards: MatchRewardCfg = field(default_factory=MatchRewardCfg)
    obs_noise: ObsNoiseCfg = field(default_factory=ObsNoiseCfg)
    randomization: RandomizationCfg = field(default_factory=RandomizationCfg)
    strategy: StrategyLevelCfg = field(default_factory=StrategyLevelCfg)  # drone_volleyball_strategy only

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"drone_volleyball mode must be one of {MODES}, got {self.mode!r}")
        if self.opening_server not in ("first", "random"):
            raise ValueError(f"opening_server must be 'first' or 'random', got {self.opening_server!r}")
        if self.action not in ("ctbr", "rotor"):
            raise ValueError(f"action must be 'ctbr' or 'rotor', got {self.action!r}")
        if self.obs_noise.enabled:  # declared, never applied: refused rather than silently ignored
            raise ValueError("obs_noise.enabled: drone_volleyball adds no observation noise (not implemented)")

    @property
    def is_match(self) -> bool:
        return self.mode in MATCHES

    @property
    def drones_per_team(self) -> int:
        return MATCHES.get(self.mode, 1)


def evaluation_overrides() -> dict:
    """Overrides for evaluation: observation noise off."""
    return {"obs_noise": {"enabled": False}}
