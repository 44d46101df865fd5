"""drone_volleyball's hierarchical team on a robot: each drone's skill observation rebuilt from standard messages,
with the team strategy and the rule layer that command its skill (numpy only).

The deployment profile (:func:`sim.tasks.drone_volleyball.deployment.deployment_profile`) names
:class:`SkillObservation` as the builder of the skills model's ``policy`` entry, fed by every drone's odometry
(``drone0`` .. ``drone<D-1>``: motion capture; this drone's own is the one of its ``agent_index``), the ball's
odometry (``ball``) and the referee's game state (``game``, a ``sensor_msgs/JointState`` whose names are
:func:`game_fields`). Each tick it does what the in-process team does (``teams.strategy_team``):

1. at a decision step of the game (``game_step % decision_steps == 0``) the team strategy (its own ONNX model, the
   builder parameter ``strategy_model``) picks the team's choices from :func:`strategy_observation`;
2. the rule layer (:func:`drone_command`, ``RuleBasedStrategy`` under a ``TeamPlan``) turns the choices into this
   drone's skill and target;
3. :func:`skill_terms` builds the skill observation the skills model reads.

Each mirrors its torch original in ``strategy.py``, ``rule_strategy.py``, ``ballistics.py`` and
``observations.py`` (same order of operations, float64 here). Every drone's node runs the strategy on the same
messages, so the team's drones agree on the choices without a team node (docs/deployment.md says why).

Conventions (those of ``sim.physics``): quaternions ``[w, x, y, z]`` body -> world; positions and velocities in the
world frame (the court's: net at x = 0, team A's half x < 0), body rates in the body frame. A team's frame is the
world turned 180 deg about z for team B (its own half at x < 0 too). No torch here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from covey_common.messages import InvalidInput, NamedValues, OdometryState
from covey_common.observation import ObservationBuilder, TermBuilder, TermContext
from covey_common.quaternion import matrix_to_6d, quat_mul, quat_rotate, quat_to_matrix
from covey_common.spec import choice_from_action

_ZROT = np.array([0.0, 0.0, 0.0, 1.0])  # 180 deg about z: team B's frame


def game_fields(n: int) -> tuple[str, ...]:
    """The game state's names (``sensor_msgs/JointState`` ``name``; values in ``position``) for teams of ``n``:

    ``game_step`` control steps since the game began; ``served`` 1 once the serve is hit; ``serving_team`` 0 A, 1 B;
    ``server`` drone index of this rally's server; ``rotation_a`` / ``rotation_b`` each team's slot (0..n-1) of its
    latest server; ``last_team`` / ``last_toucher`` team and drone that touched last (-1 none); ``touches`` touches
    of ``last_team`` since the ball crossed; ``rally_time`` s since the rally began (0: it begins now);
    ``score_a`` / ``score_b``; ``touched_<j>`` 1 once drone j hit the ball this rally.
    """
    head = ("game_step", "served", "serving_team", "server", "rotation_a", "rotation_b", "last_team", "last_toucher")
    return head + ("touches", "rally_time", "score_a", "score_b") + tuple(f"touched_{j}" for j in range(2 * n))


def mirror(v: np.ndarray, flip: bool) -> np.ndarray:
    """World vectors ``[..., 3]`` in team B's frame where ``flip`` (180 deg about z; its own inverse)."""
    v = np.array(v, dtype=np.float64)
    if flip:
        v[..., :2] *= -1.0
    return v


# --------------------------------------------------------------------------- what a drone knows at a tick


@dataclass
class CourtView:
    """Every drone's and the ball's state and the game state at one tick (world frame, float64).

    Attributes:
        pos, vel: ``[D, 3]`` drone positions (m) and velocities (m/s).
        quat: ``[D, 4]`` attitudes (wxyz, body -> world). ang_vel: ``[D, 3]`` body rates (rad/s, body frame).
        ball_pos, ball_vel: ``[3]`` each.
        game: field name -> value (:func:`game_fields`).
    """

    pos: np.ndarray
    vel: np.ndarray
    quat: np.ndarray
    ang_vel: np.ndarray
    ball_pos: np.ndarray
    ball_vel: np.ndarray
    game: Mapping[str, float]

    @classmethod
    def from_messages(cls, drones: Sequence[OdometryState], ball: OdometryState, game: NamedValues) -> CourtView:
        """From parsed odometries (every drone's in drone order, the ball's) and the game state record."""
        return cls(
            np.stack([d.pos for d in drones]),
            np.stack([d.vel for d in drones]),
            np.stack([d.quat for d in drones]),
            np.stack([d.ang_vel for d in drones]),
            np.asarray(ball.pos, np.float64),
            np.asarray(ball.vel, np.float64),
            {name: game[name] for name in game.names},
        )

    def integer(self, name: str) -> int:
        """The game state's field ``name`` as an int (counts, indices, flags)."""
        return int(round(self.game[name]))


# --------------------------------------------------------------------------- ball prediction (ballistics.py)


def predict_ball(pos: np.ndarray, vel: np.ndarray, c: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """The ball's free flight ``[T, 3]`` positions and velocities at ``dt, 2 dt, ..`` (``ballistics.predict_ball``:
    Strang splitting of gravity and quadratic drag, ``sim.physics.ball.ball_flight_step``)."""
    p = c["prediction"]
    dt, g = float(p["dt"]), float(c["gravity"])
    half_kdt, drop = 0.5 * float(c["ball_drag_k"]) * dt, 0.5 * g * dt * dt
    x, y, z = (float(a) for a in pos)
    u, v, w = (float(a) for a in vel)
    out = []
    for _ in range(max(1, round(float(p["horizon_s"]) / dt))):  # plain floats: ~10x numpy's speed on 3-vectors
        s = 1.0 + half_kdt * math.sqrt(u * u + v * v + w * w)
        u, v, w = u / s, v / s, w / s
        x, y, z = x + dt * u, y + dt * v, z + dt * w - drop
        w = w - g * dt
        s = 1.0 + half_kdt * math.sqrt(u * u + v * v + w * w)
        u, v, w = u / s, v / s, w / s
        out.append((x, y, z, u, v, w))
    flight = np.array(out)
    return flight[:, :3], flight[:, 3:]


def interception_point(view: CourtView, c: Mapping[str, Any]) -> tuple[bool, np.ndarray]:
    """``(valid, point [3])``: where the ball comes down through the hitting height, else the low one, else
    nowhere (the ball's position; ``RuleBasedStrategy.interception_point``)."""
    pos, vel = predict_ball(view.ball_pos, view.ball_vel, c)
    z_prev = np.concatenate(([view.ball_pos[2]], pos[:-1, 2]))
    valid, point = False, view.ball_pos.copy()
    rule = c["rule_layer"]
    for h in (float(rule["low_height"]), float(rule["hit_height"])):  # the higher crossing wins where both exist
        cross = (pos[:, 2] <= h) & (z_prev > h) & (vel[:, 2] < 0)
        if cross.any():
            point = pos[int(np.argmax(cross))].copy()
            valid = True
    return valid, point


# --------------------------------------------------------------------------- the team strategy (strategy.py)


def rotation_order(view: CourtView, n: int) -> np.ndarray:
    """``[2, n]`` per team its slots in serve-rotation order, the next server first (``RallyRules.rotation_order``)."""
    serving, rotation = view.integer("serving_team"), (view.integer("rotation_a"), view.integer("rotation_b"))
    lead = [rotation[t] if serving == t else (rotation[t] + 1) % n for t in (0, 1)]
    return (np.array(lead)[:, None] + np.arange(n)) % n


def strategy_observation(view: CourtView, team: int, interception: tuple[bool, np.ndarray], c: Mapping) -> np.ndarray:
    """Team ``team``'s strategy observation ``[obs_dim]`` in its frame (``strategy.strategy_observation``)."""
    n = int(c["n"])
    flip = team == 1
    valid, point = interception
    order = rotation_order(view, n) + np.array([[0], [n]])  # drone indices, rotation order
    pos, vel = mirror(view.pos, flip), mirror(view.vel, flip)
    own, opp = order[team], order[1 - team]
    p_team = mirror(point, flip)
    last_team, last_toucher = view.integer("last_team"), view.integer("last_toucher")
    mine_last = last_team == team
    touches = view.game["touches"] / float(c["max_touches"]) if mine_last else 0.0
    rally = (view.game["served"], float(view.integer("serving_team") == team), touches, float(mine_last))
    time_left = np.clip(1.0 - view.game["rally_time"] / float(c["rally_time_limit_s"]), 0.0, 1.0)
    return np.concatenate(
        (
            mirror(view.ball_pos, flip),
            mirror(view.ball_vel, flip),
            p_team,
            [float(valid)],
            [float(valid and p_team[0] < 0)],
            pos[own].reshape(-1),
            vel[own].reshape(-1),
            pos[opp].reshape(-1),
            vel[opp].reshape(-1),
            rally,
            (own == last_toucher).astype(np.float64),
            [time_left],
        )
    )


class TeamStrategy:
    """The team strategy's ONNX model: ``choices(observation) -> [4]`` option indices (``strategy.CHOICE_NAMES``).

    Args:
        path: the strategy's ``.onnx`` (task ``drone_volleyball_strategy``).
    """

    def __init__(self, path: str | Path) -> None:
        from covey_common.onnx import OnnxPolicy

        self.policy = OnnxPolicy(path, 0)
        meta = self.policy.metadata
        if "choices" not in meta:
            raise ValueError(f"{path} is not a team strategy (its metadata has no discrete 'choices')")
        self.nvec = tuple(int(k) for k in meta["choices"])
        self.obs_dim = int(self.policy.entries[0]["shape"][-1])

    def choices(self, observation: np.ndarray) -> np.ndarray:
        """Option index per choice, ``[len(nvec)]`` int64 (``choices_from_actions`` of the model's action)."""
        name = self.policy.entries[0]["name"]
        action, _ = self.policy.run({name: np.asarray(observation, np.float32)})
        return np.array([choice_from_action(float(a), k) for a, k in zip(action, self.nvec, strict=True)])


# --------------------------------------------------------------------------- the rule layer (rule_strategy.py)


def drone_command(
    view: CourtView, me: int, choices: np.ndarray, interception: tuple[bool, np.ndarray], c: Mapping[str, Any]
) -> tuple[int, np.ndarray]:
    """Drone ``me``'s skill id and target (world, ``[3]``) under its team's ``choices`` (``player``, ``play``,
    ``hit_target``, ``formation``): ``RuleBasedStrategy.__call__(plan=plan_from_choices(...))`` for one drone.

    Only its own team's plan decides its command: the other team's drones alone play a ball coming down on their
    side, and its serves and home are its team's."""
    n, skills, rule = int(c["n"]), list(c["skills"]), c["rule_layer"]
    goto, serve, play = (
        skills.index("goto"),
        skills.index("serve"),
        [skills.index(s) for s in ("pass", "set", "attack")],
    )
    team, slot = divmod(me, n)
    flip = team == 1
    order = rotation_order(view, n)[team]
    # The plan (plan_from_choices): drones named by place in the rotation order.
    pick = int(choices[0]) - 1
    attack_now = int(choices[1]) == 1
    hit_target = mirror(np.asarray(c["hit_targets"][int(choices[2])], np.float64), flip)
    places = np.asarray(c["formations"][int(choices[3])], np.float64)[:n]
    home = mirror(places[int(np.flatnonzero(order == slot)[0])], flip)

    valid, point = interception
    side = int(point[0] >= 0)  # team in possession
    touches = view.integer("touches") if view.integer("last_team") == side else 0
    play_skill = play[min(max(touches, 0), 2)]
    team_of = np.arange(2 * n) // n
    eligible = (team_of == side) & (np.arange(2 * n) != view.integer("last_toucher"))
    dist = np.linalg.norm((view.pos - point)[:, :2], axis=-1)
    chosen = int(np.argmin(np.where(eligible, dist, np.inf)))
    if side == team:
        pick_d = min(max(side * n + (int(order[pick]) if pick >= 0 else -1), 0), 2 * n - 1)
        if pick >= 0 and eligible[pick_d]:
            chosen = pick_d
        if attack_now and touches >= 1:
            play_skill = play[2]
    skill, target = goto, home
    if chosen == me and valid and view.game["served"] > 0.5:
        if play_skill == play[2]:
            target = hit_target
        else:  # pass / set: the apex halfway to the next player's point
            key = "setter_point" if play_skill == play[0] else "attack_point"
            p = mirror(np.asarray(rule[key], np.float64), flip)
            target = np.array((0.5 * (point[0] + p[0]), 0.5 * (point[1] + p[1]), p[2]))
        skill = play_skill
    if view.integer("server") == me and view.game["served"] < 0.5:
        skill, target = serve, hit_target
    return skill, np.asarray(target, np.float64)


# --------------------------------------------------------------------------- the skill observation (observations.py)


@dataclass
class DroneInputs:
    """One drone's inputs to its skill observation: the court, which drone it is and its command this tick."""

    view: CourtView
    me: int
    skill: int
    target: np.ndarray

    @property
    def flip(self) -> bool:
        return self.me >= self.view.pos.shape[0] // 2


def _paddle_centre(ctx: TermContext) -> np.ndarray:
    inp, offset = ctx.inputs, float(ctx.deployment["paddle_offset"])
    return inp.view.pos[inp.me] + quat_rotate(inp.view.quat[inp.me], np.array((0.0, 0.0, offset)))


def _own_rot(ctx: TermContext) -> np.ndarray:
    inp = ctx.inputs
    q = inp.view.quat[inp.me]
    return matrix_to_6d(quat_to_matrix(quat_mul(_ZROT, q) if inp.flip else q))


def _skill_one_hot(ctx: TermContext) -> np.ndarray:
    out = np.zeros(len(ctx.deployment["skills"]))
    out[ctx.inputs.skill] = 1.0
    return out


def _last_action(ctx: TermContext) -> np.ndarray:
    # A rally (re)starts with rally_time 0: the simulator resets the drones' actuators and their previous actions.
    return np.zeros_like(ctx.last_action) if ctx.inputs.view.game["rally_time"] == 0.0 else ctx.last_action


TERM_BUILDERS: dict[str, TermBuilder] = {
    "own_pos": lambda c: mirror(c.inputs.view.pos[c.inputs.me], c.inputs.flip),
    "own_rot": _own_rot,
    "own_vel": lambda c: mirror(c.inputs.view.vel[c.inputs.me], c.inputs.flip),
    "own_ang_vel": lambda c: c.inputs.view.ang_vel[c.inputs.me],
    "ball_rel": lambda c: mirror(c.inputs.view.ball_pos - _paddle_centre(c), c.inputs.flip),
    "ball_vel": lambda c: mirror(c.inputs.view.ball_vel, c.inputs.flip),
    "target_rel": lambda c: mirror(c.inputs.target - c.inputs.view.pos[c.inputs.me], c.inputs.flip),
    "skill": _skill_one_hot,
    "touched": lambda c: [c.inputs.view.game[f"touched_{c.inputs.me}"]],
    "last_action": _last_action,
}
"""Term name -> builder for every term of the ``skill`` observation (``spec.skill_terms``)."""


def neutral_view(n: int) -> CourtView:
    """Drones level at rest on a line above their halves, the ball above the first, a game not yet served."""
    D = 2 * n
    pos = np.stack((np.where(np.arange(D) < n, -3.0, 3.0), np.linspace(-2.0, 2.0, D), np.full(D, 2.0)), -1)
    quat = np.tile((1.0, 0.0, 0.0, 0.0), (D, 1))
    game = dict.fromkeys(game_fields(n), 0.0)
    return CourtView(pos, np.zeros((D, 3)), quat, np.zeros((D, 3)), pos[0] + (0, 0, 1.0), np.zeros(3), game)


def _constants(metadata: Mapping[str, Any]) -> Mapping[str, Any]:
    c = metadata.get("deployment") or {}
    need = ("n", "skills", "paddle_offset", "decision_steps", "max_touches", "rally_time_limit_s", "gravity")
    need += ("ball_drag_k", "prediction", "rule_layer", "hit_targets", "formations")
    missing = [k for k in need if k not in c]
    if missing:
        raise ValueError(f"metadata deployment lacks {missing} (drone_volleyball's deployment_constants)")
    return c


class SkillObservation:
    """The ``policy`` entry builder of the skills model the ROS node drives: parsed messages in, ``[34]`` float32 out.

    ``sources`` (the profile's ``from``): every drone's odometry in drone order, then the ball's odometry and the
    game state. ``params["strategy_model"]``: the team strategy's ONNX file (a relative path that does not exist
    from the working directory is read beside ``model_path``).
    """

    def __init__(
        self,
        metadata: Mapping[str, Any],
        entry: Mapping[str, Any],
        agent_index: int,
        sources: Sequence[str],
        params: Mapping[str, Any] | None = None,
        model_path: str | None = None,
    ) -> None:
        self.c = c = _constants(metadata)
        n = int(c["n"])
        if len(sources) != 2 * n + 2:
            raise ValueError(f"drone_volleyball's skill observation reads {2 * n} drones, the ball and the game state")
        self.sources = tuple(sources)
        self.me = int(agent_index)
        self.decision_steps = int(c["decision_steps"])
        path = Path(str((params or {}).get("strategy_model") or ""))
        if not str(path) or str(path) == ".":
            raise ValueError("drone_volleyball's skills need the team strategy: parameter 'strategy_model' (.onnx)")
        if not path.is_absolute() and not path.exists() and model_path:
            path = Path(model_path).resolve().parent / path
        self.strategy = TeamStrategy(path)
        neutral = DroneInputs(neutral_view(n), self.me, 0, np.zeros(3))
        self.builder = ObservationBuilder(metadata, agent_index, TERM_BUILDERS, neutral, layout=entry)
        view = neutral_view(n)
        obs = strategy_observation(view, self.me // n, interception_point(view, c), c)
        if obs.size != self.strategy.obs_dim:
            raise ValueError(f"the strategy model takes {self.strategy.obs_dim} values, the court gives {obs.size}")
        self.choices: np.ndarray | None = None  # the team's choices in force (decided at decision steps)
        self._period = -1  # the decision period of the game (game_step // decision_steps) decided last

    def view(self, inputs: Mapping[str, Any]) -> CourtView:
        """The court at this tick from the parsed messages (``inputs``: source name -> parsed message)."""
        *drones, ball, game = (inputs[s] for s in self.sources)
        if not isinstance(game, NamedValues):
            raise InvalidInput(f"{self.sources[-1]} is not a named record (sensor_msgs/JointState)")
        missing = [f for f in game_fields(int(self.c["n"])) if f not in game.names]
        if missing:
            raise InvalidInput(f"game state without field(s) {missing}")
        return CourtView.from_messages(drones, ball, game)

    def command(self, view: CourtView, decide: bool) -> DroneInputs:
        """This drone's skill command, the strategy deciding first where ``decide`` (or no choices yet)."""
        interception = interception_point(view, self.c)
        if decide or self.choices is None:
            team = self.me // int(self.c["n"])
            self.choices = self.strategy.choices(strategy_observation(view, team, interception, self.c))
        skill, target = drone_command(view, self.me, self.choices, interception, self.c)
        return DroneInputs(view, self.me, skill, target)

    def _due(self, view: CourtView) -> bool:
        """A decision at the first tick in each decision period of the game (in lockstep: exactly at its decision
        steps, as in the simulator; in real time a node that missed that state decides at the next one, so the
        team's nodes do not fly a period on different choices)."""
        period = view.integer("game_step") // self.decision_steps
        due = period != self._period
        self._period = period
        return due

    def reset(self, inputs: Mapping[str, Any]) -> np.ndarray:
        """First tick (or the first after a safe one): decide now, previous action zero; ``[34]`` float32."""
        view = self.view(inputs)
        self._period = view.integer("game_step") // self.decision_steps
        return self.builder.reset(self.command(view, decide=True))

    def push(self, inputs: Mapping[str, Any], last_action: np.ndarray, dt: float | None = None) -> np.ndarray:
        """One control step on: this tick's messages and the previous action; ``[34]`` float32."""
        view = self.view(inputs)
        return self.builder.push(self.command(view, self._due(view)), last_action, dt=dt)
