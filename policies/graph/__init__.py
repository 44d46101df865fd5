"""Graph actors: the padded observation graph straight to the Gaussian action mean (HEPi and baselines).

    hepi         heterogeneous E(3)-equivariant message passing (:mod:`policies.graph.equivariant`)
    empn         the same layers, homogeneous (one edge type, no node-type weights)
    transformer  attention over the nodes, not equivariant (:mod:`policies.graph.transformer`)

Selected by ``algo.policy.graph_actor``; :class:`policies.ActorCritic` then uses the graph actor for
the action mean (the critic stays the encoder path). See :mod:`policies.graph.base` for the parts
and the action layout.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial

from policies.encoders import InputSpec
from policies.graph.base import GraphActor, GraphActorCfg
from policies.graph.equivariant import EquivariantGraphActor
from policies.graph.transformer import TransformerGraphActor

GRAPH_ACTORS: dict[str, Callable[[Mapping[str, InputSpec], int, GraphActorCfg], GraphActor]] = {
    "hepi": partial(EquivariantGraphActor, heterogeneous=True),
    "empn": partial(EquivariantGraphActor, heterogeneous=False),
    "transformer": TransformerGraphActor,
}


def build_graph_actor(name: str, inputs: tuple[InputSpec, ...], action_dim: int, cfg: GraphActorCfg) -> GraphActor:
    """The graph actor ``name`` over ``inputs``: the parts of exactly one graph, nothing else."""
    if name not in GRAPH_ACTORS:
        raise ValueError(f"unknown graph actor {name!r}; choose from {sorted(GRAPH_ACTORS)}")
    graphs = {i.graph for i in inputs if i.kind == "graph"}
    others = [i.name for i in inputs if i.kind != "graph"]
    if len(graphs) != 1 or others:
        raise ValueError(
            f"policy.graph_actor={name} needs actor inputs that are the parts of one graph; got graphs "
            f"{sorted(graphs)} and other entries {others}"
        )
    return GRAPH_ACTORS[name]({i.role: i for i in inputs}, action_dim, cfg)


__all__ = ["GRAPH_ACTORS", "EquivariantGraphActor", "GraphActor", "GraphActorCfg", "TransformerGraphActor"]
