"""The package's public names (STYLE L4): exactly the contract the node and edge projections build on."""

from __future__ import annotations

import aether.core.gateway
import aether.core.gateway.model
import aether.core.gateway.view

CONTRACT = [
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


def test_the_package_exports_the_contract() -> None:
    """`aether.core.gateway.__all__` is the contract, and `view` offers the same names (plus EMPTY_VIEW)."""
    assert aether.core.gateway.__all__ == CONTRACT
    assert sorted(aether.core.gateway.view.__all__) == sorted([*CONTRACT, "EMPTY_VIEW"])
    for name in CONTRACT:
        assert getattr(aether.core.gateway, name) is getattr(aether.core.gateway.view, name)


def test_the_model_exports_existing_public_names() -> None:
    """`aether.core.gateway.model.__all__` has no duplicates and names only public objects that exist."""
    exported = list(aether.core.gateway.model.__all__)
    assert len(exported) == len(set(exported))
    assert [
        name for name in exported if name.startswith("_") or not hasattr(aether.core.gateway.model, name)
    ] == []
