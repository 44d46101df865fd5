"""drone_volleyball's match teams: what ``evaluate.py match=A,B`` / ``league=...`` and
``training.matches`` play, built through :class:`VolleyballTeams` (``DroneVolleyballEnv.match_teams()``).

A team is ``team(env, obs, team_index) -> actions [E, n, 4]`` for its group (``team_a`` = 0,
``team_b`` = 1). Hierarchical teams first set their own drones' skill commands
(``env.set_skill_commands(..., team=team_index)``), then fly them with :func:`skill_layer`.

Team specs (:class:`sim.core.teams.TeamSpec`):

    hover                        every drone hovers (the trivial baseline)
    scripted                     the rule-based hierarchical team: RuleBasedStrategy on ScriptedSkills
    rulebased:<skills>           the rule-based strategy on learned skills
    <flat.pt>                    a flat policy (e.g. algo=selfplay) on the ``policy`` observation
    <strategy.pt>[@<skills>]     an HCSP strategy (task drone_volleyball_strategy) over the scripted
                                 skills, or over learned ones

``<skills>``: a folder of solo skill checkpoints ``<folder>/<skill>.pt`` (scripted where a skill
has none), or one skills checkpoint of HCSP stage 3 (task drone_volleyball_coplay, one actor for
every skill).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from sim.core.spec import choices_from_actions
from sim.core.teams import (
    GROUPS,
    MatchTeams,
    PolicyLoader,
    TeamPolicy,
    TeamSpec,
    TrainedPolicy,
    flat_team,
    single_actor,
)
from sim.tasks.drone_volleyball.ballistics import sync_free
from sim.tasks.drone_volleyball.config import SKILLS
from sim.tasks.drone_volleyball.rule_strategy import RuleBasedStrategy
from sim.tasks.drone_volleyball.skills import ScriptedSkills, SkillParams

# One skill-conditioned actor for every skill (HCSP stage 3), or skill name -> actor (solo skills).
SkillActors = Mapping[str, nn.Module] | Callable[[Tensor], Tensor] | None


def hover_team(env, obs: dict, team: int) -> Tensor:
    """Every drone hovers in place (the trivial baseline)."""
    return env.hover_actions()[GROUPS[team]]


def scripted_team(env, params: SkillParams | None = None) -> TeamPolicy:
    """The rule-based hierarchical team (``match=scripted``).

    ``team(env, obs, team_index) -> [E, n, 4]``: :class:`RuleBasedStrategy` picks the skills, the
    team's own commands are set with ``env.set_skill_commands(..., team=team_index)`` (world frame),
    and :class:`ScriptedSkills` flies the team's drones (team 0: drones ``0..n-1``, team 1:
    ``n..2n-1``). Each call writes only its own drones' commands, and every drone's action depends
    only on its own command and the shared state, so two scripted teams (two calls per step, one per
    team, each from its own ``scripted_team``) do not interfere.
    """
    strategy = RuleBasedStrategy(env)
    skills = ScriptedSkills(env, params)
    groups = tuple(env.spec.groups)

    def team(env_, obs: dict, team_index: int) -> Tensor:
        if env_ is not env:
            raise ValueError("scripted_team was built for another env")
        n = env.n
        drones = slice(team_index * n, (team_index + 1) * n)
        skill_id, target = strategy(obs)
        env.set_skill_commands(skill_id[:, drones], target[:, drones], team_frame=False, team=team_index)
        return skills(obs)[groups[team_index]]

    return team


def skill_layer(env, skill_actors: SkillActors = None) -> Callable[[dict, int], Tensor]:
    """The skills of a hierarchical team: ``act(obs, team) -> [E, n, 4]`` for the team's drones, from
    the skill commands already set on ``env``. ``skill_actors`` is one skill-conditioned actor for
    every skill (HCSP stage 3, ``drone_volleyball_coplay``), or skill name -> actor on the ``skill``
    observation (e.g. trained in the solo skill modes): a drone whose commanded skill has one flies
    it (``policies.SkillDispatcher``), the others fly the scripted skill."""
    if skill_actors is not None and not isinstance(skill_actors, Mapping):
        actor = skill_actors
        return lambda obs, team: actor(env.skill_observation()[:, team * env.n : (team + 1) * env.n])
    from policies import SkillDispatcher

    skill_actors = dict(skill_actors or {})
    scripted = ScriptedSkills(env)
    if not skill_actors:
        return lambda obs, team: scripted(obs)[GROUPS[team]]
    entry = env.spec.groups["team_a"].observations["skill"]
    sl = entry.slices()["skill"]
    low = SkillDispatcher(skill_actors, SKILLS, sl, env.spec.groups["team_a"].action_dim)
    learned = torch.tensor([name in skill_actors for name in SKILLS], dtype=torch.float32, device=env.device)

    def act(obs: dict, team: int) -> Tensor:
        group = GROUPS[team]
        skill_obs = env.observe()[group]["skill"]
        use = (skill_obs[..., sl] * learned).sum(-1, keepdim=True)  # 1 where the drone's skill is learned
        return use * low(skill_obs) + (1.0 - use) * scripted(obs)[group]

    return act


def rule_based_team(env, skill_actors: SkillActors = None) -> TeamPolicy:
    """The rule-based hierarchical team: the scripted strategy (``RuleBasedStrategy``) commands each
    drone's skill and target; :func:`skill_layer` flies them (learned skills where given)."""
    strategy, skills = RuleBasedStrategy(env), skill_layer(env, skill_actors)

    def team_policy(env_, obs: dict, team: int) -> Tensor:
        n = env.n
        skill_id, target = strategy(obs)
        drones = slice(team * n, (team + 1) * n)
        env.set_skill_commands(skill_id[:, drones], target[:, drones], team_frame=False, team=team)
        return skills(obs, team)

    return team_policy


def strategy_team(
    env, actor: Callable[[Tensor], Tensor], decision_steps: int, skill_actors: SkillActors = None
) -> TeamPolicy:
    """HCSP's hierarchical team on a match env: a strategy ``actor`` trained on
    ``drone_volleyball_strategy`` (its team observation -> discrete choices) decides every
    ``decision_steps`` control steps of each game (on the match's episode clock), the rule layer turns
    the choices into skill commands, and :func:`skill_layer` flies them: the scripted skills it was
    trained over, or learned ones (``skill_actors``)."""
    from sim.tasks.drone_volleyball.strategy import (
        choice_sizes,
        default_choices,
        plan_from_choices,
        strategy_observation,
    )

    layer, skills = RuleBasedStrategy(env), skill_layer(env, skill_actors)
    nvec = choice_sizes(env.n)
    choices = default_choices(env)  # [E, 2, 4]; only this team's row is used for its drones

    def team_policy(env_, obs: dict, team: int) -> Tensor:
        nonlocal choices
        due = env.episode_step % decision_steps == 0  # [E]
        # The actor decides for every env and its choices are kept where a decision is due (it reads each env's row
        # alone). Skipped on steps where none is due, unless that test would cost the sync-free step a host sync.
        if sync_free(env) or bool(due.any()):
            action = actor(strategy_observation(env, layer.interception_point())[:, team : team + 1])[:, 0]
            new = choices_from_actions(action, nvec)
            choices = choices.clone()
            choices[:, team] = torch.where(due.unsqueeze(-1), new, choices[:, team])
        skill_id, target = layer(plan=plan_from_choices(env, choices))
        drones = slice(team * env.n, (team + 1) * env.n)
        env.set_skill_commands(skill_id[:, drones], target[:, drones], team_frame=False, team=team)
        return skills(obs, team)

    return team_policy


# --------------------------------------------------------------------------- checkpoints
def _level_names() -> tuple[str, str]:
    """(strategy task, skills task): the HCSP levels' registry names, from their classes."""
    from sim.tasks.drone_volleyball.coplay import VolleyballCoplayEnv
    from sim.tasks.drone_volleyball.strategy import VolleyballStrategyEnv

    return VolleyballStrategyEnv.task_name, VolleyballCoplayEnv.task_name


def skills_actor(loaded: TrainedPolicy, where: str) -> Callable[[Tensor], Tensor]:
    """A stage-3 skills checkpoint (task ``drone_volleyball_coplay``) as ``skill obs [E, D, s] -> [E, D, 4]``.

    Raises:
        ValueError: the checkpoint is of another task.
    """
    want = _level_names()[1]
    if loaded.task_cfg.get("name") != want:
        raise ValueError(f"{where}: not a skills checkpoint (task {loaded.task_cfg.get('name')!r}, want {want})")
    return next(iter(loaded.actors.values()))


def load_skill_actors(source: str, load: PolicyLoader, spec: str) -> SkillActors:
    """Learned skills: a skills checkpoint file (HCSP stage 3, one actor for every skill), or a
    folder of solo skill checkpoints ``<folder>/<skill>.pt`` (skill name -> actor).

    Raises:
        ValueError: no such file, no skill checkpoint in the folder, or a checkpoint of another task.
    """
    folder = Path(source)
    if folder.suffix == ".pt":
        if not folder.is_file():
            raise ValueError(f"{spec}: skills checkpoint not found: {folder}")
        try:
            return skills_actor(load(str(folder)), str(folder))
        except ValueError as err:
            raise ValueError(f"{spec}: {err}") from err
    files = {name: folder / f"{name}.pt" for name in SKILLS if (folder / f"{name}.pt").is_file()}
    if not files:
        raise ValueError(f"{spec}: no skill checkpoints (<skill>.pt for skills {list(SKILLS)}) in {folder}")
    return {name: next(iter(load(str(f)).actors.values())) for name, f in files.items()}


class VolleyballTeams(MatchTeams):
    """The team specs of the module docstring."""

    def names(self) -> dict[str, str]:
        return {
            "hover": "every drone hovers",
            "scripted": "the rule-based strategy on the scripted skills",
            "rulebased:<skills>": "the rule-based strategy on learned skills (a folder or a skills .pt)",
            "<strategy.pt>@<skills>": "an HCSP strategy checkpoint over learned skills",
        }

    def match_task(self, task_cfg: Mapping[str, Any]) -> dict[str, Any]:
        """HCSP strategy checkpoints play the match they were trained over (same config)."""
        from sim.tasks.drone_volleyball.env import DroneVolleyballEnv

        cfg = dict(task_cfg)
        if cfg.get("name") == _level_names()[0]:
            cfg["name"] = DroneVolleyballEnv.task_name
        return cfg

    def build(self, env: Any, spec: TeamSpec, load: PolicyLoader) -> TeamPolicy:
        if spec.name == "hover" and spec.arg is None:
            return hover_team
        if spec.name == "scripted" and spec.arg is None:
            return scripted_team(env)
        if spec.name == "rulebased" and spec.arg:  # the scripted strategy on learned skills
            return rule_based_team(env, load_skill_actors(spec.arg, load, spec.text))
        if spec.checkpoint is None:
            raise ValueError(self.unknown(spec))
        loaded = load(spec.checkpoint)
        actor = single_actor(loaded, spec)
        strategy_task = _level_names()[0]
        if loaded.task_cfg.get("name") == strategy_task:  # HCSP: the strategy over the skills, on the match env
            steps = int(loaded.task_cfg.get("strategy", {}).get("decision_steps", 10))
            skills = load_skill_actors(spec.arg, load, spec.text) if spec.arg else None
            return strategy_team(env, actor, steps, skills)
        if spec.arg:
            raise ValueError(f"{spec.text}: '@<skills>' goes with a strategy checkpoint ({strategy_task})")
        return flat_team(actor)
