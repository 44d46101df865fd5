"""drone_volleyball's observation entries in torch, shared by every mode: each drone's ``skill`` entry (own state, ball,
skill command, in its team frame), the rally features a match's ``policy`` adds and the critic ``state`` (the layout:
``spec.py``). The reference ``observations.c`` is held to (``native.py``, matches on a CPU).

Each function reads a :class:`~sim.tasks.drone_volleyball.env.DroneVolleyballEnv` and returns new tensors, ``[E, D,
...]`` (``[k, D, ...]`` of the envs ``ids [k]`` only, when given).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from sim.core.env import env_rows
from sim.physics.quaternion import matrix_to_6d, quat_mul, quat_rotate, quat_to_matrix
from sim.tasks.drone_volleyball.config import SKILLS
from sim.tasks.drone_volleyball.court import mirror

if TYPE_CHECKING:
    from sim.tasks.drone_volleyball.env import DroneVolleyballEnv


def skill_obs(env: DroneVolleyballEnv, ids: Tensor | None = None) -> Tensor:
    """``[E, D, s]``: every drone's ``skill`` observation in its team frame."""
    rows = env_rows(ids)
    d, flip, D = env.drones, rows(env.flip), env.num_drones
    pos, quat, vel = rows(d.pos), rows(d.quat), rows(d.vel)
    E = pos.shape[0]
    zrot = torch.tensor((0.0, 0.0, 0.0, 1.0), device=env.device)
    quat_t = torch.where(flip.unsqueeze(-1), quat_mul(zrot.expand_as(quat), quat), quat)
    center = pos + quat_rotate(quat, env.paddle_offset.expand_as(pos))
    ball = rows(env.ball_pos).unsqueeze(1)
    return torch.cat(
        (
            mirror(pos, flip),
            matrix_to_6d(quat_to_matrix(quat_t)),
            mirror(vel, flip),
            rows(d.ang_vel),
            mirror(ball - center, flip),
            mirror(rows(env.ball_vel).unsqueeze(1).expand(E, D, 3), flip),
            mirror(rows(env.skill_target) - pos, flip),
            torch.nn.functional.one_hot(rows(env.skill_id), len(SKILLS)).float(),
            rows(env.touched).float().unsqueeze(-1),
            rows(env.last_action),
        ),
        dim=-1,
    )


def rally_features(env: DroneVolleyballEnv, ids: Tensor | None = None) -> Tensor:
    """``[E, D, 5]``: my team's touches / max, I touched last, my team is to serve, I serve, ball in my half."""
    ru, team, rows = env.rules, env.team_of, env_rows(ids)
    drone = torch.arange(env.num_drones, device=env.device)
    mine = rows(ru.last_team).unsqueeze(-1) == team
    touches = torch.where(mine, rows(ru.touches).unsqueeze(-1).float() / env.cfg.rules.max_touches, 0.0)
    me_last = rows(ru.last_toucher).unsqueeze(-1) == drone
    serving = (rows(ru.serving_team).unsqueeze(-1) == team) & ~rows(ru.served).unsqueeze(-1)
    server = rows(ru.server).unsqueeze(-1) == drone
    my_half = (rows(env.ball_pos)[:, 0:1] >= 0).long() == team
    return torch.stack((touches, me_last.float(), serving.float(), server.float(), my_half.float()), -1)


def critic_state(env: DroneVolleyballEnv, ids: Tensor | None = None) -> Tensor:
    """Critic state per drone ``[E, D, state_dim]``: the whole scene in the drone's team frame, the rally features,
    the time left and the agent's one-hot id."""
    d, D, n, rows = env.drones, env.num_drones, env.n, env_rows(ids)
    pos, vel, ball_pos, ball_vel, target = (
        rows(d.pos),
        rows(d.vel),
        rows(env.ball_pos),
        rows(env.ball_vel),
        rows(env.skill_target),
    )
    rot6 = matrix_to_6d(quat_to_matrix(rows(d.quat)))
    E = pos.shape[0]
    parts = []
    for flip_team in (False, True):
        f = torch.full((E, D), flip_team, device=env.device)
        own = (env.team_of == int(flip_team)).float().expand(E, D).unsqueeze(-1)
        drones = torch.cat((mirror(pos, f), rot6, mirror(vel, f), own), -1)
        fb = torch.full((E,), flip_team, device=env.device)
        ball = torch.cat((mirror(ball_pos, fb), mirror(ball_vel, fb)), -1)
        parts.append(torch.cat((drones.flatten(1), ball, mirror(target, f).flatten(1)), -1))
    glob = torch.where(rows(env.flip).unsqueeze(-1), parts[1].unsqueeze(1), parts[0].unsqueeze(1))  # [E, D, g]
    time_left = (1.0 - rows(env.episode_step).float() / env.max_episode_steps).view(E, 1, 1).expand(E, D, 1)
    agent_id = torch.eye(n, device=env.device).repeat(D // n, 1).expand(E, D, n)
    return torch.cat((glob, rally_features(env, ids), time_left, agent_id), -1)
