"""Policy networks, distributions and observation normalisers (never imports ``sim``).

dims = GroupDims(n_agents=3, obs_dim=138, critic_dim=76, action_dim=5)
ac = ActorCritic(dims, PolicyCfg(sharing="per_agent"))
action, log_prob = ac.act(obs)              # [E, 3, 5], [E, 3]
deploy = ac.deterministic_actor()           # raw obs -> action in [-1, 1], ONNX-traceable
"""

from policies.actor_critic import (
    SHARING,
    ActorCritic,
    DeterministicActor,
    GroupDims,
    PolicyCfg,
    StatefulActor,
    action_from_choice,
    build_actor_critics,
    choice_from_action,
    reset_memory,
)
from policies.encoders import InputSpec
from policies.graph import GRAPH_ACTORS
from policies.hierarchical import SkillDispatcher
from policies.mlp import AgentLayerNorm, AgentLinear, build_mlp
from policies.normalizer import RunningNorm

__all__ = [
    "GRAPH_ACTORS",
    "SHARING",
    "ActorCritic",
    "AgentLayerNorm",
    "AgentLinear",
    "DeterministicActor",
    "GroupDims",
    "PolicyCfg",
    "RunningNorm",
    "SkillDispatcher",
    "StatefulActor",
    "InputSpec",
    "action_from_choice",
    "build_actor_critics",
    "choice_from_action",
    "reset_memory",
    "build_mlp",
]
