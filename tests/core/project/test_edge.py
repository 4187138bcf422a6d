"""Tests of `aether.core.project.edge` and `edge_listeners`: the edge snapshot from a Gateway API view."""

from __future__ import annotations

from typing import Any

from envoy.config.cluster.v3 import cluster_pb2
from envoy.extensions.filters.network.tcp_proxy.v3 import tcp_proxy_pb2
from envoy.extensions.transport_sockets.tls.v3 import tls_pb2

from aether.core.gateway import EdgeListener, GatewayView, L4Route, WeightedBackend, ir
from aether.core.project.edge import (
    UNROUTABLE_CLUSTER,
    EdgeOptions,
    certificate_name,
    edge_snapshot,
    project_edge,
)
from aether.core.project.edge_listeners import NOT_FOUND_VHOST, READINESS_PATH, route_table
from aether.core.project.gateway_routes import envoy_virtual_host
from aether.core.snapshot import CLUSTER_TYPE, ENDPOINT_TYPE, LISTENER_TYPE, ROUTE_TYPE, SECRET_TYPE, Snapshot
from aether.core.state import State
from aether.testing import (
    endpoints_snapshot_received,
    fold_events,
    gateway_object_upserted,
    kube_service_upserted,
    make_endpoint,
    make_kube_object,
    make_kube_service,
    make_svid,
    make_tls_secret,
    svid_rotated,
    tls_secret_upserted,
    trust_bundle_rotated,
)
from tests.core.project._helpers import as_dict, hcm_of, messages, unpack

EDGE_ID = "spiffe://aether.internal/ns/aether-system/sa/aether-edge"
WEB = "web.default.aether.internal"


def _vhost(name: str, *domains: str, cluster: str = WEB) -> ir.VirtualHost:
    route = ir.HTTPRoute(
        name=f"{name}/route",
        match=ir.RouteMatch(path=ir.StringMatch(kind=ir.PREFIX, value="/")),
        action=ir.Forward(destinations=(ir.Destination(cluster=cluster, weight=1),)),
    )
    return ir.VirtualHost(name=name, domains=domains, routes=(route,))


def _state() -> State:
    return fold_events(
        endpoints_snapshot_received(make_endpoint("10.0.0.1", ports=(9090,))),
        tls_secret_upserted(make_tls_secret("shop-cert", cert_chain_pem=b"SHOP")),
        tls_secret_upserted(make_tls_secret("any-cert", cert_chain_pem=b"ANY")),
        svid_rotated(make_svid(EDGE_ID)),
        trust_bundle_rotated(),
    )


def _tcp_proxy(chain: Any) -> Any:
    return unpack(chain.filters[0].typed_config, tcp_proxy_pb2.TcpProxy)


def _names(snapshot: Snapshot, type_url: str) -> list[str]:
    return sorted(snapshot.of_type(type_url))


def test_a_gateway_and_route_project_a_listener_its_table_and_an_mtls_cluster() -> None:
    """From the state: the Gateway's port gets `edge_<port>`, its table the route's host then a 404 for the rest,
    and the backend a cluster dialled at the pod's mesh inbound with the edge's SVID, pinned to the backend's ID."""
    state = fold_events(
        gateway_object_upserted(
            make_kube_object(
                "aether", kind="GatewayClass", namespace="", spec={"controllerName": "gateway.aether.io/edge"}
            )
        ),
        gateway_object_upserted(
            make_kube_object(
                "edge",
                kind="Gateway",
                spec={
                    "gatewayClassName": "aether",
                    "listeners": [{"name": "http", "port": 8080, "protocol": "HTTP"}],
                },
            )
        ),
        gateway_object_upserted(
            make_kube_object(
                "web",
                spec={
                    "parentRefs": [{"name": "edge"}],
                    "hostnames": ["web.example"],
                    "rules": [{"backendRefs": [{"name": "web", "port": 80}]}],
                },
            )
        ),
        kube_service_upserted(make_kube_service()),
        endpoints_snapshot_received(make_endpoint("10.0.0.1")),
        svid_rotated(make_svid(EDGE_ID)),
        trust_bundle_rotated(),
    )
    snapshot = project_edge(state, node_id="edge-0")
    assert snapshot.node_id == "edge-0"
    assert _names(snapshot, LISTENER_TYPE) == ["edge_8080", "edge_readiness"]
    (table,) = messages(snapshot, ROUTE_TYPE).values()
    assert [(vhost.domains[:], vhost.name == NOT_FOUND_VHOST) for vhost in table.virtual_hosts][-1] == (
        ["*"],
        True,
    )
    assert "web.example" in table.virtual_hosts[0].domains
    cluster = messages(snapshot, CLUSTER_TYPE)[WEB]
    context = unpack(cluster.transport_socket.typed_config, tls_pb2.UpstreamTlsContext)
    assert context.common_tls_context.tls_certificate_sds_secret_configs[0].name == EDGE_ID
    assert [
        san.matcher.exact
        for san in context.common_tls_context.combined_validation_context.default_validation_context.match_typed_subject_alt_names
    ] == ["spiffe://aether.internal/ns/default/sa/web"]
    (assignment,) = messages(snapshot, ENDPOINT_TYPE).values()
    address = assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address
    assert (address.address, address.port_value) == ("10.0.0.1", 18008)
    assert _names(snapshot, SECRET_TYPE) == ["spiffe://aether.internal", EDGE_ID]
    assert snapshot.consistent() == ()


def test_https_chains_select_their_certificate_by_sni_and_share_one_chain_per_hostname() -> None:
    """HTTPS listeners on one port: a chain per hostname (the empty one for any SNI) with the first certificate
    found; a listener whose Secrets are all missing serves nothing; certificates become SDS secrets."""
    listeners = (
        EdgeListener(
            gateway="Gateway/default/a",
            name="shop",
            port=443,
            protocol="HTTPS",
            hostname="shop.example",
            tls_mode="Terminate",
            certificates=("default/missing", "default/shop-cert"),
            virtual_hosts=(_vhost("shop", "shop.example"),),
        ),
        EdgeListener(
            gateway="Gateway/default/b",
            name="shop-too",
            port=443,
            protocol="HTTPS",
            hostname="shop.example",
            tls_mode="Terminate",
            certificates=("default/any-cert",),
            virtual_hosts=(_vhost("shop2", "shop.example", "api.shop.example"),),
        ),
        EdgeListener(
            gateway="Gateway/default/a",
            name="any",
            port=443,
            protocol="HTTPS",
            tls_mode="Terminate",
            certificates=("default/any-cert",),
            virtual_hosts=(_vhost("all", "*"),),
        ),
        EdgeListener(
            gateway="Gateway/default/a",
            name="broken",
            port=443,
            protocol="HTTPS",
            hostname="broken.example",
            tls_mode="Terminate",
            certificates=("default/missing",),
        ),
        EdgeListener(gateway="Gateway/default/a", name="plain", port=443, protocol="HTTP"),
        EdgeListener(
            gateway="Gateway/default/a", name="nothing", port=8443, protocol="HTTPS", tls_mode="Terminate"
        ),
    )
    view = GatewayView(edge_listeners=listeners, backend_clusters=frozenset((WEB,)))
    snapshot = edge_snapshot(view, _state(), node_id="edge-0", options=EdgeOptions(cleartext=True))
    listener = messages(snapshot, LISTENER_TYPE)["edge_443"]
    assert "edge_8443" not in snapshot.of_type(LISTENER_TYPE)
    chains = [
        (
            list(chain.filter_chain_match.server_names),
            hcm_of(chain).rds.route_config_name,
            unpack(chain.transport_socket.typed_config, tls_pb2.DownstreamTlsContext)
            .common_tls_context.tls_certificate_sds_secret_configs[0]
            .name,
        )
        for chain in listener.filter_chains
    ]
    assert chains == [
        ([], "edge_443_*", certificate_name("default/any-cert")),
        (["shop.example"], "edge_443_shop.example", certificate_name("default/shop-cert")),
    ]
    tables = messages(snapshot, ROUTE_TYPE)
    assert [list(vhost.domains) for vhost in tables["edge_443_shop.example"].virtual_hosts] == [
        ["shop.example"],
        ["api.shop.example"],
        ["*"],
    ]
    # `*` claimed: no 404 host; the shop chain's hosts are misdirected on the chain for any other name.
    assert [(vhost.name, list(vhost.domains)) for vhost in tables["edge_443_*"].virtual_hosts] == [
        ("all", ["*"]),
        ("edge_misdirected", ["api.shop.example", "shop.example"]),
    ]
    secrets = messages(snapshot, SECRET_TYPE)
    assert sorted(secrets) == [certificate_name("default/any-cert"), certificate_name("default/shop-cert")]
    assert (
        secrets[certificate_name("default/shop-cert")].tls_certificate.certificate_chain.inline_bytes
        == b"SHOP"
    )
    assert snapshot.consistent() == ()


def test_l4_listeners_pass_tls_through_by_sni_terminate_it_or_proxy_tcp() -> None:
    """TLS passthrough: a chain per SNI name (the first route claiming a name keeps it), weighted backends, an
    unresolved route to `edge_unroutable`; TLS terminate needs its certificate; TCP takes its first route."""
    alpha = WeightedBackend(cluster=f"tcp:{WEB}", weight=1, service="default/web")
    beta = WeightedBackend(cluster="tcp:db.shop.aether.internal", weight=3, service="shop/db")
    listeners = (
        EdgeListener(
            gateway="Gateway/default/a",
            name="tls",
            port=9443,
            protocol="TLS",
            tls_mode="Passthrough",
            hostname="*.example",
            l4_routes=(
                L4Route(route="TLSRoute/default/one", hostnames=("a.example",), backends=(alpha, beta)),
                L4Route(
                    route="TLSRoute/default/two", hostnames=("a.example", "b.example"), backends=(alpha,)
                ),
                L4Route(route="TLSRoute/default/three", backends=(WeightedBackend(cluster="", weight=1),)),
                L4Route(route="TLSRoute/default/four", hostnames=("a.example",), backends=(beta,)),
            ),
        ),
        EdgeListener(
            gateway="Gateway/default/a",
            name="tls-end",
            port=9444,
            protocol="TLS",
            tls_mode="Terminate",
            certificates=("default/shop-cert",),
            l4_routes=(L4Route(route="TLSRoute/default/t", backends=(alpha,)),),
        ),
        EdgeListener(
            gateway="Gateway/default/a",
            name="tls-no-cert",
            port=9445,
            protocol="TLS",
            tls_mode="Terminate",
            l4_routes=(L4Route(route="TLSRoute/default/u", backends=(alpha,)),),
        ),
        EdgeListener(
            gateway="Gateway/default/a",
            name="tcp",
            port=5432,
            protocol="TCP",
            l4_routes=(
                L4Route(
                    route="TCPRoute/default/db",
                    backends=(beta, WeightedBackend(cluster=f"tcp:{WEB}", weight=0)),
                ),
            ),
        ),
        EdgeListener(gateway="Gateway/default/a", name="idle", port=5433, protocol="TCP"),
        EdgeListener(
            gateway="Gateway/default/a",
            name="dead",
            port=5434,
            protocol="TCP",
            l4_routes=(L4Route(route="TCPRoute/default/dead"),),
        ),
    )
    view = GatewayView(edge_listeners=listeners, backend_clusters=frozenset((alpha.cluster, beta.cluster)))
    snapshot = edge_snapshot(view, _state(), node_id="edge-0", options=EdgeOptions())
    held = messages(snapshot, LISTENER_TYPE)
    assert sorted(held) == ["edge_5432", "edge_5434", "edge_9443", "edge_9444", "edge_readiness"]
    passthrough = held["edge_9443"]
    chains = [
        (list(chain.filter_chain_match.server_names), as_dict(_tcp_proxy(chain)))
        for chain in passthrough.filter_chains
    ]
    assert chains == [
        (
            ["a.example"],
            {
                "stat_prefix": "edge_9443",
                "weighted_clusters": {
                    "clusters": [{"name": alpha.cluster, "weight": 1}, {"name": beta.cluster, "weight": 3}]
                },
            },
        ),
        (["b.example"], {"stat_prefix": "edge_9443", "cluster": alpha.cluster}),
        (["*.example"], {"stat_prefix": "edge_9443", "cluster": UNROUTABLE_CLUSTER}),
    ]
    assert not passthrough.filter_chains[0].HasField("transport_socket")
    assert held["edge_9444"].filter_chains[0].HasField("transport_socket")
    assert _tcp_proxy(held["edge_5432"].filter_chains[0]).cluster == beta.cluster
    assert _tcp_proxy(held["edge_5434"].filter_chains[0]).cluster == UNROUTABLE_CLUSTER
    clusters = messages(snapshot, CLUSTER_TYPE)
    assert sorted(clusters) == sorted((alpha.cluster, beta.cluster, UNROUTABLE_CLUSTER))
    assert clusters[UNROUTABLE_CLUSTER].type == cluster_pb2.Cluster.STATIC
    assert snapshot.consistent() == ()


def test_every_backend_cluster_name_gets_a_cluster_even_without_endpoints() -> None:
    """A port no endpoint serves and a name outside the mesh still get (empty) clusters: routes never dangle."""
    names = frozenset((WEB, f"{WEB}:9090", f"{WEB}:7777", "outside.example"))
    view = GatewayView(backend_clusters=names)
    snapshot = edge_snapshot(view, _state(), node_id="edge-0", options=EdgeOptions(cleartext=True))
    clusters = messages(snapshot, CLUSTER_TYPE)
    assert sorted(clusters) == sorted(names)
    assert clusters["outside.example"].type == cluster_pb2.Cluster.STATIC
    assignments = messages(snapshot, ENDPOINT_TYPE)
    assert [len(assignments[name].endpoints) for name in (WEB, f"{WEB}:9090", f"{WEB}:7777")] == [1, 1, 0]
    assert not clusters[WEB].HasField("transport_socket")  # cleartext: identity none
    assert _names(snapshot, SECRET_TYPE) == []
    assert snapshot.consistent() == ()


def test_the_readiness_listener_answers_its_path_and_404_otherwise() -> None:
    """`edge_readiness` binds 18021 on the bind address; `/aether/readyz` is 200, anything else 404."""
    snapshot = edge_snapshot(GatewayView(), State(), node_id="edge-0", options=EdgeOptions(bind="127.0.0.1"))
    listener = messages(snapshot, LISTENER_TYPE)["edge_readiness"]
    address = listener.address.socket_address
    assert (address.address, address.port_value) == ("127.0.0.1", 18021)
    (vhost,) = hcm_of(listener.filter_chains[0]).route_config.virtual_hosts
    assert [
        (route.match.path or route.match.prefix, route.direct_response.status) for route in vhost.routes
    ] == [
        (READINESS_PATH, 200),
        ("/", 404),
    ]


def test_a_route_table_never_holds_a_domain_or_a_virtual_host_name_twice() -> None:
    """The first virtual host claiming a domain keeps it (case-insensitively); a repeated name is dropped."""
    table = route_table(
        "t",
        [
            envoy_virtual_host(_vhost("a", "x.example", "y.example")),
            envoy_virtual_host(_vhost("b", "X.example", "z.example")),
            envoy_virtual_host(_vhost("c", "y.example")),
            envoy_virtual_host(_vhost("a", "w.example")),
        ],
    )
    assert [(vhost.name, list(vhost.domains)) for vhost in table.virtual_hosts] == [
        ("a", ["x.example", "y.example"]),
        ("b", ["z.example"]),
        (NOT_FOUND_VHOST, ["*"]),
    ]
