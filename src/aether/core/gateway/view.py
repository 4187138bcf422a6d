"""The Gateway API view: what the routes, gateways and grants of the state mean for the mesh and for the edge.

`gateway_view(state)` is the one entry point both projections read: the node projection takes `mesh_routes` (GAMMA
routes replacing a mesh service's default routes), the edge projection takes `edge_listeners` and
`backend_services`, and the Kubernetes status sink writes `status`. It is pure and total: an invalid object is
reported in `status` and leaves every valid one working. `GatewayProjector().view(state)` gives the same view while
reusing what it built for the previous state (what a long-running projection holds).
"""

from __future__ import annotations

from aether.core.gateway.contract import (
    EDGE_CONTROLLER,
    MESH_CONTROLLER,
    Condition,
    EdgeListener,
    GatewayView,
    L4Route,
    ListenerStatus,
    MeshL4Destination,
    MeshL4Routing,
    MeshRouting,
    ObjectStatus,
    ParentStatus,
    PortRouting,
    WeightedBackend,
)
from aether.core.gateway.projector import GatewayProjector, GatewayStatistics
from aether.core.gateway.udp_routes import MeshUdpDestination, MeshUdpRouting, UdpBackend, UdpRouteCluster
from aether.core.state.state import State

__all__ = [
    "EDGE_CONTROLLER",
    "EMPTY_VIEW",
    "MESH_CONTROLLER",
    "Condition",
    "EdgeListener",
    "GatewayProjector",
    "GatewayStatistics",
    "GatewayView",
    "L4Route",
    "ListenerStatus",
    "MeshL4Destination",
    "MeshL4Routing",
    "MeshRouting",
    "MeshUdpDestination",
    "MeshUdpRouting",
    "ObjectStatus",
    "ParentStatus",
    "PortRouting",
    "UdpBackend",
    "UdpRouteCluster",
    "WeightedBackend",
    "gateway_view",
]

EMPTY_VIEW = GatewayView()
"""The view of a state without Gateway API objects."""


def gateway_view(state: State) -> GatewayView:
    """Return what the Gateway API objects of `state` project to (pure, total: never raises on bad input)."""
    return GatewayProjector().view(state)
