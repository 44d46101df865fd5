"""Scripted, batched skill controllers for drone_volleyball: baselines, demonstrations, opponents.

:class:`ScriptedSkills` reads the env's world-frame state (``env.drones``, ``env.ball_pos`` /
``ball_vel``, ``env.skill_id`` / ``skill_target``) and returns CTBR actions for all ``E`` envs and
``D`` drones at once; Python loops run only over a fixed number of prediction steps or candidates.

Ball skills predict the ball, pick the interception where the ball comes down through a hitting
height in the drone's half, fly there early and, the last ``strike_time`` seconds, follow a
minimum-effort guidance to the contact state: paddle centre on the ball's path, body z on the
required normal, paddle moving along it at the required speed.
The serve is planned differently (:meth:`ScriptedSkills.serve_strike`): the ball is dropped from
rest 1.5-2 m above the paddle and the contact must come within ~0.4 s, too soon to fly to a
pre-strike point. In the ball's free-falling frame gravity cancels and the paddle closes the
drop height with its thrust alone (at most ~22 m/s^2), so the drone rises straight under the ball,
body level, with the constant thrust that brings the closing speed the hit needs, and turns body
z onto the required normal only the last ``serve_turn_time`` seconds. The serve aims directly
into the opponent court at ``skill_target``, preferring high arcs (a less tilted normal, a
shorter turn) among those within ``serve_plan_thrust`` of the maximum thrust.

Flight control: :mod:`~sim.tasks.drone_volleyball.control`; ball maths:
:mod:`~sim.tasks.drone_volleyball.ballistics`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import Tensor

from sim.physics.quaternion import quat_rotate
from sim.physics.rigid_body import GRAVITY
from sim.tasks.drone_volleyball.ballistics import (
    ballistic_velocity_to,
    cached_predict_ball,
    desired_paddle_normal,
    drag_corrected,
    predicts_in_c,
    sync_free,
)
from sim.tasks.drone_volleyball.config import SKILL_IDS
from sim.tasks.drone_volleyball.control import (
    DEFAULT_GAINS,
    EZ,
    PositionGains,
    ctbr_from_thrust_direction,
    dot,
    limit_tilt,
    position_ctbr,
    unit,
)

GOTO, SERVE, PASS, SET, ATTACK = (SKILL_IDS[s] for s in ("goto", "serve", "pass", "set", "attack"))


@dataclass(frozen=True)
class SkillParams:
    """Tuning of :class:`ScriptedSkills`."""

    hit_height: tuple[float, float, float, float, float] = (2.0, 2.2, 2.5, 2.5, 2.5)  # ball centre (m) per skill
    low_height: float = 1.5  # fallback hitting height when the ball already fell through the first one
    strike_time: float = 0.3  # s before contact: guidance to the contact state takes over
    approach_min_time: float = 10.0  # s, floor of the approach guidance's time-to-go
    approach_max_acc: float = 10.0  # m/s^2
    tilt_lag: float = 0.1  # s the body takes to reach the normal (the drift starts then)
    blend_time: float = 0.12  # s: body z blends into the paddle normal over the last part of the strike
    horizon_s: float = 3.0  # ball prediction horizon
    pred_dt: float = 0.02
    net_margin: float = 0.6  # drones keep |x| >= this (the net crash zone is |x| < 0.3)
    ball_margin: float = 0.5  # interceptions only where the ball is this far inside the own half
    min_height: float = 0.6  # drone targets stay above this
    pass_apex_above: float = 0.0  # pass/set: apex this far above the target (0: the target is the apex)
    apexes: tuple[float, ...] = (3.2, 3.6, 4.0, 4.5, 5.0, 5.6)  # serve/attack apex candidates (m)
    serve_turn_time: float = 0.17  # s before the serve's contact: body z turns onto the normal
    serve_k_att: float = 12.0  # 1/s: attitude gain of the serve (a fast turn)
    serve_max_tilt: float = 0.2  # rad: tilt limit while rising under the ball
    serve_kp: float = 30.0  # 1/s^2: horizontal gains under the ball
    serve_kd: float = 8.0  # 1/s
    serve_back: float = 0.03  # m: the paddle stays this far behind the ball line while rising
    serve_closing_guess: float = 8.0  # m/s: first guess of the vertical closing speed
    serve_iterations: int = 3
    serve_tilt_weight: float = 20.0  # m/s per rad: serve apex choice, cost of the normal's tilt
    serve_plan_thrust: float = 0.8  # of the maximum thrust: serve plans needing more come last
    serve_thrust_frac: float = 0.95  # of the maximum thrust, while rising
    net_clearance: float = 0.35  # m above net top + ball radius at the crossing (drag-free estimate)
    max_acc: float = 20.0  # m/s^2, strike guidance limit along the normal
    min_thrust_acc: float = 4.5  # m/s^2, thrust floor in the strike (the rate loop needs thrust to steer)
    k_tangential: float = 3.0  # gain of the tilt correction across the normal (min-effort guidance: 3)
    max_correction: float = 2.0  # m/s^2, its limit (~ g tan(12 deg))


@dataclass
class _Drones:
    pos: Tensor
    vel: Tensor
    quat: Tensor


@dataclass
class _RowView:
    """Some drones of an env seen as ``M`` one-drone envs (``[M, 1, ...]``): the ball planning runs
    only on the drones playing the ball (in a match ~1 of 6), on tensors a sixth the size.

    Has the env attributes the planning reads; ``prediction`` is the ball forecast of each row's env."""

    env: object
    rows: tuple[Tensor, Tensor]  # (env index [M], drone index [M])
    prediction: tuple[Tensor, Tensor]  # [M, T, 3] each

    def __post_init__(self) -> None:
        env, (e, d) = self.env, self.rows
        dr = env.drones
        self.drones = _Drones(dr.pos[e, d].unsqueeze(1), dr.vel[e, d].unsqueeze(1), dr.quat[e, d].unsqueeze(1))
        self.flip = env.flip[e, d].unsqueeze(1)
        self.ball_pos, self.ball_vel = env.ball_pos[e], env.ball_vel[e]
        self.cfg, self.params, self.model = env.cfg, env.params, env.model
        self.device, self.rate_scale = env.device, env.rate_scale

    def take(self, x: Tensor) -> Tensor:
        """``[E, D, ...]`` -> ``[M, 1, ...]``."""
        e, d = self.rows
        return x[e, d].unsqueeze(1)

    def put(self, rows_value: Tensor, full: Tensor) -> Tensor:
        """Scatter ``[M, 1, ...]`` into a copy of ``full [E, D, ...]``."""
        e, d = self.rows
        out = full.clone()
        out[e, d] = rows_value[:, 0].to(out.dtype)
        return out


class ScriptedSkills:
    """Per-drone skill controller: reads env state, returns actions for every group; skills chosen by
    ``env.skill_id`` (0 goto, 1 serve, 2 pass, 3 set, 4 attack) with targets ``env.skill_target`` (world).

    Usable as a ``training.evaluation`` policy: ``ScriptedSkills(env)(obs) -> {group: [E, n, 4]}``
    (the observation is ignored; the controller reads the env's state). Solo skill drones retreat
    after their hit; in matches, who plays is the strategy's choice (``skill_id``).
    """

    def __init__(self, env, params: SkillParams | None = None, gains: PositionGains = DEFAULT_GAINS) -> None:
        self.env = env
        self.p = params or SkillParams()
        self.gains = gains
        self._in_c = predicts_in_c(env)  # the hits' drag corrections in ball_flight.c, as the env's prediction
        dev = env.device
        self.hit_height = torch.tensor(self.p.hit_height, device=dev)
        self.hold = env.drones.pos.clone()
        self.was_touched = torch.zeros_like(env.touched)
        self.plan: dict[str, Tensor] = {}
        E, D = env.skill_id.shape
        # Every (env, drone) row, for the plan of every drone (sync_free).
        self._all_rows = (torch.arange(E, device=dev).repeat_interleave(D), torch.arange(D, device=dev).repeat(E))

    # ------------------------------------------------------------------ helpers
    def clamp_to_half(self, pos: Tensor, view=None) -> Tensor:
        """Drone targets ``[E, D, 3]`` kept in the drone's half (|x| >= net_margin), the arena and above min_height."""
        env, p = view or self.env, self.p
        court = env.cfg.court
        lim_x = court.length / 2 + court.arena_margin - 0.5
        x = torch.where(env.flip, pos[..., 0].clamp(p.net_margin, lim_x), pos[..., 0].clamp(-lim_x, -p.net_margin))
        y = pos[..., 1].clamp(-(court.width / 2 + court.arena_margin - 0.5), court.width / 2 + court.arena_margin - 0.5)
        z = pos[..., 2].clamp(p.min_height, court.arena_height - 1.0)
        return torch.stack((x, y, z), -1)

    def interception(self, height: Tensor, view: _RowView | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Where the ball comes down through ``height [E, D]`` in each drone's half.

        Returns ``(valid [E, D], t [E, D], pos [E, D, 3], vel [E, D, 3])`` at the crossing.
        """
        env, p = view or self.env, self.p
        pos, vel = view.prediction if view is not None else cached_predict_ball(env, p.horizon_s, p.pred_dt)
        z = pos[..., 2]
        z_prev = torch.cat((env.ball_pos[:, 2:], z[:, :-1]), -1)  # [E, T]
        own = torch.where(
            env.flip.unsqueeze(-1), pos[:, None, :, 0] >= p.ball_margin, pos[:, None, :, 0] <= -p.ball_margin
        )  # [E, D, T]
        h = height.unsqueeze(-1)
        cross = (z.unsqueeze(1) <= h) & (z_prev.unsqueeze(1) > h) & (vel[:, None, :, 2] < 0) & own
        valid = cross.any(-1)
        idx = cross.long().argmax(-1)  # [E, D], first crossing
        pos_prev = torch.cat((env.ball_pos.unsqueeze(1), pos[:, :-1]), 1)
        vel_prev = torch.cat((env.ball_vel.unsqueeze(1), vel[:, :-1]), 1)

        def take(x: Tensor) -> Tensor:  # x [E, T, 3] -> [E, D, 3]
            return x.gather(1, idx.unsqueeze(-1).expand(*idx.shape, 3))

        zk, zp = z.gather(1, idx), z_prev.gather(1, idx)
        frac = ((zp - height) / (zp - zk).clamp(min=1e-6)).clamp(0.0, 1.0).unsqueeze(-1)
        pc = take(pos_prev) + frac * (take(pos) - take(pos_prev))
        vc = take(vel_prev) + frac * (take(vel) - take(vel_prev))
        t = p.pred_dt * (idx.float() + frac.squeeze(-1))
        return valid, t, pc, vc

    def outgoing_velocity(
        self,
        pc: Tensor,
        vc: Tensor,
        skill: Tensor,
        target: Tensor,
        tilt_weight: float = 0.0,
        max_closing: Tensor | None = None,
    ) -> Tensor:
        """The desired ball velocity after the hit ``[E, D, 3]``: pass/set through the target at the
        apex; serve/attack landing on the target (z = ball radius), clearing the net, least effort
        (``|v_out - v_in|``, plus ``tilt_weight`` per radian of tilt of the paddle normal).

        ``max_closing [E, D]`` (the serve): candidates whose vertical paddle-ball closing speed
        ``|dv|^2 / ((1 + e) dv_z)`` exceeds it come last, the least demanding first."""
        env, p = self.env, self.p
        r, k = env.cfg.ball.radius, env.cfg.ball.drag_k
        net = env.cfg.court.net_height + r + p.net_clearance
        # pass / set: the target is the apex.
        v_pass, t_pass = ballistic_velocity_to(pc, target, apex=target[..., 2] + p.pass_apex_above)  # drag: below
        # serve / attack: the least-effort apex candidate that clears the net.
        land = torch.cat((target[..., :2], torch.full_like(target[..., 2:], r)), -1)
        best_v, best_cost = None, None
        for apex in p.apexes:
            v, t = ballistic_velocity_to(pc, land, apex=max(apex, 0.0))
            # Height at the net plane (drag-free).
            dx = land[..., 0] - pc[..., 0]
            s = (-pc[..., 0] / torch.where(dx.abs() > 1e-6, dx, torch.full_like(dx, 1e-6))).clamp(0.0, 1.0)
            tx = s * t
            z_net = pc[..., 2] + v[..., 2] * tx - 0.5 * GRAVITY * tx * tx
            ok = z_net >= net
            dv = v - vc
            tilt = torch.atan2(torch.linalg.vector_norm(dv[..., :2], dim=-1), dv[..., 2])
            dv_n = torch.linalg.vector_norm(dv, dim=-1)
            cost = dv_n + tilt_weight * tilt + torch.where(ok, 0.0, 100.0 - apex)
            if max_closing is not None:
                closing = dv_n.square() / ((1.0 + env.cfg.ball.restitution_drone) * dv[..., 2].clamp(min=1e-3))
                cost = torch.where(closing > max_closing, 50.0 + closing + torch.where(ok, 0.0, 100.0 - apex), cost)
            if best_v is None:
                best_v, best_cost = v, cost
            else:
                better = cost < best_cost
                best_v = torch.where(better.unsqueeze(-1), v, best_v)
                best_cost = torch.where(better, cost, best_cost)
        # Drag: fixed-point corrections keeping each flight time, the pass's and the landing's in one batched
        # flight (the same numbers as two calls, half the small ops: this was a quarter of a scripted match).
        t_fl = self._flight_time(pc, best_v, land)
        v_land, t_land = ballistic_velocity_to(pc, land, time=t_fl)
        stack = lambda a, b: torch.stack((a, b))  # noqa: E731
        v_pass, v_land = drag_corrected(
            stack(pc, pc), stack(target, land), stack(v_pass, v_land), stack(t_pass, t_land), k, in_c=self._in_c
        ).unbind(0)
        return torch.where(((skill == ATTACK) | (skill == SERVE)).unsqueeze(-1), v_land, v_pass)

    @staticmethod
    def _flight_time(p0: Tensor, v0: Tensor, land: Tensor) -> Tensor:
        """Drag-free time for the ball from ``p0`` with ``v0`` to come down to ``land`` z."""
        dz = p0[..., 2] - land[..., 2]
        vz = v0[..., 2]
        return (vz + torch.sqrt((vz * vz + 2 * GRAVITY * dz).clamp(min=0.0))) / GRAVITY

    def strike(self, tau: Tensor, p_star: Tensor, n: Tensor, u: Tensor, view: _RowView | None = None) -> Tensor:
        """Actions bringing the drone centre to ``p_star`` with body z = ``n`` and velocity ``u`` along
        ``n`` in ``tau [E, D]`` seconds (approach hover until ``strike_time`` before)."""
        env, p, g = view or self.env, self.p, GRAVITY
        d = env.drones
        ez = torch.tensor(EZ, device=env.device)
        Ts = p.strike_time
        a_drift = -g * (ez - n[..., 2:] * n)  # tangential acceleration with body z = n
        # Approach: rest at the start of a constant-acceleration strike.
        Td = max(Ts - p.tilt_lag, 0.0)
        p_pre = p_star - (0.5 * u * Ts).unsqueeze(-1) * n - 0.5 * a_drift * Td * Td
        # PD to rest at p_pre, stiffened to minimum-effort guidance gains as the strike's start nears
        # (time-to-go floored for stability).
        tg = (tau - Ts).clamp(min=p.approach_min_time).unsqueeze(-1)
        kp = torch.maximum(torch.tensor(self.gains.kp, device=env.device), 6 / tg**2)
        kd = torch.maximum(torch.tensor(self.gains.kd, device=env.device), 4 / tg)
        acc_app = kp * (self.clamp_to_half(p_pre, view) - d.pos) - kd * d.vel
        acc_app_n = torch.linalg.vector_norm(acc_app, dim=-1, keepdim=True)
        acc_app = acc_app * (p.approach_max_acc / acc_app_n.clamp(min=1e-6)).clamp(max=1.0)
        acc_app = acc_app + g * ez - env.model.drag_force(d.quat, d.vel) / env.params.mass
        acc_app = limit_tilt(acc_app, self.gains.max_tilt)
        act_approach = ctbr_from_thrust_direction(env, unit(acc_app), acc_app, gains=self.gains)
        # Strike: body z on the normal; minimum-effort guidance to (p_star, u n) along n; a small,
        # fading tilt correction across n (the disc is wide: the normal matters more than the spot).
        tc = tau.clamp(min=0.04).unsqueeze(-1)
        err = p_star - d.pos
        s_err = dot(err, n)
        vn = dot(d.vel, n)
        a_n = 6 * (s_err - vn * tc) / tc**2 - 2 * (u.unsqueeze(-1) - vn) / tc
        a_n = torch.maximum(a_n, p.min_thrust_acc - g * n[..., 2:]).clamp(max=p.max_acc)
        err_t = err - s_err * n
        v_t = d.vel - vn * n
        a_corr = p.k_tangential * (err_t - v_t * tc - 0.5 * a_drift * tc**2) / tc**2
        a_corr_n = torch.linalg.vector_norm(a_corr, dim=-1, keepdim=True)
        a_corr = a_corr * (p.max_correction / a_corr_n.clamp(min=1e-6)).clamp(max=1.0)
        w = ((tau - p.blend_time) / p.blend_time).clamp(0.0, 1.0).unsqueeze(-1)
        acc_n = (a_n + g * n[..., 2:]) * n
        z_des = unit(acc_n + w * a_corr)
        acc = acc_n - env.model.drag_force(d.quat, d.vel) / env.params.mass
        act_strike = ctbr_from_thrust_direction(env, z_des, acc, gains=self.gains)
        striking = (tau <= Ts).unsqueeze(-1)
        return torch.where(striking, act_strike, act_approach)

    def serve_strike(self, target: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        """Serve actions ``[E, D, 4]`` into the ball dropped above the paddle, and the plan.

        Planned in the ball's free-falling frame, where gravity cancels: the paddle starts ``h`` below
        the ball at rest and closes in with the thrust acceleration ``f`` alone. The drone rises with
        its body level under the ball at a constant ``f`` chosen to arrive with the vertical closing
        speed ``V`` whose component along the required normal ``n`` gives the ball ``v_out``, and turns
        body z onto ``n`` the last ``serve_turn_time`` seconds (contact time, ``n`` and ``V`` depend
        on each other: a few fixed-point iterations).
        """
        env, p, g = self.env, self.p, GRAVITY
        d, bp = env.drones, env.cfg.ball
        ez = torch.tensor(EZ, device=env.device)
        gains = dataclasses.replace(self.gains, k_att=p.serve_k_att)
        f_max = env.params.max_thrust / env.params.mass
        bz = quat_rotate(d.quat, torch.zeros_like(d.pos) + ez)
        paddle = d.pos + env.cfg.paddle_offset * bz
        ball, ball_v = env.ball_pos.unsqueeze(1), env.ball_vel.unsqueeze(1)
        rel = ball - paddle  # ball minus paddle centre
        v0 = d.vel[..., 2] - ball_v[..., 2]  # vertical closing speed
        vf = torch.full_like(v0, p.serve_closing_guess)
        n = torch.zeros_like(d.pos) + ez
        f_plan = f_max * p.serve_plan_thrust
        for _ in range(p.serve_iterations):
            gap = (rel[..., 2] - bp.radius / n[..., 2].clamp(min=0.3)).clamp(min=1e-3)
            f = ((vf.square() - v0.square()) / (2 * gap)).clamp(p.min_thrust_acc, f_max * p.serve_thrust_frac)
            disc = (v0.square() + 2 * f * gap).clamp(min=0.0)
            t_c = 2 * gap / (v0 + disc.sqrt()).clamp(min=1e-3)
            pc = ball + ball_v * t_c.unsqueeze(-1) - 0.5 * g * ez * t_c.unsqueeze(-1).square()
            vc = ball_v - g * ez * t_c.unsqueeze(-1)
            v_max = (v0.square() + 2 * f_plan * gap).sqrt()
            v_out = self.outgoing_velocity(
                pc, vc, torch.full_like(v0, SERVE, dtype=torch.long), target, p.serve_tilt_weight, v_max
            )
            n, u = desired_paddle_normal(vc, v_out, bp.restitution_drone)
            closing = u - dot(vc, n).squeeze(-1)  # closing speed along n
            vf = closing / n[..., 2].clamp(min=0.3)
        gap = (rel[..., 2] - bp.radius / n[..., 2].clamp(min=0.3)).clamp(min=1e-3)
        f = ((vf.square() - v0.square()) / (2 * gap)).clamp(p.min_thrust_acc, f_max * p.serve_thrust_frac)
        drag = env.model.drag_force(d.quat, d.vel) / env.params.mass
        # Rise: body level under the ball (a slight offset against the drift of the turn), thrust f.
        heading = unit(torch.cat((n[..., :2], torch.zeros_like(n[..., 2:])), -1))
        err = rel - p.serve_back * heading
        a_xy = p.serve_kp * err[..., :2] - p.serve_kd * (d.vel[..., :2] - ball_v[..., :2])
        acc = torch.cat((a_xy, (f - g).unsqueeze(-1)), -1) + g * ez - drag
        acc = limit_tilt(acc, p.serve_max_tilt, min_up=p.min_thrust_acc)
        act_rise = ctbr_from_thrust_direction(env, unit(acc), acc, gains=gains)
        # Turn: body z onto n with the closing speed along n from the remaining gap along n.
        gap_n = (dot(rel, n).squeeze(-1) - bp.radius).clamp(min=1e-3)
        v0_n = dot(d.vel - ball_v, n).squeeze(-1)
        f_n = ((closing.square() - v0_n.square()) / (2 * gap_n)).clamp(p.min_thrust_acc, f_max)
        act_turn = ctbr_from_thrust_direction(env, n, f_n.unsqueeze(-1) * n - drag, gains=gains)
        act = torch.where((t_c <= p.serve_turn_time).unsqueeze(-1), act_turn, act_rise)
        return act, {"t": t_c, "pc": pc, "vc": vc, "v_out": v_out, "n": n, "u": u, "f": f}

    # ------------------------------------------------------------------ policy
    def __call__(self, obs=None) -> dict[str, Tensor]:
        env, p = self.env, self.p
        d = env.drones
        skill, target = env.skill_id, env.skill_target
        # Solo skills: after the hit, hold where the drone was, a little lower, out of the ball's way.
        new_touch = env.touched & ~self.was_touched
        self.hold = torch.where(
            new_touch.unsqueeze(-1), d.pos - torch.tensor((0.0, 0.0, 0.5), device=env.device), self.hold
        )
        self.was_touched = env.touched.clone()
        done = env.touched if not env.cfg.is_match else torch.zeros_like(env.touched)

        act_goto = position_ctbr(env, self.clamp_to_half(target), gains=self.gains)
        height = self.hit_height[skill]
        offset = env.cfg.ball.radius + env.cfg.paddle_offset
        # Ball play (pass, set, attack) is planned only for the drones that have it.
        E, D = skill.shape
        playing = ((skill == PASS) | (skill == SET) | (skill == ATTACK)) & ~done
        zeros3 = torch.zeros(E, D, 3, device=env.device)
        valid = torch.zeros(E, D, dtype=torch.bool, device=env.device)
        t, u = torch.zeros(E, D, device=env.device), torch.zeros(E, D, device=env.device)
        pc, vc, v_out, n, p_star = zeros3, zeros3, zeros3, zeros3, zeros3
        act_ball = torch.zeros(E, D, 4, device=env.device)
        if sync_free(env):  # every drone's row, kept where it plays: no index to wait for
            rows = self._all_rows
        else:  # the playing drones' rows only (~1 in 6 in a match): the index costs a host sync
            rows = playing.nonzero(as_tuple=True)
        if sync_free(env) or rows[0].numel() > 0:
            pred = cached_predict_ball(env, p.horizon_s, p.pred_dt)
            view = _RowView(env, rows, (pred[0][rows[0]], pred[1][rows[0]]))
            h = view.take(height)
            r_valid, r_t, r_pc, r_vc = self.interception(h, view)
            low_valid, low_t, low_pc, low_vc = self.interception(torch.full_like(h, p.low_height), view)
            use_low = ~r_valid & low_valid
            r_t = torch.where(use_low, low_t, r_t)
            r_pc = torch.where(use_low.unsqueeze(-1), low_pc, r_pc)
            r_vc = torch.where(use_low.unsqueeze(-1), low_vc, r_vc)
            r_valid = r_valid | low_valid
            r_v_out = self.outgoing_velocity(r_pc, r_vc, view.take(skill), view.take(target))
            r_n, r_u = desired_paddle_normal(r_vc, r_v_out, env.cfg.ball.restitution_drone)
            r_p_star = r_pc - offset * r_n
            r_valid = r_valid & view.take(playing)  # a row of a drone not playing the ball keeps no plan
            act_ball = view.put(self.strike(r_t, r_p_star, r_n, r_u, view), act_ball)
            valid, t, u = view.put(r_valid, valid), view.put(r_t, t), view.put(r_u, u)
            pc, vc, v_out = view.put(r_pc, pc), view.put(r_vc, vc), view.put(r_v_out, v_out)
            n, p_star = view.put(r_n, n), view.put(r_p_star, p_star)
        serving = skill == SERVE
        serve_plan: dict[str, Tensor] = {}
        # The serve's planner is costly: only while someone serves, unless that test would cost a host sync.
        if sync_free(env) or bool(serving.any()):
            act_serve, serve_plan = self.serve_strike(target)
            act_ball = torch.where(serving.unsqueeze(-1), act_serve, act_ball)
        act_hold = position_ctbr(env, self.clamp_to_half(self.hold), gains=self.gains)
        # No interception in sight: wait under the ball, in the own half, at the hitting height.
        wait = torch.cat((env.ball_pos[:, None, :2].expand(-1, d.pos.shape[1], 2), (height - offset).unsqueeze(-1)), -1)
        act_wait = position_ctbr(env, self.clamp_to_half(wait), gains=self.gains)
        act = torch.where((valid | serving).unsqueeze(-1), act_ball, act_wait)
        act = torch.where(done.unsqueeze(-1), act_hold, act)
        act = torch.where((skill == GOTO).unsqueeze(-1), act_goto, act)
        self.plan = {"valid": valid, "t": t, "pc": pc, "vc": vc, "v_out": v_out, "n": n, "u": u, "p_star": p_star}
        for k, v in serve_plan.items():
            if k in self.plan:
                self.plan[k] = torch.where(serving.unsqueeze(-1) if v.dim() == 3 else serving, v, self.plan[k])
        out, start = {}, 0
        for g, spec in env.spec.groups.items():  # groups hold consecutive drones (team A's first)
            out[g] = act[:, start : start + spec.n_agents]
            start += spec.n_agents
        return out
