"""ROS message -> numpy values for the policy node: one parser per message type a deployment profile may name.

A profile input says which message type feeds it (``"msg": "nav_msgs/Odometry"``); :data:`PARSERS`
maps that name to a function turning one message into plain numpy values, raising
:class:`InvalidInput` on anything unusable (non-finite numbers, malformed quaternions, a bad image
buffer). The message classes are imported by name (:func:`message_class`) only when the node
subscribes, so this module needs no rclpy.

Conventions (ROS REP 103/105 and the ``nav_msgs/Odometry`` definition):
    * Odometry ``pose`` is in the common world frame (``header.frame_id``, ENU, z up); the
      ``frame_id`` strings are not checked.
    * Odometry ``twist`` (linear and angular) is in the BODY frame (``child_frame_id``). Covey's
      tasks use the linear velocity in the world frame, so it is rotated by the pose's orientation;
      the angular velocity stays in the body frame (as in the sim).
    * Quaternions arrive as ``(x, y, z, w)`` and are reordered to covey's ``[w, x, y, z]``; they are
      normalised, and one whose norm is off by more than :data:`QUAT_NORM_TOL` (e.g. all zeros)
      makes the input invalid.
    * Images: ``rgb8``, ``bgr8`` (converted to RGB), ``mono8`` and multi-channel ``8UC1`` .. ``8UC16``
      (channels as sent, e.g. a BEV mask stack), to ``uint8 [H, W, C]``.
    * Paths (``nav_msgs/Path``): every pose's ``x, y`` and yaw (rad, about z) to float64 ``[N, 3]``, in the
      path's frame (not checked, as for odometry); its header stamp is read by the node like any other.
    * Point clouds: the ``x, y, z`` fields of every point, in cloud order, to float32 ``[n, 3]``.
    * Named records (``sensor_msgs/JointState`` as a stamped list of named numbers, e.g. a referee's game
      state): ``name[i]`` -> ``position[i]`` (``velocity`` and ``effort`` are ignored), to :class:`NamedValues`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import numpy as np

from covey_common.messages import MESSAGE_TYPES, ImageFrame, InvalidInput, NamedValues, OdometryState, PoseState
from covey_common.quaternion import quat_rotate, quat_yaw

MAX_ABS_VALUE = 1e8  # m, m/s, rad/s: beyond any workspace, even geodetic (ECEF ~6.4e6 m, UTM < 1e7 m)
QUAT_NORM_TOL = 0.1  # |norm - 1| beyond this: a malformed quaternion, not round-off


def _quat_wxyz(o: Any) -> np.ndarray:
    """``geometry_msgs/Quaternion`` (x, y, z, w) -> normalised ``[w, x, y, z]``; InvalidInput when malformed."""
    q = np.array([o.w, o.x, o.y, o.z], dtype=np.float64)
    if not np.isfinite(q).all():
        raise InvalidInput("non-finite orientation")
    norm = float(np.linalg.norm(q))
    if abs(norm - 1.0) > QUAT_NORM_TOL:
        raise InvalidInput(f"orientation quaternion has norm {norm:.3g}")
    return q / norm


def _vec(v: Any, what: str) -> np.ndarray:
    out = np.array([v.x, v.y, v.z], dtype=np.float64)
    if not np.isfinite(out).all():
        raise InvalidInput(f"non-finite {what}")
    if np.abs(out).max() > MAX_ABS_VALUE:
        # Finite but physically meaningless (an uninitialised estimator, a unit error): a task's
        # observation may clip it into range, so it must be refused here.
        raise InvalidInput(f"{what} {np.abs(out).max():.3g} beyond {MAX_ABS_VALUE:g}")
    return out


def parse_odometry(msg: Any) -> OdometryState:
    """``nav_msgs/Odometry`` -> :class:`OdometryState` (body-frame linear twist rotated to the world frame)."""
    pose, twist = msg.pose.pose, msg.twist.twist
    quat = _quat_wxyz(pose.orientation)
    pos = _vec(pose.position, "position")
    vel_body = _vec(twist.linear, "linear velocity")
    ang_vel = _vec(twist.angular, "angular velocity")
    return OdometryState(pos, quat, quat_rotate(quat, vel_body), ang_vel)


def parse_pose_stamped(msg: Any) -> PoseState:
    """``geometry_msgs/PoseStamped`` -> :class:`PoseState`."""
    return PoseState(_vec(msg.pose.position, "position"), _quat_wxyz(msg.pose.orientation))


_CHANNELS = {"rgb8": 3, "bgr8": 3, "mono8": 1}
MAX_GENERIC_CHANNELS = 16  # 8UC1 .. 8UC16: multi-channel masks (OpenCV's 8UC(n) naming)


def image_channels(encoding: str) -> int | None:
    """Channels of an 8-bit ``encoding`` (``rgb8`` 3, ``mono8`` 1, ``8UC<n>`` n for 1 <= n <= 16), None otherwise."""
    encoding = encoding.lower()
    if encoding in _CHANNELS:
        return _CHANNELS[encoding]
    digits = encoding.removeprefix("8uc")
    if digits != encoding and digits.isdigit() and 1 <= int(digits) <= MAX_GENERIC_CHANNELS:
        return int(digits)
    return None


def image_encoding(channels: int) -> str:
    """The encoding a publisher uses for ``channels`` uint8 channels: rgb8 (3), mono8 (1), else ``8UC<n>``."""
    if not 1 <= channels <= MAX_GENERIC_CHANNELS:
        raise ValueError(f"no 8-bit image encoding for {channels} channels (1 to {MAX_GENERIC_CHANNELS})")
    return {3: "rgb8", 1: "mono8"}.get(channels, f"8UC{channels}")


def parse_image(msg: Any) -> ImageFrame:
    """``sensor_msgs/Image`` (rgb8, bgr8, mono8 or 8UC1..8UC16) -> :class:`ImageFrame` (a copy; rows padded to
    ``step`` are cut)."""
    encoding = str(msg.encoding).lower()
    c = image_channels(encoding)
    if c is None:
        raise InvalidInput(
            f"image encoding {msg.encoding!r} not supported (use one of {sorted(_CHANNELS)} or "
            f"8UC1..8UC{MAX_GENERIC_CHANNELS})"
        )
    h, w, step = int(msg.height), int(msg.width), int(msg.step)
    data = np.frombuffer(bytes(msg.data), dtype=np.uint8)
    if h < 1 or w < 1 or step < w * c or data.size < h * step:
        raise InvalidInput(f"image buffer of {data.size} bytes does not hold {h}x{w} {encoding} with step {step}")
    pixels = data[: h * step].reshape(h, step)[:, : w * c].reshape(h, w, c)
    if encoding == "bgr8":
        pixels = pixels[..., ::-1]
    return ImageFrame(np.ascontiguousarray(pixels), encoding)


def parse_path(msg: Any) -> np.ndarray:
    """``nav_msgs/Path`` -> its poses as float64 ``[N, 3]``: ``x, y`` (m) and yaw (rad, about z) in the path's frame.

    An empty path, a non-finite or huge position or a malformed quaternion (in any pose) makes the input invalid:
    a route is followed as a whole, so a bad pose cannot be dropped.
    """
    poses = [(p.pose.position, p.pose.orientation) for p in msg.poses]
    if not poses:
        raise InvalidInput("empty path (no poses)")
    raw = np.array([(p.x, p.y, p.z, o.w, o.x, o.y, o.z) for p, o in poses], dtype=np.float64)  # [N, 7]
    if not np.isfinite(raw).all():
        bad = int(np.argmin(np.isfinite(raw).all(1)))
        raise InvalidInput(f"non-finite pose {bad} of {len(poses)} in the path")
    if np.abs(raw[:, :3]).max() > MAX_ABS_VALUE:
        raise InvalidInput(f"path position {np.abs(raw[:, :3]).max():.3g} beyond {MAX_ABS_VALUE:g}")
    norm = np.linalg.norm(raw[:, 3:], axis=1)
    off = np.abs(norm - 1.0)
    if off.max() > QUAT_NORM_TOL:
        bad = int(np.argmax(off))
        raise InvalidInput(f"orientation quaternion of path pose {bad} has norm {norm[bad]:.3g}")
    yaw = quat_yaw(raw[:, 3:] / norm[:, None])
    return np.stack((raw[:, 0], raw[:, 1], yaw), axis=-1)


_POINT_FIELD_DTYPES = {7: "f4", 8: "f8"}  # sensor_msgs/PointField FLOAT32, FLOAT64


def parse_point_cloud(msg: Any) -> np.ndarray:
    """``sensor_msgs/PointCloud2`` -> its points' ``x, y, z`` as float32 ``[n, 3]`` in cloud order.

    Reads the ``x``, ``y`` and ``z`` fields (FLOAT32 or FLOAT64, any offsets, either byte order) of
    ``height * width`` points of ``point_step`` bytes, rows padded to ``row_step``; other fields are
    ignored. A missing field, a buffer too short or a non-finite point makes the input invalid
    (tasks take a fixed set of points in a known order, so a dropped point cannot be patched).
    """
    fields = {str(f.name): f for f in msg.fields}
    missing = [k for k in "xyz" if k not in fields]
    if missing:
        raise InvalidInput(f"point cloud has no field(s) {missing} (fields: {sorted(fields)})")
    h, w, step, row = int(msg.height), int(msg.width), int(msg.point_step), int(msg.row_step)
    data = np.frombuffer(bytes(msg.data), dtype=np.uint8)
    if h < 1 or w < 1 or step < 1 or row < w * step or data.size < h * row:
        raise InvalidInput(f"point cloud buffer of {data.size} bytes does not hold {h}x{w} points of {step} bytes")
    rows = data[: h * row].reshape(h, row)[:, : w * step].reshape(h * w, step)
    order = ">" if msg.is_bigendian else "<"
    out = np.empty((h * w, 3), np.float32)
    for k, name in enumerate("xyz"):
        f = fields[name]
        kind = _POINT_FIELD_DTYPES.get(int(f.datatype))
        if kind is None or int(f.count) != 1:
            raise InvalidInput(f"point cloud field {name!r} must be one FLOAT32 or FLOAT64 (datatype {f.datatype})")
        size, off = int(kind[1]), int(f.offset)
        if off + size > step:
            raise InvalidInput(f"point cloud field {name!r} at offset {off} overruns point_step {step}")
        out[:, k] = np.ascontiguousarray(rows[:, off : off + size]).view(order + kind)[:, 0]
    if not np.isfinite(out).all():
        raise InvalidInput("non-finite point in the point cloud")
    return out


def parse_float_array(msg: Any) -> np.ndarray:
    """``std_msgs/Float32MultiArray`` -> its ``data`` as float32 ``[n]``; non-finite values are invalid."""
    data = np.asarray(msg.data, dtype=np.float32).reshape(-1)
    if not np.isfinite(data).all():
        raise InvalidInput("non-finite value in the array")
    return data


def parse_joint_state(msg: Any) -> NamedValues:
    """``sensor_msgs/JointState`` -> :class:`NamedValues` (``name`` and ``position``): a stamped record of named
    numbers. Unequal lengths, a repeated or empty name, and a non-finite or huge value make the input invalid."""
    names = tuple(str(n) for n in msg.name)
    values = np.asarray(msg.position, dtype=np.float64).reshape(-1)
    if len(names) != values.size:
        raise InvalidInput(f"{len(names)} names but {values.size} positions")
    if len(set(names)) != len(names) or not all(names):
        raise InvalidInput(f"names must be distinct and non-empty, got {list(names)}")
    if not np.isfinite(values).all():
        raise InvalidInput(f"non-finite value of {names[int(np.argmin(np.isfinite(values)))]!r}")
    if values.size and np.abs(values).max() > MAX_ABS_VALUE:
        raise InvalidInput(f"value {np.abs(values).max():.3g} beyond {MAX_ABS_VALUE:g}")
    return NamedValues(names, values)


PARSERS: dict[str, Callable[[Any], Any]] = {
    "nav_msgs/Odometry": parse_odometry,
    "geometry_msgs/PoseStamped": parse_pose_stamped,
    "sensor_msgs/Image": parse_image,
    "std_msgs/Float32MultiArray": parse_float_array,
    "sensor_msgs/PointCloud2": parse_point_cloud,
    "nav_msgs/Path": parse_path,
    "sensor_msgs/JointState": parse_joint_state,
}
"""Message type (``package/Type``) -> parser; a profile input may name any of these."""

__all__ = [
    "MAX_ABS_VALUE",
    "MESSAGE_TYPES",
    "PARSERS",
    "QUAT_NORM_TOL",
    "ImageFrame",
    "InvalidInput",
    "NamedValues",
    "OdometryState",
    "PoseState",
    "image_channels",
    "image_encoding",
    "message_class",
    "parse_float_array",
    "parse_image",
    "parse_joint_state",
    "parse_odometry",
    "parse_path",
    "parse_point_cloud",
    "parse_pose_stamped",
]


def message_class(type_name: str) -> type:
    """The ROS message class of ``"package/Type"`` (e.g. ``nav_msgs/Odometry`` -> ``nav_msgs.msg.Odometry``)."""
    package, sep, name = type_name.partition("/")
    if not sep or not package or not name:
        raise ValueError(f"message type must be 'package/Type', got {type_name!r}")
    try:
        return getattr(importlib.import_module(f"{package}.msg"), name)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"message type {type_name!r} is not available here ({err})") from err
