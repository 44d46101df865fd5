"""Imitation warm start (training/imitation.py): DAgger fits the task's expert, the PPO critic
warm-up leaves the actor alone, and a run keeps the observation statistics the actor was fitted on."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import sim
from policies import ActorCritic, GroupDims, PolicyCfg
from training.imitation import ImitationCfg, dagger
from training.ppo import PPO, PPOCfg
from training.runner import Runner

ROOT = Path(__file__).resolve().parents[1]


def _final_distance(env, act, steps: int) -> float:
    obs = env.reset(seed=5)
    with torch.no_grad():
        for _ in range(steps):
            obs, *_ = env.step(act(obs))
    sl = env.spec.groups["agents"].observations["policy"].slices()["goal_rel"]
    return float(obs["agents"]["policy"][..., sl].norm(dim=-1).mean())


def test_dagger_student_flies_like_the_expert() -> None:
    env = sim.make("point_reach", num_envs=64, seed=0)
    g = env.spec.groups["agents"]
    dims = GroupDims(g.n_agents, g.observations["policy"].shape[0], g.observations["state"].shape[0], g.action_dim)
    torch.manual_seed(0)
    ac = ActorCritic(dims, PolicyCfg(actor_hidden=(64, 64), critic_hidden=(16,)))
    expert = env.expert_policy()
    steps = env.max_episode_steps - 1
    before = _final_distance(env, lambda o: {"agents": ac.act_deterministic(o["agents"]["policy"])}, steps)
    cfg = ImitationCfg(expert="task", rounds=3, steps=48, epochs=30, batch_size=1024, lr=3e-3)
    stats = dagger(env, torch.nn.ModuleDict({"agents": ac}), expert, cfg, torch.Generator().manual_seed(0), log=print)
    assert [r["agents/samples"] for r in stats] == [48 * 64 * g.n_agents * k for k in (1, 2, 3)]
    assert stats[-1]["agents/mse"] < 0.01
    after = _final_distance(env, lambda o: {"agents": ac.act_deterministic(o["agents"]["policy"])}, steps)
    reference = _final_distance(env, expert, steps)
    assert after < 1.5 * reference + 0.05 < before, (before, after, reference)


def test_value_only_update_changes_the_critic_not_the_actor() -> None:
    dims = GroupDims(2, 3, 5, 2)
    cfg = PPOCfg(policy=PolicyCfg(actor_hidden=(8,), critic_hidden=(8,)))
    models = torch.nn.ModuleDict({"team": ActorCritic(dims, cfg.policy)})
    ppo = PPO(models, cfg, 4, 2, torch.device("cpu"), torch.Generator().manual_seed(0))
    ppo.freeze_obs_normalizers = True
    actor = {k: v.clone() for k, v in models["team"].state_dict().items() if not k.startswith("critic")}
    critic = [p.clone() for p in models["team"].critic.parameters()]
    for _ in range(2):
        obs = {"team": {"policy": torch.randn(4, 2, 3), "state": torch.randn(4, 2, 5)}}
        with torch.inference_mode():
            ppo.act(obs)
            ppo.process_env_step(
                {"team": torch.randn(4, 2)}, torch.zeros(4, dtype=torch.bool), torch.zeros(4, dtype=torch.bool), {}
            )
    with torch.inference_mode():
        ppo.compute_returns(obs)
    lr = ppo.learning_rate
    ppo.update(value_only=True)
    state = models["team"].state_dict()
    for k, v in actor.items():
        if k.startswith("critic_norm") or k.startswith("value_norm"):
            continue
        assert torch.equal(state[k], v), k  # actor, log_std and the frozen observation normaliser
    assert any(not torch.equal(a, b) for a, b in zip(critic, models["team"].critic.parameters(), strict=True))
    assert ppo.learning_rate == lr  # the adaptive schedule sees no policy change and must not react


def test_run_with_imitation_writes_its_rounds_and_keeps_the_fitted_statistics(tmp_path: Path) -> None:
    over = ["task=point_reach", "device=cpu", "torch_threads=1", "wandb.mode=disabled", "train.progress=false"]
    over += ["num_envs=32", "train.rollout_steps=8", "train.total_steps=512", "train.eval_envs=16"]
    over += ["algo.policy.actor_hidden=[32,32]", "algo.policy.critic_hidden=[32,32]", f"runs_dir={tmp_path}"]
    over += ["imitation.expert=task", "imitation.rounds=2", "imitation.steps=16", "imitation.critic_warmup=1"]
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
        cfg = OmegaConf.to_container(compose(config_name="config", overrides=over), resolve=True)
    runner = Runner(cfg)
    seen = {}
    orig = runner._imitate

    def imitate(bar):
        orig(bar)
        seen["obs_norm"] = {k: v.clone() for k, v in runner.models["agents"].obs_norm.state_dict().items()}

    runner._imitate = imitate
    runner.learn()
    report = json.loads((runner.run_dir / "imitation.json").read_text())
    assert len(report["rounds"]) == 2 and report["cfg"]["expert"] == "task"
    after = runner.models["agents"].obs_norm.state_dict()
    assert all(torch.equal(after[k], v) for k, v in seen["obs_norm"].items())


def test_dagger_checkpoints_its_student_every_few_rounds_and_stops_at_the_time_limit(tmp_path: Path) -> None:
    """A long distillation that is stopped keeps its student: ``imitation.checkpoint_every`` saves imitation.pt (and
    the rounds so far) while DAgger runs, and ``train.max_minutes`` ends DAgger after a round, not after all."""
    over = ["task=point_reach", "device=cpu", "torch_threads=1", "wandb.mode=disabled", "train.progress=false"]
    over += ["num_envs=16", "train.rollout_steps=8", "train.total_steps=128", "train.eval_every=0"]
    over += ["algo.policy.actor_hidden=[16]", "algo.policy.critic_hidden=[16]", "imitation.expert=task"]
    over += ["imitation.steps=4", "imitation.epochs=1", "imitation.critic_warmup=0"]
    saved_rounds = {}
    for name, extra in (("periodic", ["imitation.rounds=4", "imitation.checkpoint_every=2"]),
                        ("limited", ["imitation.rounds=50", "train.max_minutes=1e-9"])):  # fmt: skip
        with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
            cfg = OmegaConf.to_container(
                compose(config_name="config", overrides=[*over, *extra, f"runs_dir={tmp_path / name}"]), resolve=True
            )
        runner = Runner(cfg)
        orig, saves = runner.save, []

        def save(path, *args, orig=orig, saves=saves, runner=runner, **kwargs):
            if Path(path).name == "imitation.pt":
                saves.append(len(json.loads((runner.run_dir / "imitation.json").read_text())["rounds"]))
            return orig(path, *args, **kwargs)

        runner.save = save
        runner.learn()
        saved_rounds[name] = saves
    assert saved_rounds["periodic"] == [2, 4]  # after rounds 2 and 4; the end has nothing new to save
    assert saved_rounds["limited"] == [1]  # out of time after the first of 50 rounds


def _memory_reach_student(memory: str) -> ActorCritic:
    from training.runner import group_dims

    env = sim.make("memory_reach", num_envs=2)
    torch.manual_seed(0)
    return ActorCritic(group_dims(env.spec.groups["robot"]), PolicyCfg(actor_hidden=(64,), critic_hidden=(16,),
                                                                        memory=memory, memory_hidden=64))  # fmt: skip


def _memory_reach_final_distance(env, ac: ActorCritic) -> float:
    actor = ac.deterministic_actor()
    obs = env.reset(seed=7)
    with torch.no_grad():
        for _ in range(env.max_episode_steps - 1):
            obs, _, terminated, truncated, _ = env.step({"robot": actor(obs["robot"])})
            if hasattr(actor, "reset"):
                actor.reset(terminated | truncated)
    return float(env.distance().mean())


def test_recurrent_dagger_remembers_what_a_memoryless_student_cannot() -> None:
    """memory_reach shows the target only during the cue: DAgger of the privileged expert into a GRU student unrolls
    it over whole windows (truncated BPTT) and it reaches the target; the same DAgger into an MLP cannot."""
    env = sim.make("memory_reach", num_envs=128, seed=0)
    cfg = ImitationCfg(expert="task", rounds=4, steps=env.max_episode_steps, epochs=25, batch_size=2048, lr=3e-3)
    final = {}
    for memory in ("gru", "none"):
        ac = _memory_reach_student(memory)
        dagger(env, torch.nn.ModuleDict({"robot": ac}), env.expert_policy(), cfg, torch.Generator().manual_seed(0),
               log=lambda s: None)  # fmt: skip
        final[memory] = _memory_reach_final_distance(env, ac)
    assert final["gru"] < 0.5 * final["none"], final
    assert final["gru"] < 0.25, final


def test_checkpoint_expert_must_name_a_checkpoint() -> None:
    import pytest

    with pytest.raises(ValueError, match="checkpoint path"):
        ImitationCfg(expert="my_teacher")
    assert ImitationCfg(expert="runs/x/checkpoints/best.pt").expert.endswith(".pt")


def test_reused_labels_from_an_earlier_run_help_a_short_distillation() -> None:
    """Data reuse across experiments: a new run that starts from an earlier run's aggregate (states + expert labels)
    fits a fresh student better on a tiny budget of its own than the same run without it."""
    env = sim.make("point_reach", num_envs=64, seed=0)
    g = env.spec.groups["agents"]
    dims = GroupDims(g.n_agents, g.observations["policy"].shape[0], g.observations["state"].shape[0], g.action_dim)
    expert, steps = env.expert_policy(), env.max_episode_steps - 1

    def student() -> ActorCritic:
        torch.manual_seed(1)
        return ActorCritic(dims, PolicyCfg(actor_hidden=(64, 64), critic_hidden=(16,)))

    earlier: dict = {}
    cfg = ImitationCfg(expert="task", rounds=3, steps=48, epochs=20, batch_size=1024, lr=3e-3)
    dagger(env, torch.nn.ModuleDict({"agents": student()}), expert, cfg, torch.Generator().manual_seed(0),
           log=lambda s: None, dataset=earlier)  # fmt: skip
    assert earlier["kind"] == "samples" and earlier["groups"]["agents"]["y"].shape[0] == 3 * 48 * 64 * g.n_agents
    short = ImitationCfg(expert="task", rounds=1, steps=4, epochs=20, batch_size=1024, lr=3e-3)
    final = {}
    for name, data in (("reuse", dict(earlier)), ("fresh", None)):
        ac = student()
        stats = dagger(env, torch.nn.ModuleDict({"agents": ac}), expert, short, torch.Generator().manual_seed(0),
                       log=lambda s: None, dataset=data)  # fmt: skip
        final[name] = _final_distance(env, lambda o, ac=ac: {"agents": ac.act_deterministic(o["agents"]["policy"])},
                                      steps)  # fmt: skip
        new = 4 * 64 * g.n_agents
        assert stats[0]["agents/samples"] == new + (3 * 48 * 64 * g.n_agents if name == "reuse" else 0)
    assert final["reuse"] < 0.8 * final["fresh"], final  # measured 0.018 m vs 0.027 m (expert 0.017 m)


def test_balanced_fit_weighs_every_stratum_equally() -> None:
    """The same input labelled +1 in 99% of the samples (stratum 0) and -1 in 1% (stratum 1): plain MSE settles
    near the majority's +0.98, the balanced fit (imitation.balance) between the two strata, near 0."""
    from training.imitation import _fit

    n = 20_000
    x = {"policy": torch.zeros(n, 3)}
    strata = (torch.arange(n) % 100 == 0).long()
    y = torch.where(strata.bool(), -1.0, 1.0).unsqueeze(-1).expand(n, 2).contiguous()
    means = {}
    for balance in (False, True):
        torch.manual_seed(0)
        ac = ActorCritic(GroupDims(1, 3, 3, 2), PolicyCfg(actor_hidden=(8,), critic_hidden=(8,)))
        cfg = ImitationCfg(expert="task", epochs=3, batch_size=500, lr=3e-2, balance=balance)
        _fit(ac, x, y, torch.optim.Adam(ac.actor.parameters(), lr=cfg.lr), cfg, torch.Generator().manual_seed(0),
             strata if balance else None)  # fmt: skip
        with torch.no_grad():
            means[balance] = float(ac.action_mean({"policy": torch.zeros(1, 1, 3)}).mean())
    assert means[False] > 0.9 and abs(means[True]) < 0.15, means


def test_volleyball_coplay_strata_are_the_commanded_skills() -> None:
    from sim.tasks.drone_volleyball.config import SKILL_IDS

    env = sim.make("drone_volleyball_coplay", num_envs=4, seed=0)
    env.reset(seed=0)
    strata = env.imitation_strata()["drones"]
    assert strata.shape == (4, env.spec.groups["drones"].n_agents) and strata.dtype == torch.long
    # At a rally's start exactly one drone per match is commanded to serve; the others fly to their places.
    assert ((strata == SKILL_IDS["serve"]).sum(1) == 1).all(), strata
    assert ((strata == SKILL_IDS["goto"]).sum(1) == strata.shape[1] - 1).all(), strata


def test_volleyball_match_strata_are_the_scripted_teams_commands() -> None:
    """In a 3v3 match the expert (two scripted teams) commands the server to serve: after it labelled the opening
    step, the strata name that drone, and only it, as serving (what a flat student's balanced fit draws on),
    while the env's own commands, which every drone observes, are left as they were."""
    from sim.tasks.drone_volleyball.config import SKILL_IDS

    env = sim.make("drone_volleyball", num_envs=6, seed=0, opening_server="random")
    obs = env.reset(seed=0)
    commands = env.skill_id.clone(), env.skill_target.clone()
    env.expert_policy()(obs)
    # The expert's commands do not stay in what the drones observe (a flat student would read its teacher's
    # decisions while learning and miss them when it plays alone).
    assert torch.equal(env.skill_id, commands[0]) and torch.equal(env.skill_target, commands[1])
    strata = env.imitation_strata()
    assert set(strata) == {"team_a", "team_b"} and strata["team_a"].shape == (6, 3)
    both = torch.cat((strata["team_a"], strata["team_b"]), 1)
    assert ((both == SKILL_IDS["serve"]).sum(1) == 1).all(), both
    assert (both.gather(1, env.rules.server.unsqueeze(1)) == SKILL_IDS["serve"]).all()


def test_self_play_after_imitation_starts_its_league_from_the_imitated_policy(tmp_path: Path) -> None:
    """Flat volleyball self-play warm-started by DAgger: the league's protected first snapshot is the imitated policy
    (not the random weights it started from), and it is the opponent evaluation plays."""
    from training.selfplay_runner import SelfPlayRunner

    over = ["task=drone_volleyball", "task.mode=1v1", "algo=selfplay", "imitation.expert=task", "imitation.rounds=1",
            "imitation.steps=4", "imitation.balance=true", "num_envs=8", "train.rollout_steps=4",
            "train.total_steps=32", "train.eval_every=0", "train.progress=false", "device=cpu", "torch_threads=1",
            "wandb.mode=disabled", f"runs_dir={tmp_path}"]  # fmt: skip
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
        cfg = OmegaConf.to_container(compose(config_name="config", overrides=over), resolve=True)
    runner = SelfPlayRunner(cfg)
    assert len(runner.league.pool) == 0  # nothing is seeded before the imitation
    runner.learn()
    pool = runner.league.pool
    first = pool.ids[0]
    assert pool.names[first] == "imitation" and "initial" not in pool.names.values()
    assert runner._eval_opponent() == first
    imitated = torch.load(runner.ckpt_dir / "imitation.pt", weights_only=False)["model"]
    snapshot = pool.get(first)
    assert all(torch.equal(snapshot[k], imitated[f"team_a.{k}"]) for k in snapshot)
    trained = runner.models["team_a"].state_dict()
    assert any(not torch.equal(snapshot[k], trained[k]) for k in snapshot)  # PPO moved on from it
