"""The Gateway API core: typed models of the Gateway API objects, their resolution, precedence and status, and
their translation to typed, Envoy-free routes (`aether.core.gateway.ir`, which `aether.core.project` spells as
Envoy messages), for GAMMA (east-west, per mesh service) and the edge (north-south, per listener).
"""

from aether.core.gateway.udp_routes import MeshUdpDestination, MeshUdpRouting, UdpBackend, UdpRouteCluster
from aether.core.gateway.view import (
    EDGE_CONTROLLER,
    MESH_CONTROLLER,
    Condition,
    EdgeListener,
    GatewayProjector,
    GatewayStatistics,
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
    gateway_view,
)

__all__ = [
    "EDGE_CONTROLLER",
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
