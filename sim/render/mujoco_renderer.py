"""Offscreen MuJoCo rendering of batched simulator states, and video files.

The torch simulator stays the source of truth: a renderer builds one ``MjModel`` from the env's
config (same MJCF as ``sim.mujoco``), copies the state of each selected env into ``MjData``, runs
``mj_forward`` (tendons, sites) and draws it with ``mujoco.Renderer``. No MuJoCo physics is stepped.

GL backend: an existing ``MUJOCO_GL`` is respected; otherwise ``egl`` is tried, then ``osmesa``
(each in a short subprocess, ~1 s once per process) and the winner is exported to ``MUJOCO_GL``
so child processes skip the probe. Headless Debian needs ``libegl1 libopengl0 libgl1-mesa-dri``
for EGL (software llvmpipe without a GPU) or ``libosmesa6`` for OSMesa.

A new task adds a subclass of :class:`MujocoRenderer` (``_build_xml`` or ``_build_model``, ``_fetch``,
``_set_data``),
usually in its own package, and names it in its env class: ``renderer = "module:Class"``
(:func:`make_renderer` imports it on first use).
"""

from __future__ import annotations

import atexit
import ctypes.util
import importlib
import os
import subprocess
import sys
import threading
import weakref
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch

if TYPE_CHECKING:
    import mujoco

    from sim.core.env import MultiAgentEnv

CameraMode = Literal["track", "fixed"]

_BACKENDS = ("egl", "osmesa")
# Shared libraries each backend loads; each inner tuple lists alternatives (PyOpenGL takes OpenGL or GL).
_GL_LIBS = {"egl": (("EGL",), ("OpenGL", "GL")), "osmesa": (("OSMesa",),)}
APT_PACKAGES = {
    "egl": "libegl1 libopengl0 libgl1-mesa-dri",
    "osmesa": "libosmesa6",
}
_PROBE = """
import mujoco
m = mujoco.MjModel.from_xml_string("<mujoco><worldbody><geom size='.1'/></worldbody></mujoco>")
r = mujoco.Renderer(m, 16, 16)
r.update_scene(mujoco.MjData(m))
r.render()
r.close()
"""
_backend_lock = threading.Lock()
_backend: str | None = None
_backend_error: RenderUnavailableError | None = None
_live_renderers: weakref.WeakSet[MujocoRenderer] = weakref.WeakSet()


@atexit.register
def _close_live_renderers() -> None:
    # Free GL contexts before interpreter teardown (OSMesa's finaliser fails once modules are gone).
    for renderer in list(_live_renderers):
        renderer.close()


class RenderUnavailableError(RuntimeError):
    """No offscreen GL backend works on this machine."""


# --------------------------------------------------------------------------- GL backend
def _probe_backend(name: str, timeout: float = 60.0) -> str | None:
    """Render one tiny frame with ``MUJOCO_GL=name`` in a subprocess; ``None`` on success, else why not."""
    missing = [alts for alts in _GL_LIBS[name] if all(ctypes.util.find_library(lib) is None for lib in alts)]
    if missing:
        return "shared libraries not found: " + ", ".join(" or ".join(f"lib{lib}" for lib in alts) for alts in missing)
    env = {**os.environ, "MUJOCO_GL": name}  # PYOPENGL_PLATFORM, if set, binds the probe as it binds us
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"probe failed: {err}"
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return f"probe exited with {proc.returncode}: {tail}"
    return None


def gl_backend() -> str:
    """The offscreen GL backend in use (``egl``, ``osmesa``, ...), chosen once per process.

    Respects ``MUJOCO_GL`` when set; otherwise probes ``egl`` then ``osmesa`` and exports the first
    that works as ``MUJOCO_GL``.

    Raises:
        RenderUnavailableError: neither backend can render here (message names the apt packages).
    """
    global _backend, _backend_error
    with _backend_lock:
        if _backend is not None:
            return _backend
        if _backend_error is not None:
            raise _backend_error
        preset = os.environ.get("MUJOCO_GL", "").strip().lower()
        if preset in ("disable", "disabled", "off", "false", "0"):
            _backend_error = RenderUnavailableError(f"rendering is switched off (MUJOCO_GL={preset})")
            raise _backend_error
        if preset:
            _backend = preset
            return _backend
        reasons = {}
        for name in _BACKENDS:
            why = _probe_backend(name)
            if why is None:
                os.environ["MUJOCO_GL"] = name
                _backend = name
                return _backend
            reasons[name] = why
        detail = "; ".join(f"{k}: {v}" for k, v in reasons.items())
        _backend_error = RenderUnavailableError(
            f"no offscreen OpenGL backend works ({detail}). On Debian/Ubuntu install one with "
            f"`apt-get install -y --no-install-recommends {APT_PACKAGES['egl']} {APT_PACKAGES['osmesa']}`, "
            "or set MUJOCO_GL explicitly."
        )
        raise _backend_error


def _gl_context_class(backend: str) -> Any:
    """MuJoCo's ``GLContext`` class for ``backend`` (imports the backend module)."""
    if backend == "egl":
        from mujoco.egl import GLContext
    else:
        from mujoco.osmesa import GLContext
    return GLContext


def create_renderer(model: mujoco.MjModel, width: int, height: int, msaa: int | None = None) -> mujoco.Renderer:
    """A ``mujoco.Renderer`` of ``height x width`` on the backend of :func:`gl_backend`.

    Sets the model's offscreen buffer to exactly ``width x height`` (a larger buffer only costs
    time) and, when ``msaa`` is given, its multisample count (0 = off; MuJoCo's default 4 makes
    software GL ~3x slower). If ``mujoco`` was imported before ``MUJOCO_GL`` was set (so it bound
    another context class), the chosen backend's context class is swapped in while the renderer
    is created.
    """
    backend = gl_backend()
    import mujoco

    model.vis.global_.offwidth = width
    model.vis.global_.offheight = height
    if msaa is not None:
        model.vis.quality.offsamples = msaa
    gl_module = getattr(sys.modules[mujoco.Renderer.__module__], "gl_context", None)
    wanted = _gl_context_class(backend) if backend in _BACKENDS else None
    bound = getattr(gl_module, "GLContext", None)
    if gl_module is None or wanted is None or bound is wanted:
        return mujoco.Renderer(model, height=height, width=width)
    with _backend_lock:
        gl_module.GLContext = wanted
        try:
            return mujoco.Renderer(model, height=height, width=width)
        finally:
            gl_module.GLContext = bound


# --------------------------------------------------------------------------- renderers
class MujocoRenderer(ABC):
    """Shared parts of a batched state renderer: model, GL renderer, camera, the batch loop.

    Subclasses build the MJCF (:meth:`_build_xml`), copy the env's tensors to numpy once per call
    (:meth:`_fetch`) and write one env's state into ``self.data`` (:meth:`_set_data`).

    Args:
        env: the batched env to draw.
        width, height: image size in pixels.
        camera: ``"track"`` follows the point returned by :meth:`_set_data` with a free camera,
            ``"fixed"`` uses the model camera ``fixed_camera``.
        distance, azimuth, elevation: free-camera placement for ``"track"`` (m, degrees).
        msaa: multisample anti-aliasing samples; 0 (default) is fastest on software GL (llvmpipe,
            OSMesa), 4 gives smoother cables and is free on a GPU.
    """

    fixed_camera = "overview"

    def __init__(
        self,
        env: MultiAgentEnv,
        width: int = 640,
        height: int = 480,
        camera: CameraMode = "track",
        distance: float = 4.0,
        azimuth: float = 135.0,
        elevation: float = -20.0,
        msaa: int = 0,
    ) -> None:
        if width < 1 or height < 1:
            raise ValueError(f"width and height must be >= 1, got {width}x{height}")
        if camera not in ("track", "fixed"):
            raise ValueError(f"camera must be 'track' or 'fixed', got {camera!r}")
        gl_backend()  # pick the backend before mujoco can create any GL context
        import mujoco

        self.env = env
        self.width, self.height = int(width), int(height)
        self.camera_mode = camera
        self.model = self._build_model()
        self.data = mujoco.MjData(self.model)
        self._renderer = create_renderer(self.model, self.width, self.height, msaa)
        _live_renderers.add(self)
        flags = self._renderer.scene.flags
        flags[mujoco.mjtRndFlag.mjRND_SHADOW] = False
        flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = False
        self._camera = mujoco.MjvCamera()
        if camera == "track":
            self._camera.type = mujoco.mjtCamera.mjCAMERA_FREE
            self._camera.distance = distance
            self._camera.azimuth = azimuth
            self._camera.elevation = elevation
        else:
            cam_id = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_CAMERA, self.fixed_camera)
            if cam_id < 0:
                raise ValueError(f"model has no camera named {self.fixed_camera!r}")
            self._camera.type = mujoco.mjtCamera.mjCAMERA_FIXED
            self._camera.fixedcamid = cam_id

    # ----------------------------------------------------------------- task hooks
    def _build_xml(self) -> str:
        """The MJCF document drawn for every env (must contain the camera ``fixed_camera``)."""
        raise NotImplementedError(f"{type(self).__name__} implements neither _build_xml nor _build_model")

    def _build_model(self) -> mujoco.MjModel:
        """The model drawn for every env: by default compiled from :meth:`_build_xml`; a task whose
        simulation already is a MuJoCo model may return (a copy of) that one."""
        import mujoco

        return mujoco.MjModel.from_xml_string(self._build_xml())

    @abstractmethod
    def _fetch(self, env_ids: torch.Tensor) -> dict[str, np.ndarray]:
        """The state of ``env_ids [B]`` as numpy arrays with leading dim ``B`` (one device copy)."""

    @staticmethod
    def _to_numpy(parts: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
        """One float64 CPU copy of each tensor (what :meth:`_fetch` returns)."""
        return {k: v.detach().to("cpu", torch.float64).numpy() for k, v in parts.items()}

    @abstractmethod
    def _set_data(self, state: dict[str, np.ndarray], b: int) -> np.ndarray:
        """Write row ``b`` of ``state`` into ``self.data`` (qpos, mocap); return the camera target ``[3]``."""

    # ----------------------------------------------------------------- public API
    def render(self, env_ids: Sequence[int] | torch.Tensor | None = None) -> np.ndarray:
        """Images of the envs ``env_ids`` (default all), ``uint8 [B, H, W, 3]``."""
        import mujoco

        if self._renderer is None:
            raise RuntimeError("render() after close()")
        if env_ids is None:
            ids = torch.arange(self.env.num_envs)
        else:
            ids = torch.as_tensor(env_ids, dtype=torch.long).reshape(-1).cpu()
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.env.num_envs):
            raise IndexError(f"env_ids must be in [0, {self.env.num_envs}), got {ids.tolist()}")
        state = self._fetch(ids.to(self.env.device))
        frames = np.empty((ids.numel(), self.height, self.width, 3), dtype=np.uint8)
        for b in range(ids.numel()):
            target = self._set_data(state, b)
            mujoco.mj_forward(self.model, self.data)
            if self.camera_mode == "track":
                self._camera.lookat[:] = target
            self._renderer.update_scene(self.data, camera=self._camera)
            self._renderer.render(out=frames[b])
        return frames

    def close(self) -> None:
        """Free the GL context (the renderer is unusable afterwards)."""
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
        _live_renderers.discard(self)

    def __enter__(self) -> MujocoRenderer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make_renderer(env: MultiAgentEnv, **kwargs: Any) -> MujocoRenderer:
    """The task's renderer (its class attribute ``renderer``, ``"module:Class"``); ``kwargs`` go to
    its constructor.

    Raises:
        ValueError: the task has no renderer, or its renderer cannot be imported.
    """
    target = getattr(type(env), "renderer", None)
    name = getattr(env, "task_name", type(env).__name__)
    if not target:
        raise ValueError(f"no renderer for task {name!r} (its env class sets no 'renderer')")
    module_name, _, cls_name = target.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), cls_name)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"task {name!r}: cannot load its renderer {target!r}: {err}") from err
    return cls(env, **kwargs)


# --------------------------------------------------------------------------- video files
VIDEO_SUFFIXES = (".gif", ".mp4")


def check_video_path(path: str | Path) -> Path:
    """Fail early if :func:`write_video` cannot write ``path``; returns it as a ``Path``.

    Raises:
        ValueError: unsupported suffix. ImportError: ``.mp4`` without ``imageio-ffmpeg``.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in VIDEO_SUFFIXES:
        raise ValueError(f"unsupported video suffix {path.suffix!r} (use .gif, or .mp4 with the 'video' extra)")
    if suffix == ".mp4":
        try:
            import imageio_ffmpeg  # noqa: F401
        except ImportError as err:
            raise ImportError(
                "writing .mp4 needs imageio-ffmpeg: install the 'video' extra (pip install -e '.[video]') "
                "or write a .gif instead"
            ) from err
    return path


def write_video(frames: np.ndarray | Sequence[np.ndarray], path: str | Path, fps: float = 25.0) -> Path:
    """Write ``frames`` (``uint8 [T, H, W, 3]``) to ``path``; the suffix picks the format.

    ``.gif`` always works (Pillow). ``.mp4`` needs ``imageio-ffmpeg`` (``pip install covey[video]``).
    Creates missing parent directories and returns the path.

    Raises:
        ValueError: no frames, a bad frame shape or an unsupported suffix.
        ImportError: ``.mp4`` without ``imageio-ffmpeg``.
    """
    arr = np.asarray(frames)
    if arr.ndim != 4 or arr.shape[0] == 0 or arr.shape[-1] != 3:
        raise ValueError(f"frames must be a non-empty [T, H, W, 3] array, got shape {arr.shape}")
    if arr.dtype != np.uint8:
        raise ValueError(f"frames must be uint8, got {arr.dtype}")
    if fps <= 0:
        raise ValueError(f"fps must be > 0, got {fps}")
    path = check_video_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() == ".gif":
        import imageio.v3 as iio

        # Pillow's GIF writer: duration per frame in ms (GIF stores 10 ms ticks); loop=0 repeats.
        iio.imwrite(path, arr, extension=".gif", plugin="pillow", duration=1000.0 / fps, loop=0)
    else:
        import imageio.v2 as iio2

        with iio2.get_writer(
            path, format="FFMPEG", mode="I", fps=fps, codec="libx264", pixelformat="yuv420p", macro_block_size=2
        ) as writer:
            for frame in arr:
                writer.append_data(frame)
    return path
