"""What the edge's L4 listeners and GAMMA's Service destinations share about TCPRoutes, TLSRoutes and UDPRoutes: a
route's weighted backends (as cluster names), and who forwards on one destination when several routes want it.

A destination (an edge listener port, or a Service's ClusterIP and port) forwards a given SNI name through one
route only, and a connection without a name to route by (TCP, UDP, or a TLSRoute without hostnames) through one
route only: the oldest claiming it keeps it, and every later one is told why in its status.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from aether.core.gateway.attach import ParentResult, Resolved
from aether.core.gateway.contract import MESH_CONTROLLER, WeightedBackend
from aether.core.gateway.hostnames import ANY_HOST
from aether.core.gateway.model.routes import TLS_ROUTE, UDP_ROUTE
from aether.core.mesh_names import tcp_cluster_name, udp_cluster_name


def l4_cluster(kind: str, service: str, *, mesh_domain: str) -> str:
    """Return the cluster an L4 route of `kind` reaches mesh `service` through: `udp:<fqdn>` or `tcp:<fqdn>`."""
    if kind == UDP_ROUTE:
        return udp_cluster_name(service, mesh_domain=mesh_domain)
    return tcp_cluster_name(service, mesh_domain=mesh_domain)


def weighted_backends(item: Resolved, *, mesh_domain: str) -> tuple[WeightedBackend, ...]:
    """Return the backends of an L4 route's first rule (the only one L4 routes forward by), in backendRef order.

    A weight-0 backend is kept with weight 0 and an unresolved one with an empty cluster: the caller decides what
    a route with no usable backend does (the edge's unroutable cluster, the node's refusal).
    """
    kind = item.route.kind
    return tuple(
        WeightedBackend(
            cluster=l4_cluster(kind, backend.service, mesh_domain=mesh_domain) if backend.service else "",
            weight=backend.ref.weight,
            service=backend.service,
        )
        for backend in item.backends[0]
    )


def claim(
    kind: str, hosts: Sequence[str], claimed: set[str]
) -> tuple[tuple[str, ...] | None, tuple[str, ...]]:
    """Claim on one destination what a route of `kind` forwards, given what older routes `claimed` (updated).

    A TLSRoute claims its SNI `hosts`; any other kind claims the nameless connections (`ANY_HOST`), which a
    TLSRoute also claims when `hosts` is `(ANY_HOST,)`. Returns the names won (None when the route won nothing
    and forwards nothing here; `()` for a TCP or UDP route that won) and the names older routes hold.
    """
    if kind == TLS_ROUTE:
        free = tuple(host for host in hosts if host not in claimed)
        taken = tuple(host for host in hosts if host in claimed)
        claimed.update(free)
        return (free or None), taken
    if ANY_HOST in claimed:
        return None, (ANY_HOST,)
    claimed.add(ANY_HOST)
    return (), ()


def service_destinations(item: Resolved) -> Iterator[tuple[ParentResult, int]]:
    """Yield each `(Service parent, port)` a GAMMA L4 route forwards on: its accepted Service parents' ports, each
    ClusterIP and port once (two parentRefs may name one destination)."""
    seen: set[tuple[str, int]] = set()
    for result in item.parents:
        if not result.accepted or result.controller != MESH_CONTROLLER:
            continue
        for port in result.ports:
            if (result.address, port) not in seen:
                seen.add((result.address, port))
                yield result, port
