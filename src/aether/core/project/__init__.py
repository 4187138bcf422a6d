"""Projections from state to Envoy resources: the node snapshot (listeners, clusters, endpoints, routes, secrets).

`project_node(state, node_name=..., now=...)` is the pure projection; `NodeProjector` gives the same snapshots while
re-projecting only what each new state changed. Every contract name lives in `aether.core.project.names`
(those of mesh services and their clusters in `aether.core.mesh_names`).
"""

from aether.core.project.dependencies import Demand, LocalPods, ServiceDemand
from aether.core.project.node import NodeProjector, ProjectorStatistics, project_node
from aether.core.project.tls import UpstreamIdentity

__all__ = [
    "Demand",
    "LocalPods",
    "NodeProjector",
    "ProjectorStatistics",
    "ServiceDemand",
    "UpstreamIdentity",
    "project_node",
]
