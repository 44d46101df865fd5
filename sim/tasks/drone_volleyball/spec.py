"""drone_volleyball's observation and action layout: the ``skill`` frame's terms, the critic ``state``'s and the
group spec every team shares (``policy`` = ``skill`` + the mode's terms). ``observations.c`` writes the same entries
(``native.sizes``)."""

from __future__ import annotations

from sim.core.spec import EnvSpec, GroupSpec, ObsEntry, ObsTerm
from sim.tasks.drone_volleyball.config import GROUPS, SKILLS, VolleyballCfg

ACTION_NAMES = {
    "ctbr": ("thrust", "roll_rate", "pitch_rate", "yaw_rate"),
    "rotor": ("rotor_0", "rotor_1", "rotor_2", "rotor_3"),
}


def skill_terms() -> tuple[ObsTerm, ...]:
    """The ``skill`` observation frame (team frame: own half x < 0)."""
    return (
        ObsTerm("own_pos", 3, "m", "team", "own position"),
        ObsTerm("own_rot", 6, "", "team", "own rotation matrix, first two columns"),
        ObsTerm("own_vel", 3, "m/s", "team", "own velocity"),
        ObsTerm("own_ang_vel", 3, "rad/s", "body", "own body rates"),
        ObsTerm("ball_rel", 3, "m", "team", "ball minus own paddle centre"),
        ObsTerm("ball_vel", 3, "m/s", "team", "ball velocity"),
        ObsTerm("target_rel", 3, "m", "team", "skill target minus own position"),
        ObsTerm("skill", len(SKILLS), "one-hot", "", "skill: " + ", ".join(SKILLS)),
        ObsTerm("touched", 1, "", "", "1 once this drone hit the ball in the current skill/rally"),
        ObsTerm("last_action", 4, "", "", "previous action in [-1, 1]"),
    )


def state_terms(cfg: VolleyballCfg, num_drones: int) -> tuple[ObsTerm, ...]:
    """The critic ``state`` of every drone (team frame) for ``num_drones`` drones."""
    D = num_drones
    return (
        ObsTerm("drones", 13 * D, "", "team", "every drone: pos, rot 6D, vel, own-team flag"),
        ObsTerm("ball", 6, "", "team", "ball position and velocity"),
        ObsTerm("targets", 3 * D, "m", "team", "skill targets"),
        ObsTerm("rally", 5, "", "", "as in the policy"),
        ObsTerm("time_left", 1, "fraction"),
        ObsTerm("agent_id", cfg.drones_per_team, "one-hot"),
    )


def build_spec(
    cfg: VolleyballCfg, num_drones: int, task_name: str, extra_policy_terms: tuple[ObsTerm, ...] = ()
) -> EnvSpec:
    """The env spec: one group per team present (``team_a`` in the skills, ``team_a`` and ``team_b`` in matches),
    each of ``cfg.drones_per_team`` agents with the entries ``policy`` (``skill`` + ``extra_policy_terms``, the
    mode's), ``skill`` and ``state``, and 4 actions (``cfg.action``)."""
    n, D = cfg.drones_per_team, num_drones
    skill = skill_terms()
    skill_entry = ObsEntry((sum(t.size for t in skill),), terms=skill)
    policy_terms = skill + extra_policy_terms
    policy = ObsEntry((sum(t.size for t in policy_terms),), terms=policy_terms)
    state = state_terms(cfg, D)
    names = ACTION_NAMES[cfg.action]
    units = ("fraction",) + ("rad/s",) * 3 if cfg.action == "ctbr" else ("fraction",) * 4
    group = GroupSpec(
        n_agents=n,
        observations={
            "policy": policy,
            "skill": skill_entry,
            "state": ObsEntry((sum(t.size for t in state),), terms=state),
        },
        action_dim=4,
        action_names=names,
        action_units=units,
        action_scale=(1.0, cfg.max_body_rate, cfg.max_body_rate, cfg.max_body_rate / 2)
        if cfg.action == "ctbr"
        else (1.0,) * 4,
    )
    groups = {g: group for g in GROUPS[: D // n]}  # team_a (skills), or team_a and team_b
    return EnvSpec(
        task=task_name,
        groups=groups,
        control_dt=cfg.control_dt,
        physics_dt=cfg.control_dt / cfg.decimation,
        max_episode_steps=round(cfg.episode_length_s / cfg.control_dt),
        metadata={"mode": cfg.mode, "multirotor": cfg.multirotor, "controller": f"rate_pid ({cfg.action})"},
    )
