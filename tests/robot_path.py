"""The robot path run in process: what a team's policy nodes do with the sim bridge's messages in lockstep, without
DDS. Each state's messages go through a node's parsers (with the profile's size and field checks), each agent's
builders (reset on the first state, then pushed with the previous action and the stamps' dt, as the node does) and
the ONNX runner; the commands become the env's actions as the bridge turns them (``command_action``). Lockstep SITL
tests compare the bridge's run with this one to the bit."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from builtin_interfaces.msg import Time

from covey_common.onnx import OnnxPolicy
from covey_common.profile import DeploymentProfile
from deploy_ros.messages import PARSERS
from deploy_ros.policy_node import _sized, _stamp_dt, _with_fields
from deploy_ros.profile import make_builder
from sim.ros.bridge import command_action


class RobotTeam:
    """``n_agents`` policy nodes flying ``model`` (agent ``i`` in namespace ``namespace.format(i=i)``, where relative
    topics resolve; ``params``: the builders' parameters, as a parameter file gives them)."""

    def __init__(
        self,
        model: str | Path,
        n_agents: int,
        action_scale: Any,
        namespace: str = "",
        params: Mapping[str, Any] | None = None,
    ) -> None:
        self.policies = [OnnxPolicy(model, i) for i in range(n_agents)]
        meta = self.policies[0].metadata
        self.profile = profile = DeploymentProfile.from_metadata(meta)
        self.builders = [
            {
                e["name"]: make_builder(profile.observations[e["name"]], meta, e, i, params, str(model))
                for e in p.entries
            }
            for i, p in enumerate(self.policies)
        ]
        self.parse = {k: _with_fields(_sized(PARSERS[s.msg], s.size), s.fields) for k, s in profile.inputs.items()}
        self.topics = [
            {
                k: s.topic if s.topic.startswith("/") else f"{namespace.format(i=i)}/{s.topic}"
                for k, s in profile.inputs.items()
            }
            for i in range(n_agents)
        ]
        self.control_dt = 1.0 / float(meta["control_hz"])
        self.scale = np.asarray(action_scale, dtype=np.float32)
        self.last = np.zeros((n_agents, len(meta["action"]["names"])), np.float32)
        self.key: tuple | None = None  # the last answered state's stamp

    def actions(self, msgs: Mapping[str, Any], stamp: Time) -> torch.Tensor:
        """The team's actions ``[1, n_agents, act_dim]`` for the state in ``msgs`` (topic -> message) at ``stamp``."""
        key = ((stamp.sec, stamp.nanosec),)
        dt = _stamp_dt(self.key, key, self.control_dt)
        first, self.key = self.key is None, key
        commands = []
        for i, (policy, entries) in enumerate(zip(self.policies, self.builders, strict=True)):
            values = {k: self.parse[k](msgs[t]) for k, t in self.topics[i].items()}
            obs = {}
            for name, builder in entries.items():
                sources = {s: values[s] for s in self.profile.observations[name].sources}
                obs[name] = builder.reset(sources) if first else builder.push(sources, self.last[i], dt=dt)
            action, command = policy.run(obs)
            self.last[i] = action
            commands.append(np.float32([float(c) for c in command]))  # the Float32MultiArray the node sends
        return torch.as_tensor(command_action(np.stack(commands), self.scale)).unsqueeze(0)
