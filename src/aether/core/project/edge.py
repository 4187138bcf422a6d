"""The edge snapshot: Gateways of the edge's class as Envoy listeners, their routes, and the mesh backends they name.

`project_edge(state, node_id=...)` reads `gateway_view(state)` and projects, for the edge Envoy:

* one listener per Gateway listener port on the bind address (see `aether.core.project.edge_listeners`), and the
  readiness listener on 18021;
* the route tables of HTTP and HTTPS listeners (the view's virtual hosts, then a direct 404 for any other host);
* the cluster of each Service without a selector the routes name: its EndpointSlices' ready addresses, in
  plaintext (`aether.core.project.slices`);
* one cluster per other backend cluster the routes name, built like the node's (`aether.core.project.services`): EDS
  from the registry, subset by the selectors of the Services the routes name (`aether.core.project.subsets`), dialled at the pods' mesh inbound `<pod ip>:18008` with the edge's own SVID (mTLS, peer pinned
  by SPIFFE ID) or, with `cleartext`, in HTTP/2 without TLS (identity none);
* the secrets: the edge's SVID and trust bundle, and the certificate of every HTTPS/TLS listener;
* per UDP listener port `edge_udp_<port>`, a `udp_proxy` to the weighted cluster of its route
  (`udproute:<name>.<namespace>`, `aether.core.project.udp_routes`): the pods each backend Service selects, in
  plaintext at the Service port's targetPort (UDP has no mesh inbound to carry mTLS).

The edge has one identity and no local pods: nothing here depends on pods but through the registry.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.endpoint.v3 import endpoint_pb2

from aether.core.gateway import EdgeListener, GatewayView, gateway_view
from aether.core.gateway.ir import SelectorKeys
from aether.core.mesh_names import http_cluster_name, parse_cluster_name, parse_slice_cluster_name
from aether.core.project.clusters import CONNECT_TIMEOUT_MS, service_cluster
from aether.core.project.dependencies import ServiceDemand
from aether.core.project.edge_listeners import (
    certificate_secret,
    http_listener,
    https_listener,
    misdirected_vhost,
    readiness_listener,
    route_table,
    route_table_name,
    tcp_listener,
    tls_listener,
)
from aether.core.project.gateway_routes import envoy_virtual_host
from aether.core.project.listeners import udp_proxy_listener
from aether.core.project.messages import milliseconds, socket_address
from aether.core.project.names import ANY_ADDRESS, spiffe_id
from aether.core.project.secrets import node_secrets
from aether.core.project.services import ServiceContext, project_service
from aether.core.project.slices import slice_resources
from aether.core.project.tls import PLAINTEXT, UpstreamIdentity
from aether.core.project.tracing import Tracing, tracing_of
from aether.core.project.udp_routes import udp_route_resources
from aether.core.snapshot import CLUSTER_TYPE, ENDPOINT_TYPE, Resource, Snapshot
from aether.core.state.state import State

EDGE_TRACE_SERVICE = "aether-edge"
"""The `service.name` of the spans the edge's Envoy sends."""
DEFAULT_EDGE_SERVICE = "aether-system/aether-edge"
"""The edge's mesh service `<ns>/<sa>` (its Deployment's service account): the identity it presents upstream."""
UNROUTABLE_CLUSTER = "edge_unroutable"
"""An endpoint-less cluster for L4 routes whose backends all failed to resolve: connections to it close at once."""


@attrs.frozen(kw_only=True)
class EdgeOptions:
    """How the edge projects (what the state does not say)."""

    bind: str = ANY_ADDRESS
    """The address every Gateway listener port and the readiness port bind on."""
    service: str = DEFAULT_EDGE_SERVICE
    """The edge's own mesh service `<ns>/<sa>`: its SVID is the one presented to backends."""
    cleartext: bool = False
    """True for identity none: backends are dialled in HTTP/2 without TLS (routing tests without SPIFFE)."""
    spire_sds_cluster: str = ""
    """Envoy fetches the edge's SVID and bundle over SDS from this static cluster of its bootstrap (the SPIRE
    agent's Workload API socket: `aether.envoy.bootstrap.SPIRE_SDS_CLUSTER`), not from the edge over ADS."""
    collector_cluster: str = ""
    """The static cluster of the OpenTelemetry collector that Envoy's bootstrap declares
    (`aether.envoy.bootstrap.OTEL_CLUSTER`); when the MeshConfig enables tracing, HTTP listeners send spans there
    (`aether.core.project.tracing`). Empty: none declared, no tracing."""


def project_edge(state: State, *, node_id: str, options: EdgeOptions = EdgeOptions()) -> Snapshot:
    """Return the edge Envoy's snapshot of `state` (see the module docstring).

    Args:
        state: The folded state (Gateway API objects, Services, TLS Secrets, registry endpoints, SVIDs).
        node_id: The edge Envoy's node id (the edge pod's name).
        options: Bind address, identity and cleartext mode.
    """
    return edge_snapshot(gateway_view(state), state, node_id=node_id, options=options)


def edge_snapshot(view: GatewayView, state: State, *, node_id: str, options: EdgeOptions) -> Snapshot:
    """Return the edge snapshot of an already computed `view` of `state` (what `project_edge` does after the view)."""
    mesh = state.kube.mesh_config
    edge_id = spiffe_id(options.service, trust_domain=mesh.trust_domain)
    identity = (
        PLAINTEXT
        if options.cleartext
        else UpstreamIdentity(secret=edge_id, sds_cluster=options.spire_sds_cluster)
    )
    context = ServiceContext(
        mesh_domain=mesh.mesh_domain, trust_domain=mesh.trust_domain, identity=identity, locality=None
    )
    certificates = _certificates(state, view.edge_listeners)
    tracing = tracing_of(mesh, collector_cluster=options.collector_cluster, service_name=EDGE_TRACE_SERVICE)
    listeners, tables, unroutable = _listeners(
        view.edge_listeners, bind=options.bind, certificates=certificates, tracing=tracing
    )
    resources = [Resource.from_message(readiness_listener(bind=options.bind))]
    resources.extend(
        Resource.from_message(listener, references=references) for listener, references in listeners
    )
    resources.extend(Resource.from_message(table) for table in tables)
    resources.extend(_clusters(view.backend_clusters, state, context=context, subsets=view.backend_selectors))
    resources.extend(_udp(view, state, bind=options.bind))
    if unroutable:
        resources.append(Resource.from_message(_empty_cluster(UNROUTABLE_CLUSTER)))
    secrets = (
        []
        if options.cleartext
        else node_secrets(
            (edge_id,),
            svids=state.identity.svids,
            bundles=state.identity.trust_bundles,
            trust_domain=mesh.trust_domain,
        )
    )
    secrets.extend(
        certificate_secret(name, cert_chain_pem=chain, private_key=key)
        for name, (chain, key) in sorted(certificates.items())
    )
    resources.extend(Resource.from_message(secret) for secret in secrets)
    return Snapshot.build(node_id=node_id, seq=state.seq, resources=resources)


# --- certificates ---


def certificate_name(secret: str) -> str:
    """The SDS name of the certificate in Secret `<ns>/<name>`: `kubernetes://<ns>/<name>`."""
    return f"kubernetes://{secret}"


def _certificates(state: State, listeners: Iterable[EdgeListener]) -> dict[str, tuple[bytes, bytes]]:
    """The certificates the listeners name that the state holds, by SDS name: `(chain, key)`."""
    found: dict[str, tuple[bytes, bytes]] = {}
    for listener in listeners:
        for secret in listener.certificates:
            held = state.kube.tls_secrets.get(f"Secret/{secret}")
            if held is not None:
                found[certificate_name(secret)] = (held.cert_chain_pem, held.private_key.secret)
    return found


def _first_certificate(listener: EdgeListener, certificates: dict[str, tuple[bytes, bytes]]) -> str:
    # One certificate per chain: Envoy refuses two of the same key type, and the first reference is the one to use.
    return next(
        (certificate_name(s) for s in listener.certificates if certificate_name(s) in certificates), ""
    )


# --- listeners ---


def _listeners(
    edge_listeners: Sequence[EdgeListener],
    *,
    bind: str,
    certificates: dict[str, tuple[bytes, bytes]],
    tracing: Tracing | None = None,
) -> tuple[list[tuple[Any, tuple[str, ...]]], list[Any], bool]:
    """Return `(listener, its route tables)` per port, the route tables, and whether an L4 route needs
    `edge_unroutable`. Gateway listeners sharing a port must share its protocol: the first one's wins. HTTP and
    HTTPS listeners are traced with `tracing`."""
    by_port: dict[int, list[EdgeListener]] = {}
    for listener in edge_listeners:
        if listener.protocol == "UDP":
            continue  # on sockets of their own (`_udp`)
        group = by_port.setdefault(listener.port, [])
        if not group or (group[0].protocol, group[0].tls_mode) == (listener.protocol, listener.tls_mode):
            group.append(listener)
    listeners: list[tuple[Any, tuple[str, ...]]] = []
    tables: list[Any] = []
    unroutable = False
    for port, group in sorted(by_port.items()):
        first = group[0]
        if first.protocol == "HTTP":
            table = route_table(
                route_table_name(port),
                (envoy_virtual_host(vhost) for item in group for vhost in item.virtual_hosts),
            )
            listeners.append((http_listener(port, bind=bind, tracing=tracing), (table.name,)))
            tables.append(table)
        elif first.protocol == "HTTPS":
            chains: dict[str, tuple[str, list[Any]]] = {}
            for item in group:
                certificate = _first_certificate(item, certificates)
                if certificate:
                    held = chains.setdefault(item.hostname, (certificate, []))
                    held[1].extend(envoy_virtual_host(vhost) for vhost in item.virtual_hosts)
            if chains:
                served = {
                    hostname: {domain for vhost in vhosts for domain in vhost.domains if domain != "*"}
                    for hostname, (_, vhosts) in chains.items()
                }
                port_tables = [
                    route_table(
                        route_table_name(port, hostname or "*"),
                        [*vhosts, *_misdirected(hostname, served)],
                    )
                    for hostname, (_, vhosts) in sorted(chains.items())
                ]
                listener = https_listener(
                    port,
                    bind=bind,
                    chains=[(hostname, cert) for hostname, (cert, _) in sorted(chains.items())],
                    tracing=tracing,
                )
                listeners.append((listener, tuple(table.name for table in port_tables)))
                tables.extend(port_tables)
        elif first.protocol in ("TLS", "TCP"):
            built = _l4_listener(port, group, bind=bind, certificates=certificates)
            if built is not None:
                listener, needs_unroutable = built
                listeners.append((listener, ()))
                unroutable = unroutable or needs_unroutable
    return listeners, tables, unroutable


def _misdirected(hostname: str, served: dict[str, set[str]]) -> list[Any]:
    """The `edge_misdirected` virtual host of the chain of listener `hostname`: the hosts the port's other chains
    serve (the table keeps for the chain's own virtual hosts the domains they claim too); none when there are none."""
    others = sorted({domain for other, domains in served.items() if other != hostname for domain in domains})
    return [misdirected_vhost(others)] if others else []


def _l4_listener(
    port: int, group: Sequence[EdgeListener], *, bind: str, certificates: dict[str, tuple[bytes, bytes]]
) -> tuple[Any, bool] | None:
    """The TCP or TLS listener of `port`, and whether it routes to `edge_unroutable`; None when it has no route."""
    first = group[0]
    routes = [route for item in group for route in item.l4_routes]
    if not routes:
        return None
    unroutable = [(UNROUTABLE_CLUSTER, 1)]
    if first.protocol == "TCP":
        backends = routes[0].usable_backends or tuple(unroutable)
        return tcp_listener(port, bind=bind, backends=backends), backends[0][0] == UNROUTABLE_CLUSTER
    certificate = _first_certificate(first, certificates) if first.tls_mode == "Terminate" else ""
    if first.tls_mode == "Terminate" and not certificate:
        return None
    claimed: set[str] = set()
    chains: list[tuple[Sequence[str], Sequence[tuple[str, int]]]] = []
    needs = False
    for route in routes:
        # An SNI name (or the no-name default chain) goes to the first route claiming it, in precedence order.
        names = tuple(name for name in (route.hostnames or (first.hostname,)) if name.lower() not in claimed)
        if not names:
            continue
        claimed.update(name.lower() for name in names)
        backends = route.usable_backends or tuple(unroutable)
        needs = needs or backends[0][0] == UNROUTABLE_CLUSTER
        chains.append((names, backends))
    return tls_listener(port, bind=bind, chains=chains, certificate=certificate), needs


def udp_listener_name(port: int) -> str:
    """`edge_udp_<port>`: the Envoy listener of every UDP Gateway listener on `port` (UDP ports are apart from
    TCP ones: a TCP and a UDP listener may share a number)."""
    return f"edge_udp_{port}"


def _udp(view: GatewayView, state: State, *, bind: str) -> list[Resource]:
    """The UDP listeners (one per port: its first listener's oldest route forwards) and their routes' clusters."""
    resources: list[Resource] = []
    served: set[int] = set()
    clusters: dict[str, Resource] = {}
    for listener in view.edge_listeners:
        if listener.protocol != "UDP" or listener.port in served or not listener.l4_routes:
            continue
        served.add(listener.port)
        cluster = view.udp_clusters[listener.l4_routes[0].route]
        name = udp_listener_name(listener.port)
        message = udp_proxy_listener(name, socket_address(bind, listener.port), cluster=cluster.name)
        resources.append(Resource.from_message(message))
        if cluster.name not in clusters:
            for item in udp_route_resources(cluster, state.registry.endpoints.get):
                clusters[f"{item.type_url} {item.name}"] = item
    resources.extend(item for _, item in sorted(clusters.items()))
    return resources


# --- clusters ---


def _empty_cluster(name: str) -> Any:
    return cluster_pb2.Cluster(
        name=name,
        type=cluster_pb2.Cluster.STATIC,
        connect_timeout=milliseconds(CONNECT_TIMEOUT_MS),
        load_assignment=endpoint_pb2.ClusterLoadAssignment(cluster_name=name),
    )


def _clusters(
    names: Iterable[str],
    state: State,
    *,
    context: ServiceContext,
    subsets: Mapping[str, SelectorKeys],
) -> list[Resource]:
    """The clusters (and load assignments) of the backend cluster names the routes use, built like the node's:
    a cluster the routes send Services' selections to subsets its endpoints by their labels (`subsets`).

    A name the registry cannot serve (a port no endpoint advertises) still gets its cluster, with no endpoints:
    requests to it get 503 at once, and no route of the edge ever names a missing cluster.
    """
    wanted = sorted(set(names))
    by_service: dict[str, list[str]] = {}
    resources: list[Resource] = []
    for name in wanted:
        parsed = parse_cluster_name(name, mesh_domain=context.mesh_domain)
        sliced = parse_slice_cluster_name(name) if parsed is None else None
        if sliced is not None:
            cluster, assignment = slice_resources(name, sliced, state.kube)
            resources.append(Resource.from_message(cluster, references=(name,)))
            resources.append(Resource.from_message(assignment))
        elif parsed is None:
            resources.append(Resource.from_message(_empty_cluster(name)))
        else:
            by_service.setdefault(parsed.service, []).append(name)
    peer_of = {service: spiffe_id(service, trust_domain=context.trust_domain) for service in by_service}
    for service, requested in sorted(by_service.items()):
        projection = project_service(
            service,
            state.registry.endpoints.get(service),
            ServiceDemand(declared=True, requested=tuple(requested)),
            in_catalog=True,
            context=context,
            subsets=subsets.get(http_cluster_name(service, mesh_domain=context.mesh_domain), ()),
        )
        served = {item.name for item in projection.resources if item.type_url == CLUSTER_TYPE}
        resources.extend(
            item
            for item in projection.resources
            if item.name in requested and item.type_url in (CLUSTER_TYPE, ENDPOINT_TYPE)
        )
        for name in requested:
            if name not in served:
                resources.extend(_unserved(name, peer=peer_of[service], context=context))
    return resources


def _unserved(name: str, *, peer: str, context: ServiceContext) -> list[Resource]:
    parsed = parse_cluster_name(name, mesh_domain=context.mesh_domain)
    assert parsed is not None  # Invariant: only parsed names are grouped by service
    cluster = service_cluster(
        name,
        identity=context.identity,
        peer=peer,
        trust_domain=context.trust_domain,
        http=parsed.protocol == "http",
        sni=str(parsed.port) if parsed.port is not None else "",
    )
    return [
        Resource.from_message(cluster, references=(name,)),
        Resource.from_message(endpoint_pb2.ClusterLoadAssignment(cluster_name=name)),
    ]
