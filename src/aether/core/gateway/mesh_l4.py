"""GAMMA for L4: the TCPRoutes and TLSRoutes whose parent is a Service, as destinations the node's capture and L4
listeners match (the Service's ClusterIP and port, and for a TLSRoute the SNI names) with their weighted backends.

Routes are taken oldest first (creationTimestamp, then namespace/name), so on one destination the oldest TCPRoute
keeps the port (the connections no SNI chain takes) and each SNI name goes to the oldest TLSRoute naming it; a later
route is told in its status what it lost. A TCPRoute and TLSRoutes on one port share it: TLS connections with a
routed name go to the TLSRoutes, everything else to the TCPRoute.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from aether.core.gateway.attach import Resolved
from aether.core.gateway.contract import L4Route, MeshL4Destination, MeshL4Routing
from aether.core.gateway.l4 import claim, service_destinations, weighted_backends
from aether.core.gateway.model.routes import TCP_ROUTE, TLS_ROUTE


@attrs.frozen(kw_only=True)
class MeshL4Result:
    """The GAMMA L4 routing of every mesh service some L4 route's parent resolves to."""

    routing: dict[str, MeshL4Routing]
    shadowed: dict[str, list[str]]
    """Per route key, what it lost to older routes."""
    backend_services: frozenset[str]


def _destination_order(destination: MeshL4Destination) -> tuple[object, ...]:
    # Nameless (catch-all) chains after the named ones: easier to read, and Envoy's match does not depend on it.
    names = destination.route.hostnames
    return (destination.address, destination.port, not names, names)


def mesh_l4_routing(resolved: Sequence[Resolved], *, mesh_domain: str) -> MeshL4Result:
    """Return the GAMMA L4 routing of the `resolved` routes (oldest first)."""
    claims: dict[tuple[str, int], set[str]] = {}
    found: dict[str, list[MeshL4Destination]] = {}
    targets: dict[str, set[str]] = {}
    shadowed: dict[str, list[str]] = {}
    for item in resolved:
        route = item.route
        if route.kind not in (TCP_ROUTE, TLS_ROUTE) or not item.working:
            continue
        backends = weighted_backends(item, mesh_domain=mesh_domain)
        for result, port in service_destinations(item):
            claimed = claims.setdefault((result.address, port), set())
            # A TLSRoute always names hostnames (the schema requires them); a TCPRoute claims the nameless.
            won, taken = claim(route.kind, route.hostnames, claimed)
            where = f"Service {result.ref.namespace}/{result.ref.name} port {port}"
            if taken:
                lost = f"SNI {list(taken)}" if route.kind == TLS_ROUTE else "the port"
                shadowed.setdefault(route.key, []).append(
                    f"{where}: {lost} is already routed by an older {route.kind}"
                )
            if won is None:
                continue
            found.setdefault(result.service, []).append(
                MeshL4Destination(
                    address=result.address,
                    port=port,
                    route=L4Route(route=route.key, hostnames=won, backends=backends),
                )
            )
            targets.setdefault(result.service, set()).update(
                backend.service for backend in backends if backend.service
            )
    routing = {
        service: MeshL4Routing(
            service=service,
            destinations=tuple(sorted(destinations, key=_destination_order)),
            backend_services=tuple(sorted(targets[service])),
        )
        for service, destinations in sorted(found.items())
    }
    return MeshL4Result(
        routing=routing,
        shadowed=shadowed,
        backend_services=frozenset(name for names in targets.values() for name in names),
    )
