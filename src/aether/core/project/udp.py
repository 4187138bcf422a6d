"""UDP through the mesh: which Service destinations a node's proxy serves, and what each pod's capture diverts.

Envoy's UDP proxy cannot forward a datagram to its original destination (no ORIGINAL_DST for UDP), and a UDP
listener answers from the address and port it is bound to. So a node serves only the UDP it can forward: datagrams
to the ClusterIP and UDP port of a Kubernetes Service whose mesh service is in the node's dependency set. Each such
destination gets, in every captured pod, a `udp_proxy` listener bound (transparently) to that very ClusterIP and
port inside the pod's namespace, so the answer comes from the address the client sent to; the pod's capture diverts
exactly these destinations (the agent keeps the pod's nftables set equal to `UdpCapture.destinations`), and every
other datagram passes uncaptured, to wherever it was going (kube-proxy, the network).

Not served, so passed uncaptured: Services without an IPv4 ClusterIP (headless), a UDP port whose `targetPort` is a
name (the state does not hold the pods' container ports), and Services of mesh services outside the dependency set
(UDP cannot ask for a cluster on demand: declare the service in `config.aether.io/upstreams`). Datagrams go to every
endpoint of the mesh service, at the target port, in plaintext (DTLS is not implemented): the UDP proxy chooses hosts
without metadata, so a Service's selector does not narrow them further.

A UDPRoute whose parent is the Service takes its destination over (GAMMA, `aether.core.gateway.udp_routes`): the
listener sends to the route's weighted cluster instead, whatever the Service's own `targetPort` (a named one too),
and the destination is served while the parent's mesh service is in the dependency set.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Collection, Iterable, Mapping

import attrs

from aether.core.events.kube import KubeService
from aether.core.gateway.resolve import Resolver
from aether.core.gateway.udp_routes import MeshUdpDestination, numeric_target_port
from aether.core.mesh_names import udp_cluster_name
from aether.core.order import sorted_items
from aether.core.state.pods import PodRecord

_NO_ROUTES: Mapping[str, Iterable[MeshUdpDestination]] = {}

__all__ = ["UdpCapture", "UdpDestination", "udp_captures", "udp_destinations", "udp_ports_by_service"]


@attrs.frozen(kw_only=True)
class UdpDestination:
    """One Service's ClusterIP and UDP port, served by the node's proxy."""

    address: str
    """The Service's ClusterIP (IPv4)."""
    port: int
    """The Service's UDP port: what clients send to, and what the pods' listener binds."""
    service: str
    """The mesh service `<ns>/<sa>` behind the Service."""
    target_port: int
    """The endpoints' UDP port (the Service port's `targetPort`, or its `port` when none)."""
    cluster: str
    """The `udp:<sa>.<ns>.<meshDomain>:<target_port>` cluster the datagrams go to, or a UDPRoute's
    `udproute:<name>.<namespace>`."""
    route: str = ""
    """The key of the UDPRoute that took the destination over (its `cluster` is the route's; `target_port` 0)."""


@attrs.frozen(kw_only=True)
class UdpCapture:
    """What one pod's capture diverts of its UDP: the destinations its listeners serve, sorted."""

    pod: str
    """The pod's key `<namespace>/<name>`."""
    netns: str
    """The pod's network namespace (where the capture's nftables set lives)."""
    container_id: str
    """The pod's sandbox: a new one has a new capture table, so its set is written again."""
    destinations: tuple[tuple[str, int], ...]
    """`(ClusterIP, port)` pairs, sorted by address then port."""


def _ipv4(text: str) -> ipaddress.IPv4Address | None:
    try:
        return ipaddress.IPv4Address(text)
    except ValueError:  # headless ("None"), not allocated yet (""), or IPv6
        return None


def udp_destinations(
    services: Mapping[str, KubeService],
    pods: Iterable[PodRecord],
    *,
    in_set: Collection[str],
    mesh_domain: str,
    routes: Mapping[str, Iterable[MeshUdpDestination]] = _NO_ROUTES,
) -> tuple[UdpDestination, ...]:
    """Return the UDP destinations of `services` whose mesh service is in `in_set`, sorted by address and port.

    The mesh service behind a Service is resolved as for a backendRef (`aether.core.gateway.resolve.Resolver`):
    the service account of the pods it selects, or the Service's own name. `routes` are, per mesh service, the
    destinations GAMMA UDPRoutes take over (those of services outside `in_set` are not served).
    """
    resolver = Resolver(services=services, pods=pods, grants=())
    found: list[tuple[ipaddress.IPv4Address, UdpDestination]] = []
    for _, kube in sorted_items(services):  # by key: the order ties are broken in
        address = _ipv4(kube.cluster_ip)
        udp = [port for port in kube.ports if port.protocol == "UDP"]
        if address is None or not udp:
            continue
        service = resolver.mesh_service(kube.meta.namespace, kube.meta.name)
        if service is None or service not in in_set:
            continue
        for port in udp:
            target = numeric_target_port(port)
            if target is None:
                continue
            found.append(
                (
                    address,
                    UdpDestination(
                        address=str(address),
                        port=port.port,
                        service=service,
                        target_port=target,
                        cluster=udp_cluster_name(service, mesh_domain=mesh_domain, port=target),
                    ),
                )
            )
    for service in sorted(service for service in routes if service in in_set):  # routes are few, the set many
        for taken in routes[service]:
            found.append(
                (
                    ipaddress.IPv4Address(taken.address),
                    UdpDestination(
                        address=taken.address,
                        port=taken.port,
                        service=service,
                        target_port=0,
                        cluster=taken.cluster.name,
                        route=taken.cluster.route,
                    ),
                )
            )
    # A route's destination before the Service's own (a route takes it over), then the order ties are broken in.
    found.sort(key=lambda item: (item[0], item[1].port, not item[1].route))
    # Invariant: a ClusterIP belongs to one Service and its ports are distinct, so no two destinations collide;
    # should the API server ever show two (a Service re-created mid-watch), the first in order keeps the place.
    seen: set[tuple[str, int]] = set()
    result: list[UdpDestination] = []
    for _, destination in found:
        where = (destination.address, destination.port)
        if where not in seen:
            seen.add(where)
            result.append(destination)
    return tuple(result)


def udp_ports_by_service(destinations: Iterable[UdpDestination]) -> dict[str, tuple[int, ...]]:
    """Return, per mesh service, the sorted target ports its `udp:` clusters serve, by service."""
    ports: dict[str, set[int]] = {}
    for destination in destinations:
        if not destination.route:
            ports.setdefault(destination.service, set()).add(destination.target_port)
    return {service: tuple(sorted(values)) for service, values in sorted(ports.items())}


def udp_captures(
    records: Iterable[PodRecord], *, bound: Collection[str], destinations: Iterable[UdpDestination]
) -> tuple[UdpCapture, ...]:
    """Return the UDP capture of every pod of `records` with a network namespace and listeners (`bound`)."""
    pairs = tuple((item.address, item.port) for item in destinations)
    return tuple(
        UdpCapture(
            pod=record.pod.key,
            netns=record.pod.netns,
            container_id=record.pod.container_id,
            destinations=pairs,
        )
        for record in records
        if record.pod.netns and record.pod.key in bound
    )
