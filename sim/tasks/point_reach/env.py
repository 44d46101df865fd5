"""point_reach: N point masses, each driven to its own random goal (double-integrator dynamics).

Group ``agents`` (N agents). Each agent sees its goal offset and velocity; the critic's ``state``
holds every agent's offset and velocity, the time left and a one-hot agent id. Action per agent
(``dim``, in [-1, 1]): acceleration, ``max_acc`` m/s^2 at |a| = 1. Dynamics per control step
(semi-implicit Euler):

    v' = v + (k * max_acc * a - drag * v) * dt,      p' = p + v' * dt

with ``k`` the per-agent actuator factor (randomised). Shapes: E = num_envs, N = num_agents,
D = dim.
"""

from __future__ import annotations

import torch
from torch import Tensor

from sim.core.env import MultiAgentEnv, Obs
from sim.core.randomization import uniform
from sim.core.spec import EnvSpec, GroupSpec, ObsEntry, ObsTerm
from sim.tasks.point_reach.config import PointReachCfg, evaluation_overrides

GROUP = "agents"
AXES = ("x", "y", "z")


class PointReachEnv(MultiAgentEnv):
    """Batched point-mass goal reaching; see the module docstring."""

    task_name = "point_reach"
    cfg_class = PointReachCfg
    best_metric = ("metrics/final_dist_m", "min")

    @classmethod
    def evaluation_overrides(cls) -> dict:
        """Randomisation and observation noise off (:func:`~sim.tasks.point_reach.config.evaluation_overrides`)."""
        return evaluation_overrides()

    def __init__(
        self,
        cfg: PointReachCfg,
        num_envs: int,
        device: str | torch.device = "cpu",
        seed: int = 0,
        compile: bool = False,
    ) -> None:
        self.n, self.dim = cfg.num_agents, cfg.dim
        super().__init__(cfg, num_envs, device, seed, compile)
        E, N, D, dev = num_envs, self.n, self.dim, self.device
        self.pos = torch.zeros(E, N, D, device=dev)
        self.vel = torch.zeros(E, N, D, device=dev)
        self.goal = torch.zeros(E, N, D, device=dev)
        self.acc_scale = torch.ones(E, N, 1, device=dev)
        self.action = torch.zeros(E, N, D, device=dev)
        noise = cfg.obs_noise
        std = [noise.position] * D + [noise.velocity] * D
        self._noise_std = torch.tensor(std, device=dev) if noise.enabled else torch.zeros(2 * D, device=dev)
        self._obs_noise = torch.zeros(E, N, 2 * D, device=dev)
        self._policy_obs = torch.zeros(E, N, 2 * D, device=dev)
        self.reset()

    # ----------------------------------------------------------------- spec
    def _build_spec(self) -> EnvSpec:
        cfg, N, D = self.cfg, self.n, self.dim
        terms = (
            ObsTerm("goal_rel", D, "m", "world", "goal position minus own position"),
            ObsTerm("vel", D, "m/s", "world", "own velocity"),
        )
        state_terms = (
            ObsTerm("goal_rel", N * D, "m", "world", "every agent's goal offset"),
            ObsTerm("vel", N * D, "m/s", "world", "every agent's velocity"),
            ObsTerm("time_left", 1, "fraction"),
            ObsTerm("agent_id", N, "one-hot"),
        )
        group = GroupSpec(
            n_agents=N,
            observations={
                "policy": ObsEntry((2 * D,), terms=terms),
                "state": ObsEntry((sum(t.size for t in state_terms),), terms=state_terms),
            },
            action_dim=D,
            action_names=tuple(f"acc_{a}" for a in AXES[:D]),
            action_units=("m/s^2",) * D,
            action_scale=(cfg.max_acc,) * D,
        )
        return EnvSpec(
            task="point_reach",
            groups={GROUP: group},
            control_dt=cfg.control_dt,
            physics_dt=cfg.control_dt,
            max_episode_steps=round(cfg.episode_length_s / cfg.control_dt),
        )

    # ----------------------------------------------------------------- reset and step
    def _reset_idx(self, env_ids: Tensor) -> None:
        cfg, rng, dev = self.cfg, self.rng, self.device
        k, N, D = env_ids.numel(), self.n, self.dim
        self.pos[env_ids] = uniform(-cfg.start_range, cfg.start_range, (k, N, D), rng, dev)
        self.vel[env_ids] = 0.0
        self.goal[env_ids] = uniform(-cfg.goal_range, cfg.goal_range, (k, N, D), rng, dev)
        self.action[env_ids] = 0.0
        if cfg.randomization.enabled:
            self.acc_scale[env_ids] = uniform(*cfg.randomization.acc_scale, (k, N, 1), rng, dev)
        frame = self._frame()[env_ids]
        if cfg.obs_noise.enabled:
            frame = frame + torch.randn(frame.shape, generator=rng, device=dev) * self._noise_std
        # Out of place: earlier observations (info["final_obs"]) may alias the old buffer.
        self._policy_obs = self._policy_obs.index_copy(0, env_ids, frame)

    def expert_policy(self):
        """The PD law of :func:`sim.tasks.point_reach.baseline.pd_actions` (imitation tests)."""
        from sim.tasks.point_reach.baseline import pd_actions

        group = self.spec.groups[GROUP]
        return lambda obs: {GROUP: pd_actions(obs[GROUP]["policy"], group)}

    def _apply_actions(self, actions: dict[str, Tensor]) -> None:
        self.action = actions[GROUP].clamp(-1.0, 1.0)

    def _control_step(self) -> None:
        cfg, dt = self.cfg, self.cfg.control_dt
        acc = self.acc_scale * cfg.max_acc * self.action - cfg.drag * self.vel
        self.vel = self.vel + acc * dt
        self.pos = self.pos + self.vel * dt

    # ----------------------------------------------------------------- observations
    def _frame(self) -> Tensor:
        """Noise-free policy frame ``[E, N, 2D]``: goal offset (m), velocity (m/s)."""
        return torch.cat((self.goal - self.pos, self.vel), dim=-1)

    def _sample_step_noise(self) -> None:
        if self.cfg.obs_noise.enabled:
            self._obs_noise = torch.randn(self._obs_noise.shape, generator=self.rng, device=self.device)

    def _update_observation_buffers(self) -> None:
        self._policy_obs = self._frame() + self._obs_noise * self._noise_std

    def _observations(self) -> Obs:
        return {GROUP: {"policy": self._policy_obs, "state": self._state()}}

    def _state(self) -> Tensor:
        """``[E, N, 2 N D + 1 + N]``: all offsets, all velocities, time left, own one-hot id."""
        E, N = self.num_envs, self.n
        time_left = 1.0 - self.episode_step.float() / self.max_episode_steps
        glob = torch.cat(((self.goal - self.pos).flatten(1), self.vel.flatten(1), time_left.unsqueeze(-1)), dim=-1)
        eye = torch.eye(N, device=self.device).expand(E, N, N)
        return torch.cat((glob.unsqueeze(1).expand(-1, N, -1), eye), dim=-1)

    # ----------------------------------------------------------------- rewards and terminations
    def distances(self) -> Tensor:
        """Distance of each agent to its goal, ``[E, N]`` (m)."""
        return torch.linalg.vector_norm(self.goal - self.pos, dim=-1)

    def step_metrics(self) -> dict[str, Tensor]:
        """Evaluation metrics now, each ``[E]``: mean distance of the agents to their goals ``dist_m`` (m)."""
        return {"dist_m": self.distances().mean(-1)}

    def _rewards(self, terminated: Tensor) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        rc = self.cfg.rewards
        raw = {
            "distance": self.distances(),
            "action": self.action.square().sum(-1),
            "out_of_bounds": terminated.float().unsqueeze(-1).expand(-1, self.n),
        }
        weighted = {name: getattr(rc, name) * val for name, val in raw.items()}
        reward = torch.stack(list(weighted.values())).sum(0)
        return {GROUP: reward}, {name: val.mean(-1) for name, val in weighted.items()}

    def _terminations(self) -> tuple[Tensor, dict[str, Tensor]]:
        out = (self.pos.abs() > self.cfg.bounds).any(-1).any(-1)
        return out, {"out_of_bounds": out}

    def _episode_metrics_per_env(self) -> dict[str, Tensor]:
        return {"metrics/final_dist_m": self.distances()}
