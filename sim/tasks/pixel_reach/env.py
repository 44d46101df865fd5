"""pixel_reach: a point robot that sees only a rendered image and must drive onto a target.

The model task for image observations (Core v2): the actor's only input is the ``image`` entry,
``uint8 [48, 48, 3]``, an egocentric top-down camera rasterised in torch
(:mod:`sim.render.raster`) for the whole batch at once:

    red    the target, an anti-aliased disc (so sub-pixel offsets show)
    green  the robot's own marker at the image centre
    blue   the arena floor (where the robot may go), dim

The critic sees the privileged ``state`` (target offset, position, time left): an asymmetric
actor-critic, the norm for vision policies. Without the image nothing tells the robot where the
target is, so a blind policy cannot beat chance (``zero`` actions: ~0% success).

Dynamics (velocity control, one agent in group ``robot``): ``p' = clip(p + max_speed * a * dt)``
to the arena. Reward per step: ``-|target - p|``, ``+1`` while within ``success_radius``, a small
action cost. Success: the final distance is below ``success_radius`` (0.1 m). Shapes: E envs.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from sim.core.env import MultiAgentEnv, Obs
from sim.core.randomization import uniform
from sim.core.spec import EnvSpec, GroupSpec, ObsEntry, ObsTerm
from sim.render.raster import box_coverage, disc_coverage, pixel_centers, to_uint8
from sim.tasks.pixel_reach.config import PixelReachCfg

GROUP = "robot"


class PixelReachEnv(MultiAgentEnv):
    """Batched image-based reaching; see the module docstring."""

    task_name = "pixel_reach"
    cfg_class = PixelReachCfg
    best_metric = ("metrics/success", "max")
    success_criteria: ClassVar = {"dist_m": 0.1}  # = PixelReachCfg.success_radius
    evaluation_window_s = 0.1  # the last step: success is where the robot ends, not how it got there

    def __init__(
        self,
        cfg: PixelReachCfg,
        num_envs: int,
        device: str | torch.device = "cpu",
        seed: int = 0,
        compile: bool = False,
    ) -> None:
        super().__init__(cfg, num_envs, device, seed, compile)
        E, dev = num_envs, self.device
        self.pos = torch.zeros(E, 2, device=dev)
        self.target = torch.zeros(E, 2, device=dev)
        self.action = torch.zeros(E, 2, device=dev)
        size = cfg.image_size
        self._pixels = pixel_centers(size, size, cfg.view_half_extent, dev)
        self._pixel_size = 2 * cfg.view_half_extent / size
        self._image = torch.zeros(E, 1, size, size, 3, dtype=torch.uint8, device=dev)
        self.reset()

    # ----------------------------------------------------------------- spec
    def _build_spec(self) -> EnvSpec:
        cfg, s = self.cfg, self.cfg.image_size
        state_terms = (
            ObsTerm("target_rel", 2, "m", "world", "target minus own position"),
            ObsTerm("pos", 2, "m", "world", "own position"),
            ObsTerm("time_left", 1, "fraction"),
        )
        image = ObsEntry(
            (s, s, 3),
            torch.uint8,
            kind="image",
            units="RGB 0-255",
            description=f"egocentric top-down view, +-{cfg.view_half_extent:g} m, +x right, +y up; "
            "red target, green self, blue arena",
        )
        group = GroupSpec(
            n_agents=1,
            observations={"image": image, "state": ObsEntry((5,), terms=state_terms)},
            action_dim=2,
            action_names=("vel_x", "vel_y"),
            action_units=("m/s", "m/s"),
            action_scale=(cfg.max_speed,) * 2,
            actor_obs=("image",),
            critic_obs=("state",),
        )
        return EnvSpec(
            task=self.task_name,
            groups={GROUP: group},
            control_dt=cfg.control_dt,
            physics_dt=cfg.control_dt,
            max_episode_steps=round(cfg.episode_length_s / cfg.control_dt),
        )

    # ----------------------------------------------------------------- reset and step
    def _reset_idx(self, env_ids: Tensor) -> None:
        cfg, k, dev = self.cfg, env_ids.numel(), self.device
        a = cfg.arena_half
        pos = uniform(-a, a, (k, 2), self.rng, dev)
        target = uniform(-a, a, (k, 2), self.rng, dev)
        # Targets too close to the start are pushed out along the offset (no free successes).
        offset = target - pos
        dist = torch.linalg.vector_norm(offset, dim=-1, keepdim=True).clamp(min=1e-6)
        pushed = (pos + offset / dist * cfg.min_start_dist).clamp(-a, a)
        target = torch.where(dist < cfg.min_start_dist, pushed, target)
        self.pos[env_ids] = pos
        self.target[env_ids] = target
        self.action[env_ids] = 0.0
        self._image = self._image.index_copy(0, env_ids, self._render(env_ids))

    def _apply_actions(self, actions: dict[str, Tensor]) -> None:
        self.action = actions[GROUP][:, 0].clamp(-1.0, 1.0)

    def _control_step(self) -> None:
        cfg = self.cfg
        self.pos = (self.pos + cfg.max_speed * self.action * cfg.control_dt).clamp(-cfg.arena_half, cfg.arena_half)

    # ----------------------------------------------------------------- observations
    def _render(self, env_ids: Tensor | None = None) -> Tensor:
        """The egocentric camera image of ``env_ids`` (all when None), ``uint8 [k, 1, H, W, 3]``."""
        cfg = self.cfg
        pos = self.pos if env_ids is None else self.pos[env_ids]
        target = self.target if env_ids is None else self.target[env_ids]
        px = self._pixel_size
        red = disc_coverage(self._pixels, target - pos, cfg.target_draw_radius, px)
        green = disc_coverage(self._pixels, torch.zeros_like(pos), cfg.robot_draw_radius, px)
        blue = 0.4 * box_coverage(self._pixels, -cfg.arena_half - pos, cfg.arena_half - pos)
        return to_uint8(torch.stack((red, green, blue), -1)).unsqueeze(1)

    def _update_observation_buffers(self) -> None:
        self._image = self._render()

    def _observations(self) -> Obs:
        return {GROUP: {"image": self._image, "state": self._state()}}

    def _state(self) -> Tensor:
        time_left = 1.0 - self.episode_step.float() / self.max_episode_steps
        return torch.cat((self.target - self.pos, self.pos, time_left.unsqueeze(-1)), -1).unsqueeze(1)

    # ----------------------------------------------------------------- rewards, metrics
    def distance(self) -> Tensor:
        """``[E]`` m from the robot to its target."""
        return torch.linalg.vector_norm(self.target - self.pos, dim=-1)

    def step_metrics(self) -> dict[str, Tensor]:
        return {"dist_m": self.distance()}

    def _rewards(self, terminated: Tensor) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        rc, dist = self.cfg.rewards, self.distance()
        raw = {
            "distance": dist,
            "at_target": (dist < self.cfg.success_radius).float(),
            "action": self.action.square().sum(-1),
        }
        weighted = {name: getattr(rc, name) * val for name, val in raw.items()}
        reward = torch.stack(list(weighted.values())).sum(0)
        return {GROUP: reward.unsqueeze(-1)}, weighted

    def _terminations(self) -> tuple[Tensor, dict[str, Tensor]]:
        return torch.zeros(self.num_envs, dtype=torch.bool, device=self.device), {}

    def _episode_metrics_per_env(self) -> dict[str, Tensor]:
        dist = self.distance()
        return {"metrics/final_dist_m": dist, "metrics/success": (dist < self.cfg.success_radius).float()}

    def deployment_profile(self, group: str = GROUP) -> dict:
        """ROS deployment (:mod:`deploy_ros.profile`): the ``image`` entry straight from the robot's
        camera (``sensor_msgs/Image``, rgb8/bgr8 of the trained size); the command is the velocity in
        m/s, safe = stop."""
        return {
            "inputs": {"camera": {"msg": "sensor_msgs/Image", "topic": "camera/image", "qos": "sensor", "stale": True}},
            "observations": {"image": {"builder": "image", "from": ["camera"]}},
            "command": {"msg": "std_msgs/Float32MultiArray", "topic": "command", "safe": [0.0, 0.0]},
        }

    def expert_policy(self):
        """The privileged straight-line controller (the hand-written baseline: it reads the true
        target, which the learned policy must find in the image)."""
        return lambda obs: {GROUP: self.reach_actions(self.target - self.pos)}

    def reach_actions(self, offset: Tensor) -> Tensor:
        """Velocity command straight at ``offset [E, 2]`` (m), saturating: ``[E, 1, 2]`` in [-1, 1]."""
        gain = 1.0 / (self.cfg.max_speed * self.cfg.control_dt)  # arrive in one step when close
        cmd = offset * gain
        norm = torch.linalg.vector_norm(cmd, dim=-1, keepdim=True).clamp(min=1.0)
        return (cmd / norm).unsqueeze(1)
