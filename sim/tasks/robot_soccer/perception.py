"""What robot_soccer's robots observe, in the three observation modes (``cfg.observation``):

* ``state``: the privileged true state (:func:`.layout.state_terms`), the critic's input always;
* ``seen``: the state as the head camera can know it (:func:`.layout.seen_terms`): the ball and every other robot
  where each was last inside the camera's field of view (re-expressed in the robot's current frame, as odometry
  lets a robot do), their velocities only while in view, and the seconds since each was seen;
* ``vision``: the head camera's image (the baked radiance field with robots and ball composited on top,
  :mod:`.vision`, with per-episode pitch/height jitter and latency) and ``proprio``, beside ``seen``.

Every agent observes in its team's frame (its team attacks +x), vectors egocentric in the body frame.

Shapes: E envs, R robots (team_a first), P players per team, A camera robots (the agents'), D an entry's size.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch import Tensor

from sim.core.env import Obs
from sim.core.randomization import uniform
from sim.tasks.robot_soccer.config import RobotSoccerCfg
from sim.tasks.robot_soccer.constants import SEEN_AGE_CAP_S
from sim.tasks.robot_soccer.model import PITCH_HALF
from sim.tasks.robot_soccer.robots import RobotKind, rotate
from sim.tasks.robot_soccer.vision import FrameDelay, SoccerCameras

SEES = ("seen", "vision")  # the observation modes that keep what each camera last saw
BALL_AGE, OTHERS_AGE = slice(0, 1), slice(1, None)  # parts of the last axis of unseen_s and of the visibility
OTHER_SIZE, OTHER_VEL = 4, slice(2, 4)  # an other robot's block in the state: <other>_pos (2), <other>_vel (2)


class SoccerPerception:
    """The observation entries of every robot, and the camera memory behind ``seen`` and ``image``."""

    def __init__(
        self, cfg: RobotSoccerCfg, robot: RobotKind, num_envs: int, state_slices: Mapping[str, slice],
        side: Tensor, others: Tensor, device: torch.device,
    ) -> None:  # fmt: skip
        """``side [R]``: +1 team_a, -1 team_b (the attack direction); ``others [R, R-1]``: for each robot the other
        robots in observation order (teammates, then opponents)."""
        E, R, dev = num_envs, side.numel(), device
        self.cfg, self.robot, self.device = cfg, robot, device
        self.P, self.R = R // 2, R
        self.side, self.others = side, others
        self.slices = state_slices  # seen edits these parts of the state
        self.others_start = state_slices["mate0_pos" if self.P > 1 else "opponent0_pos"].start
        self.mode = cfg.observation
        # What each robot's camera last saw (observation=seen|vision): world positions and seconds since.
        self.seen_ball = torch.zeros(E, R, 2, device=dev)
        self.seen_others = torch.zeros(E, R, R - 1, 2, device=dev)
        self.unseen_s = torch.zeros(E, R, R, device=dev)  # [.., 0] the ball, [.., 1:] the others in obs order
        self.cameras: SoccerCameras | None = None
        if self.mode == "vision":
            # Cameras of the agent robots only (a scripted opponent needs no images).
            self.cam_ids = torch.arange(R if cfg.opponent == "none" else self.P, device=dev)
            A = self.cam_ids.numel()
            self.cameras = SoccerCameras(cfg, dev)
            self.pitch_jitter = torch.zeros(E, A, device=dev)
            self.height_jitter = torch.zeros(E, A, device=dev)
            self.frames = FrameDelay(cfg.randomization.max_latency_steps, E, dev)
            self.image = torch.zeros(E, A, cfg.camera.height, cfg.camera.width, 3, dtype=torch.uint8, device=dev)

    # ----------------------------------------------------------------- entries
    def state(self, s: dict[str, Tensor], action: Tensor) -> Tensor:
        """``state [E, R, D]`` for every robot (team_a first), layout :func:`.layout.state_terms`, from the env's
        state read ``s`` and the robots' last ``action [E, R, n]``; memoised in ``s`` (the scripted opponent reads
        the observation the step before computed)."""
        if "state" in s:
            return s["state"]
        pos, yaw, vel = s["pos"], s["yaw"], s["vel"]
        side = self.side.view(1, -1, 1)
        c, sn = torch.cos(yaw), torch.sin(yaw)

        def body(v: Tensor) -> Tensor:  # world vectors [E, R, 2] or [E, R, K, 2] into each robot's body frame
            if v.dim() == 4:
                return rotate(v, c.unsqueeze(-1), -sn.unsqueeze(-1))
            return rotate(v, c, -sn)

        goal_x = torch.tensor(PITCH_HALF[0], device=self.device)
        goal = torch.stack((goal_x * self.side, torch.zeros_like(self.side)), -1)  # [R, 2] attacked goal, world
        ball = s["ball"][:, None, :2]
        ball_vel = s["ball_vel"][:, None, :2].expand(-1, self.R, -1)
        others_pos = pos[:, self.others] - pos.unsqueeze(2)  # [E, R, R-1, 2]
        others_vel = vel[:, self.others]
        others = torch.cat((body(others_pos), body(others_vel)), -1).flatten(2)  # [E, R, (R-1) * 4]
        heading_team = torch.stack((c, sn), -1) * side  # yaw + pi for team_b
        parts = (
            pos * side,  # pos
            heading_team,  # heading
            body(vel),  # vel
            s["yaw_rate"].unsqueeze(-1),  # yaw_rate
            *self.robot.posture(s),  # the humanoid's height, gravity, joint_pos, joint_vel
            body(ball - pos),  # ball
            body(ball_vel),  # ball_vel
            body(goal - pos),  # goal
            body(-goal - pos),  # own_goal
            others,  # <other>_pos, <other>_vel for each other robot
            action,  # last_action
        )
        s["state"] = torch.cat(parts, -1)
        return s["state"]

    def seen(self, s: Mapping[str, Tensor], state: Tensor) -> Tensor:
        """``seen [E, R, D]`` (layout :func:`.layout.seen_terms`) from the state and what each camera last saw."""
        c, sn = torch.cos(s["yaw"]), torch.sin(s["yaw"])
        sl, others_start = self.slices, self.others_start
        ball_in = self.unseen_s[..., BALL_AGE] == 0  # [E, R, 1]
        others_in = self.unseen_s[..., OTHERS_AGE].unsqueeze(-1) == 0  # [E, R, R-1, 1]
        ball = rotate(self.seen_ball - s["pos"], c, -sn)
        others_pos = rotate(self.seen_others - s["pos"].unsqueeze(2), c.unsqueeze(-1), -sn.unsqueeze(-1))
        others = state[..., others_start : sl["last_action"].start].unflatten(-1, (self.R - 1, OTHER_SIZE))
        others = torch.cat((others_pos, torch.where(others_in, others[..., OTHER_VEL], 0.0)), -1).flatten(2)
        ball_vel = torch.where(ball_in, state[..., sl["ball_vel"]], 0.0)
        parts = (
            state[..., : sl["ball"].start],  # own pose, velocity (and posture)
            ball,  # ball (last seen)
            ball_vel,  # ball_vel (while in view)
            state[..., sl["ball_vel"].stop : others_start],  # goal, own_goal
            others,  # <other>_pos (last seen), <other>_vel (while in view)
            state[..., sl["last_action"]],  # last_action
            self.unseen_s,  # ball_unseen, <other>_unseen
        )
        return torch.cat(parts, -1)

    def observations(self, s: dict[str, Tensor], action: Tensor, groups: Mapping[str, slice]) -> Obs:
        """Every agent group's entries: ``groups`` maps each agent group to its robots' slice of the R axis."""
        state = self.state(s, action)
        obs = {g: {"state": state[:, sl]} for g, sl in groups.items()}
        if self.mode in SEES:
            seen = self.seen(s, state)
            for g, o in obs.items():
                o["seen"] = seen[:, groups[g]]
        if self.mode == "vision":
            proprio = self.robot.proprio(s, state, self.slices, action)
            for i, g in enumerate(obs):
                obs[g]["image"] = self.image[:, i * self.P : (i + 1) * self.P]
                obs[g]["proprio"] = proprio[:, groups[g]]
        return obs

    # ----------------------------------------------------------------- camera memory
    def in_view(self, s: Mapping[str, Tensor], points: Tensor) -> Tensor:
        """``[E, R, K]`` bool: world points ``[E, R, K, 3]`` inside each robot's camera view (:meth:`.robots.
        RobotKind.in_view`)."""
        return self.robot.in_view(s, points)

    def ball_in_view(self, s: Mapping[str, Tensor]) -> Tensor:
        """``[E, R]`` bool: the ball's centre lies inside each robot's camera field of view (no occlusion test)."""
        ball = s["ball"][:, None, None, :].expand(-1, self.R, 1, -1)
        return self.in_view(s, ball).squeeze(2)

    def look(self, s: Mapping[str, Tensor], env_ids: Tensor | None = None) -> None:
        """Update what each robot's camera last saw (all envs), or, for ``env_ids`` (a kickoff), set it to the true
        positions: at kickoff every robot knows where everything is placed."""
        pos3 = self.robot.poses(s)[0]
        ball3 = s["ball"][:, None, :].expand(-1, self.R, -1)
        ball, others = ball3[..., :2], pos3[:, self.others, :2]  # [E, R, 2], [E, R, R-1, 2]
        if env_ids is not None:
            self.seen_ball[env_ids] = ball[env_ids]
            self.seen_others[env_ids] = others[env_ids]
            self.unseen_s[env_ids] = 0.0
            return
        visible = self.in_view(s, torch.cat((ball3.unsqueeze(2), pos3[:, self.others]), 2))  # [E, R, R]
        dt = self.cfg.physics_dt * self.cfg.decimation
        self.unseen_s = torch.where(visible, 0.0, (self.unseen_s + dt).clamp(max=SEEN_AGE_CAP_S))
        self.seen_ball = torch.where(visible[..., BALL_AGE], ball, self.seen_ball)
        self.seen_others = torch.where(visible[..., OTHERS_AGE].unsqueeze(-1), others, self.seen_others)

    def render(self, s: Mapping[str, Tensor], env_ids: Tensor | None = None) -> Tensor:
        """The agent robots' current head-camera frames (no latency) of ``env_ids`` (all when None),
        ``uint8 [k, A, H, W, 3]``."""
        pitch, height = self.pitch_jitter, self.height_jitter
        return self.robot.render(self.cameras, s, s["ball"], self.cam_ids, pitch, height, env_ids)

    def reset(self, s: Mapping[str, Tensor], env_ids: Tensor, rng: torch.Generator) -> None:
        """At kickoff: the cameras know where everything is; per-episode camera randomisation (pitch, height,
        latency) and a fresh frame history."""
        if self.mode in SEES:
            self.look(s, env_ids)
        if self.mode != "vision":
            return
        r, k, dev = self.cfg.randomization, env_ids.numel(), self.device
        A = self.cam_ids.numel()
        on = float(r.enabled)
        pitch = math.radians(r.camera_pitch_deg) * on
        self.pitch_jitter[env_ids] = uniform(-pitch, pitch, (k, A), rng, dev)
        self.height_jitter[env_ids] = uniform(-r.camera_height_m * on, r.camera_height_m * on, (k, A), rng, dev)
        delay = torch.randint(0, r.max_latency_steps + 1, (k,), generator=rng, device=dev) if r.enabled else 0
        frames = self.render(s, env_ids)
        self.frames.reset(env_ids, frames, torch.as_tensor(delay, device=dev).expand(k))
        latest = frames if self.frames.buffer is None else self.frames.read()[env_ids]
        self.image = self.image.index_copy(0, env_ids, latest)

    def update(self, s: Mapping[str, Tensor]) -> None:
        """After a control step: what the cameras see now, and the newest frame into the latency buffer."""
        if self.mode in SEES:
            self.look(s)
        if self.mode == "vision":
            self.image = self.frames.push(self.render(s))
