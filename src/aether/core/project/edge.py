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
`edge_snapshot` builds from plans (`port_plans`, `plan_clusters`, `udp_plans`) that `EdgeProjector`
(`aether.core.project.edge_projector`) keys on to re-project only what changed: the same snapshot, incrementally.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.endpoint.v3 import endpoint_pb2

from aether.core.gateway import EdgeListener, GatewayView, UdpRouteCluster, gateway_view, ir
from aether.core.gateway.ir import SelectorKeys
from aether.core.mesh_names import (
    SliceClusterName,
    http_cluster_name,
    parse_cluster_name,
    parse_slice_cluster_name,
)
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
from aether.core.project.udp_routes import EndpointsOf, udp_route_resources
from aether.core.snapshot import CLUSTER_TYPE, ENDPOINT_TYPE, Resource, Snapshot
from aether.core.state.kube import KubeState
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
    """Return the edge snapshot of an already computed `view` of `state` (what `project_edge` does after the view).

    Built from scratch: `aether.core.project.edge_projector.EdgeProjector` gives the same snapshots while
    re-projecting only what changed since its previous one.
    """
    inputs = edge_inputs(state, options=options)
    certificates = edge_certificates(state, view.edge_listeners)
    plans, unroutable = port_plans(view.edge_listeners, certificates)
    resources = [Resource.from_message(readiness_listener(bind=options.bind))]
    resources.extend(
        Resource.from_message(
            listener_message(plan, bind=options.bind, tracing=inputs.tracing),
            references=tuple(table.name for table in tables),
        )
        for plan, tables in plans
    )
    resources.extend(Resource.from_message(table_message(table)) for _, tables in plans for table in tables)
    cluster_plan = plan_clusters(view.backend_clusters, mesh_domain=inputs.context.mesh_domain)
    for name, sliced in cluster_plan.singles:
        resources.extend(single_cluster_resources(name, sliced, state.kube))
    for service, requested in cluster_plan.services:
        resources.extend(
            service_cluster_resources(
                service, requested, state, context=inputs.context, subsets=view.backend_selectors
            )
        )
    resources.extend(udp_resources(udp_plans(view), state.registry.endpoints.get, bind=options.bind))
    if unroutable:
        resources.append(UNROUTABLE)
    resources.extend(
        Resource.from_message(secret) for secret in edge_secrets(state, inputs, certificates=certificates)
    )
    return Snapshot.build(node_id=node_id, seq=state.seq, resources=resources)


@attrs.frozen(kw_only=True)
class EdgeInputs:
    """What the edge projects with beside the view, from the state's MeshConfig and the options."""

    edge_id: str
    """The edge's SPIFFE ID (its SVID's secret name)."""
    cleartext: bool
    context: ServiceContext
    tracing: Tracing | None


def edge_inputs(state: State, *, options: EdgeOptions) -> EdgeInputs:
    """Return the edge's identity, service context and tracing for `state` and `options`."""
    mesh = state.kube.mesh_config
    edge_id = spiffe_id(options.service, trust_domain=mesh.trust_domain)
    identity = (
        PLAINTEXT
        if options.cleartext
        else UpstreamIdentity(secret=edge_id, sds_cluster=options.spire_sds_cluster)
    )
    return EdgeInputs(
        edge_id=edge_id,
        cleartext=options.cleartext,
        context=ServiceContext(
            mesh_domain=mesh.mesh_domain, trust_domain=mesh.trust_domain, identity=identity, locality=None
        ),
        tracing=tracing_of(
            mesh, collector_cluster=options.collector_cluster, service_name=EDGE_TRACE_SERVICE
        ),
    )


def edge_secrets(
    state: State, inputs: EdgeInputs, *, certificates: Mapping[str, tuple[bytes, bytes]]
) -> list[Any]:
    """The edge's secrets: its SVID and trust bundle (none in cleartext), then the listeners' certificates."""
    secrets = (
        []
        if inputs.cleartext
        else node_secrets(
            (inputs.edge_id,),
            svids=state.identity.svids,
            bundles=state.identity.trust_bundles,
            trust_domain=inputs.context.trust_domain,
        )
    )
    secrets.extend(
        certificate_secret(name, cert_chain_pem=chain, private_key=key)
        for name, (chain, key) in sorted(certificates.items())
    )
    return secrets


# --- certificates ---


def certificate_name(secret: str) -> str:
    """The SDS name of the certificate in Secret `<ns>/<name>`: `kubernetes://<ns>/<name>`."""
    return f"kubernetes://{secret}"


def edge_certificates(state: State, listeners: Iterable[EdgeListener]) -> dict[str, tuple[bytes, bytes]]:
    """The certificates the listeners name that the state holds, by SDS name: `(chain, key)`."""
    found: dict[str, tuple[bytes, bytes]] = {}
    for listener in listeners:
        for secret in listener.certificates:
            held = state.kube.tls_secrets.get(f"Secret/{secret}")
            if held is not None:
                found[certificate_name(secret)] = (held.cert_chain_pem, held.private_key.secret)
    return found


def _first_certificate(listener: EdgeListener, certificates: Mapping[str, tuple[bytes, bytes]]) -> str:
    # One certificate per chain: Envoy refuses two of the same key type, and the first reference is the one to use.
    return next(
        (certificate_name(s) for s in listener.certificates if certificate_name(s) in certificates), ""
    )


# --- listeners ---


@attrs.frozen(kw_only=True)
class TablePlan:
    """One route table of an HTTP or HTTPS listener port: its virtual hosts, then `edge_misdirected`."""

    name: str
    vhosts: tuple[ir.VirtualHost, ...]
    misdirected: tuple[str, ...] = ()
    """The domains `edge_misdirected` answers 421 for (the hosts the port's other chains serve); empty: none."""


@attrs.frozen(kw_only=True)
class ListenerPlan:
    """One Gateway listener port: everything its Envoy listener is a function of, beside the bind address and
    tracing (so equal plans give equal listeners)."""

    port: int
    protocol: str
    """`HTTP`, `HTTPS`, `TLS` or `TCP` (the port's first listener's)."""
    chains: tuple[tuple[str, str], ...] = ()
    """HTTPS: `(hostname, certificate)` per chain."""
    backends: tuple[tuple[str, int], ...] = ()
    """TCP: the `(cluster, weight)` pairs every connection is split over."""
    sni_chains: tuple[tuple[tuple[str, ...], tuple[tuple[str, int], ...]], ...] = ()
    """TLS: per chain, its SNI names and backends."""
    certificate: str = ""
    """TLS Terminate: the certificate TLS ends with; empty passes it through."""


def port_plans(
    edge_listeners: Sequence[EdgeListener], certificates: Mapping[str, tuple[bytes, bytes]]
) -> tuple[list[tuple[ListenerPlan, tuple[TablePlan, ...]]], bool]:
    """Return, per port in order, its listener's plan and its route tables, and whether an L4 route needs
    `edge_unroutable`. Gateway listeners sharing a port must share its protocol: the first one's wins (UDP
    listeners are apart: `udp_plans`)."""
    by_port: dict[int, list[EdgeListener]] = {}
    for listener in edge_listeners:
        if listener.protocol == "UDP":
            continue  # on sockets of their own (`udp_plans`)
        group = by_port.setdefault(listener.port, [])
        if not group or (group[0].protocol, group[0].tls_mode) == (listener.protocol, listener.tls_mode):
            group.append(listener)
    plans: list[tuple[ListenerPlan, tuple[TablePlan, ...]]] = []
    unroutable = False
    for port, group in sorted(by_port.items()):
        first = group[0]
        if first.protocol == "HTTP":
            table = TablePlan(
                name=route_table_name(port),
                vhosts=tuple(vhost for item in group for vhost in item.virtual_hosts),
            )
            plans.append((ListenerPlan(port=port, protocol="HTTP"), (table,)))
        elif first.protocol == "HTTPS":
            chains: dict[str, tuple[str, list[ir.VirtualHost]]] = {}
            for item in group:
                certificate = _first_certificate(item, certificates)
                if certificate:
                    held = chains.setdefault(item.hostname, (certificate, []))
                    held[1].extend(item.virtual_hosts)
            if chains:
                served = {
                    hostname: {domain for vhost in vhosts for domain in vhost.domains if domain != "*"}
                    for hostname, (_, vhosts) in chains.items()
                }
                tables = tuple(
                    TablePlan(
                        name=route_table_name(port, hostname or "*"),
                        vhosts=tuple(vhosts),
                        misdirected=_misdirected(hostname, served),
                    )
                    for hostname, (_, vhosts) in sorted(chains.items())
                )
                plan = ListenerPlan(
                    port=port,
                    protocol="HTTPS",
                    chains=tuple((hostname, cert) for hostname, (cert, _) in sorted(chains.items())),
                )
                plans.append((plan, tables))
        elif first.protocol in ("TLS", "TCP"):
            built = _l4_plan(port, group, certificates=certificates)
            if built is not None:
                plan, needs_unroutable = built
                plans.append((plan, ()))
                unroutable = unroutable or needs_unroutable
    return plans, unroutable


def listener_message(plan: ListenerPlan, *, bind: str, tracing: Tracing | None) -> Any:
    """Return the Envoy listener of `plan` on `bind`; HTTP and HTTPS listeners are traced with `tracing`."""
    if plan.protocol == "HTTP":
        return http_listener(plan.port, bind=bind, tracing=tracing)
    if plan.protocol == "HTTPS":
        return https_listener(plan.port, bind=bind, chains=plan.chains, tracing=tracing)
    if plan.protocol == "TCP":
        return tcp_listener(plan.port, bind=bind, backends=plan.backends)
    assert plan.protocol == "TLS", f"listener plan protocol {plan.protocol!r}: this is a bug"
    return tls_listener(plan.port, bind=bind, chains=plan.sni_chains, certificate=plan.certificate)


def table_message(table: TablePlan) -> Any:
    """Return the route table of `table` (see `edge_listeners.route_table`)."""
    vhosts = [envoy_virtual_host(vhost) for vhost in table.vhosts]
    if table.misdirected:
        vhosts.append(misdirected_vhost(table.misdirected))
    return route_table(table.name, vhosts)


def _misdirected(hostname: str, served: dict[str, set[str]]) -> tuple[str, ...]:
    """The domains of the `edge_misdirected` virtual host of the chain of listener `hostname`: the hosts the port's
    other chains serve (the table keeps for the chain's own virtual hosts the domains they claim too)."""
    return tuple(
        sorted({domain for other, domains in served.items() if other != hostname for domain in domains})
    )


def _l4_plan(
    port: int, group: Sequence[EdgeListener], *, certificates: Mapping[str, tuple[bytes, bytes]]
) -> tuple[ListenerPlan, bool] | None:
    """The TCP or TLS listener plan of `port`, and whether it routes to `edge_unroutable`; None when it has no
    route."""
    first = group[0]
    routes = [route for item in group for route in item.l4_routes]
    if not routes:
        return None
    unroutable = ((UNROUTABLE_CLUSTER, 1),)
    if first.protocol == "TCP":
        backends = routes[0].usable_backends or unroutable
        return ListenerPlan(port=port, protocol="TCP", backends=backends), backends[0][
            0
        ] == UNROUTABLE_CLUSTER
    certificate = _first_certificate(first, certificates) if first.tls_mode == "Terminate" else ""
    if first.tls_mode == "Terminate" and not certificate:
        return None
    claimed: set[str] = set()
    chains: list[tuple[tuple[str, ...], tuple[tuple[str, int], ...]]] = []
    needs = False
    for route in routes:
        # An SNI name (or the no-name default chain) goes to the first route claiming it, in precedence order.
        names = tuple(name for name in (route.hostnames or (first.hostname,)) if name.lower() not in claimed)
        if not names:
            continue
        claimed.update(name.lower() for name in names)
        backends = route.usable_backends or unroutable
        needs = needs or backends[0][0] == UNROUTABLE_CLUSTER
        chains.append((names, backends))
    plan = ListenerPlan(port=port, protocol="TLS", sni_chains=tuple(chains), certificate=certificate)
    return plan, needs


def udp_listener_name(port: int) -> str:
    """`edge_udp_<port>`: the Envoy listener of every UDP Gateway listener on `port` (UDP ports are apart from
    TCP ones: a TCP and a UDP listener may share a number)."""
    return f"edge_udp_{port}"


def udp_plans(view: GatewayView) -> tuple[tuple[int, UdpRouteCluster], ...]:
    """Per UDP listener port (in listener order), the weighted cluster of its first listener's oldest route."""
    plans: list[tuple[int, UdpRouteCluster]] = []
    served: set[int] = set()
    for listener in view.edge_listeners:
        if listener.protocol != "UDP" or listener.port in served or not listener.l4_routes:
            continue
        served.add(listener.port)
        plans.append((listener.port, view.udp_clusters[listener.l4_routes[0].route]))
    return tuple(plans)


def udp_resources(
    plans: Iterable[tuple[int, UdpRouteCluster]], endpoints_of: EndpointsOf, *, bind: str
) -> list[Resource]:
    """The UDP listeners of `plans` (one per port, forwarding to its cluster) and their clusters."""
    resources: list[Resource] = []
    clusters: dict[str, Resource] = {}
    for port, cluster in plans:
        name = udp_listener_name(port)
        message = udp_proxy_listener(name, socket_address(bind, port), cluster=cluster.name)
        resources.append(Resource.from_message(message))
        if cluster.name not in clusters:
            for item in udp_route_resources(cluster, endpoints_of):
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


UNROUTABLE = Resource.from_message(_empty_cluster(UNROUTABLE_CLUSTER))
"""The `edge_unroutable` cluster, serialized once."""


@attrs.frozen(kw_only=True)
class ClusterPlan:
    """The backend cluster names the routes use, by how each is built."""

    singles: tuple[tuple[str, SliceClusterName | None], ...]
    """Sorted by name: the slice clusters (Services without a selector) with their parts, and (None) the names no
    mesh service serves, which get an endpoint-less cluster."""
    services: tuple[tuple[str, tuple[str, ...]], ...]
    """Sorted by service: each mesh service and the names of its clusters the routes use, sorted."""


def plan_clusters(names: Iterable[str], *, mesh_domain: str) -> ClusterPlan:
    """Return the plan of the backend cluster `names` the routes use."""
    singles: list[tuple[str, SliceClusterName | None]] = []
    by_service: dict[str, list[str]] = {}
    for name in sorted(set(names)):
        parsed = parse_cluster_name(name, mesh_domain=mesh_domain)
        if parsed is None:
            singles.append((name, parse_slice_cluster_name(name)))
        else:
            by_service.setdefault(parsed.service, []).append(name)
    return ClusterPlan(
        singles=tuple(singles),
        services=tuple((service, tuple(requested)) for service, requested in sorted(by_service.items())),
    )


def single_cluster_resources(name: str, sliced: SliceClusterName | None, kube: KubeState) -> list[Resource]:
    """The cluster (and load assignment) of a slice cluster from its Service's EndpointSlices; of a name no mesh
    service serves (`sliced` None), a cluster with no endpoints: requests to it get 503 at once, and no route of
    the edge ever names a missing cluster."""
    if sliced is None:
        return [Resource.from_message(_empty_cluster(name))]
    cluster, assignment = slice_resources(name, sliced, kube)
    return [Resource.from_message(cluster, references=(name,)), Resource.from_message(assignment)]


def service_cluster_resources(
    service: str,
    requested: Sequence[str],
    state: State,
    *,
    context: ServiceContext,
    subsets: Mapping[str, SelectorKeys],
) -> list[Resource]:
    """The clusters and load assignments of mesh service `service` that the routes use (`requested`), built like
    the node's: a cluster the routes send Services' selections to subsets its endpoints by their labels
    (`subsets`).

    A name the registry cannot serve (a port no endpoint advertises) still gets its cluster, with no endpoints.
    """
    projection = project_service(
        service,
        state.registry.endpoints.get(service),
        ServiceDemand(declared=True, requested=tuple(requested)),
        in_catalog=True,
        context=context,
        subsets=subsets.get(http_cluster_name(service, mesh_domain=context.mesh_domain), ()),
    )
    served = {item.name for item in projection.resources if item.type_url == CLUSTER_TYPE}
    resources = [
        item
        for item in projection.resources
        if item.name in requested and item.type_url in (CLUSTER_TYPE, ENDPOINT_TYPE)
    ]
    peer = spiffe_id(service, trust_domain=context.trust_domain)
    for name in requested:
        if name not in served:
            resources.extend(_unserved(name, peer=peer, context=context))
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
