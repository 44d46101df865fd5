"""The MuJoCo Warp backend of :class:`~sim.mujoco.world.BatchedMjWorld` (``mujoco.backend=warp``).

Same model, same interface, state kept on the torch device: ``mujoco_warp`` steps all envs in
parallel kernels (one "world" per env) and the task reads and writes the Warp arrays through
zero-copy torch views (``warp.to_torch``). Built for a GPU; it also runs on the CPU device (slowly,
after a long first compile), which is how it is checked against the rollout backend here.

Model variants (e.g. pegs of different shapes) become per-env rows of MuJoCo Warp's batched model
fields: every MjModel array that differs between variants must be a batchable field (geom sizes,
positions, orientations, masses, ...); others (mesh data) are a clear error. Warp computes in
float32, the rollout backend in float64: trajectories agree to float32 precision, not bit for bit.

Install: ``pip install "covey[warp]"`` (mujoco-warp and warp-lang).
"""

from __future__ import annotations

from collections.abc import Sequence

import mujoco
import numpy as np
import torch
from torch import Tensor

from sim.mujoco.world import BatchedMjWorld

try:  # optional dependency
    import mujoco_warp as mjw
    import warp as wp
except ImportError as err:  # pragma: no cover - depends on the install
    raise ImportError(
        f"mujoco.backend=warp needs MuJoCo Warp: pip install 'covey[warp]' ({err}); or use mujoco.backend=rollout"
    ) from err


def _varying_fields(models: Sequence[mujoco.MjModel]) -> list[str]:
    """Names of the MjModel arrays that differ between variants."""
    out = []
    for name in dir(models[0]):
        ref = getattr(models[0], name, None)
        if name.startswith("_") or not isinstance(ref, np.ndarray):
            continue
        if any(not np.array_equal(getattr(m, name), ref) for m in models[1:]):
            out.append(name)
    return out


class WarpMjWorld(BatchedMjWorld):
    """``num_envs`` MuJoCo Warp worlds; see :class:`BatchedMjWorld` for the interface."""

    def _init_backend(self) -> None:
        """The Warp model and data (one world per env) and torch views of their arrays."""
        if "xfrc_applied" in self.control:  # not wired here yet: the rollout backend carries it
            raise ValueError("mujoco.backend='warp' does not take xfrc_applied controls; use backend='rollout'")
        wp.init()
        self._wp_device = "cpu" if self.device.type == "cpu" else f"cuda:{self.device.index or 0}"
        varying = _varying_fields(self.models)
        E = self.num_envs
        with wp.ScopedDevice(self._wp_device):
            try:
                self._m = mjw.put_model(self.model, batch_sizes={f: E for f in varying})
            except ValueError as err:
                raise ValueError(
                    f"model variants differ in {varying}; MuJoCo Warp can batch only some model fields ({err})"
                ) from err
            self._d = mjw.put_data(self.model, mujoco.MjData(self.model), nworld=E)
        self._varying = varying
        self._fields = {f: wp.to_torch(getattr(self._m, f)) for f in varying}
        self._view = {
            k: wp.to_torch(getattr(self._d, k))
            for k in ("qpos", "qvel", "act", "time", "ctrl", "mocap_pos", "mocap_quat", "sensordata")
        }
        self._diverged = torch.zeros(E, dtype=torch.bool, device=self.device)
        self.set_model(np.arange(E), self._index.copy())
        self.set_state(np.arange(E))

    # ------------------------------------------------------------------ stepping
    def step(self, control: Tensor | np.ndarray | None = None, nstep: int = 1) -> None:
        if control is not None:
            c = self._per_step_control(torch.as_tensor(control, dtype=torch.float32, device=self.device), nstep)
        with wp.ScopedDevice(self._wp_device):
            for k in range(nstep):
                if control is not None:
                    self._write_controls(c[:, min(k, c.shape[1] - 1)])
                mjw.step(self._m, self._d)
            if self.cfg.exact_sensors:
                mjw.forward(self._m, self._d)
        v = self._view
        self._diverged |= ~(torch.isfinite(v["qpos"]).all(1) & torch.isfinite(v["qvel"]).all(1))

    def _write_controls(self, c: Tensor) -> None:
        v, E = self._view, self.num_envs
        for name, sl in self.control_slices.items():
            if name == "ctrl":
                v["ctrl"].copy_(c[:, sl])
            else:
                v[name].copy_(c[:, sl].reshape(E, self.nmocap, -1))

    # ------------------------------------------------------------------ writing states
    def _write_state(self, ids_np: np.ndarray, given: dict[str, Tensor | np.ndarray]) -> None:
        ids = torch.as_tensor(ids_np, device=self.device)
        v, n, sl = self._view, len(ids_np), self._slices
        state0, pos0, quat0 = (torch.as_tensor(x, device=self.device) for x in self._initial_state(ids_np))

        def put(name: str, default: Tensor) -> None:  # the given value, else the default
            value = given.get(name)
            x = default if value is None else torch.as_tensor(value, dtype=torch.float32, device=self.device)
            v[name][ids] = x.reshape(n, *v[name].shape[1:]).to(v[name].dtype)

        put("qpos", state0[:, sl["qpos"]])
        put("qvel", state0[:, sl["qvel"]])
        put("act", state0[:, sl["act"]])
        put("time", state0[:, sl["time"]][:, 0])
        put("ctrl", torch.zeros(n, self.nu, device=self.device))
        if self.nmocap:
            put("mocap_pos", pos0)
            put("mocap_quat", quat0)
        with wp.ScopedDevice(self._wp_device):
            mjw.forward(self._m, self._d)  # sensors (and everything derived) at the new states

    def set_model(self, env_ids: Tensor | np.ndarray | Sequence[int], model_index: Tensor | np.ndarray | int) -> None:
        ids, new = self._assign_variants(env_ids, model_index)
        rows = torch.as_tensor(ids, device=self.device)
        for f, view in self._fields.items():
            values = np.stack([getattr(self.models[k], f) for k in new])
            view[rows] = torch.as_tensor(values, device=self.device).reshape(len(ids), *view.shape[1:]).to(view.dtype)

    # ------------------------------------------------------------------ reading
    # float32 copies of the Warp arrays (shapes: BatchedMjWorld's properties of the same names)
    qpos = property(lambda self: self._read("qpos"))
    qvel = property(lambda self: self._read("qvel"))
    time = property(lambda self: self._read("time"))
    mocap_pos = property(lambda self: self._read("mocap_pos"))
    mocap_quat = property(lambda self: self._read("mocap_quat"))
    sensordata = property(lambda self: self._read("sensordata"))

    def _read(self, name: str) -> Tensor:
        """A float32 copy of the Warp data array ``name`` (a copy: later steps do not change it)."""
        return self._view[name].float().clone()

    def diverged(self) -> Tensor:
        return self._diverged | ~torch.isfinite(self._view["sensordata"]).all(1)
