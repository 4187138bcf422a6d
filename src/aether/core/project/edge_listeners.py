"""The edge's Envoy listeners and route tables: one listener per Gateway listener port, and the readiness listener.

* HTTP: one chain, its routes from RDS `edge_<port>`.
* HTTPS (Terminate): `tls_inspector` reads the SNI and one chain per listener hostname serves that hostname's
  certificate (`filter_chain_match.server_names`; a listener without hostname is the chain for any name); each
  chain routes with its own table `edge_<port>_<hostname>`.
* TLS Passthrough: `tls_inspector`, one chain per SNI name a TLSRoute claims, proxied as is (`tcp_proxy`).
* TLS Terminate and TCP: TLS ends at the edge (TLS) or never began (TCP); the first route's backends take the bytes.

Every HTTP route table ends with `edge_not_found` (`*`), a direct 404: a host no route claims is answered at once,
never left waiting for a cluster. Before it, an HTTPS chain's table has `edge_misdirected`: the hosts the port's
other chains serve, answered 421 (the request came on a connection whose SNI chose another certificate). `edge_readiness` (18021) answers `/aether/readyz` with 200 for probes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from envoy.config.core.v3 import base_pb2
from envoy.config.listener.v3 import listener_components_pb2, listener_pb2
from envoy.config.route.v3 import route_components_pb2, route_pb2
from envoy.extensions.filters.http.router.v3 import router_pb2
from envoy.extensions.filters.listener.tls_inspector.v3 import tls_inspector_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.extensions.filters.network.tcp_proxy.v3 import tcp_proxy_pb2
from envoy.extensions.transport_sockets.tls.v3 import common_pb2, secret_pb2, tls_pb2
from google.protobuf import wrappers_pb2

from aether.core.project.messages import ads, pack, socket_address
from aether.core.project.tls import TLS_SOCKET
from aether.core.project.tracing import Tracing, add_tracing

READINESS_PORT = 18021
"""The edge's readiness port (DESIGN.md section 4)."""
READINESS_PATH = "/aether/readyz"
READINESS_LISTENER = "edge_readiness"
NOT_FOUND_VHOST = "edge_not_found"
"""The catch-all virtual host of every edge route table: a direct 404."""
DOWNSTREAM_ALPN = ("h2", "http/1.1")
"""What HTTPS listeners offer clients: HTTP/2 first, HTTP/1.1 for the rest."""

_HCM = "envoy.filters.network.http_connection_manager"
_TCP_PROXY = "envoy.filters.network.tcp_proxy"


def listener_name(port: int) -> str:
    """`edge_<port>`: the Envoy listener of every Gateway listener on `port`."""
    return f"edge_{port}"


def route_table_name(port: int, hostname: str = "") -> str:
    """`edge_<port>` (HTTP), `edge_<port>_<hostname>` (an HTTPS chain; `*` for the chain without hostname)."""
    return listener_name(port) if not hostname else f"{listener_name(port)}_{hostname}"


def _filter(name: str, config: Any) -> Any:
    return listener_components_pb2.Filter(name=name, typed_config=pack(config))


def _tls_inspector() -> Any:
    return listener_components_pb2.ListenerFilter(
        name="envoy.filters.listener.tls_inspector", typed_config=pack(tls_inspector_pb2.TlsInspector())
    )


def _http_manager(
    stat_prefix: str, *, route: str = "", table: Any = None, tracing: Tracing | None = None
) -> Any:
    """An HTTP connection manager routing with RDS `route`, or with the inline `table`; traced with `tracing`."""
    manager = hcm_pb2.HttpConnectionManager(
        stat_prefix=stat_prefix,
        # The edge is the first proxy a client reaches: the peer's address is the client's.
        use_remote_address=wrappers_pb2.BoolValue(value=True),
        normalize_path=wrappers_pb2.BoolValue(value=True),
        # Gateway hostnames name no port, and the port a redirect's Location names is the API's (the listener's or
        # the scheme's), never the one a client wrote in Host: the edge drops it before routing.
        strip_any_host_port=True,
        http_filters=[
            hcm_pb2.HttpFilter(name="envoy.filters.http.router", typed_config=pack(router_pb2.Router()))
        ],
    )
    if table is not None:
        manager.route_config.CopyFrom(table)
    else:
        manager.rds.CopyFrom(hcm_pb2.Rds(config_source=ads(), route_config_name=route))
    return _filter(_HCM, add_tracing(manager, tracing))


def tcp_proxy(stat_prefix: str, backends: Sequence[tuple[str, int]]) -> Any:
    """A `tcp_proxy` filter to one cluster, or split by weight over several (`(cluster, weight)` pairs)."""
    proxy = tcp_proxy_pb2.TcpProxy(stat_prefix=stat_prefix)
    if len(backends) == 1:
        proxy.cluster = backends[0][0]
    else:
        for cluster, weight in backends:
            proxy.weighted_clusters.clusters.add(name=cluster, weight=weight)
    return _filter(_TCP_PROXY, proxy)


def not_found_vhost() -> Any:
    """`edge_not_found`: every host, answered 404 at once."""
    return route_components_pb2.VirtualHost(
        name=NOT_FOUND_VHOST,
        domains=["*"],
        routes=[
            route_components_pb2.Route(
                match=route_components_pb2.RouteMatch(prefix="/"),
                direct_response=route_components_pb2.DirectResponseAction(status=404),
            )
        ],
    )


MISDIRECTED_VHOST = "edge_misdirected"
MISDIRECTED_STATUS = 421
"""Misdirected Request (RFC 9110 section 15.5.20): the connection's TLS server name selected another certificate
than the one of the request's host, so this connection must not answer for it (a client reusing an HTTP/2
connection for another host it resolves to the same address sends such requests; it retries on a new one)."""


def misdirected_vhost(domains: Sequence[str]) -> Any:
    """`edge_misdirected`: the hosts other chains of an HTTPS port serve, answered 421 at once."""
    return route_components_pb2.VirtualHost(
        name=MISDIRECTED_VHOST,
        domains=list(domains),
        routes=[
            route_components_pb2.Route(
                match=route_components_pb2.RouteMatch(prefix="/"),
                direct_response=route_components_pb2.DirectResponseAction(status=MISDIRECTED_STATUS),
            )
        ],
    )


def route_table_options(name: str) -> Any:
    """Return the route table `name` without virtual hosts: its options (what `route_table` adds them to)."""
    # Gateway hostnames name no port, and clients send `Host: name:port` on a listener's non-default port.
    return route_pb2.RouteConfiguration(name=name, ignore_port_in_host_matching=True)


def table_hosts(vhosts: Iterable[tuple[str, Sequence[str]]]) -> tuple[list[tuple[int, list[str]]], bool]:
    """Decide which virtual hosts a route table keeps, given each one's `(name, domains)` in order.

    Returns `(index, the domains it keeps)` per kept virtual host, and whether `edge_not_found` ends the table (no
    kept domain is `*`). A domain claimed twice keeps its first virtual host (the view orders them, the older route
    first) and is dropped from the later ones, which Envoy would otherwise refuse whole; so is a virtual host name
    used twice.
    """
    kept: list[tuple[int, list[str]]] = []
    domains: set[str] = set()
    names: set[str] = set()
    for index, (name, claimed) in enumerate(vhosts):
        fresh = [domain for domain in claimed if domain.lower() not in domains]
        if not fresh or name in names:
            continue
        kept.append((index, fresh))
        domains.update(domain.lower() for domain in fresh)
        names.add(name)
    return kept, "*" not in domains


def route_table(name: str, vhosts: Iterable[Any]) -> Any:
    """Return the route table `name`: `vhosts` in order, then `edge_not_found` unless one already claims `*` (see
    `table_hosts` for the domains and names each keeps)."""
    given = list(vhosts)
    table = route_table_options(name)
    kept, not_found = table_hosts((vhost.name, vhost.domains) for vhost in given)
    for index, fresh in kept:
        entry = table.virtual_hosts.add()
        entry.CopyFrom(given[index])
        del entry.domains[:]
        entry.domains.extend(fresh)
    if not_found:
        table.virtual_hosts.append(not_found_vhost())
    return table


def http_listener(port: int, *, bind: str, tracing: Tracing | None = None) -> Any:
    """`edge_<port>` for HTTP Gateway listeners: one chain routed by RDS `edge_<port>`."""
    name = listener_name(port)
    return listener_pb2.Listener(
        name=name,
        address=socket_address(bind, port),
        filter_chains=[
            listener_components_pb2.FilterChain(filters=[_http_manager(name, route=name, tracing=tracing)])
        ],
    )


def certificate_secret(name: str, *, cert_chain_pem: bytes, private_key: bytes) -> Any:
    """Return the SDS secret `name` serving a Gateway listener's certificate (from a `kubernetes.io/tls` Secret)."""
    return secret_pb2.Secret(
        name=name,
        tls_certificate=common_pb2.TlsCertificate(
            certificate_chain=base_pb2.DataSource(inline_bytes=cert_chain_pem),
            private_key=base_pb2.DataSource(inline_bytes=private_key),
        ),
    )


def _terminating_socket(certificate: str, *, alpn: Sequence[str]) -> Any:
    context = tls_pb2.DownstreamTlsContext(
        common_tls_context=tls_pb2.CommonTlsContext(
            tls_certificate_sds_secret_configs=[
                secret_pb2.SdsSecretConfig(name=certificate, sds_config=ads())
            ],
            alpn_protocols=list(alpn),
        )
    )
    return base_pb2.TransportSocket(name=TLS_SOCKET, typed_config=pack(context))


def _sni_chain(hostnames: Sequence[str], filters: Sequence[Any], *, transport: Any = None) -> Any:
    chain = listener_components_pb2.FilterChain(filters=list(filters))
    # No hostname: the chain for any name (and for clients that send no SNI).
    chain.filter_chain_match.server_names.extend(name for name in hostnames if name)
    if transport is not None:
        chain.transport_socket.CopyFrom(transport)
    return chain


def https_listener(
    port: int, *, bind: str, chains: Sequence[tuple[str, str]], tracing: Tracing | None = None
) -> Any:
    """`edge_<port>` for HTTPS: one chain per `(hostname, certificate secret)`, routed by `edge_<port>_<hostname>`."""
    name = listener_name(port)
    return listener_pb2.Listener(
        name=name,
        address=socket_address(bind, port),
        listener_filters=[_tls_inspector()],
        filter_chains=[
            _sni_chain(
                (hostname,),
                [_http_manager(name, route=route_table_name(port, hostname or "*"), tracing=tracing)],
                transport=_terminating_socket(certificate, alpn=DOWNSTREAM_ALPN),
            )
            for hostname, certificate in chains
        ],
    )


def tls_listener(
    port: int,
    *,
    bind: str,
    chains: Sequence[tuple[Sequence[str], Sequence[tuple[str, int]]]],
    certificate: str = "",
) -> Any:
    """`edge_<port>` for TLS listeners: per `(SNI names, backends)` a chain proxying bytes to the backends.

    Passthrough when `certificate` is empty (the client's TLS reaches the backend); otherwise TLS ends here with
    that certificate and the cleartext bytes go on.
    """
    name = listener_name(port)
    transport = _terminating_socket(certificate, alpn=()) if certificate else None
    return listener_pb2.Listener(
        name=name,
        address=socket_address(bind, port),
        listener_filters=[_tls_inspector()],
        filter_chains=[
            _sni_chain(hostnames, [tcp_proxy(name, backends)], transport=transport)
            for hostnames, backends in chains
        ],
    )


def tcp_listener(port: int, *, bind: str, backends: Sequence[tuple[str, int]]) -> Any:
    """`edge_<port>` for TCP listeners: every connection proxied to `backends`."""
    name = listener_name(port)
    return listener_pb2.Listener(
        name=name,
        address=socket_address(bind, port),
        filter_chains=[listener_components_pb2.FilterChain(filters=[tcp_proxy(name, backends)])],
    )


def readiness_listener(*, bind: str) -> Any:
    """`edge_readiness` (18021): `/aether/readyz` answers 200 once Envoy holds this listener, anything else 404."""
    ready = route_components_pb2.Route(
        match=route_components_pb2.RouteMatch(path=READINESS_PATH),
        direct_response=route_components_pb2.DirectResponseAction(
            status=200, body=base_pb2.DataSource(inline_string="ready\n")
        ),
    )
    vhost = route_components_pb2.VirtualHost(
        name="readiness", domains=["*"], routes=[ready, *not_found_vhost().routes]
    )
    table = route_pb2.RouteConfiguration(name=READINESS_LISTENER, virtual_hosts=[vhost])
    return listener_pb2.Listener(
        name=READINESS_LISTENER,
        address=socket_address(bind, READINESS_PORT),
        filter_chains=[
            listener_components_pb2.FilterChain(filters=[_http_manager(READINESS_LISTENER, table=table)])
        ],
    )
