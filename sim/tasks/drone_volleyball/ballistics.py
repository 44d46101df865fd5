"""Ball maths of the scripted volleyball skills: the paddle normal of a hit, the ball's predicted
free flight and ballistic launch velocities.

- :func:`desired_paddle_normal`: the frictionless impulse ``v_out = v_in - (1 + e) ((v_in - v_p) . n) n``
  solved for the paddle normal (parallel to ``v_out - v_in``) and the paddle speed along it.
- :func:`predict_ball`: the ball's free flight (env's drag model), batched
  (:func:`cached_predict_ball`: shared by everyone who asks during one step).
- :func:`ballistic_velocity_to`: launch velocity through a point with a given apex (drag-free closed
  form, corrected for drag by fixed-point iterations on a simulated flight, :func:`drag_corrected`).
"""

from __future__ import annotations

import weakref

import torch
from torch import Tensor

from sim.physics.ball import ball_flight_step
from sim.physics.rigid_body import GRAVITY
from sim.tasks.drone_volleyball import native
from sim.tasks.drone_volleyball.control import EZ, dot


def desired_paddle_normal(v_in: Tensor, v_out_desired: Tensor, e: float) -> tuple[Tensor, Tensor]:
    """Paddle normal ``n [..., 3]`` and paddle speed along it ``[...]`` that turn ``v_in`` into
    ``v_out_desired`` under ``v_out = v_in - (1 + e) ((v_in - v_p) . n) n``: n is parallel to
    ``v_out - v_in`` and ``v_p . n = v_in . n + |v_out - v_in| / (1 + e)``."""
    delta = v_out_desired - v_in
    mag = torch.linalg.vector_norm(delta, dim=-1, keepdim=True)
    n = torch.where(
        mag > 1e-6, delta / mag.clamp(min=1e-6), torch.zeros_like(delta) + torch.tensor(EZ, device=delta.device)
    )
    speed = dot(v_in, n) + mag / (1.0 + e)
    return n, speed.squeeze(-1)


def predict_ball(env, horizon_s: float, dt: float = 0.02) -> tuple[Tensor, Tensor]:
    """The ball's free flight (no contacts) from now: positions and velocities ``[E, T, 3]`` at
    ``t = dt, 2 dt, .., T dt`` (``T = round(horizon_s / dt)``), with the env's drag model. Where the env runs its C
    kernels (a match on a CPU, :func:`predicts_in_c`), ``ball_flight.c`` computes the same numbers to the bit."""
    pos, vel = env.ball_pos, env.ball_vel
    steps = max(1, round(horizon_s / dt))
    if predicts_in_c(env):
        return native.ball_flight(pos, vel, env.cfg.ball.drag_k, dt, steps, GRAVITY)
    ps, vs = [], []
    for _ in range(steps):
        pos, vel = ball_flight_step(pos, vel, env.cfg.ball, dt)
        ps.append(pos)
        vs.append(vel)
    return torch.stack(ps, -2), torch.stack(vs, -2)


_PREDICTIONS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def predicts_in_c(env) -> bool:
    """Whether ``env``'s ball is predicted in C: it computes with its C kernels (``env.kernels == "native"``: a match
    on a CPU, ``sim.kernels`` not "torch") and :func:`native.ball_flight_runs` on its tensors."""
    return getattr(env, "kernels", "torch") == "native" and native.ball_flight_runs(env.ball_pos)


def sync_free(env) -> bool:
    """Whether ``env``'s step must not wait for the device: it resets by mask (``masked_resets``, what a CUDA graph
    or a compiled step needs). The scripted layers then test nothing on the host: the skills plan every drone and
    keep the plans of those that play (else only the playing drones, a sixth of the work in a match, whose index
    costs a host sync)."""
    return bool(getattr(env, "masked_resets", False))


def cached_predict_ball(env, horizon_s: float, dt: float = 0.02) -> tuple[Tensor, Tensor]:
    """:func:`predict_ball`, reused while the env's ball state and the arguments are unchanged: the strategy, the
    skills and both scripted teams of a step share one prediction. Unchanged is told by comparing values, a host
    sync: where the env steps :func:`sync_free` the ball is predicted anew instead (as compiled code does: its graph
    computes the prediction once anyway)."""
    if torch.compiler.is_compiling() or sync_free(env) or predicts_in_c(env):
        return predict_ball(env, horizon_s, dt)  # in C a prediction costs less than the comparison
    pos, vel = env.ball_pos, env.ball_vel
    hit = _PREDICTIONS.get(env)
    if (
        hit is not None
        and hit[0] == (horizon_s, dt)
        and hit[1].shape == pos.shape
        and torch.equal(hit[1], pos)
        and torch.equal(hit[2], vel)
    ):
        return hit[3]
    out = predict_ball(env, horizon_s, dt)
    _PREDICTIONS[env] = ((horizon_s, dt), pos.clone(), vel.clone(), out)
    return out


def _flight(pos: Tensor, vel: Tensor, k: float, dt: Tensor, steps: int) -> Tensor:
    """Position after ``steps`` steps of ``dt [..., 1]`` of the env's splitting scheme (drag ``k``)."""
    g = torch.tensor(EZ, device=pos.device) * GRAVITY
    for _ in range(steps):
        vel = vel / (1.0 + 0.5 * k * dt * torch.linalg.vector_norm(vel, dim=-1, keepdim=True))
        pos = pos + dt * vel - 0.5 * dt * dt * g
        vel = vel - dt * g
        vel = vel / (1.0 + 0.5 * k * dt * torch.linalg.vector_norm(vel, dim=-1, keepdim=True))
    return pos


def ballistic_velocity_to(
    p_from: Tensor,
    p_to: Tensor,
    apex: Tensor | float | None = None,
    time: Tensor | float | None = None,
    drag_k: float = 0.0,
    iterations: int = 3,
    steps: int = 30,
) -> tuple[Tensor, Tensor]:
    """Launch velocity ``[..., 3]`` from ``p_from`` through ``p_to`` (``[..., 3]``), and the flight time ``[...]``.

    Either ``apex`` (absolute height of the apex, clamped to at least both end heights; the ball
    reaches ``p_to`` on its way down, or at the apex when ``apex == p_to`` z) or ``time`` (time of flight).
    The drag-free closed form; with ``drag_k > 0``, ``iterations`` fixed-point corrections
    ``v += (p_to - p_sim(t)) / t`` on a flight simulated in ``steps`` steps keep the time and pass
    through ``p_to`` under drag.
    """
    g = GRAVITY
    dz = p_to[..., 2] - p_from[..., 2]
    if time is None:
        if apex is None:
            raise ValueError("give apex or time")
        apex_t = torch.as_tensor(apex, dtype=p_from.dtype, device=p_from.device).expand_as(dz)
        top = torch.maximum(apex_t, torch.maximum(p_from[..., 2], p_to[..., 2]))
        vz = torch.sqrt(2 * g * (top - p_from[..., 2]))
        t = vz / g + torch.sqrt((2 * (top - p_to[..., 2]) / g).clamp(min=0.0))
    else:
        t = torch.as_tensor(time, dtype=p_from.dtype, device=p_from.device).expand_as(dz)
        vz = dz / t + 0.5 * g * t
    t = t.clamp(min=1e-3)
    vxy = (p_to[..., :2] - p_from[..., :2]) / t.unsqueeze(-1)
    v = torch.cat((vxy, vz.unsqueeze(-1)), -1)
    if drag_k > 0:
        v = drag_corrected(p_from, p_to, v, t, drag_k, iterations, steps)
    return v, t


def drag_corrected(
    p_from: Tensor,
    p_to: Tensor,
    v: Tensor,
    t: Tensor,
    drag_k: float,
    iterations: int = 3,
    steps: int = 30,
    in_c: bool = False,
) -> Tensor:
    """Launch velocity ``v [..., 3]`` corrected so that the flight under drag ``drag_k`` from ``p_from``
    passes through ``p_to`` after ``t [...]`` (``iterations`` fixed-point steps ``v += (p_to - p_sim(t)) / t``
    on a flight simulated in ``steps`` steps). Elementwise over the leading axes, so callers stack
    several problems into one call (the simulated flight is ~300 small ops whatever the batch). ``in_c``: the
    flights in ``ball_flight.c`` (the same numbers; where the env :func:`predicts_in_c`)."""
    dt = (t / steps).unsqueeze(-1)
    for _ in range(iterations):
        if in_c:
            end = native.drag_flight(p_from, v, dt, drag_k, steps, GRAVITY)
        else:
            end = _flight(p_from, v, drag_k, dt, steps)
        v = v + (p_to - end) / t.unsqueeze(-1)
    return v
