"""UDPRoutes, at the edge and in the mesh (GAMMA): a route's backends as one weighted cluster, and the Service
destinations (a ClusterIP and UDP port) a UDPRoute whose parent is a Service takes over.

Envoy's UDP proxy sends a session to one cluster: its `matcher` chooses by the datagram's addresses and ports,
never by chance, and its route action names one cluster (it has no weighted clusters). So a UDPRoute's weights
live in a cluster of its own, `udproute:<name>.<namespace>`: one locality per backendRef, whose weight is the
backendRef's, holding the pods that backend's Service selects at the Service port's numeric `targetPort`; Envoy's
locality-weighted load balancing picks a locality by weight, then an endpoint in it (`aether.core.project.
udp_routes` builds it). Each new session (a client address and port) picks once and keeps its endpoint:
per-packet load balancing stays off, so one client's answers come from one server, as its protocol expects.

A UDP route forwards by its first rule (the only one the API's UDPRoute forwards by). On one destination the oldest
route keeps it (creationTimestamp, then namespace/name) and a later one is told in its status what it lost.
A backendRef resolves only to a Service with a selector and a UDP port of that number whose `targetPort` is a
number or absent: the state holds no container ports to resolve a named one, and a Service without a selector has
EndpointSlices the mesh does not send UDP to.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import attrs

from aether.core.events.kube import KubeService, ServicePort
from aether.core.gateway.attach import Resolved
from aether.core.gateway.l4 import claim, service_destinations
from aether.core.gateway.model.routes import UDP_ROUTE
from aether.core.gateway.resolve import BACKEND_NOT_FOUND, Backend

__all__ = [
    "UDP_ROUTE_CLUSTER_PREFIX",
    "MeshUdpDestination",
    "MeshUdpResult",
    "MeshUdpRouting",
    "UdpBackend",
    "UdpRouteCluster",
    "edge_udp_clusters",
    "mesh_udp_routing",
    "numeric_target_port",
    "udp_backend",
    "udp_route_cluster",
    "udp_route_cluster_name",
]

UDP_ROUTE_CLUSTER_PREFIX = "udproute:"


def udp_route_cluster_name(namespace: str, name: str) -> str:
    """Return `udproute:<name>.<namespace>`: the weighted cluster of UDPRoute `namespace/name`."""
    return f"{UDP_ROUTE_CLUSTER_PREFIX}{name}.{namespace}"


@attrs.frozen(kw_only=True)
class UdpBackend:
    """One usable backendRef of a UDPRoute: the pods it reaches and its share."""

    service: str
    """The mesh service `<ns>/<sa>` of the backend Service's pods (whose registry endpoints are read)."""
    selector: tuple[tuple[str, str], ...]
    """The backend Service's selector, sorted: the endpoints of `service` whose pod labels include it."""
    port: int
    """The endpoints' UDP port: the backend Service port's `targetPort` (its `port` when none)."""
    weight: int
    """The backendRef's weight (positive: a weight-0 backend takes no share and is left out)."""


@attrs.frozen(kw_only=True)
class UdpRouteCluster:
    """The weighted cluster of one UDPRoute."""

    name: str
    """`udproute:<name>.<namespace>`."""
    route: str
    """The route's key `UDPRoute/<ns>/<name>`."""
    backends: tuple[UdpBackend, ...] = ()
    """In backendRef order; empty when no backend is usable (the route's datagrams are then dropped)."""

    @property
    def services(self) -> tuple[str, ...]:
        """The mesh services the backends reach, sorted: their endpoints must be in the caller's registry."""
        return tuple(sorted({backend.service for backend in self.backends}))


@attrs.frozen(kw_only=True)
class MeshUdpDestination:
    """GAMMA UDP: what one UDPRoute forwards on one UDP port of its Service parent's ClusterIP."""

    address: str
    """The parent Service's ClusterIP."""
    port: int
    """The parentRef's `port`, or each UDP port of the Service when it names none."""
    cluster: UdpRouteCluster


@attrs.frozen(kw_only=True)
class MeshUdpRouting:
    """The GAMMA UDPRoutes of one mesh service (the one behind their parent Services), for the node's listeners."""

    service: str
    """The mesh service `<ns>/<sa>` of the parent Services: the node serves them when it is a dependency."""
    destinations: tuple[MeshUdpDestination, ...] = ()
    """Sorted by address then port; no two share one."""
    backend_services: tuple[str, ...] = ()
    """The mesh services the routes forward to, sorted: the caller's registry must hold their endpoints."""


@attrs.frozen(kw_only=True)
class MeshUdpResult:
    """The GAMMA UDP routing of every mesh service some UDPRoute's parent resolves to."""

    routing: dict[str, MeshUdpRouting]
    shadowed: dict[str, list[str]]
    """Per route key, the destinations it lost to older routes."""
    backend_services: frozenset[str]


def numeric_target_port(port: ServicePort) -> int | None:
    """Return the numeric target port of Service port `port` (its own number when none is given); None for a name."""
    text = port.target_port
    if not text:
        return port.port
    if text.isascii() and text.isdigit() and 1 <= int(text) <= 65535:
        return int(text)
    return None


def _udp_port(kube: KubeService, number: int) -> ServicePort | None:
    """Return the UDP port `number` of `kube`, or its only UDP port when `number` is 0."""
    udp = [port for port in kube.ports if port.protocol == "UDP"]
    if not number:
        return udp[0] if len(udp) == 1 else None
    return next((port for port in udp if port.port == number), None)


def udp_backend(backend: Backend, services: Mapping[str, KubeService]) -> Backend:
    """Return `backend` (a UDPRoute's, resolved as any route's) unresolved when no UDP endpoint port serves it."""
    if not backend.service:
        return backend
    ref = backend.ref
    kube = services.get(f"Service/{ref.namespace}/{ref.name}")
    problem = ""
    if kube is None or not kube.selector:
        problem = "the Service has no selector: UDPRoutes reach the pods a Service selects, give it one"
    elif (port := _udp_port(kube, ref.port)) is None:
        udp = sorted(item.port for item in kube.ports if item.protocol == "UDP")
        wanted = f"UDP port {ref.port}" if ref.port else "port (and has not exactly one UDP port)"
        problem = f"names no {wanted} of the Service (its UDP ports: {udp})"
    elif numeric_target_port(port) is None:
        problem = (
            f"the Service's UDP port {port.port} has the named targetPort {port.target_port!r}, which the mesh "
            "cannot resolve (it does not know the pods' container ports): give targetPort as a number"
        )
    if not problem:
        return backend
    return Backend(ref=ref, reason=BACKEND_NOT_FOUND, message=f"backendRef {ref.key}: {problem}")


def udp_route_cluster(item: Resolved, services: Mapping[str, KubeService]) -> UdpRouteCluster:
    """Return the weighted cluster of UDPRoute `item` (its backends resolved through `udp_backend`)."""
    meta = item.route.meta
    backends: list[UdpBackend] = []
    for backend in item.backends[0] if item.backends else ():
        ref = backend.ref
        kube = services.get(f"Service/{ref.namespace}/{ref.name}")
        if not backend.service or ref.weight <= 0 or kube is None:
            continue
        port = _udp_port(kube, ref.port)
        target = numeric_target_port(port) if port is not None else None
        # Invariant: `udp_backend` left resolved only backends with a numeric UDP target port.
        assert target is not None, f"{item.route.key}: backend {ref.key} resolved without a UDP port; a bug"
        backends.append(
            UdpBackend(service=backend.service, selector=backend.selector, port=target, weight=ref.weight)
        )
    return UdpRouteCluster(
        name=udp_route_cluster_name(meta.namespace, meta.name), route=item.route.key, backends=tuple(backends)
    )


def mesh_udp_routing(resolved: Sequence[Resolved], *, services: Mapping[str, KubeService]) -> MeshUdpResult:
    """Return the GAMMA UDP routing of the `resolved` routes (oldest first)."""
    claims: dict[tuple[str, int], set[str]] = {}
    found: dict[str, list[MeshUdpDestination]] = {}
    targets: dict[str, set[str]] = {}
    shadowed: dict[str, list[str]] = {}
    for item in resolved:
        route = item.route
        if route.kind != UDP_ROUTE or not item.working:
            continue
        cluster: UdpRouteCluster | None = None
        for result, port in service_destinations(item):
            won, _ = claim(UDP_ROUTE, (), claims.setdefault((result.address, port), set()))
            if won is None:
                shadowed.setdefault(route.key, []).append(
                    f"Service {result.ref.namespace}/{result.ref.name} port {port}: the port is already routed "
                    "by an older UDPRoute"
                )
                continue
            cluster = cluster or udp_route_cluster(item, services)
            found.setdefault(result.service, []).append(
                MeshUdpDestination(address=result.address, port=port, cluster=cluster)
            )
            targets.setdefault(result.service, set()).update(cluster.services)
    routing = {
        service: MeshUdpRouting(
            service=service,
            destinations=tuple(sorted(destinations, key=lambda item: (item.address, item.port))),
            backend_services=tuple(sorted(targets[service])),
        )
        for service, destinations in sorted(found.items())
    }
    return MeshUdpResult(
        routing=routing,
        shadowed=shadowed,
        backend_services=frozenset(name for names in targets.values() for name in names),
    )


def edge_udp_clusters(
    routes: Iterable[str], resolved: Sequence[Resolved], *, services: Mapping[str, KubeService]
) -> dict[str, UdpRouteCluster]:
    """Return, by route key, the weighted clusters of the UDPRoutes `routes` (those the edge's UDP listeners
    forward through)."""
    wanted = set(routes)
    return {
        item.route.key: udp_route_cluster(item, services)
        for item in resolved
        if item.route.key in wanted and item.route.kind == UDP_ROUTE
    }
