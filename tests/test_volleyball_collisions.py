"""drone_volleyball drone faults: collisions between drones, and a crash inside a game to N points."""

from __future__ import annotations

import torch

import sim


def test_two_teammates_flying_into_each_other_crash_and_lose_the_point() -> None:
    env = sim.make("drone_volleyball", num_envs=1, seed=0, mode="2v2")
    env.reset()
    env.rules.served = torch.tensor([True])  # mid-rally: the serve is not what decides this point
    env.ball_pos = torch.tensor([[0.0, 0.0, 6.0]])
    env.drones.pos[0, 0] = torch.tensor([-3.0, 0.5, 2.0])
    env.drones.pos[0, 1] = torch.tensor([-3.0, -0.5, 2.0])
    env.drones.vel[0, 0] = torch.tensor([0.0, -3.0, 0.0])
    env.drones.vel[0, 1] = torch.tensor([0.0, 3.0, 0.0])
    for _ in range(20):
        _, _, term, _, info = env.step(env.hover_actions())
        if term[0]:
            break
    assert term[0] and info["episode"]["events/drone_crash"] == 1.0
    assert info["episode"]["events/points_b"] == 1.0


def test_a_crash_in_a_game_to_three_is_a_point_and_the_game_goes_on() -> None:
    env = sim.make("drone_volleyball", num_envs=1, seed=0, mode="1v1", rules={"points_to_win": 3})
    env.reset()
    act = env.hover_actions()
    act["team_a"][..., 0] = -1.0  # team A's drone falls
    for _ in range(150):
        _, _, term, _, _ = env.step(act)
        if int(env.rules.score[0].sum()) >= 1:
            break
    assert int(env.rules.score[0, 1]) >= 1 and not term[0]
    assert float(env.rules.counters["drone_crash"][0]) == 1.0  # the point came from the crash
    # The next rally starts from a clean slate: drones back up and rotors at hover speed.
    assert float(env.drones.pos[0, 0, 2]) > 1.5
    hover = float(env.model.hover_speed(env.params.mass * 9.81))
    assert torch.allclose(env.rotor_speed[0], torch.full_like(env.rotor_speed[0], hover), rtol=0.05)
