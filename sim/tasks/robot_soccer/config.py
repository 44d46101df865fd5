"""Configuration of robot_soccer: 1v1 (or 2v2) soccer of small wheeled robots on the arena pitch."""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.core.config import at_least, non_negative, positive
from sim.mujoco.world import MjWorldCfg
from sim.tasks.robot_soccer.humanoid import HumanoidCfg

OPPONENTS = ("none", "chaser", "attacker", "idle")  # "none": both teams are agents (matches, self-play)
OBSERVATIONS = ("state", "seen", "vision")
ROBOTS = ("wheeled", "humanoid")
SKILLS = ("soccer", "getup")


@dataclass(frozen=True)
class RobotCfg:
    """The default robot: a box body with a head camera on planar joints (x, y slides and a yaw hinge),
    driven by velocity servos with force limits (like dm_control's boxhead walker, without rolling)."""

    mass: float = positive(1.2)  # kg
    half_size: tuple[float, float, float] = (0.09, 0.075, 0.07)  # m: body box half extents (x forward)
    head_height: float = positive(0.22)  # m: camera height above the floor
    max_speed: float = positive(1.2)  # m/s: forward/lateral velocity at |action| = 1
    max_yaw_rate: float = positive(4.0)  # rad/s at |action| = 1
    lateral_scale: float = positive(0.6)  # lateral speed limit as a share of max_speed (wheels prefer forward)
    kv: float = positive(25.0)  # velocity servo gain (N per m/s)
    kv_yaw: float = positive(0.6)  # yaw servo gain (N m per rad/s)
    max_force: float = positive(14.0)  # N per axis: accelerations up to ~12 m/s^2
    max_torque: float = positive(0.6)  # N m
    kick_reach: float = positive(0.06)  # m: the kicker plate's stroke
    kick_kp: float = positive(1500.0)  # N/m: its position servo
    kick_force: float = positive(60.0)  # N: its force limit (a kick sends the ball at ~2.3 m/s)


@dataclass(frozen=True)
class BallCfg:
    radius: float = positive(0.065)  # m
    mass: float = positive(0.15)  # kg
    friction: float = positive(0.7)  # sliding friction with floor and robots
    rolling_friction: float = non_negative(0.003)  # slows a rolling ball down (m)


@dataclass(frozen=True)
class RewardCfg:
    """Reward of each agent = sum of named raw terms times these scales (per control step)."""

    scored: float = 10.0  # 1 on the step its team scores
    conceded: float = -10.0  # 1 on the step the other team scores
    ball_to_goal: float = 0.5  # ball velocity towards the attacked goal (m/s)
    approach_ball: float = 0.2  # own velocity towards the ball (m/s), while farther than 0.3 m
    action_rate: float = -0.01  # |a_t - a_{t-1}|^2
    # The humanoid's posture (zero for the wheeled robot, which cannot fall):
    upright: float = 0.0  # the torso's z axis . world up, in [-1, 1]
    height: float = 0.0  # the torso's height as a share of its standing height, in [0, 1.2]
    fallen: float = 0.0  # 1 while fallen (HumanoidCfg.fallen_up_z / fallen_height)


# The get-up skill's reward (task.skill=getup): stand up and stay up; nothing about the ball.
GETUP_REWARDS = RewardCfg(
    scored=0.0, conceded=0.0, ball_to_goal=0.0, approach_ball=0.0, action_rate=-0.02, upright=0.5, height=1.0,
    fallen=-0.5,
)  # fmt: skip


@dataclass(frozen=True)
class RandomizationCfg:
    """Domain randomisation, one model variant per env drawn from ``variants`` sampled models."""

    enabled: bool = True
    variants: int = at_least(1, 8)  # model variants (floor/ball friction, masses, servo gains)
    friction_scale: tuple[float, float] = positive((0.7, 1.3), ordered=True)
    mass_scale: tuple[float, float] = positive((0.85, 1.15), ordered=True)
    gain_scale: tuple[float, float] = positive((0.8, 1.2), ordered=True)
    camera_pitch_deg: float = non_negative(3.0)  # +- per episode (vision)
    camera_height_m: float = non_negative(0.01)  # +- per episode (vision)
    max_latency_steps: int = non_negative(1)  # vision frames are 0..this many control steps old (per episode)
    # The scripted opponent's speed (its commands scaled, per episode): a range of opponent strength to learn
    # against (a learner first scores on slow opponents); evaluation (randomisation off) plays it at full speed.
    opponent_speed: tuple[float, float] = positive((0.4, 1.0), ordered=True)


@dataclass(frozen=True)
class ModelScaleCfg:
    """Fixed multipliers on the model of every env, applied under any randomised variant: the model changes a real
    robot brings beyond the training randomisation (``evaluate.py scenario=<name>``, :mod:`.scenarios`). All 1 in
    training."""

    friction: float = positive(1.0)  # floor, ball and robot sliding friction, the ball's rolling friction
    mass: float = positive(1.0)  # the robots' bodies and the ball
    gain: float = positive(1.0)  # servo gains and force (torque) limits: drive, yaw and kicker (humanoid joints)


@dataclass(frozen=True)
class CameraCfg:
    """The head camera (vision observation): the paper's 40x30 RGB."""

    width: int = at_least(8, 40)
    height: int = at_least(6, 30)
    fov_y_deg: float = positive(52.0)  # vertical; 40x30 square pixels make it ~66 deg horizontally
    pitch_deg: float = 12.0  # down from the horizon
    background: str = "assets/fields/soccer_arena_baked.pt"  # baked radiance field (sim.render.nerf.bake)


@dataclass(frozen=True)
class RobotSoccerCfg:
    """Task settings; override any field through ``sim.make(..., **overrides)`` or hydra."""

    players_per_team: int = at_least(1, 1)  # 1v1 by default, 2 for 2v2
    opponent: str = "chaser"  # who plays team_b: a scripted team inside the env, or "none" (an agent group)
    # actor input: state (privileged, all-seeing) | seen (the state as the head camera can know it: the ball and the
    # other robots where they were last in view) | vision (head camera + proprioception)
    observation: str = "state"
    # wheeled: the cheap default (velocity servos on planar joints, cannot fall) | humanoid: the paper's setting, a
    # small biped with joint position control (humanoid.py), opponents idle or none
    robot_kind: str = "wheeled"
    # soccer | getup (the humanoid's get-up skill: every robot starts lying on the floor, getup_rewards)
    skill: str = "soccer"
    end_on_fall: bool = False  # a fall ends the episode (else the humanoid must get up, as in the paper)
    physics_dt: float = positive(0.01)  # s
    decimation: int = at_least(1, 5)  # physics steps per control step (20 Hz)
    episode_length_s: float = positive(20.0)  # a game's length; a goal ends it (end_on_goal)
    end_on_goal: bool = True  # the episode (game) ends at the first goal; else play restarts at kickoff
    # Restarts that keep play going (robot soccer rules): a ball over a touch or goal line outside the mouth is put
    # back at rest ball_in_m inside the line where it left (a kick-in for nobody); a ball that has not moved for
    # stall_s (pinned in a corner or between two robots) is dropped at a random point near the centre spot.
    ball_out_restart: bool = True
    ball_in_m: float = non_negative(0.3)
    stall_s: float = non_negative(3.0)  # 0 = never
    kickoff_jitter_m: float = non_negative(0.6)  # random start positions around the kickoff spots
    ball_start_jitter_m: float = non_negative(0.8)  # the ball starts within this of the centre spot
    robot: RobotCfg = field(default_factory=RobotCfg)
    humanoid: HumanoidCfg = field(default_factory=HumanoidCfg)
    ball: BallCfg = field(default_factory=BallCfg)
    rewards: RewardCfg = field(default_factory=RewardCfg)
    # the reward with skill=getup (rewards is the soccer skill's)
    getup_rewards: RewardCfg = field(default_factory=lambda: GETUP_REWARDS)
    randomization: RandomizationCfg = field(default_factory=RandomizationCfg)
    model_scale: ModelScaleCfg = field(default_factory=ModelScaleCfg)
    camera: CameraCfg = field(default_factory=CameraCfg)
    mujoco: MjWorldCfg = field(default_factory=MjWorldCfg)

    def __post_init__(self) -> None:
        if self.opponent not in OPPONENTS:
            raise ValueError(f"robot_soccer.opponent must be one of {OPPONENTS}, got {self.opponent!r}")
        if self.observation not in OBSERVATIONS:
            raise ValueError(f"robot_soccer.observation must be one of {OBSERVATIONS}, got {self.observation!r}")
        if self.robot_kind not in ROBOTS:
            raise ValueError(f"robot_soccer.robot_kind must be one of {ROBOTS}, got {self.robot_kind!r}")
        if self.skill not in SKILLS:
            raise ValueError(f"robot_soccer.skill must be one of {SKILLS}, got {self.skill!r}")
        if self.robot_kind == "wheeled" and self.skill == "getup":
            raise ValueError("robot_soccer.skill=getup needs robot_kind=humanoid (the wheeled robot cannot fall)")
        if self.robot_kind == "humanoid":
            if self.opponent not in ("idle", "none"):
                # The scripted teams drive the wheeled robot's velocity servos; a humanoid has no walking
                # controller to follow such commands (walking is a learned skill).
                raise ValueError(
                    f"robot_soccer.robot_kind=humanoid plays opponent=idle (a standing humanoid) or none (an agent "
                    f"group), got opponent={self.opponent!r}"
                )
