"""HTTP/3 between proxies in the node projection (`aether.core.project.quic`)."""

from __future__ import annotations

from aether.core.events import Event
from aether.core.mesh_names import ClusterName, parse_cluster_name, quic_cluster_name
from aether.core.project import project_node
from aether.core.project.quic import QUIC_CLUSTER_HEADER, quic_dns_sans, quic_dns_sans_of_id, quic_server_name
from aether.core.snapshot import CLUSTER_TYPE, LISTENER_TYPE, ROUTE_TYPE
from aether.core.state.state import State
from aether.testing import (
    AT,
    endpoints_snapshot_received,
    fold_events,
    make_endpoint,
    make_pod,
    make_svid,
    on_demand_cluster_requested,
    pod_added,
    svid_rotated,
)
from tests.core.project._helpers import NODE, as_dict, messages

DOMAIN = "aether.internal"
WEB = "spiffe://aether.internal/ns/default/sa/web"


def test_quic_names_take_the_caller_and_the_destination_apart() -> None:
    name = quic_cluster_name("default/web", f"db.shop.{DOMAIN}:9090")
    assert name == "quic:web.default@db.shop.aether.internal:9090"
    assert parse_cluster_name(name, mesh_domain=DOMAIN) == ClusterName(
        service="shop/db", protocol="quic", port=9090, source="default/web"
    )
    # The destination half is a Host header, matched without regard to case by its virtual host.
    assert parse_cluster_name("quic:web.default@DB.Shop.aether.internal", mesh_domain=DOMAIN) == ClusterName(
        service="shop/db", protocol="quic", port=None, source="default/web"
    )
    for bad in ("quic:web@db.shop.aether.internal", "quic:db.shop.aether.internal", "quic:Web.x@db.shop.x"):
        assert parse_cluster_name(bad, mesh_domain=DOMAIN) is None


def test_the_two_dns_sans_derive_from_the_spiffe_id_alone() -> None:
    """The SNI of a service's own cluster and, by the wildcard, of each of its ports."""
    assert quic_dns_sans("shop/db", trust_domain=DOMAIN) == (
        "db.shop.aether.internal",
        "*.db.shop.aether.internal",
    )
    assert quic_dns_sans_of_id("spiffe://aether.internal/ns/shop/sa/db") == quic_dns_sans(
        "shop/db", trust_domain=DOMAIN
    )
    assert quic_dns_sans_of_id("spiffe://aether.internal") is None
    assert quic_server_name("shop/db", trust_domain=DOMAIN, port=9090) == "9090.db.shop.aether.internal"


def _state(*extra: Event, http3_problem: str = "") -> State:
    return fold_events(
        pod_added(
            make_pod("web-1", ips=("10.0.0.1",), annotations={"config.aether.io/upstreams": "shop/db"})
        ),
        pod_added(make_pod("db-0", namespace="shop", service_account="db", ips=("10.0.0.2",))),
        svid_rotated(make_svid(WEB)),
        svid_rotated(make_svid("spiffe://aether.internal/ns/shop/sa/db", http3_problem=http3_problem)),
        endpoints_snapshot_received(make_endpoint("10.0.0.2", service="shop/db", node_name=NODE)),
        *extra,
    )


def test_a_callers_first_request_names_its_own_quic_cluster_which_presents_its_own_svid() -> None:
    """Nothing per caller exists until Envoy asks: then one cluster, one transport socket (no matcher)."""
    name = f"quic:web.default@db.shop.{DOMAIN}"
    before = project_node(_state(), node_name=NODE, now=AT)
    assert not any(item.startswith("quic:") for item in before.of_type(CLUSTER_TYPE))
    routes = as_dict(messages(before, ROUTE_TYPE)["out_http"])
    db = next(vhost for vhost in routes["virtual_hosts"] if vhost["name"] == f"db.shop.{DOMAIN}")
    assert db["routes"][0]["route"]["cluster_header"] == QUIC_CLUSTER_HEADER
    assert routes["request_headers_to_remove"] == [QUIC_CLUSTER_HEADER]
    after = project_node(_state(on_demand_cluster_requested(name, at=AT)), node_name=NODE, now=AT)
    cluster = as_dict(messages(after, CLUSTER_TYPE)[name])
    assert "transport_socket_matches" not in cluster
    socket = cluster["transport_socket"]
    assert socket["name"] == "envoy.transport_sockets.quic"
    tls = socket["typed_config"]["upstream_tls_context"]
    assert tls["sni"] == f"db.shop.{DOMAIN}"
    # The caller's own secret: its SVID (or the node's fallback while it has none).
    assert tls["common_tls_context"]["tls_certificate_sds_secret_configs"][0]["name"] == f"caller:{WEB}"
    auto = cluster["typed_extension_protocol_options"][
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
    ]["auto_config"]
    assert auto["alternate_protocols_cache_options"]["prepopulated_entries"] == [
        {"hostname": f"db.shop.{DOMAIN}", "port": 18008}
    ]


def test_every_pod_listens_for_quic_unless_its_svid_lacks_the_dns_sans() -> None:
    listeners = project_node(_state(), node_name=NODE, now=AT).of_type(LISTENER_TYPE)
    assert {"inbound_quic_web-1.default", "inbound_quic_db-0.shop"} <= set(listeners)
    lacking = project_node(_state(http3_problem="lacks the DNS SANs"), node_name=NODE, now=AT)
    names = set(lacking.of_type(LISTENER_TYPE))
    assert "inbound_quic_db-0.shop" not in names
    assert {"inbound_quic_web-1.default", "inbound_db-0.shop"} <= names  # still served over TCP


def test_a_mixed_case_host_still_gets_its_quic_cluster_under_the_exact_name_asked() -> None:
    name = "quic:web.default@DB.Shop.aether.internal"
    snapshot = project_node(_state(on_demand_cluster_requested(name, at=AT)), node_name=NODE, now=AT)
    assert name in snapshot.of_type(CLUSTER_TYPE)
    assert snapshot.not_found == frozenset()


def test_a_quic_cluster_between_declared_services_outlives_the_on_demand_ttl() -> None:
    """web declares db: its `quic:` cluster of db stays past the TTL (Envoy asks once, then routes every request of
    the pair to it); one of a service nobody declares expires like any on-demand name."""
    kept, gone = f"quic:web.default@db.shop.{DOMAIN}", f"quic:web.default@api.shop.{DOMAIN}"
    state = _state(
        endpoints_snapshot_received(
            make_endpoint("10.0.0.2", service="shop/db", node_name=NODE),
            make_endpoint("10.0.0.3", service="shop/api"),
        ),
        on_demand_cluster_requested(kept, at=AT),
        on_demand_cluster_requested(gone, at=AT),
    )
    assert {kept, gone} <= set(project_node(state, node_name=NODE, now=AT).of_type(CLUSTER_TYPE))
    later = project_node(state, node_name=NODE, now=AT + 3_600 * 10**9)  # past the default TTL of 600 s
    assert kept in later.of_type(CLUSTER_TYPE)
    assert gone not in later.of_type(CLUSTER_TYPE)
