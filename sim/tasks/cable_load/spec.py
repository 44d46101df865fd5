"""cable_load's observation and action layout: the policy frame's terms, the ``mavs`` group spec (with the PID
action prior) and the observation noise per frame entry. ``post_physics.c`` writes the same frame (``FRAME_SIZE``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from sim.core.spec import EnvSpec, GroupSpec, ObsEntry, ObsTerm
from sim.tasks.cable_load.config import GROUP, CableLoadCfg

ACTION_NAMES = ("acc_x", "acc_y", "acc_z", "roll_rate", "pitch_rate")


def policy_terms() -> tuple[ObsTerm, ...]:
    """The terms of one policy observation frame, in order (the ``policy`` entry holds ``history_len`` frames)."""
    return (
        ObsTerm("goal_pos_rel", 3, "m", "world", "goal position minus load position"),
        ObsTerm("load_rot", 6, "", "world", "load rotation matrix, first two columns"),
        ObsTerm("goal_rot_rel", 6, "", "load", "goal rotation in the load frame, first two columns"),
        ObsTerm("load_vel", 3, "m/s", "world", "load linear velocity"),
        ObsTerm("load_ang_vel", 3, "rad/s", "load", "load angular velocity"),
        ObsTerm("own_pos_rel", 3, "m", "world", "own position minus load position"),
        ObsTerm("own_vel", 3, "m/s", "world", "own linear velocity"),
        ObsTerm("own_rot", 6, "", "world", "own rotation matrix, first two columns"),
        ObsTerm("own_ang_vel", 3, "rad/s", "body", "own body rates"),
        ObsTerm("own_attach", 3, "m", "load", "own cable attachment point on the load"),
        ObsTerm("own_slot_rel", 3, "m", "world", "own hover slot at the (yaw-limited) goal pose minus own position"),
        ObsTerm(
            "own_attach_err_int",
            3,
            "m s",
            "world",
            "leaky integral of own attachment point's error (at the yaw-limited goal pose minus now)",
        ),
        ObsTerm("last_action", 5, "", "", "previous action in [-1, 1]"),
    )


def pid_law(cfg: CableLoadCfg, kp: float, kd: float, ki: float) -> tuple[tuple[int, int, float], ...]:
    """The PID formation law as ``GroupSpec.action_prior`` entries ``(policy index, action index, gain)``: the
    normalised acceleration ``(kp own_slot_rel - kd own_vel + ki own_attach_err_int) / action_acc_scale``, read
    from the newest frame of the ``policy`` history; body rates 0. Zero gains give no entries."""
    frame = sum(t.size for t in policy_terms())
    slices = ObsEntry((frame,), terms=policy_terms()).slices()
    newest = (cfg.history_len - 1) * frame  # offset of the newest frame in the flattened history
    slot, vel, integ = (newest + slices[t].start for t in ("own_slot_rel", "own_vel", "own_attach_err_int"))
    prior = []
    for k in range(3):
        for index, gain in ((slot, kp), (vel, -kd), (integ, ki)):
            if gain:
                prior.append((index + k, k, gain / cfg.action_acc_scale))
    return tuple(prior)


def build_spec(cfg: CableLoadCfg) -> EnvSpec:
    """The ``mavs`` group (policy history and critic state entries, the action prior) and the timing."""
    N = cfg.num_mavs
    terms = policy_terms()
    frame = sum(t.size for t in terms)
    state_terms = (
        ObsTerm("mav_pos_rel", 3 * N, "m", "world"),
        ObsTerm("mav_vel", 3 * N, "m/s", "world"),
        ObsTerm("mav_rot", 6 * N, "", "world"),
        ObsTerm("mav_ang_vel", 3 * N, "rad/s", "body"),
        ObsTerm("cable_tension", N, "N"),
        ObsTerm("goal_pos_rel", 3, "m", "world"),
        ObsTerm("load_rot", 6, "", "world"),
        ObsTerm("goal_rot_rel", 6, "", "load"),
        ObsTerm("load_vel", 3, "m/s", "world"),
        ObsTerm("load_ang_vel", 3, "rad/s", "load"),
        ObsTerm("time_left", 1, "fraction"),
        # Privileged (critic only), with faults on: which MAV is lost, which the value must foresee.
        *((ObsTerm("mav_lost", N, "flag"),) if cfg.fault.enabled else ()),
        ObsTerm("agent_id", N, "one-hot"),
    )
    policy = ObsEntry((cfg.history_len * frame,), terms=terms, history=cfg.history_len)
    prior = pid_law(cfg, cfg.action_prior_kp, cfg.action_prior_kd, cfg.action_prior_ki)
    group = GroupSpec(
        n_agents=N,
        observations={
            "policy": policy,
            "state": ObsEntry((sum(t.size for t in state_terms),), terms=state_terms),
        },
        action_dim=len(ACTION_NAMES),
        action_names=ACTION_NAMES,
        action_units=("m/s^2",) * 3 + ("rad/s",) * 2,
        action_scale=(cfg.action_acc_scale,) * 3 + (cfg.action_rate_scale,) * 2,
        action_prior=tuple(prior),
    )
    return EnvSpec(
        task="cable_load",
        groups={GROUP: group},
        control_dt=cfg.control_dt,
        physics_dt=cfg.control_dt / cfg.decimation / cfg.physics_substeps,
        max_episode_steps=round(cfg.episode_length_s / cfg.control_dt),
        metadata={
            "multirotor": cfg.multirotor,
            "controller": "indi",
            "controller_hz": 1 / (cfg.control_dt / cfg.decimation),
        },
    )


def noise_std(cfg: CableLoadCfg, device: torch.device) -> Tensor:
    """Noise std per frame entry, ``[frame_size]`` (zeros when noise is off)."""
    nz = cfg.obs_noise
    std_by_term = {
        "goal_pos_rel": nz.position,
        "load_rot": nz.rotation,
        "goal_rot_rel": nz.rotation,
        "load_vel": nz.velocity,
        "load_ang_vel": nz.angular_velocity,
        "own_pos_rel": nz.position,
        "own_slot_rel": nz.position,
        "own_vel": nz.velocity,
        "own_rot": nz.rotation,
        "own_ang_vel": nz.angular_velocity,
    }
    parts = [torch.full((t.size,), std_by_term.get(t.name, 0.0) if nz.enabled else 0.0) for t in policy_terms()]
    return torch.cat(parts).to(device)
