"""Radiance-field backgrounds: nerfstudio-format captures, a built-in pure-torch field, volume rendering.

    cap = load_capture("assets/captures/soccer_arena")          # images uint8 [N, H, W, 3], c2w [N, 4, 4]
    field = load_field("assets/fields/soccer_arena.pt")        # any RadianceField (built-in or nerfstudio-baked)
    rgb, depth = render_views(field, cap.c2w[:2], cap.intrinsics)

Make the default capture: ``python -m sim.render.nerf.capture make out=assets/captures/soccer_arena``;
train: ``python -m sim.render.nerf.train capture=assets/captures/soccer_arena out=assets/fields/soccer_arena.pt``;
a nerfstudio model (GPU machine): ``python -m sim.render.nerf.nerfstudio_route config=<config.yml> out=<file.pt>``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim._lazy import lazy_exports

if TYPE_CHECKING:
    from sim.render.nerf.capture import Capture, CaptureError, Intrinsics, camera_rays, load_capture, write_capture
    from sim.render.nerf.field import GridField, RadianceField, TensorVMField, load_field
    from sim.render.nerf.volume import psnr, render_rays, render_views

# lazy: `python -m sim.render.nerf.<module>` then runs its module without importing it twice
_EXPORTS = {
    "Capture": "sim.render.nerf.capture",
    "CaptureError": "sim.render.nerf.capture",
    "Intrinsics": "sim.render.nerf.capture",
    "camera_rays": "sim.render.nerf.capture",
    "load_capture": "sim.render.nerf.capture",
    "write_capture": "sim.render.nerf.capture",
    "GridField": "sim.render.nerf.field",
    "RadianceField": "sim.render.nerf.field",
    "TensorVMField": "sim.render.nerf.field",
    "load_field": "sim.render.nerf.field",
    "psnr": "sim.render.nerf.volume",
    "render_rays": "sim.render.nerf.volume",
    "render_views": "sim.render.nerf.volume",
}
__all__ = [  # noqa: F822 - loaded by __getattr__
    "Capture",
    "CaptureError",
    "GridField",
    "Intrinsics",
    "RadianceField",
    "TensorVMField",
    "camera_rays",
    "load_capture",
    "load_field",
    "psnr",
    "render_rays",
    "render_views",
    "write_capture",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
