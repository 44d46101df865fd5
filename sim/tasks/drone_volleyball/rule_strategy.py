"""The rule-based match strategy of drone_volleyball (the scripted team's high level) and the
:class:`TeamPlan` through which a learned strategy steers it (HCSP's rule layer)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from sim.tasks.drone_volleyball.ballistics import cached_predict_ball
from sim.tasks.drone_volleyball.court import mirror
from sim.tasks.drone_volleyball.skills import ATTACK, GOTO, PASS, SERVE, SET


class RuleBasedStrategy:
    """Rule-based match strategy: ``strategy(obs) -> (skill_id [E, D] long, target [E, D, 3] world)``.

    - Before the serve the designated server serves directly over the net (landing target
      ``serve_target``, in the opponent court) and everyone else holds a home position of the
      starting formation.
    - Afterwards the ball's interception point (where it comes down through ``hit_height``, else
      ``low_height``) picks the team in possession (the half it falls in); that team's drone
      nearest to it, other than the last toucher, plays the ball: pass (apex halfway to the setter
      point), set (apex halfway to the attack point) or attack (to the opponent court) by the team's
      touch count. Everyone else holds home. Points are in each team's frame (own half x < 0).

    Feed it through ``env.set_skill_commands(skill_id, target, team_frame=False)`` before
    :class:`ScriptedSkills` acts.

    A learned strategy steers it with a :class:`TeamPlan` per env and team (``__call__(plan=...)``):
    which drone plays the ball, whether the next touch attacks at once, where serves and attacks
    land, and the formation; without one (or where a plan entry says so) the rules above decide.
    """

    def __init__(
        self,
        env,
        hit_height: float = 2.5,
        low_height: float = 1.5,
        setter_point: tuple[float, float] = (-2.5, 0.0),
        attack_point: tuple[float, float] = (-1.3, 0.0),
        pass_apex: float = 3.5,
        set_apex: float = 3.8,
        attack_target: tuple[float, float, float] = (3.5, 0.0, 0.0),
        serve_target: tuple[float, float, float] = (3.5, 0.0, 0.0),
        home: tuple[tuple[float, float, float], ...] | None = None,
    ) -> None:
        if not env.cfg.is_match:
            raise ValueError("RuleBasedStrategy plays matches (modes 1v1, 2v2, 3v3)")
        self.env = env
        self.hit_height, self.low_height = hit_height, low_height
        dev, n, D = env.device, env.n, env.num_drones
        team_b = env.flip[0]  # [D]

        def world(p: tuple[float, float, float]) -> Tensor:  # team frame -> world, [D, 3]
            return mirror(torch.tensor(p, device=dev).expand(D, 3), team_b)

        self.setter_point = world((*setter_point, pass_apex))
        self.attack_point = world((*attack_point, set_apex))
        self.attack_target = world(attack_target)
        self.serve_target = world(serve_target)
        if home is None:  # receiver deep, setter and attacker near their points (team frame)
            home = ((-4.0, -1.0, 2.0), (-2.6, 1.0, 2.0), (-1.6, -0.6, 2.2))[:n] if n <= 3 else None
        if home is None or len(home) != n:
            raise ValueError(f"give {n} home positions")
        base = torch.tensor(home, device=dev, dtype=torch.float32)
        self.home = mirror(torch.cat((base, base)), team_b)  # [D, 3]

    def interception_point(self) -> tuple[Tensor, Tensor]:
        """``(valid [E], point [E, 3])``: where the ball comes down through the hitting height."""
        env = self.env
        pos, vel = cached_predict_ball(env, 3.0, 0.02)
        z_prev = torch.cat((env.ball_pos[:, 2:], pos[:, :-1, 2]), -1)
        valid = torch.zeros(env.num_envs, dtype=torch.bool, device=env.device)
        point = env.ball_pos.clone()
        for h in (self.low_height, self.hit_height):  # the higher crossing wins where both exist
            cross = (pos[..., 2] <= h) & (z_prev > h) & (vel[..., 2] < 0)
            idx = cross.long().argmax(-1)
            p = pos.gather(1, idx.view(-1, 1, 1).expand(-1, 1, 3)).squeeze(1)
            point = torch.where(cross.any(-1).unsqueeze(-1), p, point)
            valid = valid | cross.any(-1)
        return valid, point

    def __call__(self, obs=None, plan: TeamPlan | None = None) -> tuple[Tensor, Tensor]:
        env, ru = self.env, self.env.rules
        E, D, dev = env.num_envs, env.num_drones, env.device
        team = env.team_of  # [D]
        skill = torch.full((E, D), GOTO, dtype=torch.long, device=dev)
        target = self.home.expand(E, D, 3).clone() if plan is None else plan.world_home(env)
        drone_idx = torch.arange(D, device=dev)
        valid, point = self.interception_point()
        side = (point[:, 0] >= 0).long()  # team in possession
        count = torch.where(ru.last_team == side, ru.touches, 0)
        play_skill = torch.stack(
            (torch.full_like(count, PASS), torch.full_like(count, SET), torch.full_like(count, ATTACK)), -1
        )
        play_skill = play_skill.gather(1, count.clamp(0, 2).unsqueeze(-1)).squeeze(-1)  # [E]
        dist = torch.linalg.vector_norm((env.drones.pos - point.unsqueeze(1))[..., :2], dim=-1)  # [E, D]
        eligible = (team == side.unsqueeze(-1)) & (drone_idx != ru.last_toucher.unsqueeze(-1))
        chosen = torch.where(eligible, dist, math.inf).argmin(-1)  # [E]
        attack_target = self.attack_target.expand(E, D, 3)
        serve_target = self.serve_target.expand(E, D, 3)
        if plan is not None:
            rows = torch.arange(E, device=dev)
            # The planned player (a team-local index; -1 = nearest) where it may play the ball.
            pick = plan.player[rows, side]  # [E]
            pick_d = (side * env.n + pick).clamp(0, D - 1)
            ok = (pick >= 0) & eligible[rows, pick_d]
            chosen = torch.where(ok, pick_d, chosen)
            # Attack now: a team that touched once already may attack with its next touch.
            now = plan.attack_now[rows, side] & (count >= 1)
            play_skill = torch.where(now, ATTACK, play_skill)
            attack_target = serve_target = plan.world_hit_target(env)
        player = torch.nn.functional.one_hot(chosen, D).bool() & (valid & ru.served).unsqueeze(-1)

        # Pass / set: the apex halfway between the interception and the next player's point, so that
        # the ball comes down through the hitting height there.
        def apex_between(p: Tensor) -> Tensor:  # p [D, 3] -> [E, D, 3]
            mid = 0.5 * (point[:, None, :2] + p[:, :2])
            return torch.cat((mid, p[:, 2:].expand(E, D, 1)), -1)

        play_target = torch.stack(
            (apex_between(self.setter_point), apex_between(self.attack_point), attack_target)
        )  # [3, E, D, 3]
        play_target = play_target.gather(0, (play_skill - PASS).clamp(0, 2).view(1, E, 1, 1).expand(1, E, D, 3))[0]
        skill = torch.where(player, play_skill.unsqueeze(-1), skill)
        target = torch.where(player.unsqueeze(-1), play_target, target)
        # The serve.
        server = torch.nn.functional.one_hot(ru.server, D).bool() & ~ru.served.unsqueeze(-1)
        skill = torch.where(server, SERVE, skill)
        target = torch.where(server.unsqueeze(-1), serve_target, target)
        return skill, target


@dataclass
class TeamPlan:
    """A strategy's per-env choices for both teams, in each team's own frame (own half x < 0).

    ``player [E, 2]`` long: team-local index of the drone that plays the ball (-1: the nearest
    eligible; an ineligible pick also falls back to it). ``attack_now [E, 2]`` bool: attack with the
    team's next touch (from its second touch on). ``hit_target [E, 2, 3]``: landing point of the
    team's serves and attacks. ``home [E, 2, n, 3]``: where the drones not playing the ball wait.
    """

    player: Tensor
    attack_now: Tensor
    hit_target: Tensor
    home: Tensor

    def world_hit_target(self, env) -> Tensor:
        """``[E, D, 3]`` world frame, each drone its team's target."""
        return mirror(self.hit_target[:, env.team_of], env.flip)

    def world_home(self, env) -> Tensor:
        """``[E, D, 3]`` world frame."""
        return mirror(self.home.flatten(1, 2), env.flip)
