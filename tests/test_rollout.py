"""training.rollout: the one loop that drives an env with a policy (evaluation, matches, export recordings).

A recurrent policy's state restarts exactly for the envs whose episode ended, the hook sees the state the policy
acts on, breaking stops the env, and the seed makes two rollouts equal.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_evaluate import ClockEnv  # tests/ is on sys.path (pytest rootdir-relative imports)

import sim
from policies import ActorCritic, GroupDims, PolicyCfg
from training.rollout import rollout

ROOT = Path(__file__).resolve().parents[1]


class StepCounter:
    """A fake recurrent policy: its state ``[E]`` counts the steps since its last restart; action 0."""

    def __init__(self, num_envs: int) -> None:
        self.count = torch.full((num_envs,), -99.0)  # garbage until the rollout restarts it
        self.seen: list[tuple[torch.Tensor, torch.Tensor]] = []  # (episode step in obs, state), per call

    def reset(self, done: torch.Tensor | None = None) -> None:
        self.count = torch.zeros_like(self.count) if done is None else torch.where(done, 0.0, self.count)

    def __call__(self, obs: dict) -> dict[str, torch.Tensor]:
        self.seen.append((obs["g"]["policy"][:, 0, 0].clone(), self.count.clone()))
        self.count = self.count + 1
        return {"g": torch.zeros(self.count.shape[0], 1, 1)}


def test_recurrent_state_restarts_exactly_where_episodes_ended() -> None:
    # Env 0 terminates every 3 steps, env 1 only at the 7-step limit (truncation), env 2 every 5 steps.
    env = ClockEnv(die_at=[3, 0, 5], steps=7)
    policy = StepCounter(env.num_envs)
    ended = torch.zeros(env.num_envs)
    for s in rollout(env, policy, 30, seed=0, memory=policy):
        ended += (s.terminated | s.truncated).float()
    assert ended.tolist() == [10.0, 4.0, 6.0]  # every env ended several episodes, at different steps
    for clock, count in policy.seen:  # the state counted exactly the steps of the running episode
        assert torch.equal(count, clock), (count, clock)


def test_a_recurrent_actor_forgets_only_the_envs_that_ended() -> None:
    env = ClockEnv(die_at=[2, 0, 0], steps=50)
    ac = ActorCritic(GroupDims(1, 1, 1, 1), PolicyCfg(actor_hidden=(8,), critic_hidden=(8,), memory="gru"))
    actor = ac.deterministic_actor()
    actors = {"g": actor}
    run = rollout(env, lambda obs: {"g": actor(obs["g"])}, 10, seed=0, memory=actors)
    first = next(run)
    assert not bool(first.terminated.any()) and bool((actor.memory != 0).all())
    second = next(run)
    assert second.terminated.tolist() == [True, False, False]
    assert bool((actor.memory[0] == 0).all()) and bool((actor.memory[1:] != 0).all())
    rollout(env, lambda obs: {"g": actor(obs["g"])}, 10, seed=0, memory=actors)  # a new rollout restarts every env
    assert actor.memory is None


def test_the_hook_sees_the_state_the_policy_acts_on_and_break_stops_the_env() -> None:
    env = ClockEnv(die_at=[0, 0], steps=100)
    hooked: list[tuple[int, torch.Tensor]] = []
    steps = []
    for s in rollout(env, lambda obs: {"g": torch.zeros(2, 1, 1)}, 100, before_step=lambda t, o: hooked.append((t, o))):
        steps.append(s)
        if s.t == 4:
            break
    assert [s.t for s in steps] == [t for t, _ in hooked] == [0, 1, 2, 3, 4]
    for s, (_, obs) in zip(steps, hooked, strict=True):
        assert s.obs is obs and s.obs["g"]["policy"][0, 0, 0] == s.t  # the pre-step observation
        assert s.next_obs["g"]["policy"][0, 0, 0] == s.t + 1
    assert env.episode_step.tolist() == [5, 5]  # no step after the break


def test_the_seed_makes_two_rollouts_equal_and_another_seed_differs() -> None:
    env = sim.make("point_reach", num_envs=4, seed=0)

    def trace(seed: int) -> torch.Tensor:
        gen = torch.Generator().manual_seed(1)  # the same actions each time: only the env's seed differs
        steps = rollout(env, lambda obs: env.sample_actions(gen), 12, seed=seed)
        return torch.stack([torch.cat([s.obs["agents"]["policy"], s.next_obs["agents"]["policy"]]) for s in steps])

    a, b = trace(3), trace(3)
    assert torch.equal(a, b)
    assert not torch.equal(a, trace(4))


def test_an_onnx_recurrent_policy_restarts_like_the_torch_actor() -> None:
    # The shipped GRU policy, driven through a rollout where env 0 is cut short: ONNX and torch agree on every action
    # before and after the restart (a restart that missed env 0, or hit the others, would drift apart).
    pytest.importorskip("onnxruntime")
    from training.checkpoint import load_policy
    from training.evaluation import actor_policy, onnx_policy, onnx_session

    shipped = ROOT / "assets" / "policies" / "memory_reach"
    loaded = load_policy(shipped / "policy.pt")
    env = sim.make(loaded.task_cfg, num_envs=3, seed=0)
    policies = {
        "torch": actor_policy(loaded.actors, env),
        "onnx": onnx_policy(onnx_session(shipped / "policy.onnx"), env),
    }

    def cut(t: int, obs: dict) -> None:  # env 0's episode reaches its time limit at step 6
        if t == 6:
            env.episode_step[0] = env.max_episode_steps - 1

    actions = {}
    for name, policy in policies.items():
        steps = list(rollout(env, policy, 12, seed=2, memory=policy, before_step=cut))
        assert [bool(s.truncated[0]) for s in steps].index(True) == 6 and not bool(steps[6].truncated[1:].any())
        actions[name] = torch.stack([s.actions["robot"] for s in steps])
    torch.testing.assert_close(actions["onnx"], actions["torch"], atol=1e-5, rtol=0)
