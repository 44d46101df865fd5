"""MuJoCo-backed batched worlds: ``num_envs`` states over one model (or same-size model variants).

:class:`BatchedMjWorld` keeps the physics state of every env as one array ``[E, nstate]`` and
advances all of them with one ``mujoco.rollout`` call per control step, on a pool of CPU threads:
no Python loop over envs. The task sees torch tensors (``qpos``, ``qvel``, ``mocap_pos``,
``sensordata``, ...) on its device and writes states back for resets (``set_state``).

Shapes: E = ``num_envs``; ``nstate`` = MuJoCo's ``mjSTATE_FULLPHYSICS`` size (time, qpos, qvel,
act, history, plugin state); controls follow ``control`` (a subset of ``ctrl``, ``xfrc_applied``,
``mocap_pos``, ``mocap_quat`` in that order), ``ncontrol`` values per physics step. ``xfrc_applied``
is ``[nbody, 6]`` per env flattened (force, torque; world frame, at each body's centre of mass), for
forces a task computes from the state itself (rotor thrust, drag); held like ``ctrl`` when not given.

Two details that matter:

* Mocap poses are not part of MuJoCo's physics state, so they would come from the shared thread
  ``MjData`` in a rollout. The world keeps them per env and always passes them as controls (held
  when the caller does not drive them).
* ``rollout`` reports sensors computed inside ``mj_step``, i.e. at the state *before* the last
  integration (one physics step stale). With ``exact_sensors`` the world reads them again at the
  final state by a one-step rollout over zero-timestep copies of the models, which changes no state
  (the same trick computes the sensors of freshly reset envs). Those copies skip contacts and
  constraints (most of a step's cost), so position and velocity sensors are exact and acceleration
  or force sensors (touch, force, torque) read zero constraint force: tasks use the former.

Backends (``MjWorldCfg.backend``): ``rollout`` (CPU threads, tested here) and ``warp`` (MuJoCo
Warp on a GPU, same model and the same interface; needs ``pip install mujoco-warp``).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import mujoco
import numpy as np
import torch
from mujoco import rollout
from torch import Tensor

from sim.core.config import non_negative
from sim.physics.quaternion import quat_rotate
from sim.physics.rigid_body import RigidBodyState

ArrayT = TypeVar("ArrayT", np.ndarray, Tensor)
BACKENDS = ("rollout", "warp")
CONTROLS = ("ctrl", "xfrc_applied", "mocap_pos", "mocap_quat")  # MuJoCo's state-bit order
STATE_SPEC = mujoco.mjtState.mjSTATE_FULLPHYSICS
_CONTROL_BITS = {
    "ctrl": mujoco.mjtState.mjSTATE_CTRL,
    "xfrc_applied": mujoco.mjtState.mjSTATE_XFRC_APPLIED,
    "mocap_pos": mujoco.mjtState.mjSTATE_MOCAP_POS,
    "mocap_quat": mujoco.mjtState.mjSTATE_MOCAP_QUAT,
}


@dataclass(frozen=True)
class MjWorldCfg:
    """How a batched MuJoCo world is stepped (part of a task's config: ``task.mujoco.*``)."""

    backend: str = "rollout"  # rollout (CPU threads) | warp (MuJoCo Warp, GPU)
    nthread: int = non_negative(0)  # rollout threads; 0 = all CPU cores of this process
    exact_sensors: bool = True  # re-read sensors at the final state (see module docstring)

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"mujoco.backend must be one of {BACKENDS}, got {self.backend!r}")


def _size_signature(m: mujoco.MjModel) -> dict[str, int]:
    """Every integer size of a model (``nq``, ``nv``, ``ngeom``, ``nC``, ...). Variants stepped by one
    rollout must agree on all of them: ``rollout`` checks only some, and a variant whose sparse mass
    matrix differs (``nC``, e.g. a body whose frame sits at its centre of mass) steps into garbage."""
    text = ("nbuffer", "nnames", "nnames_map", "npaths")  # name/path storage: no bearing on the physics
    return {k: v for k in dir(m) if k.startswith("n") and k not in text and isinstance(v := getattr(m, k), int)}


def _state_offsets(m: mujoco.MjModel) -> dict[str, slice]:
    """Slices of time, qpos, qvel and act inside a FULLPHYSICS state vector (components in bit order)."""
    out, start = {}, 0
    for name, bit in (("time", 1), ("qpos", 2), ("qvel", 4), ("act", 8)):
        size = mujoco.mj_stateSize(m, bit)
        out[name] = slice(start, start + size)
        start += size
    return out


class BatchedMjWorld:
    """``num_envs`` MuJoCo states stepped together; see the module docstring.

    Args:
        models: one ``MjModel`` or a sequence of variants with the same sizes (e.g. pegs of
            different shapes built from the same number of pieces).
        num_envs: E.
        model_index: ``[E]`` which variant each env uses (default: variant 0 everywhere).
        control: what :meth:`step` takes, a subset of :data:`CONTROLS` in that order.
        cfg: backend and threads.
        device: where the returned torch tensors live.

    This class is the rollout backend. Another backend (``WarpMjWorld``) subclasses it and keeps
    its checks, layouts and initial states; it implements :meth:`_init_backend`, :meth:`step`,
    :meth:`_write_state`, :meth:`set_model` (after :meth:`_assign_variants`), :meth:`diverged` and
    the state readers.
    """

    def __init__(
        self,
        models: mujoco.MjModel | Sequence[mujoco.MjModel],
        num_envs: int,
        *,
        model_index: Sequence[int] | np.ndarray | Tensor | None = None,
        control: Sequence[str] = ("ctrl",),
        cfg: MjWorldCfg | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        self._init_common(models, num_envs, model_index, control, cfg, device)
        self._init_backend()

    def _init_backend(self) -> None:
        """The rollout backend's per-env arrays, thread ``MjData`` pool and zero-timestep model copies."""
        index = self._index
        self._state = np.stack([self._state0[i] for i in index])
        self._mocap_pos = np.stack([self._mocap0[i][0] for i in index]).reshape(self.num_envs, self.nmocap, 3)
        self._mocap_quat = np.stack([self._mocap0[i][1] for i in index]).reshape(self.num_envs, self.nmocap, 4)
        self._ctrl = np.zeros((self.num_envs, self.nu))
        self._xfrc = np.zeros((self.num_envs, 6 * self.nbody))  # used where control has xfrc_applied
        self._sensordata = np.zeros((self.num_envs, self.nsensordata))
        self._diverged = np.zeros(self.num_envs, bool)

        nthread = self.cfg.nthread or len(os.sched_getaffinity(0))
        self._datas = [mujoco.MjData(self.model) for _ in range(max(1, nthread))]
        self._zero_dt = []
        for v in self.models:
            z = copy.copy(v)  # MjModel copies are deep
            z.opt.timestep = 0.0
            # Position and velocity sensors do not depend on constraint forces: skip collision
            # detection and the solver, most of a step's cost in contact-rich scenes.
            z.opt.integrator = mujoco.mjtIntegrator.mjINT_EULER  # no implicit-damping derivatives
            for flag in ("CONTACT", "CONSTRAINT", "SPRING", "DAMPER", "GRAVITY", "ACTUATION", "WARMSTART"):
                z.opt.disableflags |= int(getattr(mujoco.mjtDisableBit, f"mjDSBL_{flag}"))
            self._zero_dt.append(z)
        self._env_models = [self.models[i] for i in index]
        self._env_zero_dt = [self._zero_dt[i] for i in index]
        self._refresh_sensors(np.arange(self.num_envs))

    def __new__(cls, *args: object, **kwargs: object) -> BatchedMjWorld:
        cfg = kwargs.get("cfg")
        if cls is BatchedMjWorld and isinstance(cfg, MjWorldCfg) and cfg.backend == "warp":
            from sim.mujoco.warp_world import WarpMjWorld  # optional dependency, imported on demand

            return super().__new__(WarpMjWorld)
        return super().__new__(cls)

    def _init_common(
        self,
        models: mujoco.MjModel | Sequence[mujoco.MjModel],
        num_envs: int,
        model_index: Sequence[int] | np.ndarray | Tensor | None,
        control: Sequence[str],
        cfg: MjWorldCfg | None,
        device: torch.device | str,
    ) -> None:
        """Checks and layouts shared by the backends: variants, sizes, control slices, initial states."""
        self.cfg = cfg or MjWorldCfg()
        self.models = [models] if isinstance(models, mujoco.MjModel) else list(models)
        if not self.models:
            raise ValueError("BatchedMjWorld needs at least one model")
        sig = _size_signature(self.models[0])
        for k, m in enumerate(self.models[1:], 1):
            diff = {n: (sig[n], v) for n, v in _size_signature(m).items() if sig.get(n) != v}
            if diff:
                raise ValueError(f"model variant {k} differs in size from variant 0: {diff} (variant 0, variant {k})")
        unknown = [c for c in control if c not in CONTROLS]
        if unknown or list(control) != [c for c in CONTROLS if c in control]:
            raise ValueError(f"control must be a subset of {CONTROLS} in that order, got {tuple(control)}")
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.model = m = self.models[0]
        self.num_envs, self.device = int(num_envs), torch.device(device)
        self.nq, self.nv, self.nu, self.na, self.nmocap = m.nq, m.nv, m.nu, m.na, m.nmocap
        self.nsensordata = m.nsensordata
        self.nstate = mujoco.mj_stateSize(m, STATE_SPEC)
        self._slices = _state_offsets(m)

        # The caller's control vector, and the full one given to rollout (mocap always included).
        self.control = tuple(control)
        self.nbody = m.nbody
        sizes = {
            "ctrl": self.nu,
            "xfrc_applied": 6 * m.nbody,
            "mocap_pos": 3 * self.nmocap,
            "mocap_quat": 4 * self.nmocap,
        }
        self.control_slices: dict[str, slice] = {}
        start = 0
        for c in self.control:
            self.control_slices[c] = slice(start, start + sizes[c])
            start += sizes[c]
        self.ncontrol = start
        full = ["ctrl"] + (["xfrc_applied"] if "xfrc_applied" in self.control else [])
        full += ["mocap_pos", "mocap_quat"] if self.nmocap else []
        self._full_spec = 0
        self._full_slices: dict[str, slice] = {}
        start = 0
        for c in full:
            self._full_spec |= int(_CONTROL_BITS[c])
            self._full_slices[c] = slice(start, start + sizes[c])
            start += sizes[c]
        self._nfull = start

        # Which variant each env uses, and each variant's initial state (float64, what MuJoCo reads).
        index = np.zeros(self.num_envs, np.int64) if model_index is None else _as_index(model_index, self.num_envs)
        if index.min() < 0 or index.max() >= len(self.models):
            raise ValueError(f"model_index must lie in [0, {len(self.models)}), got [{index.min()}, {index.max()}]")
        self._index = index
        self._state0, self._mocap0 = [], []
        for v in self.models:
            d = mujoco.MjData(v)
            mujoco.mj_forward(v, d)
            s = np.empty(self.nstate)
            mujoco.mj_getState(v, d, s, STATE_SPEC)
            self._state0.append(s)
            self._mocap0.append((d.mocap_pos.copy(), d.mocap_quat.copy()))

    # ------------------------------------------------------------------ stepping
    def step(self, control: Tensor | np.ndarray | None = None, nstep: int = 1) -> None:
        """Advance every env ``nstep`` physics steps.

        Args:
            control: ``[E, ncontrol]`` held for all steps, or ``[E, nstep, ncontrol]`` per step, laid
                out by :attr:`control_slices`; None holds the current controls and mocap poses.
            nstep: physics steps (the task's decimation).
        """
        E = self.num_envs
        full = np.empty((E, nstep, self._nfull))
        full[..., self._full_slices["ctrl"]] = self._ctrl[:, None]
        if "xfrc_applied" in self._full_slices:
            full[..., self._full_slices["xfrc_applied"]] = self._xfrc[:, None]
        if self.nmocap:
            full[..., self._full_slices["mocap_pos"]] = self._mocap_pos.reshape(E, 1, -1)
            full[..., self._full_slices["mocap_quat"]] = self._mocap_quat.reshape(E, 1, -1)
        if control is not None:
            c = self._per_step_control(_to_numpy(control), nstep)
            for name, sl in self.control_slices.items():
                full[..., self._full_slices[name]] = c[..., sl]
            self._ctrl = full[:, -1, self._full_slices["ctrl"]].copy()
            if "xfrc_applied" in self._full_slices:
                self._xfrc = full[:, -1, self._full_slices["xfrc_applied"]].copy()
            if self.nmocap:
                self._mocap_pos = full[:, -1, self._full_slices["mocap_pos"]].reshape(E, self.nmocap, 3).copy()
                self._mocap_quat = full[:, -1, self._full_slices["mocap_quat"]].reshape(E, self.nmocap, 4).copy()
        state, sensordata = rollout.rollout(
            self._env_models, self._datas, self._state, full, control_spec=self._full_spec, nstep=nstep,
            persistent_pool=True,
        )  # fmt: skip
        expected = self._state[:, self._slices["time"]][:, 0] + nstep * self._timestep()
        self._state = np.ascontiguousarray(state[:, -1])
        self._sensor_steps = sensordata  # [E, nstep, nsensordata]: every step's, for sensors_per_step
        # MuJoCo resets an unstable env to its initial state (with a warning) and restarts its clock:
        # a clock that did not advance by nstep * dt marks an env that diverged.
        clock = self._state[:, self._slices["time"]][:, 0]
        self._diverged |= ~np.isclose(clock, expected, rtol=0.0, atol=1e-6) | ~np.isfinite(self._state).all(1)
        if self.cfg.exact_sensors:
            self._refresh_sensors(None)
        else:
            self._sensordata = np.ascontiguousarray(sensordata[:, -1])

    def _per_step_control(self, c: ArrayT, nstep: int) -> ArrayT:
        """``c`` (numpy or torch) as ``[E, 1 or nstep, ncontrol]``: a ``[E, ncontrol]`` control is held
        for all ``nstep`` steps. Raises ValueError on any other shape."""
        if c.ndim == 2:
            c = c[:, None]
        E = self.num_envs
        if c.shape[0] != E or c.shape[-1] != self.ncontrol or c.shape[1] not in (1, nstep):
            raise ValueError(
                f"control must be [{E}, {self.ncontrol}] or [{E}, {nstep}, {self.ncontrol}], got {tuple(c.shape)}"
            )
        return c

    def _refresh_sensors(self, env_ids: np.ndarray | None) -> None:
        """Sensors at the current state of ``env_ids`` (all when None): one zero-timestep step."""
        ids = slice(None) if env_ids is None else env_ids
        if env_ids is not None and len(env_ids) == 0:
            return
        models = self._env_zero_dt if env_ids is None else [self._env_zero_dt[i] for i in env_ids]
        n = len(models)
        full = np.empty((n, 1, self._nfull))
        full[:, 0, self._full_slices["ctrl"]] = self._ctrl[ids]
        if "xfrc_applied" in self._full_slices:
            full[:, 0, self._full_slices["xfrc_applied"]] = self._xfrc[ids]
        if self.nmocap:
            full[:, 0, self._full_slices["mocap_pos"]] = self._mocap_pos[ids].reshape(n, -1)
            full[:, 0, self._full_slices["mocap_quat"]] = self._mocap_quat[ids].reshape(n, -1)
        _, sensordata = rollout.rollout(
            models, self._datas, self._state[ids], full, control_spec=self._full_spec, nstep=1, persistent_pool=True
        )
        self._sensordata[ids] = sensordata[:, 0]

    # ------------------------------------------------------------------ writing states
    def set_state(
        self,
        env_ids: Tensor | np.ndarray | Sequence[int],
        *,
        qpos: Tensor | np.ndarray | None = None,
        qvel: Tensor | np.ndarray | None = None,
        mocap_pos: Tensor | np.ndarray | None = None,
        mocap_quat: Tensor | np.ndarray | None = None,
        ctrl: Tensor | np.ndarray | None = None,
    ) -> None:
        """Write the state of ``env_ids`` (each given array is ``[len(env_ids), ...]``; omitted parts
        go back to the variant's initial values) and recompute their sensors. Time, actuator
        activations and the rest of the state restart from the variant's initial state."""
        ids = _as_index(env_ids, None)
        if len(ids) == 0:
            return
        given = {"qpos": qpos, "qvel": qvel, "mocap_pos": mocap_pos, "mocap_quat": mocap_quat, "ctrl": ctrl}
        self._write_state(ids, {k: v for k, v in given.items() if v is not None})
        self._diverged[ids] = False

    def _write_state(self, ids: np.ndarray, given: dict[str, Tensor | np.ndarray]) -> None:
        """The backend's :meth:`set_state` of envs ``ids [n]`` (non-empty): the ``given`` parts
        (``qpos``, ``qvel``, ``mocap_pos``, ``mocap_quat``, ``ctrl``, each ``[n, ...]``), the rest from
        the variants' initial state (ctrl 0), then the sensors."""
        n = len(ids)
        state0, pos0, quat0 = self._initial_state(ids)
        self._state[ids] = state0
        if "qpos" in given:
            self._state[ids, self._slices["qpos"]] = _to_numpy(given["qpos"]).reshape(n, self.nq)
        if "qvel" in given:
            self._state[ids, self._slices["qvel"]] = _to_numpy(given["qvel"]).reshape(n, self.nv)
        if self.nmocap:
            pos, quat = given.get("mocap_pos"), given.get("mocap_quat")
            self._mocap_pos[ids] = pos0 if pos is None else _to_numpy(pos).reshape(n, self.nmocap, 3)
            self._mocap_quat[ids] = quat0 if quat is None else _to_numpy(quat).reshape(n, self.nmocap, 4)
        self._ctrl[ids] = _to_numpy(given["ctrl"]).reshape(n, self.nu) if "ctrl" in given else 0.0
        self._xfrc[ids] = 0.0
        self._refresh_sensors(ids)

    def _initial_state(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The initial values of envs ``ids [n]`` (their variants'): ``(state [n, nstate],
        mocap_pos [n, nmocap, 3], mocap_quat [n, nmocap, 4])``, float64."""
        variants = self._index[ids]
        return (
            np.stack([self._state0[i] for i in variants]),
            np.stack([self._mocap0[i][0] for i in variants]),
            np.stack([self._mocap0[i][1] for i in variants]),
        )

    def set_model(self, env_ids: Tensor | np.ndarray | Sequence[int], model_index: Tensor | np.ndarray | int) -> None:
        """Switch ``env_ids`` to other variants (call :meth:`set_state` afterwards to place them)."""
        ids, new = self._assign_variants(env_ids, model_index)
        for i, k in zip(ids.tolist(), new.tolist(), strict=True):
            self._env_models[i] = self.models[k]
            self._env_zero_dt[i] = self._zero_dt[k]

    def _assign_variants(
        self, env_ids: Tensor | np.ndarray | Sequence[int], model_index: Tensor | np.ndarray | int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Check ``model_index`` (one variant, or one per env) and record it for ``env_ids``; returns
        ``(ids [n], variants [n])`` for the backend to switch its models."""
        ids = _as_index(env_ids, None)
        new = np.broadcast_to(_to_numpy(model_index).astype(np.int64), ids.shape)
        if len(ids) and (new.min() < 0 or new.max() >= len(self.models)):
            raise ValueError(f"model_index must lie in [0, {len(self.models)})")
        self._index[ids] = new
        return ids, new

    # ------------------------------------------------------------------ reading
    def _tensor(self, array: np.ndarray) -> Tensor:
        return torch.as_tensor(array, dtype=torch.float32, device=self.device)

    @property
    def model_index(self) -> Tensor:
        """``[E]`` long: the variant of each env."""
        return torch.as_tensor(self._index.copy(), device=self.device)

    @property
    def qpos(self) -> Tensor:
        """``[E, nq]``."""
        return self._tensor(self._state[:, self._slices["qpos"]])

    @property
    def qvel(self) -> Tensor:
        """``[E, nv]``."""
        return self._tensor(self._state[:, self._slices["qvel"]])

    @property
    def time(self) -> Tensor:
        """``[E]`` simulated seconds since the env's last reset."""
        return self._tensor(self._state[:, self._slices["time"]][:, 0])

    @property
    def mocap_pos(self) -> Tensor:
        """``[E, nmocap, 3]``."""
        return self._tensor(self._mocap_pos)

    @property
    def mocap_quat(self) -> Tensor:
        """``[E, nmocap, 4]`` (w, x, y, z)."""
        return self._tensor(self._mocap_quat)

    @property
    def sensordata(self) -> Tensor:
        """``[E, nsensordata]`` at the current state (see ``exact_sensors``)."""
        return self._tensor(self._sensordata)

    def sensors_per_step(self) -> Tensor:
        """``[E, nstep, nsensordata]``: the sensors of every physics step of the last :meth:`step`, each at the state
        that step started from (as ``rollout`` computes them inside ``mj_step``; e.g. the contacts found at each
        step, which a task reading only the final state would miss). Rollout backend only."""
        steps = getattr(self, "_sensor_steps", None)
        if steps is None:
            raise RuntimeError("sensors_per_step: no step taken yet (or a backend that does not keep them)")
        return self._tensor(steps)

    def diverged(self) -> Tensor:
        """``[E]`` bool: since its last :meth:`set_state` the env went unstable (MuJoCo reset it
        mid-step, which also restarts its clock) or holds NaN/inf. Reset these envs."""
        bad = self._diverged | ~np.isfinite(self._state).all(1) | ~np.isfinite(self._sensordata).all(1)
        return torch.as_tensor(bad, device=self.device)

    def _timestep(self) -> np.ndarray:
        """``[E]`` physics dt of each env's variant."""
        return np.array([m.opt.timestep for m in self.models])[self._index]

    def sensor_slice(self, name: str) -> slice:
        """Where sensor ``name`` lies in :attr:`sensordata`."""
        s = self.model.sensor(name)
        return slice(int(s.adr[0]), int(s.adr[0]) + int(s.dim[0]))


def free_bodies(qpos: Tensor, qvel: Tensor, n: int) -> RigidBodyState:
    """The first ``n`` free-joint bodies of every env, ``[E, n, ...]``, from MuJoCo's ``qpos [E, nq]`` and
    ``qvel [E, nv]`` (position, ``[w, x, y, z]`` quaternion, world-frame velocity, body-frame angular velocity:
    covey's conventions and a free joint's)."""
    q, v = qpos[:, : 7 * n].view(-1, n, 7), qvel[:, : 6 * n].view(-1, n, 6)
    return RigidBodyState(q[..., :3], q[..., 3:], v[..., :3], v[..., 3:])


def thrust_wrench(quat: Tensor, thrust: Tensor, body_torque: Tensor, force: Tensor) -> Tensor:
    """A multirotor's ``xfrc_applied`` rows ``[..., 6]`` (world frame, at the centre of mass): collective ``thrust``
    ``[...]`` along its body z and ``body_torque [..., 3]`` rotated by ``quat [..., 4]``, plus a world-frame ``force``
    ``[..., 3]`` (drag)."""
    e_z = torch.zeros_like(force)
    e_z[..., 2] = thrust
    return torch.cat((quat_rotate(quat, e_z) + force, quat_rotate(quat, body_torque)), -1)


def _to_numpy(x: Tensor | np.ndarray | Sequence[float] | int) -> np.ndarray:
    if isinstance(x, Tensor):
        return x.detach().to("cpu", torch.float64 if x.is_floating_point() else torch.int64).numpy()
    return np.asarray(x)


def _as_index(ids: Tensor | np.ndarray | Sequence[int], n: int | None) -> np.ndarray:
    out = _to_numpy(ids).astype(np.int64).reshape(-1)
    if n is not None and len(out) != n:
        raise ValueError(f"expected {n} indices, got {len(out)}")
    return out
