"""robot_soccer's fixed numbers and names: the rules' thresholds, kickoff spots, observation caps, counter names.

What a user tunes lives in :mod:`.config`; the pitch's geometry in :mod:`.model`; the humanoid's body in
:mod:`.humanoid`. These are the task logic's constants, named once here so the logic reads without magic numbers.
"""

from __future__ import annotations

# ----------------------------------------------------------------- MuJoCo's joints
# A free joint (the ball, a humanoid's torso): qpos x, y, z then the quaternion w, x, y, z; qvel the linear velocity
# (world frame) then the angular velocity (body frame). Slices relative to the joint's address.
FREE_QPOS, FREE_QVEL = 7, 6
FREE_POS, FREE_QUAT = slice(0, 3), slice(3, 7)
FREE_LIN_VEL, FREE_ANG_VEL = slice(0, 3), slice(3, 6)
PLANAR_JOINTS = ("x", "y", "yaw")  # the wheeled robot's joints, in order (slides, then the hinge)


def at(address: int, part: slice) -> slice:
    """``part`` (a slice relative to a joint) at the joint's ``address`` in qpos or qvel."""
    return slice(address + part.start, address + part.stop)


# ----------------------------------------------------------------- rules (:mod:`.rules`)
TOUCH_MARGIN = 0.03  # m beyond contact that still counts as a touch
HIT_DV = 0.3  # m/s: a ball velocity change within one control step that counts as a hit (not rolling friction)
HIT_REACH = 0.35  # m: the nearest robot within this distance of the ball made that hit
STILL_SPEED = 0.05  # m/s: slower than this, the ball counts as not moving (for the stall rule)
STALL_DROP_SHARE = 0.5  # a stalled ball is dropped within this share of ball_start_jitter_m of the centre spot
EVENTS = ("goal_a", "goal_b", "touch_a", "touch_b")  # this step's events, [E] floats (0 or 1)
COUNTERS = (
    "points_a", "points_b", "hits_a", "hits_b", "ball_out", "restarts", "first_touch_s_a", "ball_in_view_a", "falls_a",
    "falls_b",
)  # fmt: skip

# ----------------------------------------------------------------- kickoff
KICKOFF_X = 1.2  # m: each team's kickoff spots this far from the halfway line, in its own half
KICKOFF_Y_SPREAD = 0.6  # m: with two or more players, the spots span +-this across the pitch
KICKOFF_YAW_JITTER = 0.6  # rad: +- around facing the other goal
BALL_START_Y_SHARE = 0.6  # the ball's start jitter across the pitch, as a share of ball_start_jitter_m

# ----------------------------------------------------------------- robots (:mod:`.robots`)
HUMANOID_REACH = 0.1  # m: the humanoid's feet ahead of its torso centre
LYING_START_Z = 0.12  # m: a fallen humanoid's torso starts this high and drops onto the floor
LYING_TILT_JITTER = 0.3  # rad: a lying humanoid's start is tilted up to this much more
STAND_START_CLEARANCE = 0.01  # m: a standing humanoid starts this far above its standing height, to settle

# ----------------------------------------------------------------- perception (:mod:`.perception`)
SEEN_AGE_CAP_S = 3.0  # s: "not seen for this long or longer" (keeps the age input bounded)
CAMERA_NEAR_M = 0.05  # m: a point must lie this far in front of a camera to count as in view

# ----------------------------------------------------------------- rewards
APPROACH_MIN_DIST = 0.3  # m: the approach reward pays only while the robot is farther than this from the ball
