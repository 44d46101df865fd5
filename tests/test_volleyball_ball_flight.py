"""The ball's predicted flight in C (sim/tasks/drone_volleyball/ball_flight.c) against its torch reference
(ballistics.predict_ball and the drag correction's flight): the same numbers to the bit, so a match whose scripted
players predict in C plays exactly the match they play in torch."""

from __future__ import annotations

import pytest
import torch

import sim
from sim.physics.ball import BallParams
from sim.physics.rigid_body import GRAVITY
from sim.tasks.drone_volleyball import ballistics, native
from sim.tasks.drone_volleyball.teams import scripted_team

pytestmark = pytest.mark.skipif(
    not native.ball_flight_runs(torch.zeros(1, 3)), reason="no C compiler to build ball_flight.c"
)
DRAG_K = BallParams().drag_k


def balls(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` balls ``[n, 3]`` at random, a resting one and a fast one among them (where the drag terms are largest)."""
    gen = torch.Generator().manual_seed(seed)
    pos, vel = torch.randn(n, 3, generator=gen) * 3, torch.randn(n, 3, generator=gen) * 8
    vel[0] = 0.0
    vel[-1] = torch.tensor([25.0, -12.0, 30.0])
    return pos, vel


def torch_prediction(pos: torch.Tensor, vel: torch.Tensor, dt: float, steps: int) -> tuple[torch.Tensor, ...]:
    class Env:  # what predict_ball reads; no `kernels`, so the torch code runs
        ball_pos, ball_vel = pos, vel
        cfg = type("Cfg", (), {"ball": BallParams()})

    assert not ballistics.predicts_in_c(Env)
    return ballistics.predict_ball(Env, steps * dt, dt)


@pytest.mark.parametrize("n", [1, 37])
@pytest.mark.parametrize("dt", [0.02, 0.005])
def test_the_c_prediction_is_the_torch_prediction_to_the_bit(n: int, dt: float) -> None:
    pos, vel = balls(n)
    steps = round(3.06 / dt)
    ref_pos, ref_vel = torch_prediction(pos, vel, dt, steps)
    c_pos, c_vel = native.ball_flight(pos, vel, DRAG_K, dt, steps, GRAVITY)
    assert c_pos.shape == ref_pos.shape == (n, steps, 3)
    assert torch.equal(c_pos, ref_pos) and torch.equal(c_vel, ref_vel)


@pytest.mark.parametrize("shape", [(1, 6), (2, 1, 6), (2, 16, 6)])
def test_the_c_drag_flight_is_the_torch_flight_to_the_bit(shape: tuple[int, ...]) -> None:
    gen = torch.Generator().manual_seed(len(shape))
    pos, vel = torch.randn(*shape, 3, generator=gen) * 3, torch.randn(*shape, 3, generator=gen) * 8
    dt = ((torch.rand(*shape, generator=gen) * 2 + 0.05) / 30).unsqueeze(-1)
    ref = ballistics._flight(pos, vel, DRAG_K, dt, 30)
    assert torch.equal(native.drag_flight(pos, vel, dt, DRAG_K, 30, GRAVITY), ref)
    # and the whole correction: the same launch velocities with the flights in C
    p_to, t = pos + 2.0, torch.rand(*shape, generator=gen) + 0.3
    assert torch.equal(
        ballistics.drag_corrected(pos, p_to, vel, t, DRAG_K, in_c=True),
        ballistics.drag_corrected(pos, p_to, vel, t, DRAG_K),
    )


def test_a_scripted_match_is_the_same_match_with_the_prediction_in_c(monkeypatch) -> None:
    """Both teams scripted (ball prediction, hit planning with drag corrections) for 250 steps: a match on a CPU
    predicts in C, and its drones and ball follow the torch prediction's match to the bit."""

    def play() -> tuple[torch.Tensor, torch.Tensor]:
        env = sim.make("drone_volleyball", num_envs=2, seed=3, mode="3v3")
        team_a, team_b = scripted_team(env), scripted_team(env)
        hits = torch.zeros(())
        for _ in range(250):
            env.step({"team_a": team_a(env, None, 0), "team_b": team_b(env, None, 1)})
            hits = hits + env.touched.sum()
        return torch.cat((env.drones.pos.flatten(), env.ball_pos.flatten(), env.ball_vel.flatten())), hits

    env = sim.make("drone_volleyball", num_envs=1, mode="3v3")
    assert env.kernels == "native" and ballistics.predicts_in_c(env)
    assert not ballistics.predicts_in_c(sim.make("drone_volleyball", num_envs=1, mode="3v3", kernels="torch"))
    in_c, hits = play()
    assert hits > 0  # the scripted players touched the ball: their hits were planned
    monkeypatch.setattr(ballistics, "predicts_in_c", lambda env: False)
    monkeypatch.setattr("sim.tasks.drone_volleyball.skills.predicts_in_c", lambda env: False)
    in_torch, _ = play()
    assert torch.equal(in_c, in_torch)


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match=r"\[E, 3\]"):
        native.ball_flight(torch.zeros(2, 4, 3), torch.zeros(2, 4, 3), DRAG_K, 0.02, 10, GRAVITY)
