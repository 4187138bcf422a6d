"""HTTP/3 between proxies: the callee's QUIC inbound, the caller's per-source `quic:` clusters fetched on demand.

Every mesh pod's inbound 18008 listens on UDP too (`inbound_quic_<pod>`), with the same SVID and the same client
certificate requirement as its TCP side. A caller's HTTP requests ride HTTP/3 with nothing to enable:

1. The pod's outbound and capture HTTP managers run an early header mutation (before routing) that sets
   `x-aether-quic-cluster: quic:<caller sa>.<caller ns>@%REQ(:authority)%`: the caller's half is the listener's own
   (a client cannot forge it: the header is overwritten), the destination's half is the Host the request names.
2. A service's own virtual host (not its GAMMA routes), and the catch-all for a mesh name outside the dependency
   set, route requests carrying that header by `cluster_header`, so
   the first request of a (source service account, destination) pair names a cluster Envoy does not hold; the
   on-demand filter asks for it (ODCDS) and the projection answers with a `quic:` cluster presenting exactly that
   caller's SVID (one transport socket, no matcher): the callee sees the caller's own identity.
3. The `quic:` cluster is Envoy's `auto_config` with HTTP/3 and HTTP/2: its alternate-protocols cache is
   prepopulated with `(<SNI>, 18008)`, the origin Envoy keys an endpoint on, so Envoy tries QUIC to every endpoint at
   once, and its connectivity grid races TCP (HTTP/2, the same TLS context) when QUIC does not answer quickly or
   fails, marking HTTP/3 broken for that origin for a while. A blocked UDP 18008 costs a delay, not a request.

What stays on HTTP/2 by design: a service whose routing comes from GAMMA routes (the weighted splits among them;
here every GAMMA-routed virtual host, a superset), a service with an endpoint behind the east/west waypoint (an
endpoint of another cluster, `Endpoint.cluster_name` set: the waypoint tunnels TCP), and a node that holds no SVID
(QUIC has no plaintext).

Names. Envoy's QUIC client checks the server certificate's DNS names against the SNI it sends (TCP's SNI here is a
bare port number, which is no DNS name), so every workload SVID carries two DNS SANs, both fixed by its SPIFFE ID
`spiffe://<td>/ns/<ns>/sa/<sa>` alone (SPIRE can template them in its registration entries; no mesh-domain or
MeshConfig coupling, which can change under a running SVID):

* `<sa>.<ns>.<td>`: the SNI of a service's own cluster (its endpoints' primary ports);
* `*.<sa>.<ns>.<td>`: covers `<port>.<sa>.<ns>.<td>`, the SNI of its per-port clusters, which selects the callee's
  chain of that port (TCP keeps its bare-port SNI, and its port chains accept the DNS form too, for the fallback).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from envoy.config.common.mutation_rules.v3 import mutation_rules_pb2
from envoy.config.core.v3 import address_pb2, base_pb2, extension_pb2, protocol_pb2
from envoy.config.listener.v3 import (
    listener_components_pb2,
    listener_pb2,
    quic_config_pb2,
    udp_listener_config_pb2,
)
from envoy.config.route.v3 import route_components_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.extensions.http.early_header_mutation.header_mutation.v3 import header_mutation_pb2
from envoy.extensions.transport_sockets.quic.v3 import quic_transport_pb2
from envoy.extensions.transport_sockets.tls.v3 import tls_pb2
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2

from aether.core.events.registry import Endpoint
from aether.core.mesh_names import ClusterName, split_service
from aether.core.project.clusters import HTTP_OPTIONS_KEY, UPSTREAM_IDLE_SECONDS, service_cluster
from aether.core.project.messages import pack, seconds
from aether.core.project.names import (
    MESH_INBOUND_PORT,
    app_cluster_name,
    caller_secret_name,
    inbound_quic_listener_name,
    pod_token,
    spiffe_id,
)
from aether.core.project.tls import UpstreamIdentity
from aether.core.state.pods import PodRecord

QUIC_CLUSTER_HEADER = "x-aether-quic-cluster"
"""Set by a caller pod's HTTP managers before routing: the `quic:` cluster of this caller and the Host it names."""
QUIC_TRANSPORT = "envoy.transport_sockets.quic"
H3_ALPN = ("h3",)


def quic_server_name(service: str, *, trust_domain: str, port: int | None = None) -> str:
    """Return the SNI of `service`'s HTTP/3 clusters: `<sa>.<ns>.<td>`, or `<port>.<sa>.<ns>.<td>` for a port."""
    namespace, account = split_service(service)
    name = f"{account}.{namespace}.{trust_domain}"
    return name if port is None else f"{port}.{name}"


def quic_dns_sans(service: str, *, trust_domain: str) -> tuple[str, str]:
    """Return the two DNS SANs every SVID of `service` needs for HTTP/3: `<sa>.<ns>.<td>` and its wildcard."""
    name = quic_server_name(service, trust_domain=trust_domain)
    return (name, f"*.{name}")


def quic_dns_sans_of_id(identity: str) -> tuple[str, str] | None:
    """Return the two DNS SANs of the SPIFFE ID `spiffe://<td>/ns/<ns>/sa/<sa>`, or None for another shape."""
    rest = identity.removeprefix("spiffe://")
    trust_domain, _, path = rest.partition("/")
    parts = path.split("/")
    if rest == identity or len(parts) != 4 or parts[0] != "ns" or parts[2] != "sa":
        return None
    return quic_dns_sans(f"{parts[1]}/{parts[3]}", trust_domain=trust_domain)


def behind_waypoint(endpoint: Endpoint) -> bool:
    """True when `endpoint` is reached through the east/west waypoint (an endpoint of another cluster)."""
    return bool(endpoint.cluster_name)


def quic_eligible(members: Iterable[Endpoint]) -> bool:
    """True when requests to a service with these HTTP endpoints may ride HTTP/3 (none behind the waypoint)."""
    return not any(behind_waypoint(item) for item in members)


# --- the caller's side ---


def quic_header_mutation(source: str) -> Any:
    """Return the early header mutation of a caller pod of `source` (`<ns>/<sa>`) naming its `quic:` cluster."""
    namespace, account = split_service(source)
    value = f"quic:{account}.{namespace}@%REQ(:authority)%"
    mutation = header_mutation_pb2.HeaderMutation(
        mutations=[
            mutation_rules_pb2.HeaderMutation(
                append=base_pb2.HeaderValueOption(
                    header=base_pb2.HeaderValue(key=QUIC_CLUSTER_HEADER, value=value),
                    append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
                )
            )
        ]
    )
    return extension_pb2.TypedExtensionConfig(
        name="envoy.http.early_header_mutation.header_mutation", typed_config=pack(mutation)
    )


def quic_header_present() -> Any:
    """Return the route header matcher of requests whose caller named its `quic:` cluster."""
    return route_components_pb2.HeaderMatcher(name=QUIC_CLUSTER_HEADER, present_match=True)


def quic_target(
    parsed: ClusterName, *, primaries: Sequence[int], advertised: Iterable[int]
) -> tuple[bool, int | None]:
    """Return whether the service serves the Host a `quic:` cluster was named after, and the port its endpoints
    are reached at (None: their primary ports, which the service's own cluster reaches)."""
    if parsed.port is None or parsed.port in primaries:
        return True, None
    return parsed.port in set(advertised), parsed.port


def quic_protocol_options(server_name: str, *, idle_timeout_seconds: int) -> Any:
    """Return the `auto_config` HTTP/3 + HTTP/2 options of a `quic:` cluster whose endpoints send `server_name`."""
    options = http_protocol_options_pb2.HttpProtocolOptions(
        common_http_protocol_options=protocol_pb2.HttpProtocolOptions(
            idle_timeout=seconds(idle_timeout_seconds)
        )
    )
    auto = options.auto_config
    auto.http2_protocol_options.SetInParent()
    auto.http3_protocol_options.SetInParent()
    cache = auto.alternate_protocols_cache_options
    # One cache per SNI: the `quic:` clusters of every caller of one destination share what they learn (a cache
    # name must always come with the same options, which it does: they derive from the name).
    cache.name = f"h3:{server_name}"
    cache.prepopulated_entries.add(hostname=server_name, port=MESH_INBOUND_PORT)
    return options


def quic_transport_socket(context: Any) -> Any:
    """Wrap an `UpstreamTlsContext` into the QUIC transport socket (its TCP fallback uses the same context)."""
    return base_pb2.TransportSocket(
        name=QUIC_TRANSPORT,
        typed_config=pack(quic_transport_pb2.QuicUpstreamTransport(upstream_tls_context=context)),
    )


def source_of(parsed: ClusterName, *, trust_domain: str) -> str:
    """Return the SPIFFE ID a `quic:` cluster presents."""
    return spiffe_id(parsed.source, trust_domain=trust_domain)


# --- the callee's side ---


def _quic_socket(tcp_socket: Any) -> Any:
    """Return the QUIC downstream socket carrying the TLS context of `tcp_socket` (same SVID, same client
    certificate requirement), with ALPN h3."""
    context = tls_pb2.DownstreamTlsContext()
    tcp_socket.typed_config.Unpack(context)
    del context.common_tls_context.alpn_protocols[:]
    context.common_tls_context.alpn_protocols.extend(H3_ALPN)
    return base_pb2.TransportSocket(
        name=QUIC_TRANSPORT,
        typed_config=pack(quic_transport_pb2.QuicDownstreamTransport(downstream_tls_context=context)),
    )


def inbound_quic_listener(
    record: PodRecord, *, address: Any, tcp_socket: Any, trust_domain: str, http: Any
) -> Any:
    """Return `inbound_quic_<pod>`: UDP 18008 beside the TCP inbound (at the same `address`), HTTP/3 only.

    `tcp_socket` is the TCP inbound's HTTP transport socket, whose TLS context this listener reuses; `http(name,
    cluster)` builds the inbound HTTP manager delivering to the app cluster. SNI `<port>.<sa>.<ns>.<td>` selects
    that port's chain; anything else the primary port's.
    """
    pod = record.pod
    token = pod_token(pod)
    socket = _quic_socket(tcp_socket)
    udp = listener_pb2.Listener()
    udp.CopyFrom(address_listener(address))
    udp.name = inbound_quic_listener_name(pod)
    udp.traffic_direction = base_pb2.INBOUND
    udp.udp_listener_config.CopyFrom(
        udp_listener_config_pb2.UdpListenerConfig(quic_options=quic_config_pb2.QuicProtocolOptions())
    )
    for port in record.config.ports:
        name = quic_server_name(record.service, trust_domain=trust_domain, port=port)
        udp.filter_chains.append(
            listener_components_pb2.FilterChain(
                name=f"in_h3_{token}_{port}",
                filter_chain_match=listener_components_pb2.FilterChainMatch(server_names=[name]),
                transport_socket=socket,
                filters=[http(f"in_h3_{token}_{port}", app_cluster_name(pod, port))],
            )
        )
    udp.filter_chains.append(
        listener_components_pb2.FilterChain(
            name=f"in_h3_{token}",
            transport_socket=socket,
            filters=[http(f"in_h3_{token}", app_cluster_name(pod, record.config.port))],
        )
    )
    return udp


def address_listener(address: Any) -> Any:
    """Return a listener bound to `address` with its protocol set to UDP."""
    udp_address = address_pb2.Address()
    udp_address.CopyFrom(address)
    udp_address.socket_address.protocol = address_pb2.SocketAddress.UDP
    return listener_pb2.Listener(address=udp_address)


def http3_codec(manager: Any) -> Any:
    """Turn an inbound HTTP connection manager into its HTTP/3 form (in place); return it."""
    manager.codec_type = hcm_pb2.HttpConnectionManager.HTTP3
    manager.http3_protocol_options.SetInParent()
    return manager


def caller_identity(identity: UpstreamIdentity, source: str) -> UpstreamIdentity:
    """Return the one certificate a per-caller cluster presents: `source`'s caller secret (its SVID, or while it
    has none the node's fallback; see `aether.core.project.tls`); plaintext stays plaintext, and a cluster of one
    certificate keeps it."""
    if not identity.per_caller:
        return identity
    return UpstreamIdentity(secret=caller_secret_name(source), sds_cluster=identity.sds_cluster)


def quic_cluster(
    name: str, *, source: str, identity: UpstreamIdentity, peer: str, trust_domain: str, server_name: str
) -> Any:
    """Return the `quic:` cluster `name`: HTTP/3 (HTTP/2 as the fallback) to endpoints presenting `peer`,
    presenting the caller secret of `source` (the SPIFFE ID its name's caller runs as: its SVID or, while that
    caller has none, the node's fallback), with SNI `server_name`."""
    cluster = service_cluster(
        name,
        identity=caller_identity(identity, source),
        peer=peer,
        trust_domain=trust_domain,
        http=True,
        sni=server_name,
    )
    context = tls_pb2.UpstreamTlsContext()
    cluster.transport_socket.typed_config.Unpack(context)
    # No ALPN of our own: QUIC offers h3, and `auto_config` offers h2 and http/1.1 on the TCP fallback.
    del context.common_tls_context.alpn_protocols[:]
    cluster.transport_socket.CopyFrom(quic_transport_socket(context))
    cluster.typed_extension_protocol_options[HTTP_OPTIONS_KEY].CopyFrom(
        pack(quic_protocol_options(server_name, idle_timeout_seconds=UPSTREAM_IDLE_SECONDS))
    )
    return cluster
