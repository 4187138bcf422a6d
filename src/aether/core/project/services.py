"""The resources of one mesh service in the dependency set: its clusters, their load assignments, its virtual hosts.

Which clusters a service gets:

* `<fqdn>` when it has HTTP endpoints, or no endpoints at all (a declared upstream not registered yet still gets
  its cluster and virtual host: callers then see 503 "no healthy upstream", not a 404, and nothing but the load
  assignment changes when its first endpoint registers);
* `<fqdn>:<port>` for each port its HTTP endpoints advertise besides their primary ports (the `ports` endpoint
  annotation), and for a primary port when that exact name was requested on demand (so the request that asked for
  it is answered with it);
* `tcp:<fqdn>` when it has TCP endpoints, or a GAMMA L4 route of the node forwards to it;
* `udp:<fqdn>:<port>` for each target port of the UDP Service destinations the node serves for it
  (`aether.core.project.udp`): every endpoint, at that port.

A service only requested on demand gets nothing while it is not in the registry catalog, and every requested name it
cannot serve (not in the catalog, a port it does not advertise, `udp:`) is reported as not found.

When routes send Kubernetes Services' selections to the service (backendRefs of Services whose pods run as its
account), its bare cluster subsets its endpoints by the selectors' label keys (`aether.core.project.subsets`): each
Service's share reaches the pods it selects, and callers of the service's own name still reach every endpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from aether.core.events.registry import Endpoint, Protocol
from aether.core.gateway.contract import MeshRouting
from aether.core.gateway.ir import SelectorKeys
from aether.core.mesh_names import (
    http_cluster_name,
    parse_cluster_name,
    service_fqdn,
    tcp_cluster_name,
    udp_cluster_name,
)
from aether.core.order import sorted_values
from aether.core.project.clusters import service_cluster, service_cluster_resource, udp_cluster
from aether.core.project.dependencies import ServiceDemand
from aether.core.project.endpoints import Locality, load_assignment
from aether.core.project.gateway_routes import envoy_route_list
from aether.core.project.names import spiffe_id
from aether.core.project.quic import (
    caller_identity,
    quic_cluster,
    quic_eligible,
    quic_server_name,
    quic_target,
    source_of,
)
from aether.core.project.routes import routed_vhost, service_vhost_entry, vhost_entry
from aether.core.project.tls import UpstreamIdentity
from aether.core.snapshot import EMPTY_PIECE, Piece, Resource
from aether.core.state.registry import ServiceEndpoints


@attrs.frozen(kw_only=True)
class ServiceContext:
    """Everything besides its own endpoints and demand that a service's resources depend on: nothing about which
    workloads run on the node or which SVIDs it holds (`identity` is `tls.PER_CALLER` or plaintext on a node), so a
    new local identity re-projects no service."""

    mesh_domain: str
    trust_domain: str
    identity: UpstreamIdentity
    locality: Locality | None


@attrs.frozen(kw_only=True, eq=False)
class ServiceProjection:
    """One service's share of the node snapshot."""

    resources: tuple[Resource, ...] = ()
    """Its clusters and their load assignments."""
    vhosts: Piece = EMPTY_PIECE
    """Its virtual hosts, serialized as `virtual_hosts` entries of a route table (see `routes`): one piece, hashed
    here once, that both route tables keep by reference (its parts partly shared by every service:
    `routes.service_vhost_entry`)."""
    not_found: tuple[str, ...] = ()
    """The names requested on demand that it cannot serve."""


NOTHING = ServiceProjection()


@attrs.frozen(kw_only=True)
class _Cluster:
    name: str
    members: tuple[Endpoint, ...]
    http: bool
    sni: str = ""
    subsets: SelectorKeys = ()


def _serves(endpoint: Endpoint, port: int) -> bool:
    return endpoint.port == port or port in endpoint.ports


def _clusters(
    service: str,
    endpoints: Sequence[Endpoint],
    requested: Sequence[str],
    *,
    mesh_domain: str,
    tcp_backend: bool = False,
    subsets: SelectorKeys = (),
) -> tuple[list[_Cluster], list[tuple[str, list[str], str]]]:
    """Return the service's clusters and its virtual hosts as `(name, domains, cluster)`."""
    http = tuple(item for item in endpoints if item.protocol != Protocol.TCP)
    tcp = tuple(item for item in endpoints if item.protocol == Protocol.TCP)
    clusters: list[_Cluster] = []
    vhosts: list[tuple[str, list[str], str]] = []
    if http or not tcp:
        fqdn = service_fqdn(service, mesh_domain=mesh_domain)
        primaries = sorted({item.port for item in http})
        advertised = {port for item in http for port in (item.port, *item.ports)}
        extras = sorted(advertised.difference(primaries))
        asked = set()
        for name in requested:
            parsed = parse_cluster_name(name, mesh_domain=mesh_domain)
            if parsed is not None and parsed.protocol == "http" and parsed.port in primaries:
                asked.add(parsed.port)
        bare = http_cluster_name(service, mesh_domain=mesh_domain)
        clusters.append(_Cluster(name=bare, members=http, http=True, subsets=subsets))
        vhosts.append((bare, [fqdn, *(f"{fqdn}:{port}" for port in primaries)], bare))
        for port in sorted(asked.union(extras)):
            name = http_cluster_name(service, mesh_domain=mesh_domain, port=port)
            members = tuple(item for item in http if _serves(item, port))
            clusters.append(_Cluster(name=name, members=members, http=True, sni=str(port)))
            if port in extras:
                vhosts.append((name, [name], name))
    if tcp or tcp_backend:
        clusters.append(
            _Cluster(name=tcp_cluster_name(service, mesh_domain=mesh_domain), members=tcp, http=False)
        )
    return clusters, vhosts


def port_vhost_name(fqdn: str, port: int) -> str:
    """`gamma:<fqdn>:<port>`: the virtual host of the GAMMA routes of one Service port."""
    return f"gamma:{fqdn}:{port}"


def _vhosts(
    vhosts: Sequence[tuple[str, list[str], str]],
    routing: MeshRouting | None,
    *,
    fqdn: str,
    quic: bool = False,
) -> list[bytes]:
    """Return the service's virtual hosts, serialized: the first (its own) with the GAMMA routes that name no port
    (or its default routes when every route names one), the others with their default routes, and one per Service
    port routes name, which takes that port's domains from the others (Envoy refuses a domain twice)."""
    ports = routing.ports if routing is not None else ()
    taken: dict[int, list[str]] = {
        item.port: [*([fqdn] if item.bare else []), f"{fqdn}:{item.port}"] for item in ports
    }
    claimed = {domain for domains in taken.values() for domain in domains}
    entries = []
    for index, (name, domains, cluster) in enumerate(vhosts):
        kept = [domain for domain in domains if domain not in claimed]
        if not kept:
            continue
        if routing is not None and routing.every_port and index == 0:
            routes = envoy_route_list(routing.all_routes, mesh=True)
            entries.append(vhost_entry(routed_vhost(name, domains=kept, routes=routes)))
        else:
            entries.extend(service_vhost_entry(name, domains=kept, cluster=cluster, quic=quic))
    for item in ports:
        routes = envoy_route_list(item.all_routes, mesh=True)
        entries.append(
            vhost_entry(
                routed_vhost(port_vhost_name(fqdn, item.port), domains=taken[item.port], routes=routes)
            )
        )
    return entries


def _quic_clusters(
    service: str,
    http: Sequence[Endpoint],
    requested: Sequence[str],
    context: ServiceContext,
    *,
    http3: bool,
) -> list[tuple[str, Any, tuple[Endpoint, ...]]]:
    """Return the `quic:` clusters requested for `service` that it serves: name, cluster, members.

    When the service must stay on HTTP/2 (`http3` false: an endpoint behind the waypoint, a plaintext node), a
    name Envoy still asks for (its route table may lag one push behind) is answered with the caller's own HTTP/2
    cluster, so that no request fails on a missing cluster while the routes catch up.
    """
    primaries = sorted({item.port for item in http})
    advertised = {port for item in http for port in (item.port, *item.ports)}
    peer = spiffe_id(service, trust_domain=context.trust_domain)
    found = []
    for name in requested:
        parsed = parse_cluster_name(name, mesh_domain=context.mesh_domain)
        if parsed is None or parsed.protocol != "quic":
            continue
        served, port = quic_target(parsed, primaries=primaries, advertised=advertised)
        if not served:
            continue
        members = tuple(http) if port is None else tuple(item for item in http if _serves(item, port))
        source = source_of(parsed, trust_domain=context.trust_domain)
        if http3:
            message = quic_cluster(
                name,
                source=source,
                identity=context.identity,
                peer=peer,
                trust_domain=context.trust_domain,
                server_name=quic_server_name(service, trust_domain=context.trust_domain, port=port),
            )
        else:
            message = service_cluster(
                name,
                identity=caller_identity(context.identity, source),
                peer=peer,
                trust_domain=context.trust_domain,
                http=True,
                sni="" if port is None else str(port),
            )
        found.append((name, message, members))
    return found


def project_service(
    service: str,
    endpoints: ServiceEndpoints | None,
    demand: ServiceDemand,
    *,
    in_catalog: bool,
    context: ServiceContext,
    routing: MeshRouting | None = None,
    tcp_backend: bool = False,
    subsets: SelectorKeys = (),
    udp_ports: tuple[int, ...] = (),
) -> ServiceProjection:
    """Return the resources of `service` (see the module docstring for which).

    With `routing` (GAMMA routes whose parent resolves to the service), the routes of its own virtual host (the
    one named after its bare cluster) are the GAMMA routes that name no Service port, in precedence order; its
    per-port virtual hosts keep the default routes; each Service port GAMMA routes name gets a virtual host of its
    own (`<fqdn>:<port>`, and `<fqdn>` for port 80), with that port's routes and those naming none. A `tcp_backend` (a GAMMA TCPRoute or TLSRoute of the node forwards to it) gets its `tcp:`
    cluster even before its first TCP endpoint registers, so no `tcp_proxy` names a missing cluster. `subsets`
    (the label key sets of the Service selectors routes send to its bare cluster with) subset that cluster's
    endpoints by their labels (`aether.core.project.subsets`). Each of `udp_ports` (target ports of the Service UDP
    destinations the node serves) gets a `udp:` cluster.
    """
    if not demand.declared and not in_catalog:
        return ServiceProjection(not_found=demand.requested) if demand.requested else NOTHING
    members = sorted_values(endpoints) if endpoints is not None else []
    clusters, vhosts = _clusters(
        service,
        members,
        demand.requested,
        mesh_domain=context.mesh_domain,
        tcp_backend=tcp_backend,
        subsets=subsets,
    )
    peer = spiffe_id(service, trust_domain=context.trust_domain)
    resources: list[Resource] = []
    for item in clusters:
        resources.append(
            service_cluster_resource(
                item.name,
                identity=context.identity,
                peer=peer,
                trust_domain=context.trust_domain,
                http=item.http,
                sni=item.sni,
                subsets=item.subsets,
            )
        )
        resources.append(
            Resource.from_message(
                load_assignment(item.name, item.members, locality=context.locality, subsets=item.subsets)
            )
        )
    names = {item.name for item in clusters}
    http_members = [item for item in members if item.protocol != Protocol.TCP]
    quic = not context.identity.plaintext and quic_eligible(http_members) and bool(vhosts)
    for name, message, members_of in _quic_clusters(
        service, http_members, demand.requested, context, http3=quic
    ):
        names.add(name)
        resources.append(Resource.from_message(message, references=(name,)))
        resources.append(Resource.from_message(load_assignment(name, members_of, locality=context.locality)))
    for port in udp_ports:
        name = udp_cluster_name(service, mesh_domain=context.mesh_domain, port=port)
        names.add(name)
        resources.append(Resource.from_message(udp_cluster(name), references=(name,)))
        resources.append(
            Resource.from_message(load_assignment(name, members, locality=context.locality, port=port))
        )
    return ServiceProjection(
        resources=tuple(resources),
        vhosts=Piece.of(
            _vhosts(vhosts, routing, fqdn=service_fqdn(service, mesh_domain=context.mesh_domain), quic=quic)
        ),
        not_found=tuple(name for name in demand.requested if name not in names),
    )
