"""sensor_msgs/PointCloud2 -> float32 [n, 3]: the parser reads real messages, whatever their layout."""

from __future__ import annotations

import numpy as np
import pytest

from deploy_ros.messages import PARSERS, InvalidInput, parse_point_cloud

sensor_msgs = pytest.importorskip("sensor_msgs.msg")


def _cloud(points: np.ndarray, *, dtype: str = "<f4", extra: int = 4, height: int = 1, row_pad: int = 0):
    """A PointCloud2 with fields intensity (first, to move x/y/z off offset 0), x, y, z."""
    size = np.dtype(dtype).itemsize
    kind = sensor_msgs.PointField.FLOAT32 if size == 4 else sensor_msgs.PointField.FLOAT64
    names = ["intensity", "x", "y", "z"]
    offsets = [0] + [extra + k * size for k in range(3)]
    fields = [
        sensor_msgs.PointField(name=n, offset=o, datatype=kind, count=1) for n, o in zip(names, offsets, strict=True)
    ]
    step = extra + 3 * size
    n = len(points)
    width = n // height
    rec = np.zeros((n, step), np.uint8)
    rec[:, extra:] = np.ascontiguousarray(points.astype(dtype)).view(np.uint8).reshape(n, 3 * size)
    rows = rec.reshape(height, width * step)
    rows = np.concatenate([rows, np.full((height, row_pad), 255, np.uint8)], 1)
    return sensor_msgs.PointCloud2(
        height=height, width=width, fields=fields, is_bigendian=dtype.startswith(">"), point_step=step,
        row_step=width * step + row_pad, data=rows.tobytes(), is_dense=True,
    )  # fmt: skip


@pytest.mark.parametrize("dtype", ["<f4", "<f8", ">f4"])
def test_points_come_back_in_order_for_any_layout(dtype: str) -> None:
    pts = np.random.default_rng(0).normal(size=(12, 3)).astype(np.float32)
    out = PARSERS["sensor_msgs/PointCloud2"](_cloud(pts, dtype=dtype, height=3, row_pad=5))
    assert out.dtype == np.float32 and out.shape == (12, 3)
    np.testing.assert_allclose(out, pts, rtol=1e-6)


def test_unusable_clouds_are_invalid_inputs() -> None:
    pts = np.ones((4, 3), np.float32)
    bad = pts.copy()
    bad[2, 1] = np.nan
    with pytest.raises(InvalidInput, match="non-finite"):
        parse_point_cloud(_cloud(bad))
    msg = _cloud(pts)
    msg.fields = msg.fields[:2]
    with pytest.raises(InvalidInput, match=r"no field\(s\) \['y', 'z'\]"):
        parse_point_cloud(msg)
    short = _cloud(pts)
    short.data = short.data[:10]
    with pytest.raises(InvalidInput, match="does not hold"):
        parse_point_cloud(short)
