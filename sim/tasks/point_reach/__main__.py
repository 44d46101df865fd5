"""``python -m sim.tasks.point_reach``: run the PD baseline and print the distance to the goals."""

from sim.tasks.point_reach.baseline import pd_actions
from sim.tasks.point_reach.config import PointReachCfg
from sim.tasks.point_reach.env import GROUP, PointReachEnv

env = PointReachEnv(PointReachCfg(), num_envs=256)
obs = env.reset(seed=0)
for t in range(env.max_episode_steps):
    if t % 5 == 0:
        print(f"step {t:3d}  mean distance {float(env.distances().mean()):.3f} m")
    act = pd_actions(obs[GROUP]["policy"], env.spec.groups[GROUP])
    obs, _, _, _, info = env.step({GROUP: act})
print("episode:", {k: round(float(v), 3) for k, v in info["episode"].items()})
