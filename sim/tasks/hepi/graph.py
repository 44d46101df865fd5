"""The HEPi observation graph: object points and actuators as one padded heterogeneous graph.

Following the paper (Hoang et al., ICLR 2025): node types *object* (peg keypoints, rope links,
cloth particles) and *actuator* (grippers); per node a one-hot type and 3D vectors; edges

    type 0  object -> object      each object node receives from its k nearest other object nodes
    type 1  object -> actuator    all pairs
    type 2  actuator -> actuator  all ordered pairs (a != b)

The target enters as a per-node displacement vector, not as nodes. Everything has a fixed size
(padded, with masks), so policies, storage and ONNX see static shapes. Object nodes come first and
actuator nodes last: the graph actor reads its action vectors at the last ``n_actuator`` nodes.

Shapes: E = envs, No = object nodes, Na = actuator nodes, N = No + Na, V = vectors per node,
M = No * k + No * Na + Na * (Na - 1) edges. Observation parts carry one agent axis: ``[E, 1, ...]``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from sim.core.spec import ObsEntry

NODE_OBJECT, NODE_ACTUATOR = 0, 1
EDGE_OBJECT, EDGE_OBJECT_TO_ACTUATOR, EDGE_ACTUATOR = 0, 1, 2
N_NODE_TYPES = 2
ROLES = ("node_features", "node_vectors", "node_types", "node_mask", "edge_index", "edge_types", "edge_mask")


class SceneGraph:
    """Static layout and per-step assembly of the observation graph.

    Args:
        n_object: No, object nodes (padding included: masked nodes take part in nothing).
        n_actuator: Na, actuator nodes.
        n_vectors: V, 3D vectors per node; channel 0 is the node position (world frame), the
            rest are free vectors (displacement to target, linear and angular velocity, ...).
        k: object-object neighbours per object node.
        graph: name of the graph; entries are ``f"{graph}_{role}"``.
        vector_names: what each vector channel is (for the spec's description and the ONNX metadata).
    """

    def __init__(
        self,
        n_object: int,
        n_actuator: int,
        n_vectors: int,
        *,
        k: int = 3,
        graph: str = "scene",
        vector_names: tuple[str, ...] = (),
        device: torch.device | str = "cpu",
    ) -> None:
        if n_object < 2 or n_actuator < 1 or n_vectors < 1:
            raise ValueError("a scene graph needs >= 2 object nodes, >= 1 actuator and >= 1 vector per node")
        if not 1 <= k < n_object:
            raise ValueError(f"k must lie in [1, n_object - 1] = [1, {n_object - 1}], got {k}")
        if vector_names and len(vector_names) != n_vectors:
            raise ValueError(f"vector_names needs {n_vectors} names, got {len(vector_names)}")
        self.n_object, self.n_actuator, self.n_vectors, self.k = n_object, n_actuator, n_vectors, k
        self.n_nodes = n_object + n_actuator
        self.graph, self.device = graph, torch.device(device)
        self.vector_names = tuple(vector_names) or ("position",) + tuple(f"v{i}" for i in range(1, n_vectors))
        obj = torch.arange(n_object, device=self.device)
        act = torch.arange(n_object, self.n_nodes, device=self.device)
        # Static edges: object -> actuator (all pairs), actuator -> actuator (ordered pairs, no self loops).
        oa = torch.stack(torch.meshgrid(obj, act, indexing="ij"), -1).reshape(-1, 2)
        aa = torch.stack(torch.meshgrid(act, act, indexing="ij"), -1).reshape(-1, 2)
        aa = aa[aa[:, 0] != aa[:, 1]]
        self._static_edges = torch.cat([oa, aa])
        self.n_knn = n_object * k
        self.n_edges = self.n_knn + len(self._static_edges)
        self.edge_types = torch.cat(
            [
                torch.full((self.n_knn,), EDGE_OBJECT),
                torch.full((len(oa),), EDGE_OBJECT_TO_ACTUATOR),
                torch.full((len(aa),), EDGE_ACTUATOR),
            ]
        ).to(self.device)
        self.node_types = torch.cat(
            [torch.full((n_object,), NODE_OBJECT), torch.full((n_actuator,), NODE_ACTUATOR)]
        ).to(self.device)
        self._receivers = obj.repeat_interleave(k)  # knn edge i*k + j goes to object node i

    def name(self, role: str) -> str:
        return f"{self.graph}_{role}"

    def entries(self) -> dict[str, ObsEntry]:
        """The observation entries of the graph (one per part), for the group's spec."""
        n, m, g = self.n_nodes, self.n_edges, self.graph
        vectors = ", ".join(self.vector_names)
        f32, i64, b = torch.float32, torch.int64, torch.bool
        parts = {  # role: (shape, dtype, units, description)
            "node_features": ((n, N_NODE_TYPES), f32, "", "one-hot node type (object, actuator)"),
            "node_vectors": (
                (n, self.n_vectors, 3),
                f32,
                "m, m/s, rad/s",
                f"per node, world frame: {vectors} (channel 0 is the position)",
            ),
            "node_types": ((n,), i64, "", "0 object point, 1 actuator (last nodes)"),
            "node_mask": ((n,), b, "", "real node"),
            "edge_index": ((m, 2), i64, "", "(sender, receiver) node indices"),
            "edge_types": ((m,), i64, "", "0 object-object kNN, 1 object->actuator, 2 actuator<->actuator"),
            "edge_mask": ((m,), b, "", "real edge"),
        }
        out = {}
        for role, (shape, dtype, units, text) in parts.items():
            out[self.name(role)] = ObsEntry(
                shape, dtype, kind="graph", graph=g, role=role, units=units, description=text
            )
        return out

    def knn_senders(self, object_pos: Tensor, object_mask: Tensor | None = None) -> Tensor:
        """``[E, No * k]``: for each object node (receiver, k consecutive edges) its k nearest other
        real object nodes. ``object_pos [E, No, 3]``, ``object_mask [E, No]`` bool."""
        d = torch.cdist(object_pos, object_pos)  # [E, No, No]
        eye = torch.eye(self.n_object, dtype=torch.bool, device=d.device)
        d = d.masked_fill(eye, float("inf"))
        if object_mask is not None:
            d = d.masked_fill(~object_mask[:, None, :], float("inf"))
        return d.topk(self.k, dim=-1, largest=False).indices.reshape(d.shape[0], -1)

    def observation(
        self,
        object_vectors: Tensor,
        actuator_vectors: Tensor,
        object_mask: Tensor | None = None,
    ) -> dict[str, Tensor]:
        """The graph parts ``{entry name: [E, 1, ...]}``.

        Args:
            object_vectors: ``[E, No, V, 3]``, channel 0 the position.
            actuator_vectors: ``[E, Na, V, 3]``, channel 0 the position.
            object_mask: ``[E, No]`` bool, real object nodes (default: all).
        """
        E = object_vectors.shape[0]
        if object_vectors.shape[1:] != (self.n_object, self.n_vectors, 3):
            raise ValueError(
                f"object_vectors must be [E, {self.n_object}, {self.n_vectors}, 3], got {tuple(object_vectors.shape)}"
            )
        if actuator_vectors.shape != (E, self.n_actuator, self.n_vectors, 3):
            raise ValueError(
                f"actuator_vectors must be [{E}, {self.n_actuator}, {self.n_vectors}, 3], "
                f"got {tuple(actuator_vectors.shape)}"
            )
        dev = object_vectors.device
        senders = self.knn_senders(object_vectors[:, :, 0], object_mask)
        knn = torch.stack([senders, self._receivers.to(dev).expand(E, -1)], -1)
        edge_index = torch.cat([knn, self._static_edges.to(dev).expand(E, -1, -1)], 1)
        if object_mask is None:
            node_mask = torch.ones(E, self.n_nodes, dtype=torch.bool, device=dev)
        else:
            node_mask = torch.cat([object_mask, torch.ones(E, self.n_actuator, dtype=torch.bool, device=dev)], 1)
        edge_mask = node_mask.gather(1, edge_index[..., 0]) & node_mask.gather(1, edge_index[..., 1])
        types = self.node_types.to(dev)
        vectors = torch.cat([object_vectors, actuator_vectors], 1) * node_mask[..., None, None]
        parts = {
            "node_features": torch.nn.functional.one_hot(types, N_NODE_TYPES).float().expand(E, -1, -1),
            "node_vectors": vectors,
            "node_types": types.expand(E, -1),
            "node_mask": node_mask,
            "edge_index": edge_index,
            "edge_types": self.edge_types.to(dev).expand(E, -1),
            "edge_mask": edge_mask,
        }
        return {self.name(r): p.unsqueeze(1).contiguous() for r, p in parts.items()}
