"""sim.adapters: each adapter passes its peer's own checker or runs its peer's learner (issue 20).

Gymnasium's ``check_env`` (single-env view) and a CleanRL-style PPO on the vector env; Stable-
Baselines3's PPO on the single view; PettingZoo's ``parallel_api_test``; rsl_rl's ``OnPolicyRunner``
on cable_load. Each layout claim of the module docstrings is checked against a twin covey env
stepped directly with the same seed.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import sim

gym = pytest.importorskip("gymnasium")
pettingzoo = pytest.importorskip("pettingzoo")

from sim.adapters import BatchedParallelEnv, CoveyGymEnv, CoveyParallelEnv, CoveyVectorEnv, layout  # noqa: E402

# Every entry kind: vectors (point_reach, cable_load: 3 agents), a uint8 image (pixel_reach), graph parts
# with float, int64 and bool dtypes (hepi_insertion).
TASKS = ["point_reach", "pixel_reach", "cable_load", "hepi_insertion"]


def _quiet_check(fn, *args, **kwargs) -> list[str]:
    """Run a checker; return its warnings except gymnasium's note on unbounded float Boxes (covey's
    vectors are unbounded by nature)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn(*args, **kwargs)
    return [str(w.message) for w in caught if "infinity" not in str(w.message)]


# ----------------------------------------------------------------------------- gymnasium
@pytest.mark.parametrize("task", TASKS)
def test_gym_single_view_passes_check_env(task):
    from gymnasium.utils.env_checker import check_env

    env = CoveyGymEnv(sim.make(task, num_envs=1))
    assert _quiet_check(check_env, env, skip_render_check=True) == []
    # Dtypes carried, not converted.
    for key, space in env.observation_space.spaces.items():
        group, entry = key.split(layout.SEP)
        assert space.dtype == np.dtype(str(env.env.spec.groups[group].observations[entry].dtype).removeprefix("torch."))


def test_gym_vector_env_layout_and_same_step_autoreset():
    task, n = "point_reach", 5
    twin = sim.make(task, num_envs=n)
    venv = CoveyVectorEnv(sim.make(task, num_envs=n))
    assert venv.metadata["autoreset_mode"] == gym.vector.AutoresetMode.SAME_STEP
    obs, _ = venv.reset(seed=3)
    ref = twin.reset(seed=3)
    assert venv.observation_space.contains(obs)
    gen = torch.Generator().manual_seed(0)
    seen_done = False
    for _ in range(twin.max_episode_steps + 2):
        grouped = twin.sample_actions(gen)
        # The flat layout: groups in spec order, each agent-major.
        flat = torch.cat([grouped[g].reshape(n, -1) for g in twin.spec.groups], -1)
        obs, reward, term, trunc, info = venv.step(flat.numpy())
        ref, ref_reward, ref_term, ref_trunc, ref_info = twin.step(grouped)
        for key, value in layout.flatten_groups(ref).items():
            np.testing.assert_array_equal(obs[key], value.numpy())
        mean = torch.stack([r.mean(-1) for r in ref_reward.values()]).mean(0)
        np.testing.assert_allclose(reward, mean.numpy(), rtol=1e-6)
        np.testing.assert_array_equal(term, ref_term.numpy())
        np.testing.assert_array_equal(trunc, ref_trunc.numpy())
        assert venv.observation_space.contains(obs)
        done = ref_term | ref_trunc
        if done.any():
            seen_done = True
            np.testing.assert_array_equal(info["_final_obs"], done.numpy())
            final_ref = layout.flatten_groups(ref_info["final_obs"])
            for i in range(n):
                if done[i]:
                    for key, value in final_ref.items():
                        np.testing.assert_array_equal(info["final_obs"][i][key], value[i].numpy())
                else:
                    assert info["final_obs"][i] is None
            assert "return" in info["episode"]
            for key, value in final_ref.items():  # the batched form: every env, the observation where none ended
                np.testing.assert_array_equal(info["final_obs_batched"][key], value.numpy())
        else:
            assert "final_obs" not in info and "_final_obs" not in info
    assert seen_done, "no episode ended: the auto-reset path was not exercised"


def test_gym_vector_env_keeps_uint8_images_and_torch_mode():
    venv = CoveyVectorEnv(sim.make("pixel_reach", num_envs=2))
    obs, _ = venv.reset(seed=0)
    assert obs["robot/image"].dtype == np.uint8 and obs["robot/image"].shape == (2, 1, 48, 48, 3)
    tvenv = CoveyVectorEnv(sim.make("pixel_reach", num_envs=2), numpy=False)
    tobs, _ = tvenv.reset(seed=0)
    assert tobs["robot/image"].dtype == torch.uint8
    np.testing.assert_array_equal(tobs["robot/image"].numpy(), obs["robot/image"])
    out = tvenv.step(torch.zeros(2, 2))
    assert isinstance(out[1], torch.Tensor) and out[1].shape == (2,)


def _cleanrl_ppo(
    envs, updates: int, steps: int, seed: int = 0, epochs: int = 4, lr: float = 3e-3
) -> tuple[list[float], torch.nn.Module]:
    """A CleanRL-style continuous PPO (ppo_continuous_action.py, shortened) on a Dict-observation
    VectorEnv: flattens every entry, Gaussian actor, GAE that bootstraps truncations from
    ``info["final_obs_batched"]``. Returns the mean reward of each rollout and the agent."""
    torch.manual_seed(seed)
    keys = sorted(envs.single_observation_space.spaces)
    obs_dim = sum(int(np.prod(envs.single_observation_space[k].shape)) for k in keys)
    act_dim = envs.single_action_space.shape[0]
    n = envs.num_envs

    def flat(o) -> torch.Tensor:
        return torch.cat([torch.as_tensor(o[k], dtype=torch.float32).reshape(n, -1) for k in keys], -1)

    critic = torch.nn.Sequential(torch.nn.Linear(obs_dim, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    actor = torch.nn.Sequential(torch.nn.Linear(obs_dim, 64), torch.nn.Tanh(), torch.nn.Linear(64, act_dim))
    log_std = torch.full((act_dim,), -1.0)  # fixed exploration noise: a short test run cannot afford std drift
    agent = torch.nn.ModuleList([critic, actor])
    opt = torch.optim.Adam(agent.parameters(), lr=lr)
    obs_buf = torch.zeros(steps, n, obs_dim)  # [T, E, obs_dim]
    act_buf = torch.zeros(steps, n, act_dim)
    logp_buf, rew_buf, done_buf, val_buf = (torch.zeros(steps, n) for _ in range(4))
    next_obs, _ = envs.reset(seed=seed)
    rollout_rewards = []
    for _ in range(updates):
        x = flat(next_obs)
        for t in range(steps):
            with torch.no_grad():
                dist = torch.distributions.Normal(actor(x), log_std.exp())
                action = dist.sample()
                obs_buf[t], act_buf[t], logp_buf[t] = x, action, dist.log_prob(action).sum(-1)
                val_buf[t] = critic(x).squeeze(-1)
            next_obs, reward, term, trunc, info = envs.step(action.numpy())
            reward = torch.as_tensor(reward, dtype=torch.float32)
            trunc = torch.as_tensor(trunc)
            if trunc.any():  # bootstrap a time-limit end from the pre-reset observation
                with torch.no_grad():
                    final_v = critic(flat(info["final_obs_batched"])).squeeze(-1)
                reward = reward + 0.99 * final_v * trunc
            rew_buf[t], done_buf[t] = reward, torch.as_tensor(term) | trunc
            x = flat(next_obs)
        rollout_rewards.append(float(rew_buf.mean()))
        with torch.no_grad():  # GAE(0.99, 0.95)
            adv = torch.zeros(steps, n)
            last, next_v = torch.zeros(n), critic(x).squeeze(-1)
            for t in reversed(range(steps)):
                nonterminal = 1.0 - done_buf[t].float()
                delta = rew_buf[t] + 0.99 * next_v * nonterminal - val_buf[t]
                last = delta + 0.99 * 0.95 * nonterminal * last
                adv[t], next_v = last, val_buf[t]
            ret = adv + val_buf
        b_obs, b_act, b_logp = obs_buf.reshape(-1, obs_dim), act_buf.reshape(-1, act_dim), logp_buf.reshape(-1)
        b_adv, b_ret = adv.reshape(-1), ret.reshape(-1)
        for _ in range(epochs):
            dist = torch.distributions.Normal(actor(b_obs), log_std.exp())
            ratio = (dist.log_prob(b_act).sum(-1) - b_logp).exp()
            a = (b_adv - b_adv.mean()) / (b_adv.std() + 1e-8)
            pg = torch.max(-a * ratio, -a * ratio.clamp(0.8, 1.2)).mean()
            v_loss = 0.5 * (critic(b_obs).squeeze(-1) - b_ret).pow(2).mean()
            opt.zero_grad()
            (pg + 0.5 * v_loss).backward()
            opt.step()
    return rollout_rewards, agent


def test_cleanrl_style_ppo_trains_through_the_vector_env():
    envs = CoveyVectorEnv(sim.make("point_reach", num_envs=8))
    torch.manual_seed(0)
    rewards, agent = _cleanrl_ppo(envs, updates=3, steps=20)  # 60 steps: across point_reach's 40-step episodes
    assert len(rewards) == 3 and all(np.isfinite(rewards))
    assert all(torch.isfinite(p).all() for p in agent.parameters())
    # Learning itself is PPO's business, not the adapter's (a few seconds of it moves nothing measurable):
    # the same agent re-initialised differs from the trained one.
    _, untrained = _cleanrl_ppo(envs, updates=0, steps=20)
    assert any((a != b).any() for a, b in zip(agent.parameters(), untrained.parameters(), strict=True))


def test_stable_baselines3_ppo_runs_on_the_single_view():
    sb3 = pytest.importorskip("stable_baselines3")
    env = CoveyGymEnv(sim.make("point_reach", num_envs=1))
    model = sb3.PPO("MultiInputPolicy", env, n_steps=64, batch_size=32, n_epochs=1, seed=0, device="cpu")
    before = [p.detach().clone() for p in model.policy.parameters()]
    model.learn(total_timesteps=128)
    assert any((a != b).any() for a, b in zip(before, model.policy.parameters(), strict=True))
    action, _ = model.predict(env.reset(seed=0)[0], deterministic=True)
    assert env.action_space.contains(action)


# ----------------------------------------------------------------------------- pettingzoo
@pytest.mark.parametrize("task", TASKS)
def test_pettingzoo_parallel_env_passes_parallel_api_test(task):
    from pettingzoo.test import parallel_api_test

    env = CoveyParallelEnv(sim.make(task, num_envs=1))
    # Enough cycles that point_reach's and pixel_reach's episodes end (agents leave, reset follows).
    assert _quiet_check(parallel_api_test, env, num_cycles=45) == []
    obs, _ = env.reset(seed=1)
    for agent, o in obs.items():
        assert env.observation_space(agent).contains(o), agent


def test_pettingzoo_batched_matches_covey_step():
    twin = sim.make("cable_load", num_envs=3)
    penv = BatchedParallelEnv(sim.make("cable_load", num_envs=3))
    assert penv.agents == ["mavs_0", "mavs_1", "mavs_2"]
    obs, _ = penv.reset(seed=2)
    ref = twin.reset(seed=2)
    actions = twin.sample_actions(torch.Generator().manual_seed(1))
    per_agent = {f"mavs_{i}": actions["mavs"][:, i] for i in range(3)}
    obs, rew, term, trunc, infos = penv.step(per_agent)
    ref, ref_rew, ref_term, _, _ = twin.step(actions)
    for i in range(3):
        torch.testing.assert_close(obs[f"mavs_{i}"]["policy"], ref["mavs"]["policy"][:, i], rtol=0, atol=0)
        torch.testing.assert_close(rew[f"mavs_{i}"], ref_rew["mavs"][:, i], rtol=0, atol=0)
        assert torch.equal(term[f"mavs_{i}"], ref_term)
        assert set(infos[f"mavs_{i}"]["final_obs"]) == {"policy", "state"}
    with pytest.raises(ValueError, match="mavs_2"):
        penv.step({"mavs_0": per_agent["mavs_0"], "mavs_1": per_agent["mavs_1"]})


# ----------------------------------------------------------------------------- rsl_rl
def test_rsl_rl_on_policy_runner_trains_cable_load():
    pytest.importorskip("rsl_rl")
    from rsl_rl.runners import OnPolicyRunner

    from sim.adapters import RslRlVecEnv, rsl_rl_train_cfg

    env = RslRlVecEnv(sim.make("cable_load", num_envs=4, seed=0), action_prior=True)
    assert env.num_envs == 12 and env.num_actions == 5
    assert env.obs_groups == {"actor": ["policy"], "critic": ["state"]}
    cfg = rsl_rl_train_cfg(
        env.obs_groups, num_steps_per_env=8, hidden_dims=(32, 32), learning_rate=1e-3, num_learning_epochs=1
    )
    runner = OnPolicyRunner(env, cfg, log_dir=None, device="cpu")
    before = [p.detach().clone() for p in runner.alg.get_policy().parameters()]
    runner.learn(3, init_at_random_ep_len=True)
    after = list(runner.alg.get_policy().parameters())
    assert any((a != b).any() for a, b in zip(before, after, strict=True))
    assert all(torch.isfinite(p).all() for p in after)
    assert runner.current_learning_iteration == 2


def test_rsl_rl_rows_prior_and_time_outs():
    pytest.importorskip("rsl_rl")
    from sim.adapters import RslRlVecEnv

    twin = sim.make("cable_load", num_envs=2)
    env = RslRlVecEnv(sim.make("cable_load", num_envs=2), action_prior=True)
    obs = env.reset(seed=5)
    ref = twin.reset(seed=5)
    torch.testing.assert_close(obs["policy"], ref["mavs"]["policy"].reshape(6, -1), rtol=0, atol=0)
    assert obs["policy"].dtype == torch.float32
    # A zero learned action sends exactly the prior (the residual covey's policies learn on top of).
    prior = twin.spec.groups["mavs"].action_prior_matrix()
    obs, rew, dones, extras = env.step(torch.zeros(6, 5))
    ref, ref_rew, ref_term, ref_trunc, _ = twin.step({"mavs": (ref["mavs"]["policy"] @ prior).clamp(-1, 1)})
    torch.testing.assert_close(obs["policy"], ref["mavs"]["policy"].reshape(6, -1))
    torch.testing.assert_close(rew, ref_rew["mavs"].reshape(6))
    # Truncations reach rsl_rl as time_outs, one per row.
    env.episode_length_buf = torch.full((6,), env.max_episode_length - 1)
    _, _, dones, extras = env.step(torch.zeros(6, 5))
    assert dones.all() and extras["time_outs"].all() and "/episode/return" in extras["log"]
    assert env.episode_length_buf.max() == 0


def test_rsl_rl_refuses_an_unknown_group():
    pytest.importorskip("rsl_rl")
    from sim.adapters import RslRlVecEnv

    with pytest.raises(ValueError, match="nope"):
        RslRlVecEnv(sim.make("point_reach", num_envs=1), group="nope")


# ----------------------------------------------------------------------------- Isaac Gym VecTask convention
def test_vectask_view_buffers_match_covey():
    from sim.adapters import VecTaskView

    twin = sim.make("cable_load", num_envs=2)
    view = VecTaskView(sim.make("cable_load", num_envs=2))
    assert (view.num_envs, view.num_obs, view.num_states, view.num_actions) == (6, 150, 73, 5)
    obs = view.reset(seed=4)
    ref = twin.reset(seed=4)
    assert torch.equal(obs["obs"], ref["mavs"]["policy"].reshape(6, 150))
    assert torch.equal(obs["states"], ref["mavs"]["state"].reshape(6, 73))
    actions = twin.sample_actions(torch.Generator().manual_seed(0))
    obs, rew, reset, extras = view.step(actions["mavs"].reshape(6, 5))
    ref, ref_rew, *_ = twin.step(actions)
    assert torch.equal(obs["obs"], ref["mavs"]["policy"].reshape(6, 150)) and view.obs_buf is obs["obs"]
    assert torch.equal(rew, ref_rew["mavs"].reshape(6)) and reset.dtype == torch.long and not reset.any()
    view.env.episode_step[:] = view.max_episode_length - 1
    _, _, reset, extras = view.step(torch.zeros(6, 5))
    assert reset.all() and extras["time_outs"].all() and "episode" in extras
    assert view.observation_space.shape == (150,) and view.action_space.shape == (5,)


@pytest.mark.parametrize(("task", "entry"), [("pixel_reach", "image"), ("hepi_insertion", "scene_node_features")])
def test_vectask_view_refuses_non_vector_entries_by_name(task, entry):
    from sim.adapters import VecTaskView

    with pytest.raises(ValueError, match=entry):
        VecTaskView(sim.make(task, num_envs=1))
