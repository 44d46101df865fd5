"""The HEPi task family's common env: floating grippers on a MuJoCo world, observed as a scene graph.

:class:`HepiEnv` is what hepi_insertion, hepi_rope_closing and hepi_cloth_hanging share:

* **One agent** in group ``"grippers"``; its action is ``[Na * action_vectors * 3]`` in [-1, 1]:
  for each actuator (in graph node order) its vectors, ``[lin_vel(3)]`` or ``[lin_vel(3), ang_vel(3)]``
  (world frame), scaled by ``cfg.max_lin_vel`` (m/s) and ``cfg.max_ang_vel`` (rad/s).
* **Grippers** are the first ``Na`` mocap bodies of every model, welded (or otherwise tied) to the
  held object. Each control step the commanded velocities are integrated into one mocap pose per
  physics step (``p_k = p_0 + v k dt``; ``q_k = exp(w k dt) q_0``, the exact rotation of a constant
  world-frame angular velocity), clipped to the task's workspace box, and passed to
  :class:`sim.mujoco.world.BatchedMjWorld` as the control trajectory ``[E, decimation, ncontrol]``.
  Other mocap bodies (a hole, a pole) hold their pose. With :meth:`_held_positions` a gripper never
  leads its held point by more than ``cfg.max_lead`` at the start of a step, which bounds the weld
  force and so how hard a gripper can push its object through a wall.
* **Observation**: the task gives node vectors (:meth:`_node_vectors`: channel 0 the position, then
  displacement to the target, linear and angular velocity, zeros where meaningless), the
  :class:`sim.tasks.hepi.graph.SceneGraph` turns them into the padded graph parts; ``actor_obs`` and
  ``critic_obs`` are those parts (the critic is a DeepSets over the same graph).
* **Timing**: physics ``cfg.physics_dt`` (0.01 s), ``cfg.decimation`` physics steps per control
  step, ``cfg.episode_length_s``.
* **Numerical guard**: MuJoCo resets a diverging env by itself mid-step (or it holds NaN); such an
  env is reset by the task at once (never observed by the policy), counted
  (``unstable_resets_total``, per episode ``metrics/unstable``) and terminated with reason
  ``unstable``.
* **Rewards**: :meth:`_reward_terms` returns raw terms ``[E]`` named like the fields of
  ``cfg.rewards``; each is multiplied by its scale and logged. ``action_rate`` (``|a_t - a_t-1|^2``)
  is computed here when ``cfg.rewards`` has that field and the task does not return it.

A subclass sets, BEFORE calling ``super().__init__``: ``self.world`` (a ``BatchedMjWorld`` whose
``control`` is ``("mocap_pos", "mocap_quat")``; :func:`mocap_world` makes it), ``self.n_object``,
``self.n_actuator`` and ``self.action_vectors`` (1 or 2); optionally ``self.vector_names`` (default:
position, target_displacement, linear_velocity, angular_velocity). Its config needs ``physics_dt``,
``decimation``, ``episode_length_s``, ``max_lin_vel``, ``rewards`` and, for 2 action vectors,
``max_ang_vel``; ``max_lead`` is read when :meth:`_held_positions` returns positions.
It implements :meth:`_task_reset`, :meth:`_node_vectors`, :meth:`_reward_terms` and may override
:meth:`_workspace`, :meth:`_held_positions`, :meth:`_task_terminations`, :meth:`step_metrics`,
:meth:`_task_episode_metrics`, :meth:`_make_graph` (:meth:`_scene_graph` builds one).
``state_cache`` (a dict cleared whenever the state changes) memoises values several hooks read
(poses, errors). A task deployable under ROS sets ``robot_builder`` (its numpy graph builder, e.g.
:mod:`sim.tasks.hepi.insertion_robot`).
Shapes: E envs, Na actuators, No object nodes, V vectors per node.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import ClassVar

import mujoco
import torch
from torch import Tensor

from sim.core.config import resolve_device
from sim.core.env import MultiAgentEnv, Obs
from sim.core.randomization import uniform
from sim.core.spec import EnvSpec, GroupSpec
from sim.mujoco.world import BatchedMjWorld
from sim.physics.quaternion import quat_from_axis_angle, quat_mul
from sim.tasks.hepi.graph import SceneGraph

GROUP = "grippers"
VECTOR_NAMES = ("position", "target_displacement", "linear_velocity", "angular_velocity")
MOCAP_CONTROL = ("mocap_pos", "mocap_quat")  # what a HepiEnv world is stepped with (grippers first)


def mocap_world(
    models: mujoco.MjModel | Sequence[mujoco.MjModel], num_envs: int, cfg, device: str | torch.device
) -> BatchedMjWorld:
    """The batched world of a hepi task (``cfg.mujoco`` its stepping settings): its controls are every
    mocap pose, ``[E, T, nmocap * 7]``, which :meth:`HepiEnv._control_step` fills."""
    return BatchedMjWorld(models, num_envs, control=MOCAP_CONTROL, cfg=cfg.mujoco, device=device)


def yaw_quat(yaw: Tensor) -> Tensor:
    """``[..., 4]`` rotations about z by ``yaw [...]`` (rad)."""
    z = torch.zeros(*yaw.shape, 3, device=yaw.device)
    z[..., 2] = 1.0
    return quat_from_axis_angle(z, yaw)


def random_tilt(k: int, max_angle: float, rng: torch.Generator, device: torch.device) -> Tensor:
    """``[k, 4]`` rotations about a uniformly random horizontal axis by an angle uniform in [0, max_angle]."""
    phi = uniform(-math.pi, math.pi, (k,), rng, device)
    axis = torch.stack((torch.cos(phi), torch.sin(phi), torch.zeros_like(phi)), -1)
    return quat_from_axis_angle(axis, uniform(0.0, max_angle, (k,), rng, device))


def rotation_quat(omega: Tensor, t: Tensor) -> Tensor:
    """Quaternion of turning at a constant angular velocity ``omega [..., 3]`` (rad/s) for ``t`` s
    (broadcast against ``omega[..., 0]``): ``[cos(|w| t / 2), sin(|w| t / 2) w / |w|]``, ``[..., 4]``."""
    rate = torch.linalg.vector_norm(omega, dim=-1)
    half = 0.5 * rate * t
    # sin(|w| t / 2) / |w| -> t / 2 as |w| -> 0; no branch, no division by zero.
    scale = torch.where(rate > 1e-9, torch.sin(half) / rate.clamp(min=1e-9), 0.5 * t)
    return torch.cat((torch.cos(half).unsqueeze(-1), omega * scale.unsqueeze(-1)), -1)


class HepiEnv(MultiAgentEnv):
    """Common base of the HEPi tasks; see the module docstring for what a subclass provides."""

    world: BatchedMjWorld
    n_object: int
    n_actuator: int
    action_vectors: int
    vector_names: tuple[str, ...] = VECTOR_NAMES
    graph_k: ClassVar[int] = 3  # object-object neighbours (the paper's k)
    robot_builder: ClassVar[str] = ""  # "module:Class" building the graph parts on a robot ("" = not deployable)

    def __init__(
        self, cfg, num_envs: int, device: str | torch.device = "cpu", seed: int = 0, compile: bool = False
    ) -> None:
        if self.action_vectors not in (1, 2):
            raise ValueError(f"action_vectors must be 1 (linear velocity) or 2 (+ angular), got {self.action_vectors}")
        self.graph = self._make_graph(resolve_device(device))  # before the base class builds the spec from it
        super().__init__(cfg, num_envs, device, seed, compile)
        E, dev = num_envs, self.device
        self.action = torch.zeros(E, self.spec.groups[GROUP].action_dim, device=dev)
        self.prev_action = torch.zeros_like(self.action)
        self.unstable = torch.zeros(E, dtype=torch.bool, device=dev)
        self.unstable_resets_total = 0  # envs the numerical guard reset since construction
        # Values derived from the current state (the observation, a task's poses), memoised until the
        # state changes (a control step or a reset clears it): several hooks read the same poses.
        self.state_cache: dict[str, object] = {}
        steps = torch.arange(1, cfg.decimation + 1, device=dev, dtype=torch.float32)
        self._step_times = steps * cfg.physics_dt  # [T] s after the control step's start
        sl = self.world.control_slices
        self._pos_slice, self._quat_slice = sl["mocap_pos"], sl["mocap_quat"]

    # ----------------------------------------------------------------- spec
    def _build_spec(self) -> EnvSpec:
        cfg = self.cfg
        kinds = (("v", "m/s", cfg.max_lin_vel),)
        if self.action_vectors == 2:
            kinds += (("w", "rad/s", cfg.max_ang_vel),)
        names, units, scale = [], [], []
        for a in range(self.n_actuator):
            for prefix, unit, s in kinds:
                names += [f"gripper{a}_{prefix}{axis}" for axis in "xyz"]
                units += [unit] * 3
                scale += [float(s)] * 3
        entries = self.graph.entries()
        group = GroupSpec(
            n_agents=1,
            observations=entries,
            action_dim=len(names),
            action_names=tuple(names),
            action_units=tuple(units),
            action_scale=tuple(scale),
            actor_obs=tuple(entries),
            critic_obs=tuple(entries),
        )
        control_dt = cfg.physics_dt * cfg.decimation
        return EnvSpec(
            task=self.task_name,
            groups={GROUP: group},
            control_dt=control_dt,
            physics_dt=cfg.physics_dt,
            max_episode_steps=round(cfg.episode_length_s / control_dt),
            metadata={"n_object": self.n_object, "n_actuator": self.n_actuator, "vectors": list(self.vector_names)},
        )

    # ----------------------------------------------------------------- task hooks (subclasses)
    def _make_graph(self, device: torch.device) -> SceneGraph:
        """The observation graph (called once, before the spec is built)."""
        return self._scene_graph(device)

    def _scene_graph(self, device: torch.device, graph_class: type[SceneGraph] = SceneGraph, **extra) -> SceneGraph:
        """A ``graph_class`` over this task's ``n_object`` object and ``n_actuator`` actuator nodes with
        its ``vector_names`` and ``graph_k``; ``extra`` goes to the class (e.g. a rigid object's keypoints)."""
        return graph_class(
            self.n_object,
            self.n_actuator,
            len(self.vector_names),
            k=self.graph_k,
            vector_names=self.vector_names,
            device=device,
            **extra,
        )

    def _task_reset(self, env_ids: Tensor) -> None:
        """Sample the episodes of ``env_ids [k]`` and write their states into ``self.world``."""
        raise NotImplementedError

    def _node_vectors(self) -> tuple[Tensor, Tensor]:
        """``(object_vectors [E, No, V, 3], actuator_vectors [E, Na, V, 3])`` of the current state,
        world frame, channel 0 the position (see ``vector_names``)."""
        raise NotImplementedError

    def _reward_terms(self) -> dict[str, Tensor]:
        """Raw reward terms ``{name: [E]}``, names = fields of ``cfg.rewards``."""
        raise NotImplementedError

    def _workspace(self) -> tuple[Tensor, Tensor]:
        """``(low, high)`` gripper position bounds (m), each broadcastable to ``[E, Na, 3]``; none here."""
        inf = torch.tensor(float("inf"), device=self.device)
        return -inf, inf

    def _held_positions(self) -> Tensor | None:
        """``[E, Na, 3]`` where each gripper's held point actually is (m), or None: the gripper is
        then integrated from its last commanded pose without a lead bound."""
        return None

    def _task_terminations(self) -> dict[str, Tensor]:
        """Task termination reasons ``{name: [E] bool}``; none here."""
        return {}

    def _task_episode_metrics(self, env_ids: Tensor) -> dict[str, Tensor]:
        """Task metrics at the end of the episodes ``env_ids``; none here."""
        return {}

    # ----------------------------------------------------------------- reset and step
    def _reset_idx(self, env_ids: Tensor) -> None:
        self.action[env_ids] = 0.0
        self.prev_action[env_ids] = 0.0
        self.unstable[env_ids] = False
        self.state_cache.clear()
        self._task_reset(env_ids)
        self.state_cache.clear()

    def _apply_actions(self, actions: dict[str, Tensor]) -> None:
        self.prev_action = self.action
        self.action = actions[GROUP][:, 0].clamp(-1.0, 1.0)

    def gripper_trajectory(self) -> tuple[Tensor, Tensor]:
        """This control step's gripper poses, one per physics step: ``(pos [E, T, Na, 3],
        quat [E, T, Na, 4])`` with T = ``cfg.decimation`` (see the module docstring)."""
        cfg, E, Na = self.cfg, self.num_envs, self.n_actuator
        act = self.action.view(E, Na, self.action_vectors, 3)
        pos0 = self.world.mocap_pos[:, :Na]
        quat0 = self.world.mocap_quat[:, :Na]
        held = self._held_positions()
        if held is not None:  # restart from at most max_lead ahead of the held point
            lead = pos0 - held
            norm = torch.linalg.vector_norm(lead, dim=-1, keepdim=True)
            pos0 = held + lead * (cfg.max_lead / norm.clamp(min=cfg.max_lead))
        t = self._step_times.view(1, -1, 1, 1)
        pos = pos0.unsqueeze(1) + (cfg.max_lin_vel * act[:, :, 0]).unsqueeze(1) * t
        low, high = self._workspace()
        pos = torch.maximum(torch.minimum(pos, high), low)
        if self.action_vectors == 2:
            omega = (cfg.max_ang_vel * act[:, :, 1]).unsqueeze(1)  # [E, 1, Na, 3]
            quat = quat_mul(rotation_quat(omega, t.squeeze(-1)), quat0.unsqueeze(1).expand(-1, t.shape[1], -1, -1))
            quat = quat / torch.linalg.vector_norm(quat, dim=-1, keepdim=True)  # no float32 drift over an episode
        else:
            quat = quat0.unsqueeze(1).expand(-1, t.shape[1], -1, -1)
        return pos, quat

    def _control_step(self) -> None:
        cfg, E, Na = self.cfg, self.num_envs, self.n_actuator
        pos, quat = self.gripper_trajectory()
        T = pos.shape[1]
        all_pos = self.world.mocap_pos.unsqueeze(1).expand(-1, T, -1, -1).clone()  # other mocaps hold still
        all_quat = self.world.mocap_quat.unsqueeze(1).expand(-1, T, -1, -1).clone()
        all_pos[:, :, :Na] = pos
        all_quat[:, :, :Na] = quat
        control = torch.zeros(E, T, self.world.ncontrol, device=self.device)
        control[..., self._pos_slice] = all_pos.flatten(2)
        control[..., self._quat_slice] = all_quat.flatten(2)
        self.world.step(control, cfg.decimation)
        self.state_cache.clear()
        bad = self.world.diverged().to(self.device)
        if bool(bad.any()):
            ids = bad.nonzero().squeeze(-1)
            self._reset_idx(ids)
            self.unstable[ids] = True
            self.unstable_resets_total += int(ids.numel())

    # ----------------------------------------------------------------- observations
    def _update_observation_buffers(self) -> None:
        pass  # the graph is computed from the state on read (memoised until the state changes)

    def _observations(self) -> Obs:
        if "obs" not in self.state_cache:
            obj, act = self._node_vectors()
            self.state_cache["obs"] = {GROUP: self.graph.observation(obj, act)}
        return self.state_cache["obs"]

    # ----------------------------------------------------------------- rewards, terminations, metrics
    def _rewards(self, terminated: Tensor) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        scales = self.cfg.rewards
        raw = self._reward_terms()
        names = {f.name for f in dataclasses.fields(scales)}
        if "action_rate" in names and "action_rate" not in raw:
            raw["action_rate"] = (self.action - self.prev_action).square().sum(-1)
        unknown = sorted(set(raw) - names)
        if unknown:
            raise KeyError(f"reward terms {unknown} have no scale in {type(scales).__name__}")
        weighted = {name: getattr(scales, name) * val for name, val in raw.items()}
        reward = torch.stack(list(weighted.values())).sum(0)
        return {GROUP: reward.unsqueeze(-1)}, weighted

    def _terminations(self) -> tuple[Tensor, dict[str, Tensor]]:
        reasons = {"unstable": self.unstable.clone(), **self._task_terminations()}
        terminated = torch.stack(list(reasons.values())).any(0)
        return terminated, reasons

    def _episode_metrics(self, env_ids: Tensor) -> dict[str, Tensor]:
        return {"metrics/unstable": self.unstable[env_ids].float().mean(), **self._task_episode_metrics(env_ids)}

    def deployment_profile(self, group: str = GROUP) -> dict:
        """ROS deployment (:mod:`deploy_ros.profile`): the object points arrive as a
        ``sensor_msgs/PointCloud2`` (``object_points``, in the graph's object node order), each
        gripper's pose and twist as ``nav_msgs/Odometry`` (``gripper<i>/odom``), the task target as a
        ``geometry_msgs/PoseStamped``; every graph part is built from them by the task's robot-side
        builder (class attribute ``robot_builder``, ``"module:Class"``, numpy only). Command: the
        velocities (m/s, rad/s) in action order; safe = stop. ``{}`` (not deployable) for a task
        without a robot-side builder."""
        if not self.robot_builder:
            return {}
        inputs = {
            "points": {
                "msg": "sensor_msgs/PointCloud2",
                "topic": "object_points",
                "qos": "sensor",
                "stale": True,
                "points": self.n_object,  # how many points a cloud carries (the graph also has actuator nodes)
            },
            "target": {"msg": "geometry_msgs/PoseStamped", "topic": "target", "qos": "reliable", "stale": False},
        }
        for a in range(self.n_actuator):
            inputs[f"gripper{a}"] = {
                "msg": "nav_msgs/Odometry",
                "topic": f"gripper{a}/odom",
                "qos": "sensor",
                "stale": True,
            }
        sources = list(inputs)
        return {
            "inputs": inputs,
            "observations": {name: {"builder": self.robot_builder, "from": sources} for name in self.graph.entries()},
            "command": {
                "msg": "std_msgs/Float32MultiArray",
                "topic": "command",
                "safe": [0.0] * self.spec.groups[GROUP].action_dim,
            },
            # A state is the cloud and the grippers' odometry of one instant (the bridge stamps them alike): in
            # lockstep a node answers it once all are here, never with the previous state's gripper odometry.
            "step_inputs": ["points", *(f"gripper{a}" for a in range(self.n_actuator))],
            "bridge": "sim.tasks.hepi.ros_bridge:HepiBridge",  # the sim bridge's side (SITL)
        }
