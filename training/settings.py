"""The settings dataclasses of training: one per node of train.py's config, with every field's default and bounds.

    train       :class:`TrainCfg`      the loop: budget, rollouts, evaluation, checkpoints
    wandb       :class:`WandbCfg`      wandb logging
    algo        :class:`PPOCfg`        PPO (its networks: ``policy``, :class:`policies.PolicyCfg`; a teacher's KL
                                       term: ``teacher``, :class:`TeacherCfg`; TRPL's projection: ``trpl``,
                                       :class:`TRPLCfg`)
    sac         :class:`SACCfg`        SAC (algo=sac)
    imitation   :class:`ImitationCfg`  DAgger warm start
    league      :class:`SelfPlayCfg`   self-play league (:class:`LeagueCfg`) and how the runner uses it
    coselfplay  :class:`CoSelfPlayCfg` HCSP stage 3
    pipeline    :class:`PipelineCfg`   a recipe's stages run in turn (training/pipeline.py)

A leaf: it imports no runner or algorithm, so that training/config.py (the hydra layer), the runners and
scripts read the settings without one importing the other. The algorithm modules re-export theirs
(``from training.ppo import PPOCfg`` still works).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from policies import PolicyCfg
from sim.core.config import at_least, check_bounds, fraction, non_negative, positive
from training.logger import WANDB_MODES

CRITIC_INPUTS = ("state", "policy")
SCHEDULES = ("constant", "linear", "adaptive")
PROJECTIONS = ("none", "w2", "kl", "frob")
SAC_SCHEDULES = ("constant", "linear")
EXPERTS = ("none", "task")
META_SOLVERS = ("self", "fsp", "psro_nash", "pfsp", "first_quarter")


@dataclass(frozen=True)
class TrainCfg:
    """Loop settings (hydra node ``train``)."""

    total_steps: int = at_least(1, 20_000_000)  # env steps (num_envs per env.step), rounded up to whole iterations
    rollout_steps: int = at_least(1, 32)  # env steps per env per iteration
    max_minutes: float = non_negative(0.0)  # stop after this much wall-clock time (0 = no limit)
    eval_every: int = non_negative(25)  # iterations between deterministic evaluations (0 = never)
    eval_envs: int = at_least(1, 64)  # envs of the evaluation env (one episode length each)
    checkpoint_every: int = non_negative(25)  # iterations between checkpoints/latest.pt (0 = only at the end)
    best_metric: str = ""  # episode metric choosing best.pt; "" = the task's default (its env class's best_metric)
    # Start the envs at random points of their first episode (MultiAgentEnv.randomize_episode_progress):
    # with synchronised envs each rollout holds one phase of the episode and PPO forgets the others.
    random_episode_start: bool = True
    best_mode: str = ""  # "min" | "max"; "" = the task's default
    video: bool = False  # record env 0 in evaluations (tasks with a renderer; needs GL)
    video_every: int = non_negative(0)  # a video every N-th evaluation (0 = only the final one)
    video_fps: float = positive(25.0)
    progress: bool = True  # tqdm progress bar
    # Curriculum to a plain policy: the task's action prior fades linearly to 0 over this many env steps
    # (changed between iterations, so a rollout and its update see the same prior); the actor learns to
    # do without it. best.pt only counts evaluations after the prior is gone. 0 = the prior stays.
    prior_anneal_steps: int = non_negative(0)

    def __post_init__(self) -> None:
        if self.best_mode not in ("", "min", "max"):
            raise ValueError(f"train.best_mode must be '', 'min' or 'max', got {self.best_mode!r}")


@dataclass(frozen=True)
class WandbCfg:
    """wandb settings (hydra node ``wandb``); ``mode=disabled`` never imports wandb."""

    mode: str = "offline"  # offline | online | disabled
    project: str = "covey"
    entity: str = ""
    group: str = ""
    tags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.mode not in WANDB_MODES:
            raise ValueError(f"wandb.mode must be one of {WANDB_MODES}, got {self.mode!r}")


@dataclass(frozen=True)
class TeacherCfg:
    """Hydra node ``algo.teacher``; an empty ``checkpoint`` turns the term off."""

    checkpoint: str = ""  # a trained checkpoint whose actors teach the groups it has
    kl_coef: float = non_negative(1.0)  # the term's initial weight
    kl_target: float = non_negative(0.0)  # > 0: adapt the weight to keep the KL near this (nats per agent-step)
    coef_decay: float = positive(1.0)  # weight *= this after every update (1 = no annealing)
    min_coef: float = non_negative(1e-4)
    max_coef: float = positive(100.0)
    teacher_std: float = positive(0.37)  # std of the Gaussian around the teacher's action ([-1, 1] units)


@dataclass(frozen=True)
class TRPLCfg:
    """Hydra node ``algo.trpl``: differentiable trust-region projection layers (training/trpl.py; Otto et al. 2021).

    ``projection`` other than ``none`` replaces PPO's clipped ratio: each state's new Gaussian is projected onto the
    trust region around the rollout's (mean and covariance parts bounded separately), the importance-sampled advantage
    is taken under the projection, and ``trust_region_coeff`` times the distance from the network to its projection
    pulls the network back inside. Defaults: the reference implementation's layer (W2 scaled by the old precision).
    """

    projection: str = "none"  # none (PPO's clipped ratio) | w2 | kl | frob
    mean_bound: float = positive(0.03)  # bound of the mean part (Mahalanobis under the old covariance; KL: half of it)
    cov_bound: float = positive(0.001)  # bound of the covariance part of the chosen distance
    trust_region_coeff: float = non_negative(1.0)  # weight of d(network, projection) in the loss

    def __post_init__(self) -> None:
        if self.projection not in PROJECTIONS:
            raise ValueError(f"algo.trpl.projection must be one of {PROJECTIONS}, got {self.projection!r}")


@dataclass(frozen=True)
class PPOCfg:
    """PPO settings (hydra node ``algo``); ``policy`` holds the network settings."""

    name: str = "mappo"  # label for logs and checkpoints
    critic_input: str = "state"  # "state": centralised critic (MAPPO); "policy": local (IPPO)
    lr: float = positive(3e-4)
    schedule: str = "adaptive"  # "constant" | "linear" (to 0 at the end) | "adaptive" (KL-driven)
    desired_kl: float = positive(0.01)  # target of the adaptive schedule
    min_lr: float = non_negative(1e-5)
    max_lr: float = positive(1e-2)
    gamma: float = fraction(0.99)
    lam: float = fraction(0.95)  # GAE lambda
    clip: float = positive(0.2)  # ratio clip
    value_clip: float = non_negative(0.2)  # clip of the value change (normalised units); 0 disables
    epochs: int = at_least(1, 5)
    minibatches: int = at_least(1, 4)
    entropy_coef: float = non_negative(0.003)
    value_coef: float = non_negative(1.0)
    max_grad_norm: float = positive(1.0)
    normalize_obs: bool = True  # running mean/std of actor and critic inputs
    normalize_value: bool = True  # running mean/std of value targets (PopArt-lite)
    policy: PolicyCfg = field(default_factory=PolicyCfg)
    teacher: TeacherCfg = field(default_factory=TeacherCfg)  # a KL term towards trained experts (training.teacher)
    trpl: TRPLCfg = field(default_factory=TRPLCfg)  # projection != none: TRPL's policy loss (algo=trpl) instead of clip
    # Stratified PPO: advantages normalised within each stratum of the agent states (the task's
    # imitation_strata(), e.g. the skill each volleyball drone is commanded) and the policy loss weighted
    # so each stratum present counts equally (RolloutStorage.stratified_advantages), weights capped here.
    stratify: bool = False
    stratum_max_weight: float = positive(10.0)

    def __post_init__(self) -> None:
        if self.critic_input not in CRITIC_INPUTS:
            raise ValueError(f"algo.critic_input must be one of {CRITIC_INPUTS}, got {self.critic_input!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"algo.schedule must be one of {SCHEDULES}, got {self.schedule!r}")


@dataclass(frozen=True)
class SACCfg:
    """SAC's settings (hydra node ``sac``; its defaults are VLM-RL's). From ``algo`` it takes only the networks
    (``algo.policy``) and ``algo.normalize_obs``: PPO's learning rate, discount and clipping are not SAC's."""

    lr: float = positive(1e-4)  # of the actor, the critics and the temperature
    schedule: str = "linear"  # "constant" | "linear" (lr -> lr_end over train.total_steps)
    gamma: float = fraction(0.98)
    max_grad_norm: float = positive(10.0)  # only against blow-ups (SB3's SAC does not clip); inf = off
    buffer_size: int = at_least(1, 100_000)  # transitions (one env step of one env, all its agents)
    batch_size: int = at_least(1, 256)
    tau: float = fraction(0.02)  # Polyak factor of the target Q networks
    learning_starts: int = non_negative(10_000)  # env steps (num_envs per env.step) of uniform random actions
    gradient_steps: int = at_least(1, 64)  # updates after each train.rollout_steps env steps
    lr_end: float = non_negative(5e-7)  # learning rate at the end of the run (schedule=linear)
    init_alpha: float = positive(1.0)  # initial entropy temperature
    learn_alpha: bool = True  # automatic temperature towards target_entropy
    target_entropy_scale: float = 1.0  # target entropy = -scale * act_dim (per agent)
    log_std_min: float = -5.0  # clamp of the state-dependent log std
    log_std_max: float = 2.0
    use_sde: bool = False  # gSDE: state-dependent noise from exploration matrices held for sde_sample_freq steps
    sde_sample_freq: int = at_least(1, 16)  # env steps between new exploration matrices (use_sde)
    # Initial L of gSDE. L moves slowly (each entry scales one feature's share), so the start matters: SB3's -3
    # kept the entropy far below target on point_reach and failed; -1 learned it (0.055 m after 20k env steps).
    sde_log_std_init: float = -1.0

    def __post_init__(self) -> None:
        if self.schedule not in SAC_SCHEDULES:
            raise ValueError(f"sac.schedule must be one of {SAC_SCHEDULES}, got {self.schedule!r}")
        if self.log_std_min >= self.log_std_max:
            raise ValueError(f"sac.log_std_min ({self.log_std_min}) must be < sac.log_std_max ({self.log_std_max})")


@dataclass(frozen=True)
class ImitationCfg:
    """DAgger settings (hydra node ``imitation``); ``expert: none`` skips it."""

    expert: str = "none"  # none | task (the env's expert_policy()) | <checkpoint.pt> (its actors)
    rounds: int = at_least(1, 6)  # DAgger rounds; round 0 follows the expert
    steps: int = at_least(1, 64)  # env steps per round (each num_envs samples)
    epochs: int = at_least(1, 10)  # passes over the aggregate per round
    batch_size: int = at_least(1, 4096)
    lr: float = positive(1e-3)
    max_samples: int = at_least(1, 2_000_000)  # the aggregate keeps the newest samples beyond this
    critic_warmup: int = non_negative(5)  # PPO iterations that fit only the value function afterwards
    # Data reuse across experiments: earlier runs' aggregates (<run>/imitation_data.pt, written with save_data)
    # join this run's from round 0 (states and expert labels; the newest max_samples are kept, reused ones first out).
    reuse: tuple[str, ...] = ()
    save_data: bool = False  # write this run's final aggregate to <run>/imitation_data.pt
    # Rounds between saves of checkpoints/imitation.pt and imitation.json while DAgger runs (0: at its end only), so a
    # long distillation that is stopped keeps its student; train.max_minutes also ends DAgger after a round.
    checkpoint_every: int = non_negative(0)
    # Fit on samples drawn equally from each stratum of env.imitation_strata() (feed-forward students; see above).
    balance: bool = False

    def __post_init__(self) -> None:
        if self.expert not in EXPERTS and not self.expert.endswith(".pt"):
            raise ValueError(
                f"imitation.expert must be one of {EXPERTS} or a checkpoint path (.pt), got {self.expert!r}"
            )


@dataclass(frozen=True)
class LeagueCfg:
    """Self-play league settings (hydra node ``league``)."""

    pool_size: int = at_least(1, 16)  # max frozen snapshots kept (oldest unprotected evicted first)
    snapshot_every: int = at_least(1, 50)  # iterations between snapshots of the learner (see League.snapshot_due)
    meta_solver: str = "fsp"  # "self" | "fsp" | "psro_nash" | "pfsp" | "first_quarter" (see the module docstring)
    pfsp_power: float = non_negative(2.0)  # PFSP weight (1 - p_win)^power; larger = more focus on hard opponents
    latest_prob: float = fraction(0.2)  # mass always given to the newest snapshot; 0 = pure solver
    elo_k: float = positive(16.0)
    initial_elo: float = 1000.0

    def __post_init__(self) -> None:
        # Direct construction (tests, scripts) is checked too; build_config re-checks with the node's path.
        check_bounds(self, "league")
        if self.meta_solver not in META_SOLVERS:
            raise ValueError(f"league.meta_solver must be one of {META_SOLVERS}, got {self.meta_solver!r}")


@dataclass(frozen=True)
class SelfPlayCfg(LeagueCfg):
    """Hydra node ``league``: the league settings (:class:`LeagueCfg`) plus how the runner uses them."""

    learner_group: str = "team_a"
    opponents_per_iteration: int = at_least(1, 4)  # distinct snapshots per rollout (each plays a block of envs)
    # Discrete-choice tasks: a protected snapshot that always plays this choice (e.g. the volleyball
    # strategy's rule-based team) enters the pool first; evaluation then plays against it.
    scripted_choice: tuple[int, ...] = non_negative(())
    # Tasks whose env plays its own scripted team (``env.set_scripted_opponent``): that team joins the pool as the
    # protected snapshot ``scripted``, a fixed anchor among the learner's snapshots (evaluation then plays it).
    env_scripted: bool = False

    @property
    def league(self) -> LeagueCfg:
        """The :class:`LeagueCfg` part (what :class:`League` reads)."""
        return LeagueCfg(**{f.name: getattr(self, f.name) for f in fields(LeagueCfg)})


@dataclass(frozen=True)
class CoSelfPlayCfg:
    """Hydra node ``coselfplay``."""

    strategy: str = ""  # the stage-2 strategy checkpoint to start from (required)
    skills: str = ""  # a checkpoint of the skills task to start the skills from ("" = a fresh network)
    cycles: int = at_least(1, 1)
    skills_minutes: float = non_negative(20.0)  # wall-clock budget per skills phase (0 = none)
    strategy_minutes: float = non_negative(20.0)  # per strategy phase
    # env steps per skills phase (each num_envs x 6 drone samples); 0: no skills phase, the strategy
    # phases fly ``skills`` as they are (e.g. to retrain a stage-3 strategy for other rules or starts)
    skills_steps: int = at_least(0, 3_000_000)
    strategy_steps: int = at_least(1, 100_000)  # decisions per strategy phase
    random_choice_prob: float = fraction(0.3)  # skills phase: share of random strategy decisions
    # strategy phase: what the opponents' drones fly (the strategy task's ``strategy.team_b_skills``):
    # "same" the learned skills, "scripted" the scripted ones (train against the scripted team's skills)
    opponent_skills: str = "same"
    skills_num_envs: int = at_least(1, 256)
    strategy_num_envs: int = at_least(1, 256)

    def __post_init__(self) -> None:
        if self.opponent_skills not in ("same", "scripted"):
            raise ValueError(f"coselfplay.opponent_skills must be 'same' or 'scripted', got {self.opponent_skills!r}")


BUDGETS = ("smoke", "cpu", "gpu")


@dataclass(frozen=True)
class PipelineStageCfg:
    """One stage of a pipeline (an entry of ``pipeline.stages``): one run of ``train.py`` in the stage config
    ``stage``, whose products later stages name through ``{run}`` (the pipeline's run directory)."""

    name: str = ""  # its folder under the run ("skills/serve": products in <run>/skills/serve.pt), unique
    stage: str = ""  # the configs/stage/<stage>.yaml it runs (train.py's stage=)
    overrides: tuple[str, ...] = ()  # train.py overrides on top of task=<task> stage=<stage>; {run} = the run dir
    budgets: dict[str, list[str]] = field(default_factory=dict)  # budget name -> overrides on top of those


@dataclass(frozen=True)
class PipelineCfg:
    """Hydra node ``pipeline``: the stages of ``runner=pipeline`` (a task's recipe declares them), in order."""

    # smoke: minutes, for tests | cpu: ~90 min of a 2-core machine | gpu: the budgets that made the shipped policies
    budget: str = "cpu"
    stages: tuple[PipelineStageCfg, ...] = ()
    # The end product: stage products (paths in the run, e.g. coselfplay/strategy.pt) copied to <run>/team/ under
    # their file names; the team is those files joined by "@" in this order (evaluate.py match=<team>,...).
    team: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.budget not in BUDGETS:
            raise ValueError(f"pipeline.budget must be one of {BUDGETS}, got {self.budget!r}")
