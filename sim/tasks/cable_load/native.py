"""cable_load's post-physics pass in C (``post_physics.c``): the CPU fast path of ``compile=True``.

:class:`NativePostPhysics` does what ``CableLoadEnv._post_physics`` (the base's pass over the task's hooks) does,
in one loop over the envs, and returns the same tuple. The torch hooks stay the reference
(``tests/test_cable_load_native.py`` holds the two together) and run everywhere else: on a GPU, eagerly, and
where no C compiler is found (:func:`sim.core.native.load`).
"""

from __future__ import annotations

import ctypes
import math
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from sim.core import native

if TYPE_CHECKING:
    from sim.tasks.cable_load.env import CableLoadEnv

SOURCE = Path(__file__).with_name("post_physics.c")
MAX_MAVS = 6  # post_physics.c's per-env arrays
FRAME_SIZE = 50  # the policy frame post_physics.c writes (env._policy_terms)
REWARD_TERMS = ("position", "orientation", "action_smoothness", "body_rate", "cable_force", "formation", "termination")
REASONS = ("crash", "load_ground", "drone_proximity", "cable_proximity", "out_of_bounds")


class NativePostPhysics:
    """Callable ``() -> (obs, reward, terms, terminated, reasons, bad)`` for a CPU ``CableLoadEnv``; it also
    advances ``env.history`` and ``env.attach_err_int`` as ``_update_observation_buffers`` does."""

    def __init__(self, env: CableLoadEnv, lib: ctypes.CDLL) -> None:
        self.env = env
        self.fn = lib.cable_load_post_physics
        self.state_fn = lib.cable_load_state
        self.fn.restype = self.state_fn.restype = None
        cfg = env.cfg
        rc, tc = cfg.rewards, cfg.terminations
        leak = 1.0 - cfg.control_dt / cfg.integral_tau_s if cfg.integral_tau_s > 0 else 1.0
        # The order of post_physics.c's enum P_*.
        params = (
            env.max_episode_steps,
            math.radians(cfg.slot_yaw_lead_deg),
            cfg.integral_err_clip,
            leak,
            cfg.control_dt,
            cfg.integral_limit,
            float(cfg.fault.enabled),
            *(getattr(rc, name) for name in REWARD_TERMS),
            rc.position_sigma,
            rc.orientation_sigma,
            tc.drone_min_height,
            math.cos(math.radians(tc.drone_max_tilt_deg)),
            cfg.load_size[2] / 2,
            tc.load_min_clearance,
            tc.drone_min_distance,
            tc.cable_min_distance,
            tc.bounds_xy,
            tc.bounds_z,
        )
        self.params = (ctypes.c_double * len(params))(*params)
        self.cable_attach = env.model.cable_attach.contiguous()

    @staticmethod
    def supports(env: CableLoadEnv) -> str | None:
        """None when the kernel can run ``env``, else why not."""
        if env.device.type != "cpu":
            return f"it runs on CPU tensors only (the env is on {env.device})"
        if env.n > MAX_MAVS:
            return f"it holds at most {MAX_MAVS} MAVs"
        if env.history.shape[-1] != FRAME_SIZE:
            return f"it writes {FRAME_SIZE}-entry frames"
        return None

    def __call__(self) -> tuple:
        env = self.env
        E, N, H, F = env.history.shape
        d, ld, c = env.drones, env.load, torch.Tensor.contiguous
        history = torch.empty_like(env.history)
        integ = torch.empty_like(env.attach_err_int)
        state = torch.empty(E, N, self._state_size())
        reward = torch.empty(E, N)
        terms = torch.empty(len(REWARD_TERMS), E)
        terminated = torch.empty(E, dtype=torch.bool)
        reasons = torch.empty(len(REASONS), E, dtype=torch.bool)
        bad = torch.empty(E, dtype=torch.bool)
        # Held in this list until the call returns: a .contiguous() copy would otherwise be freed before it.
        inputs = [
            c(d.pos), c(d.quat), c(d.vel), c(d.ang_vel),
            c(ld.pos), c(ld.quat), c(ld.vel), c(ld.ang_vel),
            c(env.goal_pos), c(env.goal_quat), c(env.start_pos),
            c(env.attach), c(env.nominal_offset), self.cable_attach,
            c(env.cable_tension), c(env.hover_tension), c(env.formation_offset),
            c(env.last_action), c(env.prev_action),
            c(env.attach_err_int), integ,
            c(env.failed), c(env.episode_step),
            c(env.history), history,
            c(env._obs_noise) if env.cfg.obs_noise.enabled else None, c(env._frame_noise_std),
            state, reward, terms, terminated, reasons, bad,
        ]  # fmt: skip
        sizes = (*(ctypes.c_int64(x) for x in (E, N, H, F, state.shape[-1])), ctypes.c_int(native.threads()))
        self.fn(*sizes, *map(native.ptr, inputs), self.params)
        env.history = history
        env.attach_err_int = integ
        obs = {"mavs": {"policy": history.flatten(2), "state": state}}
        return (
            obs,
            {"mavs": reward},
            dict(zip(REWARD_TERMS, terms.unbind(0), strict=True)),
            terminated,
            dict(zip(REASONS, reasons.unbind(0), strict=True)),
            bad,
        )

    def state(self) -> Tensor:
        """The critic's state ``[E, N, state_dim]``, as ``CableLoadEnv._state`` (the observations after a reset)."""
        env = self.env
        E, N = env.num_envs, env.n
        d, ld, c = env.drones, env.load, torch.Tensor.contiguous
        state = torch.empty(E, N, self._state_size())
        inputs = [
            c(d.pos), c(d.quat), c(d.vel), c(d.ang_vel),
            c(ld.pos), c(ld.quat), c(ld.vel), c(ld.ang_vel),
            c(env.goal_pos), c(env.goal_quat), c(env.cable_tension),
            c(env.failed), c(env.episode_step), state,
        ]  # fmt: skip
        sizes = (ctypes.c_int64(E), ctypes.c_int64(N), ctypes.c_int64(state.shape[-1]), ctypes.c_int(native.threads()))
        self.state_fn(*sizes, *map(native.ptr, inputs), self.params)
        return state

    def _state_size(self) -> int:
        return self.env.spec.groups["mavs"].observations["state"].shape[0]
