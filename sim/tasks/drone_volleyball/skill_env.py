"""drone_volleyball's solo skill tasks: one drone of team A learns a skill (``cfg.mode``).

``goto`` (fly to a target point), ``serve`` (drop the ball on the own paddle and send it into the
opponent court, near a landing target), ``pass`` (a ball served from team B's half: send it to the
setter point), ``set`` (a teammate's pass: send it to the attack point near the net), ``attack``
(a set near the net: hit it into the opponent court, near a landing target). Group ``team_a``
with one agent; its ``policy`` observation is the ``skill`` one. The bodies, physics and
observations are :class:`~sim.tasks.drone_volleyball.env.DroneVolleyballEnv`'s.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from sim.core.randomization import uniform
from sim.physics.quaternion import quat_rotate
from sim.physics.rigid_body import GRAVITY
from sim.tasks.drone_volleyball import rules as R
from sim.tasks.drone_volleyball.config import SKILL_IDS, VolleyballCfg
from sim.tasks.drone_volleyball.court import in_court
from sim.tasks.drone_volleyball.env import DroneVolleyballEnv


class VolleyballSkillEnv(DroneVolleyballEnv):
    """A solo skill (modes goto, serve, pass, set, attack); see the module docstring. ``D = 1``."""

    def __init__(
        self,
        cfg: VolleyballCfg,
        num_envs: int,
        device: str | torch.device = "cpu",
        seed: int = 0,
        compile: bool = False,
    ) -> None:
        if cfg.is_match:
            raise ValueError(f"mode {cfg.mode!r} is a match: VolleyballMatchEnv plays it")
        self.num_drones = 1
        super().__init__(cfg, num_envs, device, seed, compile)
        # Min distance of the ball to the target after the hit (pass, set).
        self.miss = torch.full((num_envs,), math.inf, device=self.device)
        self._ending = torch.zeros(num_envs, dtype=torch.bool, device=self.device)  # see _post_physics
        self.reset()

    def expert_policy(self):
        """The scripted skills, ``obs -> {"team_a": [E, 1, 4]}``."""
        from sim.tasks.drone_volleyball.skills import ScriptedSkills

        return ScriptedSkills(self)

    # ----------------------------------------------------------------- reset
    def _reset_idx(self, env_ids: Tensor) -> None:
        self._reset_skill(env_ids)
        self._set_action_delay(env_ids, self._action_delay_draws(env_ids.numel()))  # after the skill's draws
        self._reset_actuators(env_ids)
        self.miss[env_ids] = math.inf
        self.landed_at[env_ids] = 0.0

    def _reset_skill(self, env_ids: Tensor) -> None:
        cfg, lc, k, dev, rng = self.cfg, self.cfg.launch, env_ids.numel(), self.device, self.rng
        mode = cfg.mode
        self.rules.reset(env_ids)  # team A serves with drone 0
        if mode == "goto":
            box = lc.goto_box
            start = torch.stack([uniform(box[2 * i], box[2 * i + 1], (k,), rng, dev) for i in range(3)], -1)
            target = torch.stack([uniform(box[2 * i], box[2 * i + 1], (k,), rng, dev) for i in range(3)], -1)
            self._place_drones(env_ids, start.unsqueeze(1))
            self.ball_pos[env_ids] = torch.tensor((0.0, 0.0, -10.0), device=dev)  # parked below the floor
            self.ball_vel[env_ids] = 0.0
            self.skill_target[env_ids] = target.unsqueeze(1)
        elif mode == "serve":
            y = uniform(-lc.lateral / 2, lc.lateral / 2, (k,), rng, dev)
            start = torch.stack((torch.full_like(y, lc.serve_x), y, torch.full_like(y, cfg.serve_height)), -1)
            self._place_drones(env_ids, start.unsqueeze(1))
            drop = uniform(*lc.serve_height, (k,), rng, dev)
            self.ball_pos[env_ids] = start + torch.stack(
                (torch.zeros_like(y), torch.zeros_like(y), cfg.paddle_offset + drop), -1
            )
            self.ball_vel[env_ids] = 0.0
            self.skill_target[env_ids] = self._landing_target(k).unsqueeze(1)
        else:
            # pass / set / attack: a ball launched on a ballistic arc towards the drone.
            if mode == "pass":
                x0 = uniform(*lc.incoming_from_x, (k,), rng, dev)
                x1 = uniform(*lc.incoming_to_x, (k,), rng, dev)
                apex = uniform(*lc.incoming_apex, (k,), rng, dev)
                target = torch.tensor(lc.pass_target, device=dev).expand(k, 3)
                # Served by team B: A's first touch comes after the legal crossing.
                self.rules.reset(env_ids, serving_team=1, server=1)
                self.rules.served = self.rules.served.index_fill(0, env_ids, True)
            elif mode == "set":
                x0 = uniform(*lc.set_from, (k,), rng, dev)
                x1 = uniform(-2.0, -1.0, (k,), rng, dev)
                apex = uniform(4.0, 5.0, (k,), rng, dev)
                target = torch.tensor(lc.set_target, device=dev).expand(k, 3)
            else:  # attack
                x0 = uniform(*lc.attack_from, (k,), rng, dev)
                x1 = uniform(-1.5, -0.8, (k,), rng, dev)
                apex = uniform(4.0, 4.8, (k,), rng, dev)
                target = self._landing_target(k)
            y0 = uniform(-lc.lateral / 2, lc.lateral / 2, (k,), rng, dev)
            y1 = uniform(-lc.lateral / 2, lc.lateral / 2, (k,), rng, dev)
            z0 = torch.full_like(x0, 2.5)
            # Drag-free ballistic launch to reach `apex` and come down at (x1, y1) at hitting height 2.5 m.
            vz = torch.sqrt(2 * GRAVITY * (apex - z0))
            t = vz / GRAVITY + torch.sqrt(2 * (apex - 2.5) / GRAVITY)
            self.ball_pos[env_ids] = torch.stack((x0, y0, z0), -1)
            self.ball_vel[env_ids] = torch.stack(((x1 - x0) / t, (y1 - y0) / t, vz), -1)
            start = torch.stack(
                (
                    x1 + uniform(-0.8, 0.8, (k,), rng, dev),
                    y1 + uniform(-0.8, 0.8, (k,), rng, dev),
                    torch.full_like(x1, 1.8),
                ),
                -1,
            )
            self._place_drones(env_ids, start.unsqueeze(1))
            self.skill_target[env_ids] = target.unsqueeze(1)
        self.ball_prev[env_ids] = self.ball_pos[env_ids]
        self.skill_id[env_ids] = SKILL_IDS[mode]

    def _landing_target(self, k: int) -> Tensor:
        lc, dev = self.cfg.launch, self.device
        x = uniform(*lc.landing_x, (k,), self.rng, dev)
        y = uniform(-lc.lateral, lc.lateral, (k,), self.rng, dev)
        return torch.stack((x, y, torch.zeros_like(x)), -1)

    # ----------------------------------------------------------------- after the physics
    def _after_rules(self) -> None:
        if self.cfg.mode in ("pass", "set"):
            dist = torch.linalg.vector_norm(self.ball_pos - self.skill_target[:, 0], dim=-1)
            self.miss = torch.where(self.touched[:, 0], torch.minimum(self.miss, dist), self.miss)

    def _policy_obs(self, skill: Tensor, ids: Tensor | None = None) -> Tensor:
        return skill

    # ----------------------------------------------------------------- rewards, terminations
    def _terminations(self) -> tuple[Tensor, dict[str, Tensor]]:
        ev = self.events
        crash = self.drone_crash.any(-1) | ~torch.isfinite(self.drones.pos).all(-1).all(-1)
        out = self.drone_out.any(-1)
        if self.cfg.mode == "goto":
            return crash | out, {"crash": crash, "out": out}
        # Ball skills end when the ball lands, the rally ends, or the drone touches twice.
        double = self.hits.any(-1) & (self.touched & ~self.hits).any(-1)
        ended = self.ball_ground | ev.rally_over | double
        return crash | out | ended, {"crash": crash, "out": out, "ball_down": ended}

    def _upright(self) -> Tensor:
        q = self.drones.quat
        return 1 - 2 * (q[..., 1].square() + q[..., 2].square())  # R[2, 2], [E, D]

    def _rewards(self, terminated: Tensor) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        rc, d, mode = self.cfg.skill_rewards, self.drones, self.cfg.mode
        crash = (self.drone_crash | self.drone_out).float()
        terms = {
            "upright": rc.upright * self._upright(),
            "ang_vel": rc.ang_vel * d.ang_vel.square().sum(-1),
            "crash": rc.crash * crash,
        }
        if mode == "goto":
            dist = torch.linalg.vector_norm(self.skill_target - d.pos, dim=-1)
            terms["approach"] = torch.exp(-dist)
        else:
            center = d.pos + quat_rotate(d.quat, self.paddle_offset.expand_as(d.pos))
            gap = torch.linalg.vector_norm(self.ball_pos.unsqueeze(1) - center, dim=-1)
            terms["approach"] = rc.approach * torch.exp(-gap) * (~self.touched).float()
            first_hit = self.events.valid_hit[:, :1] & ~(self.touched & ~self.hits)
            terms["hit"] = rc.hit * first_hit.float()
            end = terminated.unsqueeze(-1).float()
            ok, miss = self.skill_outcome()
            terms["delivery"] = rc.delivery * end * torch.exp(-miss / rc.delivery_sigma).unsqueeze(-1)
            if mode in ("serve", "attack"):
                # Pass and set end in the own court by design (no teammate plays on): no fault term there.
                terms["in_court"] = rc.in_court * end * ok.float().unsqueeze(-1)
                fault = self.events.rally_over & (self.events.fault_team == 0)
                terms["fault"] = rc.fault * fault.float().unsqueeze(-1)
        reward = torch.stack(list(terms.values())).sum(0)
        return {"team_a": reward}, {k: v.mean(-1) for k, v in terms.items()}

    def skill_outcome(self) -> tuple[Tensor, Tensor]:
        """``(success [E] bool, miss [E] m)`` of the current ball skill, valid at the end of the flight.

        serve / attack: the ball, hit by the drone, landed in the opponent court; miss = distance of
        the landing point to the landing target. pass / set: miss = closest distance of the ball to
        the target after the hit; success = miss < 1 m.
        """
        mode, E = self.cfg.mode, self.num_envs
        hit = self.touched[:, 0]
        if mode in ("serve", "attack"):
            landed = self.ball_ground | (self.landed_at.abs().sum(-1) > 0)
            xy = self.landed_at
            opp = in_court(xy, self.cfg.court) & (xy[:, 0] > 0)
            miss = torch.linalg.vector_norm((xy - self.skill_target[:, 0])[:, :2], dim=-1)
            miss = torch.where(hit & landed, miss, torch.full((E,), 10.0, device=self.device))
            return hit & landed & opp & ~self.ball_net, miss
        if mode in ("pass", "set"):
            miss = torch.where(hit, self.miss, torch.full((E,), 10.0, device=self.device)).clamp(max=10.0)
            return hit & (miss < 1.0), miss
        return torch.zeros(E, dtype=torch.bool, device=self.device), torch.zeros(E, device=self.device)

    def _post_physics(self):
        out = super()._post_physics()
        # The envs whose episode ends this step, as step() finds them: _episode_metrics_per_env pops their counters.
        self._ending = out[3] | (self.episode_step >= self.max_episode_steps)
        return out

    def _episode_metrics_per_env(self) -> dict[str, Tensor]:
        """Per env ``[E]``: ``events/<name>`` (the rules' counters; popped where an episode ends this step, and kept
        in ``final_counters``, by mask) and the skill's metrics."""
        done = self._ending
        table = self.rules.pop_counter_table_where(done)  # [K, E]
        final = torch.where(done, table, torch.stack([self.final_counters[name] for name in R.COUNTER_NAMES]))
        self.final_counters = dict(zip(R.COUNTER_NAMES, final.unbind(0), strict=True))
        out = {f"events/{name}": row for name, row in zip(R.COUNTER_NAMES, table.unbind(0), strict=True)}
        if self.cfg.mode == "goto":
            out["metrics/final_dist_m"] = torch.linalg.vector_norm(self.skill_target - self.drones.pos, dim=-1)
        else:
            ok, miss = self.skill_outcome()
            out["metrics/success"] = ok.float()
            out["metrics/miss_m"] = miss
            out["metrics/hit"] = self.touched[:, 0].float()
        return out

    def step_metrics(self) -> dict[str, Tensor]:
        """Per-env metrics now: skills ``success``/``miss_m`` (final at the end of the flight), goto distance."""
        if self.cfg.mode == "goto":
            return {"dist_m": torch.linalg.vector_norm(self.skill_target - self.drones.pos, dim=-1)[:, 0]}
        ok, miss = self.skill_outcome()
        return {"success": ok.float(), "miss_m": miss}
