"""robot_soccer's observation and action layouts: the named terms of the ``state``, ``seen`` and ``proprio`` entries
and the wheeled robot's action components. The spec (:meth:`sim.core.spec.ObsEntry.slices`) turns the terms into
named slices; the env, the scripted players and the robot-side builders all read those names.

Frames: "team" (own team attacks +x), "body" (the robot's frame, x forward, y left), "torso" (the humanoid's torso).
"""

from __future__ import annotations

from sim.core.spec import ObsTerm
from sim.tasks.robot_soccer.constants import SEEN_AGE_CAP_S
from sim.tasks.robot_soccer.humanoid import JOINTS as HUMANOID_JOINTS

# The wheeled robot's action, in order; the scripted players write it, the drive components come before the kick.
WHEELED_ACTIONS = ("forward", "lateral", "turn", "kick")
WHEELED_ACTION_UNITS = ("m/s", "m/s", "rad/s", "m")
KICK = WHEELED_ACTIONS.index("kick")
TURN = WHEELED_ACTIONS.index("turn")
DRIVE = slice(0, KICK)  # forward, lateral, turn: what a slower scripted opponent scales
MOVE = slice(0, TURN)  # forward, lateral: the body-frame velocity command


def state_terms(players_per_team: int, humanoid: bool = False) -> tuple[ObsTerm, ...]:
    """The ``state`` entry's layout (team frame: own team attacks +x; "body": the robot's frame, x forward); the
    humanoid's posture and joints follow the yaw rate."""
    terms = [
        ObsTerm("pos", 2, "m", "team", "own position"),
        ObsTerm("heading", 2, "", "team", "cos, sin of own yaw"),
        ObsTerm("vel", 2, "m/s", "body", "own velocity"),
        ObsTerm("yaw_rate", 1, "rad/s"),
    ]
    if humanoid:
        n = len(HUMANOID_JOINTS)
        terms += [
            ObsTerm("height", 1, "m", "", "torso centre above the floor"),
            ObsTerm("gravity", 3, "", "torso", "unit gravity direction in the torso frame"),
            ObsTerm("joint_pos", n, "rad", "", "joint angles minus the standing pose (humanoid.JOINTS order)"),
            ObsTerm("joint_vel", n, "rad/s", "", "joint velocities"),
        ]
    terms += [
        ObsTerm("ball", 2, "m", "body", "ball minus own position"),
        ObsTerm("ball_vel", 2, "m/s", "body", "ball velocity"),
        ObsTerm("goal", 2, "m", "body", "centre of the attacked goal mouth minus own position"),
        ObsTerm("own_goal", 2, "m", "body", "centre of the defended goal mouth minus own position"),
    ]
    for name in other_robots(players_per_team):
        terms.append(ObsTerm(f"{name}_pos", 2, "m", "body", f"{name} minus own position"))
        terms.append(ObsTerm(f"{name}_vel", 2, "m/s", "body", f"{name}'s velocity"))
    if humanoid:
        terms.append(ObsTerm("last_action", len(HUMANOID_JOINTS), "", "", "previous action (joint targets)"))
    else:
        names = ", ".join(WHEELED_ACTIONS)
        terms.append(ObsTerm("last_action", len(WHEELED_ACTIONS), "", "", f"previous action ({names})"))
    return tuple(terms)


def other_robots(players_per_team: int) -> list[str]:
    """The other robots as a robot observes them, in order: its teammates, then its opponents."""
    return [f"mate{i}" for i in range(players_per_team - 1)] + [f"opponent{i}" for i in range(players_per_team)]


def state_slices(players_per_team: int, humanoid: bool = False) -> dict[str, slice]:
    """Term name -> slice of the ``state`` entry (what ``spec.groups[g].observations["state"].slices()`` gives)."""
    out, start = {}, 0
    for term in state_terms(players_per_team, humanoid):
        out[term.name] = slice(start, start + term.size)
        start += term.size
    return out


def seen_terms(players_per_team: int, humanoid: bool = False) -> tuple[ObsTerm, ...]:
    """The ``seen`` entry's layout: :func:`state_terms` with the ball and the other robots as last seen by the head
    camera (velocities zero while out of view), then the seconds since the ball and each other robot were in view."""
    state = state_terms(players_per_team, humanoid)
    others = [t.name[: -len("_pos")] for t in state if t.name.endswith("_pos")]
    ages = [ObsTerm("ball_unseen", 1, "s", "", f"seconds since the ball was in view (capped at {SEEN_AGE_CAP_S:g})")]
    ages += [ObsTerm(f"{n}_unseen", 1, "s", "", f"seconds since {n} was in view") for n in others]
    return state + tuple(ages)


PROPRIO_TERMS = (
    ObsTerm("vel", 2, "m/s", "body", "own velocity (wheel odometry)"),
    ObsTerm("yaw_rate", 1, "rad/s", "", "gyro"),
    ObsTerm("last_action", len(WHEELED_ACTIONS), "", "", "previous action"),
)
HUMANOID_PROPRIO_TERMS = (  # the paper's OP3 proprioception: servo encoders, IMU, last action
    ObsTerm("ang_vel", 3, "rad/s", "torso", "gyro"),
    ObsTerm("gravity", 3, "", "torso", "unit gravity direction (IMU orientation)"),
    ObsTerm("joint_pos", len(HUMANOID_JOINTS), "rad", "", "joint angles minus the standing pose"),
    ObsTerm("joint_vel", len(HUMANOID_JOINTS), "rad/s", "", "joint velocities"),
    ObsTerm("last_action", len(HUMANOID_JOINTS), "", "", "previous action"),
)
