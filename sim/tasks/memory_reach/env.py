"""memory_reach: drive onto a target that is visible only during the first steps of the episode.

The model task for recurrent policies (Core v2). The actor's ``policy`` vector holds its own
position, the target position (zeros after the cue) and a cue flag:

    pos          2   m      own position (world)
    cue_target   2   m      the target's position during the first ``cue_steps`` steps, then 0
    cue          1   -      1 while the target is shown, then 0

Targets start at least ``min_start_dist`` (0.8 m) from the robot, farther than it can drive while
the cue lasts (2 steps x 0.1 m), so a memoryless (MLP) policy is left at chance once the cue is
gone: it must remember the target (a GRU/LSTM, ``algo.policy.memory=gru``). The critic sees the
privileged ``state`` (target offset, position, time left), so only the actor needs memory.

Dynamics (velocity control, one agent in group ``robot``): ``p' = clip(p + max_speed * a * dt)``.
Reward per step: ``-|target - p|``, ``+1`` within ``success_radius``, a small action cost. Success:
the final distance is below ``success_radius`` (0.1 m). Shapes: E envs.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from sim.core.env import MultiAgentEnv, Obs
from sim.core.randomization import uniform
from sim.core.spec import EnvSpec, GroupSpec, ObsEntry, ObsTerm
from sim.tasks.memory_reach.config import MemoryReachCfg

GROUP = "robot"


class MemoryReachEnv(MultiAgentEnv):
    """Batched reaching to a target that is shown only at the start; see the module docstring."""

    task_name = "memory_reach"
    cfg_class = MemoryReachCfg
    best_metric = ("metrics/success", "max")
    success_criteria: ClassVar = {"dist_m": 0.1}  # = MemoryReachCfg.success_radius
    evaluation_window_s = 0.1  # the last step: success is where the robot ends, not how it got there

    def __init__(
        self,
        cfg: MemoryReachCfg,
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
        self.reset()

    # ----------------------------------------------------------------- spec
    def _build_spec(self) -> EnvSpec:
        cfg = self.cfg
        terms = (
            ObsTerm("pos", 2, "m", "world", "own position"),
            ObsTerm("cue_target", 2, "m", "world", "target position while the cue is shown, else 0"),
            ObsTerm("cue", 1, "", "", "1 while the target is shown"),
        )
        state_terms = (
            ObsTerm("target_rel", 2, "m", "world", "target minus own position"),
            ObsTerm("pos", 2, "m", "world", "own position"),
            ObsTerm("time_left", 1, "fraction"),
        )
        group = GroupSpec(
            n_agents=1,
            observations={"policy": ObsEntry((5,), terms=terms), "state": ObsEntry((5,), terms=state_terms)},
            action_dim=2,
            action_names=("vel_x", "vel_y"),
            action_units=("m/s", "m/s"),
            action_scale=(cfg.max_speed,) * 2,
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
        # Targets closer than min_start_dist are redrawn a fixed number of times (batched, no Python
        # loop over envs); what is still too close after 8 redraws is negligible.
        target = uniform(-a, a, (k, 2), self.rng, dev)
        for _ in range(8):
            close = torch.linalg.vector_norm(target - pos, dim=-1) < cfg.min_start_dist
            target = torch.where(close.unsqueeze(-1), uniform(-a, a, (k, 2), self.rng, dev), target)
        self.pos[env_ids] = pos
        self.target[env_ids] = target
        self.action[env_ids] = 0.0

    def _apply_actions(self, actions: dict[str, Tensor]) -> None:
        self.action = actions[GROUP][:, 0].clamp(-1.0, 1.0)

    def _control_step(self) -> None:
        cfg = self.cfg
        self.pos = (self.pos + cfg.max_speed * self.action * cfg.control_dt).clamp(-cfg.arena_half, cfg.arena_half)

    # ----------------------------------------------------------------- observations
    def _update_observation_buffers(self) -> None:
        pass  # the observation is computed from the state on read

    def _observations(self) -> Obs:
        cue = (self.episode_step < self.cfg.cue_steps).float().unsqueeze(-1)
        policy = torch.cat((self.pos, self.target * cue, cue), -1).unsqueeze(1)
        time_left = 1.0 - self.episode_step.float() / self.max_episode_steps
        state = torch.cat((self.target - self.pos, self.pos, time_left.unsqueeze(-1)), -1).unsqueeze(1)
        return {GROUP: {"policy": policy, "state": state}}

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
        """ROS deployment (:mod:`deploy_ros.profile`): the robot publishes its ``policy`` frame (own
        position, the cue and the cue flag, in the entry's term order) as a ``Float32MultiArray``;
        the node carries the GRU state between ticks. The command is the velocity in m/s, safe = stop."""
        return {
            "inputs": {"obs": {"msg": "std_msgs/Float32MultiArray", "topic": "obs", "qos": "sensor", "stale": True}},
            "observations": {"policy": {"builder": "vector", "from": ["obs"]}},
            "command": {"msg": "std_msgs/Float32MultiArray", "topic": "command", "safe": [0.0, 0.0]},
        }

    def expert_policy(self):
        """The privileged straight-line controller (hand-written baseline: it reads the true target
        at every step, which the learned policy sees only during the cue)."""
        gain = 1.0 / (self.cfg.max_speed * self.cfg.control_dt)

        def act(obs: Obs) -> dict[str, Tensor]:
            cmd = (self.target - self.pos) * gain
            return {GROUP: (cmd / torch.linalg.vector_norm(cmd, dim=-1, keepdim=True).clamp(min=1.0)).unsqueeze(1)}

        return act
