"""MJCF generation from the same parameters the torch physics uses.

One source of truth: multirotor constants come from :class:`MultirotorParams`, the team and load
from :class:`CableLoadCfg`. Conventions shared with ``sim.physics``:

- each rotor is a ``general`` actuator on a site at the rotor hub whose control is the rotor's
  thrust in N; ``gear = (0, 0, 1, 0, 0, -spin k_m/k_f)`` adds the reaction torque;
- cables are spatial tendons with a dead-band spring (``springlength="0 L"``): force only when
  longer than ``L``, like our tension-only cable. MuJoCo's tendon damper also acts while slack,
  which ours does not; scenarios compared against MuJoCo keep the cables taut;
- the integrator is ``Euler`` (semi-implicit), like ``rigid_body_step``; gravity 9.81.
Visual geoms have no collisions except with the floor, as in the torch model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sim.physics.multirotor import MultirotorParams
from sim.physics.rigid_body import GRAVITY


def _vec(v: Sequence[float]) -> str:
    return " ".join(f"{float(x):.9g}" for x in v)


def multirotor_body(
    params: MultirotorParams,
    name: str,
    pos: Sequence[float] = (0.0, 0.0, 0.0),
    quat: Sequence[float] = (1.0, 0.0, 0.0, 0.0),
    rgba: str = "0.2 0.4 0.8 1",
) -> tuple[str, str]:
    """``(body_xml, actuator_xml)`` for one free-flying multirotor named ``name``.

    Sites: ``{name}_rotor{i}`` at each hub, ``{name}_attach`` at the cable attachment point.
    Actuators: ``{name}_rotor{i}``, control = thrust (N) in ``[0, k_f Omega_max^2]``.
    """
    arm = params.arm_length
    ratio = params.torque_coeff / params.thrust_coeff
    t_max = params.thrust_coeff * params.rotor_speed_max**2
    rotor_r = 0.45 * arm
    parts = [
        f'<body name="{name}" pos="{_vec(pos)}" quat="{_vec(quat)}">',
        "  <freejoint/>",
        f'  <inertial pos="0 0 0" mass="{params.mass:.9g}" diaginertia="{_vec(params.inertia)}"/>',
        f'  <geom name="{name}_core" type="box" size="{0.35 * arm:.4g} {0.35 * arm:.4g} {0.12 * arm:.4g}"'
        f' rgba="{rgba}" mass="0" contype="2" conaffinity="1"/>',
    ]
    actuators = []
    for i, ((x, y, z), spin) in enumerate(zip(params.rotor_positions(), params.rotor_spin, strict=True)):
        parts.append(
            f'  <geom type="capsule" fromto="0 0 0 {x:.6g} {y:.6g} {z:.6g}" size="{0.06 * arm:.4g}"'
            f' rgba="0.15 0.15 0.15 1" mass="0" contype="0" conaffinity="0"/>'
        )
        parts.append(
            f'  <geom type="cylinder" pos="{x:.6g} {y:.6g} {z + 0.1 * arm:.6g}" size="{rotor_r:.4g} {0.02 * arm:.4g}"'
            f' rgba="0.7 0.7 0.7 0.5" mass="0" contype="0" conaffinity="0"/>'
        )
        parts.append(f'  <site name="{name}_rotor{i}" pos="{x:.9g} {y:.9g} {z:.9g}"/>')
        actuators.append(
            f'<general name="{name}_rotor{i}" site="{name}_rotor{i}" ctrllimited="true"'
            f' ctrlrange="0 {t_max:.9g}" gear="0 0 1 0 0 {-spin * ratio:.9g}"/>'
        )
    parts.append(f'  <site name="{name}_attach" pos="{_vec(params.cable_attach)}" size="0.01"/>')
    parts.append("</body>")
    return "\n".join(parts), "\n".join(actuators)


def box_load_body(
    name: str,
    mass: float,
    size: Sequence[float],
    attach: Sequence[Sequence[float]],
    pos: Sequence[float] = (0.0, 0.0, 0.0),
    quat: Sequence[float] = (1.0, 0.0, 0.0, 0.0),
    inertia: Sequence[float] | None = None,
) -> str:
    """A free box load with sites ``{name}_attach{i}`` at the given load-frame points."""
    sx, sy, sz = size
    if inertia is None:
        inertia = (mass * (sy**2 + sz**2) / 12, mass * (sx**2 + sz**2) / 12, mass * (sx**2 + sy**2) / 12)
    lines = [
        f'<body name="{name}" pos="{_vec(pos)}" quat="{_vec(quat)}">',
        "  <freejoint/>",
        f'  <inertial pos="0 0 0" mass="{mass:.9g}" diaginertia="{_vec(inertia)}"/>',
        f'  <geom type="box" size="{sx / 2:.6g} {sy / 2:.6g} {sz / 2:.6g}" rgba="0.85 0.55 0.2 1" mass="0"'
        ' contype="2" conaffinity="1"/>',
    ]
    lines += [f'  <site name="{name}_attach{i}" pos="{_vec(p)}" size="0.01"/>' for i, p in enumerate(attach)]
    lines.append("</body>")
    return "\n".join(lines)


def cable_tendon(name: str, site_a: str, site_b: str, length: float, stiffness: float, damping: float) -> str:
    """A tension-only cable as a spatial tendon with a dead-band spring."""
    return (
        f'<spatial name="{name}" stiffness="{stiffness:.9g}" damping="{damping:.9g}" springlength="0 {length:.9g}"'
        f' width="0.004" rgba="0.1 0.1 0.1 1"><site site="{site_a}"/><site site="{site_b}"/></spatial>'
    )


def mjcf_document(
    body_xml: str,
    actuator_xml: str = "",
    tendon_xml: str = "",
    timestep: float = 0.002,
    floor: bool = True,
    extra_world_xml: str = "",
) -> str:
    """Wrap bodies into a complete model with options, lights, a floor and a tracking camera."""
    floor_xml = (
        '<geom name="floor" type="plane" size="0 0 0.05" material="grid" contype="1" conaffinity="2"/>' if floor else ""
    )
    return f"""<mujoco model="covey">
<compiler angle="radian"/>
<option timestep="{timestep:.9g}" gravity="0 0 {-GRAVITY}" integrator="Euler"/>
<visual><global offwidth="1280" offheight="960"/><quality shadowsize="0"/></visual>
<asset>
  <texture name="grid" type="2d" builtin="checker" rgb1="0.32 0.36 0.40" rgb2="0.26 0.30 0.34"
    width="512" height="512"/>
  <material name="grid" texture="grid" texrepeat="1 1" texuniform="true"/>
  <texture name="sky" type="skybox" builtin="gradient" rgb1="0.6 0.75 0.9" rgb2="0.95 0.95 1.0"
    width="256" height="256"/>
</asset>
<worldbody>
  <light pos="0 0 6" dir="0 0 -1" directional="true" castshadow="false"/>
  {floor_xml}
  {extra_world_xml}
{body_xml}
</worldbody>
<tendon>
{tendon_xml}
</tendon>
<actuator>
{actuator_xml}
</actuator>
</mujoco>"""


def free_multirotor_model(params: MultirotorParams, timestep: float) -> str:
    """A single multirotor in free flight (no floor), body named ``drone``."""
    body, act = multirotor_body(params, "drone")
    return mjcf_document(body, act, timestep=timestep, floor=False)


def cable_load_model(
    params: MultirotorParams,
    num_mavs: int,
    load_mass: float,
    load_size: Sequence[float],
    load_attach: Sequence[Sequence[float]],
    cable_lengths: Sequence[float],
    stiffness: float,
    damping: float,
    timestep: float,
    drone_pos: Sequence[Sequence[float]] | None = None,
    drone_quat: Sequence[Sequence[float]] | None = None,
    load_pos: Sequence[float] = (0.0, 0.0, 1.0),
    floor: bool = True,
    extra_world_xml: str = "",
) -> str:
    """The cable_load team: bodies ``mav{i}`` and ``load``, tendons ``cable{i}``.

    Joint order in ``qpos``: ``mav0 .. mav{N-1}``, then ``load`` (7 each: pos, quat).
    Actuator order: ``mav{i}_rotor{j}``, i-major. ``extra_world_xml`` adds bodies/cameras (e.g. a goal
    marker) to the world; add them after the team so the joint order above holds.
    """
    bodies, acts, tendons = [], [], []
    colors = ["0.2 0.4 0.8 1", "0.8 0.25 0.25 1", "0.25 0.7 0.3 1", "0.7 0.3 0.8 1", "0.9 0.7 0.1 1", "0.1 0.7 0.7 1"]
    for i in range(num_mavs):
        pos = drone_pos[i] if drone_pos is not None else (0.0, 0.0, 2.0)
        quat = drone_quat[i] if drone_quat is not None else (1.0, 0.0, 0.0, 0.0)
        body, act = multirotor_body(params, f"mav{i}", pos, quat, colors[i % len(colors)])
        bodies.append(body)
        acts.append(act)
        tendons.append(
            cable_tendon(f"cable{i}", f"mav{i}_attach", f"load_attach{i}", cable_lengths[i], stiffness, damping)
        )
    bodies.append(box_load_body("load", load_mass, load_size, load_attach, pos=load_pos))
    bodies.append(extra_world_xml)
    return mjcf_document("\n".join(bodies), "\n".join(acts), "\n".join(tendons), timestep=timestep, floor=floor)


@dataclass(frozen=True)
class BallContacts:
    """The ball's physics in MuJoCo for :func:`volleyball_model` (a second engine's, not a drawing's).

    Contacts are explicit ``pair``s, ball against ``floor``, ``net`` and each ``drone{i}_paddle``, frictionless
    (``condim=1``) with a direct ``solref = "-K -B"`` per surface and a constant impedance ``d``: in contact the
    penetration ``x`` obeys ``x'' + B x' + K x = (1 - d) a_free``, a spring-damper whose restitution is
    ``exp(-pi zeta / sqrt(1 - zeta^2))``, ``zeta = B / (2 sqrt K)``. Nothing else touches the ball, net or paddles.
    The ball's drag is MuJoCo's ellipsoid fluid model (``fluidcoef = "C_D/2 0 0 0 0"``: ``-1/2 rho C_D pi r^2 |v|
    v``); the drones get a zero-coefficient ellipsoid so that the fluid model adds nothing to them.
    ``found`` contact sensors (named ``ball_<surface>``), then the ball's ``framepos``, are the model's sensors.
    """

    solref: Mapping[str, tuple[float, float]]  # "floor", "net", "paddle" -> (K 1/s^2, B 1/s)
    impedance: float = 0.99  # solimp d (constant)
    drag_coeff: float = 0.47  # the ball's C_D
    air_density: float = 1.225  # kg/m^3 (MuJoCo's global density)
    paddle_half_height: float = 0.005  # m: the paddle's cylinder, its top face at the paddle plane
    net_half_thickness: float = 0.005  # m


def volleyball_model(
    params: MultirotorParams,
    drone_pos: Sequence[Sequence[float]],
    ball_pos: Sequence[float],
    ball_radius: float,
    ball_mass: float,
    net_height: float,
    court_width: float,
    timestep: float,
    drone_rgba: Sequence[str] | None = None,
    paddle: tuple[float, float] | None = None,
    extra_world_xml: str = "",
    contacts: BallContacts | None = None,
) -> str:
    """Drone volleyball: bodies ``drone{i}`` (multirotors), a free ``ball`` sphere, a net (a thin
    static box at x = 0) and the floor. Joint order: drones, then the ball. Actuators:
    ``drone{i}_rotor{j}``, i-major. ``drone_rgba`` colours each drone; ``paddle = (radius, offset)``
    draws each drone's hitting disc (visual only) ``offset`` above its centre of mass. With ``contacts``
    (and ``paddle``) the ball collides with the floor, the net and the paddles as :class:`BallContacts` says."""
    if contacts is not None and paddle is None:
        raise ValueError("volleyball_model: contacts need the paddle (radius, offset)")
    bodies, acts = [], []
    no_fluid = ' fluidshape="ellipsoid" fluidcoef="0 0 0 0 0"' if contacts is not None else ""
    for i, pos in enumerate(drone_pos):
        rgba = drone_rgba[i] if drone_rgba is not None else "0.2 0.4 0.8 1"
        body, act = multirotor_body(params, f"drone{i}", pos, (1.0, 0.0, 0.0, 0.0), rgba)
        body = body.replace(f'name="drone{i}_core"', f'name="drone{i}_core"{no_fluid}')
        if paddle is not None:
            half, z = 0.006, paddle[1]
            if contacts is not None:
                half, z = contacts.paddle_half_height, paddle[1] - contacts.paddle_half_height
            disc = (
                f'<geom name="drone{i}_paddle" type="cylinder" size="{paddle[0]:.4g} {half:.4g}" pos="0 0 {z:.6g}"'
                f' rgba="{rgba.rsplit(" ", 1)[0]} 0.45" mass="0" contype="0" conaffinity="0"/>'
            )
            body = body[: body.rindex("</body>")] + disc + "\n</body>"
        bodies.append(body)
        acts.append(act)
    ball_extra, net_extra, net_half = "", "", 0.01
    if contacts is not None:
        ball_extra = (
            f' name="ball" contype="0" conaffinity="0" fluidshape="ellipsoid"'
            f' fluidcoef="{contacts.drag_coeff / 2:.9g} 0 0 0 0"'
        )
        net_extra, net_half = ' contype="0" conaffinity="0"', contacts.net_half_thickness
    bodies.append(
        f'<body name="ball" pos="{_vec(ball_pos)}"><freejoint/>'
        f'<geom type="sphere" size="{ball_radius}" mass="{ball_mass}" rgba="1 0.9 0.2 1"{ball_extra}/></body>'
    )
    net = (
        f'<geom name="net" type="box" pos="0 0 {net_height / 2}" size="{net_half} {court_width / 2} {net_height / 2}"'
        f' rgba="0.95 0.95 0.95 0.55"{net_extra}/>'
    )
    xml = mjcf_document("\n".join(bodies), "\n".join(acts), timestep=timestep, extra_world_xml=net + extra_world_xml)
    if contacts is None:
        return xml
    d = contacts.impedance
    surfaces = [("floor", "floor"), ("net", "net")] + [(f"drone{i}_paddle", "paddle") for i in range(len(drone_pos))]
    pairs, sensors = [], []
    for geom, kind in surfaces:
        k, b = contacts.solref[kind]
        pairs.append(
            f'<pair geom1="ball" geom2="{geom}" condim="1" solref="{-k:.9g} {-b:.9g}" solimp="{d:g} {d:g} 0.001"/>'
        )
        sensors.append(f'<contact name="ball_{geom}" geom1="ball" geom2="{geom}" data="found" num="1"/>')
    sensors.append('<framepos name="ball_pos" objtype="body" objname="ball"/>')
    extra = f"<contact>{''.join(pairs)}</contact><sensor>{''.join(sensors)}</sensor>"
    xml = xml.replace("<option ", f'<option density="{contacts.air_density:.9g}" ', 1)
    return xml.replace("</mujoco>", extra + "\n</mujoco>")


def camera_xml(name: str, pos: Sequence[float], target: Sequence[float]) -> str:
    """A fixed camera looking from ``pos`` at ``target`` (for ``extra_world_xml``)."""
    dx, dy, dz = (t - p for t, p in zip(target, pos, strict=True))
    yaw = math.atan2(dy, dx)
    # xyaxes: camera x to the right of the view direction, y up-ish.
    right = (math.sin(yaw), -math.cos(yaw), 0.0)
    fwd_norm = math.sqrt(dx * dx + dy * dy + dz * dz)
    fwd = (dx / fwd_norm, dy / fwd_norm, dz / fwd_norm)
    up = (
        right[1] * fwd[2] - right[2] * fwd[1],
        right[2] * fwd[0] - right[0] * fwd[2],
        right[0] * fwd[1] - right[1] * fwd[0],
    )
    return f'<camera name="{name}" pos="{_vec(pos)}" xyaxes="{_vec(right)} {_vec(up)}"/>'
