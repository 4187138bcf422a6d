"""Per-pod listeners: explicit outbound HTTP, transparent capture, the L4 port, and the mesh inbound.

Where they bind: inside the pod's network namespace (`SocketAddress.network_namespace_filepath`) when it has one;
in local mode (no namespace) on the pod's own IP, the first of `pod.ips`.

* `outbound_http_<pod>` (127.0.0.1:18081): HTTP proxy port; the Host header names the service (`out_http`).
* `capture_<pod>` (18001, transparent): `original_dst` recovers the destination the connection had, and
  `http_inspector` tells HTTP apart; HTTP goes into the mesh routes (`cap_http`), everything else through to
  its original destination (`passthrough_original_dst`).
* GAMMA L4 (TCPRoute, TLSRoute with a Service parent): on both transparent listeners, a chain per routed
  ClusterIP and port (and SNI name) proxies to the route's backends (`l4_chains`).
* `l4_tcp_<pod>` (18082, transparent): TCP through to the original destination.
* `udp_<pod>_<address>_<port>` (transparent, UDP): one per Service ClusterIP and UDP port the node serves, bound to
  that destination itself (see `aether.core.project.udp`): `udp_proxy` to its `udp:` cluster.
* `inbound_<pod>` (18008): mTLS with the pod's own SVID, client certificates required and checked against the
  trust bundle; the caller's identity is recorded in `x-forwarded-client-cert` (SANITIZE_SET: URI and Subject)
  and the request delivered to the app through `app_<pod>_<port>`. SNI = a port selects that port's chain, ALPN
  h2 the primary port's HTTP chain, and anything else (the TCP floor) is proxied to the primary port as is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from envoy.config.core.v3 import address_pb2, base_pb2, substitution_format_string_pb2
from envoy.config.listener.v3 import listener_components_pb2, listener_pb2, udp_listener_config_pb2
from envoy.config.route.v3 import route_pb2 as http_route_pb2
from envoy.extensions.filters.common.set_filter_state.v3 import value_pb2
from envoy.extensions.filters.http.on_demand.v3 import on_demand_pb2
from envoy.extensions.filters.http.router.v3 import router_pb2
from envoy.extensions.filters.listener.http_inspector.v3 import http_inspector_pb2
from envoy.extensions.filters.listener.original_dst.v3 import original_dst_pb2
from envoy.extensions.filters.listener.tls_inspector.v3 import tls_inspector_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.extensions.filters.network.set_filter_state.v3 import set_filter_state_pb2
from envoy.extensions.filters.network.tcp_proxy.v3 import tcp_proxy_pb2
from envoy.extensions.filters.udp.udp_proxy.v3 import route_pb2, udp_proxy_pb2
from google.protobuf import wrappers_pb2
from xds.core.v3 import extension_pb2 as xds_extension_pb2
from xds.type.matcher.v3 import matcher_pb2

from aether.core.gateway.contract import MeshL4Destination
from aether.core.project.frontends import FrontendRoute
from aether.core.project.l4_chains import l4_chains, needs_sni
from aether.core.project.messages import ads, milliseconds, pack, socket_address
from aether.core.project.names import (
    ANY_ADDRESS,
    CALLER_SECRET_KEY,
    CAPTURE_PORT,
    CAPTURE_ROUTE,
    L4_PORT,
    LOOPBACK,
    MESH_INBOUND_PORT,
    OUTBOUND_HTTP_PORT,
    OUTBOUND_ROUTE,
    PASSTHROUGH_CLUSTER,
    SOURCE_IDENTITY_KEY,
    app_cluster_name,
    caller_secret_name,
    capture_listener_name,
    inbound_listener_name,
    l4_tcp_listener_name,
    outbound_listener_name,
    pod_token,
    spiffe_id,
    udp_listener_name,
)
from aether.core.project.outcome import inbound_local_replies
from aether.core.project.quic import (
    http3_codec,
    inbound_quic_listener,
    quic_header_mutation,
    quic_server_name,
)
from aether.core.project.routes import inbound_route_configuration
from aether.core.project.tls import downstream_socket
from aether.core.project.tracing import Tracing, add_tracing
from aether.core.project.udp import UdpDestination
from aether.core.state.pods import PodRecord

ON_DEMAND_TIMEOUT_MS = 2_000
"""How long a request waits for a cluster asked for on demand: one node-local xDS round trip takes milliseconds;
two seconds (the original system's value) covers a registry that is still syncing."""
LISTENER_FILTERS_TIMEOUT_MS = 1_000
"""How long capture waits for a first byte to inspect; server-first protocols (SMTP, MySQL) then pass through."""

HTTP_PROTOCOLS = ("http/1.0", "http/1.1", "h2c")
"""What `http_inspector` reports for cleartext HTTP."""
INBOUND_ALPN = ("h2", "http/1.1")

_HCM = "envoy.filters.network.http_connection_manager"


def _filter(name: str, config: Any) -> Any:
    return listener_components_pb2.Filter(name=name, typed_config=pack(config))


def _listener_filter(name: str, config: Any) -> Any:
    return listener_components_pb2.ListenerFilter(name=name, typed_config=pack(config))


def _http_filter(name: str, config: Any) -> Any:
    return hcm_pb2.HttpFilter(name=name, typed_config=pack(config))


def _address(record: PodRecord, port: int, *, host: str) -> Any:
    """`host:port` inside the pod's namespace, or `<pod ip>:port` in local mode."""
    pod = record.pod
    if pod.netns:
        return socket_address(host, port, netns=pod.netns)
    return socket_address(pod.ips[0], port)


def _filter_state_value(key: str, factory: str, value: str) -> Any:
    return value_pb2.FilterStateValue(
        object_key=key,
        factory_key=factory,
        format_string=substitution_format_string_pb2.SubstitutionFormatString(
            text_format_source=base_pb2.DataSource(inline_string=value)
        ),
        shared_with_upstream=value_pb2.FilterStateValue.ONCE,
    )


def _source_identity(record: PodRecord, *, trust_domain: str) -> Any:
    """The `set_filter_state` filter recording, for the pod's upstream connections, its SPIFFE ID and the name of
    the caller secret its service clusters present (see `tls`)."""
    identity = spiffe_id(record.service, trust_domain=trust_domain)
    values = [
        # Hashable: the value joins the upstream connection pool key, so callers never share a connection.
        _filter_state_value(SOURCE_IDENTITY_KEY, "envoy.hashable_string", identity),
        # What the clusters' certificate selector fetches over SDS and presents.
        _filter_state_value(CALLER_SECRET_KEY, "envoy.string", caller_secret_name(identity)),
    ]
    return _filter(
        "envoy.filters.network.set_filter_state", set_filter_state_pb2.Config(on_new_connection=values)
    )


def _mesh_http(
    stat_prefix: str,
    *,
    route: str = "",
    table: Any = None,
    quic_source: str = "",
    tracing: Tracing | None = None,
) -> Any:
    """The mesh's HTTP connection manager, routing with RDS `route` or with the inline route `table`; with
    `quic_source` (the pod's service, on a node with SVIDs) it names the caller's `quic:` cluster before routing
    (see `aether.core.project.quic`); traced with `tracing`."""
    manager = hcm_pb2.HttpConnectionManager(
        stat_prefix=stat_prefix,
        http_filters=[
            _http_filter(
                "envoy.filters.http.on_demand",
                on_demand_pb2.OnDemand(
                    odcds=on_demand_pb2.OnDemandCds(source=ads(), timeout=milliseconds(ON_DEMAND_TIMEOUT_MS))
                ),
            ),
            _http_filter("envoy.filters.http.router", router_pb2.Router()),
        ],
    )
    if table is not None:
        manager.route_config.CopyFrom(table)
    else:
        manager.rds.CopyFrom(hcm_pb2.Rds(config_source=ads(), route_config_name=route))
    if quic_source:
        manager.early_header_mutation_extensions.append(quic_header_mutation(quic_source))
    return _filter(_HCM, add_tracing(manager, tracing))


def _tcp_proxy(stat_prefix: str, cluster: str) -> Any:
    return _filter(
        "envoy.filters.network.tcp_proxy", tcp_proxy_pb2.TcpProxy(stat_prefix=stat_prefix, cluster=cluster)
    )


def outbound_listener(
    record: PodRecord, *, trust_domain: str, quic: bool = False, tracing: Tracing | None = None
) -> Any:
    """Return `outbound_http_<pod>`: the pod's HTTP proxy port, routed by `out_http` (traced with `tracing`)."""
    name = outbound_listener_name(record.pod)
    return listener_pb2.Listener(
        name=name,
        address=_address(record, OUTBOUND_HTTP_PORT, host=LOOPBACK),
        traffic_direction=base_pb2.OUTBOUND,
        filter_chains=[
            listener_components_pb2.FilterChain(
                name=name,
                filters=[
                    _source_identity(record, trust_domain=trust_domain),
                    _mesh_http(
                        f"out_http_{pod_token(record.pod)}",
                        route=OUTBOUND_ROUTE,
                        quic_source=record.service if quic else "",
                        tracing=tracing,
                    ),
                ],
            )
        ],
    )


def _passthrough_chain(name: str) -> Any:
    return listener_components_pb2.FilterChain(name=name, filters=[_tcp_proxy(name, PASSTHROUGH_CLUSTER)])


def _inspectors(l4: Sequence[MeshL4Destination], *, http: bool) -> list[Any]:
    """The listener filters of a transparent listener: the original destination, TLS SNI when a GAMMA L4 chain
    matches on it, the HTTP protocol on capture."""
    filters = [_listener_filter("envoy.filters.listener.original_dst", original_dst_pb2.OriginalDst())]
    if needs_sni(l4):
        filters.append(
            _listener_filter("envoy.filters.listener.tls_inspector", tls_inspector_pb2.TlsInspector())
        )
    if http:
        filters.append(
            _listener_filter("envoy.filters.listener.http_inspector", http_inspector_pb2.HttpInspector())
        )
    return filters


def capture_listener(
    record: PodRecord,
    *,
    trust_domain: str,
    l4: Sequence[MeshL4Destination] = (),
    frontends: Sequence[FrontendRoute] = (),
    quic: bool = False,
    tracing: Tracing | None = None,
) -> Any:
    """Return `capture_<pod>`: captured HTTP into `cap_http` (naming the caller's `quic:` cluster with `quic`), but
    HTTP to a GAMMA frontend (a routed Service's ClusterIP and port) into that frontend's virtual host (GAMMA stays on
    HTTP/2); the GAMMA L4 destinations `l4` to their routes'
    backends, anything else through to where it was going."""
    name = capture_listener_name(record.pod)
    token = pod_token(record.pod)
    return listener_pb2.Listener(
        name=name,
        address=_address(record, CAPTURE_PORT, host=ANY_ADDRESS),
        traffic_direction=base_pb2.OUTBOUND,
        # TPROXY-style capture keeps the original destination on the packet: the socket must accept any address.
        transparent=wrappers_pb2.BoolValue(value=True),
        listener_filters=_inspectors(l4, http=True),
        listener_filters_timeout=milliseconds(LISTENER_FILTERS_TIMEOUT_MS),
        continue_on_listener_filters_timeout=True,
        filter_chains=[
            listener_components_pb2.FilterChain(
                name=f"capture_http_{token}",
                filter_chain_match=listener_components_pb2.FilterChainMatch(
                    application_protocols=list(HTTP_PROTOCOLS)
                ),
                filters=[
                    _source_identity(record, trust_domain=trust_domain),
                    _mesh_http(
                        f"capture_{token}",
                        route=CAPTURE_ROUTE,
                        quic_source=record.service if quic else "",
                        tracing=tracing,
                    ),
                ],
            ),
            *(
                _frontend_chain(
                    f"capture_frontend_{token}_{item.address}_{item.port}",
                    record,
                    item,
                    trust_domain,
                    tracing,
                )
                for item in frontends
            ),
            *l4_chains(f"capture_l4_{token}", l4),
        ],
        default_filter_chain=_passthrough_chain(f"capture_passthrough_{token}"),
    )


def _frontend_chain(
    name: str, record: PodRecord, frontend: FrontendRoute, trust_domain: str, tracing: Tracing | None
) -> Any:
    """The capture chain of one GAMMA frontend: cleartext HTTP to its ClusterIP and port, routed by its own
    virtual host (inline: it is the pod's only use of it; clusters are not validated, as with RDS)."""
    table = http_route_pb2.RouteConfiguration(
        name=name,
        virtual_hosts=[frontend.virtual_host()],
        validate_clusters=wrappers_pb2.BoolValue(value=False),
    )
    return listener_components_pb2.FilterChain(
        name=name,
        filter_chain_match=listener_components_pb2.FilterChainMatch(
            prefix_ranges=[
                address_pb2.CidrRange(
                    address_prefix=frontend.address, prefix_len=wrappers_pb2.UInt32Value(value=32)
                )
            ],
            destination_port=wrappers_pb2.UInt32Value(value=frontend.port),
            application_protocols=list(HTTP_PROTOCOLS),
        ),
        filters=[
            _source_identity(record, trust_domain=trust_domain),
            _mesh_http(name, table=table, tracing=tracing),
        ],
    )


def l4_tcp_listener(record: PodRecord, *, l4: Sequence[MeshL4Destination] = ()) -> Any:
    """Return `l4_tcp_<pod>`: TCP on the L4 port, the GAMMA L4 destinations `l4` to their routes' backends,
    anything else through to its original destination."""
    name = l4_tcp_listener_name(record.pod)
    listener = listener_pb2.Listener(
        name=name,
        address=_address(record, L4_PORT, host=ANY_ADDRESS),
        traffic_direction=base_pb2.OUTBOUND,
        transparent=wrappers_pb2.BoolValue(value=True),
        listener_filters=_inspectors(l4, http=False),
        filter_chains=[_passthrough_chain(name), *l4_chains(name, l4)],
    )
    if needs_sni(l4):
        # Like capture: a client that speaks first waits no longer than this before passing through.
        listener.listener_filters_timeout.CopyFrom(milliseconds(LISTENER_FILTERS_TIMEOUT_MS))
        listener.continue_on_listener_filters_timeout = True
    return listener


def udp_listener(record: PodRecord, destination: UdpDestination) -> Any:
    """Return `udp_<pod>_<address>_<port>`: the pod's datagrams to one Service destination, to its `udp:` cluster.

    Bound to the destination itself inside the pod's namespace (transparent: the address is not the pod's), so
    the capture hands it exactly the datagrams sent there and its answers leave from the address and port the
    client sent to.
    """
    pod = record.pod
    name = udp_listener_name(pod, destination.address, destination.port)
    address = socket_address(destination.address, destination.port, netns=pod.netns)
    listener = udp_proxy_listener(name, address, cluster=destination.cluster)
    listener.traffic_direction = base_pb2.OUTBOUND
    listener.transparent.value = True
    return listener


def udp_proxy_listener(name: str, address: Any, *, cluster: str) -> Any:
    """Return the UDP listener `name` on `address` (made UDP here) whose `udp_proxy` sends every session to
    `cluster` (the matcher's `on_no_match`: the `cluster` field is deprecated)."""
    address.socket_address.protocol = address_pb2.SocketAddress.UDP
    route = matcher_pb2.Matcher.OnMatch(
        action=xds_extension_pb2.TypedExtensionConfig(
            name="route", typed_config=pack(route_pb2.Route(cluster=cluster))
        )
    )
    proxy = udp_proxy_pb2.UdpProxyConfig(stat_prefix=name, matcher=matcher_pb2.Matcher(on_no_match=route))
    return listener_pb2.Listener(
        name=name,
        address=address,
        udp_listener_config=udp_listener_config_pb2.UdpListenerConfig(),
        listener_filters=[_listener_filter("envoy.filters.udp_listener.udp_proxy", proxy)],
    )


def _inbound_manager(
    stat_prefix: str,
    routes: Sequence[tuple[str | None, str]],
    *,
    plaintext: bool,
    tracing: Tracing | None = None,
) -> Any:
    manager = hcm_pb2.HttpConnectionManager(
        stat_prefix=stat_prefix,
        route_config=inbound_route_configuration(routes),
        http_filters=[_http_filter("envoy.filters.http.router", router_pb2.Router())],
        local_reply_config=inbound_local_replies(),
    )
    if plaintext:  # no verified peer to record: only make sure no caller forges one
        manager.forward_client_cert_details = hcm_pb2.HttpConnectionManager.SANITIZE
    else:
        manager.forward_client_cert_details = hcm_pb2.HttpConnectionManager.SANITIZE_SET
        manager.set_current_client_cert_details.uri = True
        manager.set_current_client_cert_details.subject.value = True
    return add_tracing(manager, tracing)


def _inbound_http(
    stat_prefix: str, routes: Sequence[tuple[str | None, str]], *, plaintext: bool, tracing: Tracing | None
) -> Any:
    return _filter(_HCM, _inbound_manager(stat_prefix, routes, plaintext=plaintext, tracing=tracing))


def inbound_listener(
    record: PodRecord, *, trust_domain: str, plaintext: bool, tracing: Tracing | None = None
) -> Any:
    """Return `inbound_<pod>`: the mesh inbound of the pod (mTLS unless the node holds no SVID at all), its HTTP
    chains traced with `tracing`.

    Plaintext: no SNI exists to select a port, so the HTTP chain routes on the Host header's port instead.
    """
    pod = record.pod
    token = pod_token(pod)
    primary = app_cluster_name(pod, record.config.port)
    listener = listener_pb2.Listener(
        name=inbound_listener_name(pod),
        address=_address(record, MESH_INBOUND_PORT, host=ANY_ADDRESS),
        traffic_direction=base_pb2.INBOUND,
        default_filter_chain=listener_components_pb2.FilterChain(
            name=f"in_tcp_{token}", filters=[_tcp_proxy(f"in_tcp_{token}", primary)]
        ),
    )
    if plaintext:
        listener.listener_filters.append(
            _listener_filter("envoy.filters.listener.http_inspector", http_inspector_pb2.HttpInspector())
        )
        by_port: list[tuple[str | None, str]] = [
            (str(port), app_cluster_name(pod, port)) for port in record.config.ports
        ]
        listener.filter_chains.add(
            name=f"in_{token}",
            filter_chain_match=listener_components_pb2.FilterChainMatch(
                application_protocols=list(HTTP_PROTOCOLS)
            ),
            filters=[
                _inbound_http(f"in_{token}", [*by_port, (None, primary)], plaintext=True, tracing=tracing)
            ],
        )
        return listener
    identity = spiffe_id(record.service, trust_domain=trust_domain)
    http_socket = downstream_socket(identity, trust_domain=trust_domain, alpn=INBOUND_ALPN)
    listener.listener_filters.append(
        _listener_filter("envoy.filters.listener.tls_inspector", tls_inspector_pb2.TlsInspector())
    )
    listener.default_filter_chain.transport_socket.CopyFrom(
        downstream_socket(identity, trust_domain=trust_domain, alpn=())
    )
    for port in record.config.ports:
        listener.filter_chains.add(
            name=f"in_{token}_{port}",
            filter_chain_match=listener_components_pb2.FilterChainMatch(
                # The bare port (HTTP/2 clusters), and the DNS form of the `quic:` clusters' TCP fallback.
                server_names=[
                    str(port),
                    quic_server_name(record.service, trust_domain=trust_domain, port=port),
                ]
            ),
            transport_socket=http_socket,
            filters=[
                _inbound_http(
                    f"in_{token}_{port}",
                    [(None, app_cluster_name(pod, port))],
                    plaintext=False,
                    tracing=tracing,
                )
            ],
        )
    listener.filter_chains.add(
        name=f"in_{token}",
        filter_chain_match=listener_components_pb2.FilterChainMatch(application_protocols=["h2"]),
        transport_socket=http_socket,
        filters=[_inbound_http(f"in_{token}", [(None, primary)], plaintext=False, tracing=tracing)],
    )
    return listener


def inbound_quic(record: PodRecord, *, trust_domain: str, tracing: Tracing | None = None) -> Any:
    """Return `inbound_quic_<pod>`: the UDP half of the pod's mesh inbound, HTTP/3 with the TCP side's SVID and
    client-certificate requirement (see `aether.core.project.quic`), traced as the TCP side with `tracing`."""
    identity = spiffe_id(record.service, trust_domain=trust_domain)

    def http(stat_prefix: str, cluster: str) -> Any:
        manager = _inbound_manager(stat_prefix, [(None, cluster)], plaintext=False, tracing=tracing)
        return _filter(_HCM, http3_codec(manager))

    return inbound_quic_listener(
        record,
        address=_address(record, MESH_INBOUND_PORT, host=ANY_ADDRESS),
        tcp_socket=downstream_socket(identity, trust_domain=trust_domain, alpn=INBOUND_ALPN),
        trust_domain=trust_domain,
        http=http,
    )
