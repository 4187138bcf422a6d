"""Tests of `aether.core.project.names`: the contract's names, ports and their parsing."""

from __future__ import annotations

import re

import pytest

from aether.core.project.names import (
    ClusterName,
    app_cluster_name,
    capture_listener_name,
    http_cluster_name,
    inbound_listener_name,
    l4_tcp_listener_name,
    mesh_authority_regex,
    outbound_listener_name,
    parse_cluster_name,
    pod_token,
    service_fqdn,
    spiffe_id,
    split_service,
    tcp_cluster_name,
    trust_bundle_name,
)
from aether.testing import make_pod


def test_per_pod_names_carry_the_pod_name_and_namespace() -> None:
    """Per-pod resources are named `<kind>_<name>.<namespace>`, so same-named pods of two namespaces differ."""
    pod = make_pod("web-1", namespace="shop")
    assert pod_token(pod) == "web-1.shop"
    assert [
        outbound_listener_name(pod),
        capture_listener_name(pod),
        l4_tcp_listener_name(pod),
        inbound_listener_name(pod),
        app_cluster_name(pod, 8080),
    ] == [
        "outbound_http_web-1.shop",
        "capture_web-1.shop",
        "l4_tcp_web-1.shop",
        "inbound_web-1.shop",
        "app_web-1.shop_8080",
    ]
    assert pod_token(make_pod("web-1", namespace="default")) != pod_token(pod)


def test_service_names_follow_the_contract() -> None:
    """A service key `<ns>/<sa>` gives the FQDN, the cluster names, and the SPIFFE ID of the contract."""
    assert split_service("shop/db") == ("shop", "db")
    assert service_fqdn("shop/db", mesh_domain="mesh.local") == "db.shop.mesh.local"
    assert http_cluster_name("shop/db", mesh_domain="aether.internal") == "db.shop.aether.internal"
    assert (
        http_cluster_name("shop/db", mesh_domain="aether.internal", port=9090)
        == "db.shop.aether.internal:9090"
    )
    assert tcp_cluster_name("shop/db", mesh_domain="aether.internal") == "tcp:db.shop.aether.internal"
    assert spiffe_id("shop/db", trust_domain="example.org") == "spiffe://example.org/ns/shop/sa/db"
    assert trust_bundle_name("example.org") == "spiffe://example.org"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("db.shop.aether.internal", ClusterName(service="shop/db", protocol="http", port=None)),
        ("db.shop.aether.internal:9090", ClusterName(service="shop/db", protocol="http", port=9090)),
        ("tcp:db.shop.aether.internal", ClusterName(service="shop/db", protocol="tcp", port=None)),
        ("udp:dns.kube.aether.internal:53", ClusterName(service="kube/dns", protocol="udp", port=53)),
        ("a.b.shop.aether.internal", ClusterName(service="shop/a.b", protocol="http", port=None)),
        ("db.shop.other.domain", None),
        ("shop.aether.internal", None),
        ("aether.internal", None),
        ("Db.shop.aether.internal", None),
        ("db.Shop.aether.internal", None),
        ("db.shop.aether.internal:0", None),
        ("db.shop.aether.internal:http", None),
        ("db.shop.aether.internal:²", None),
        ("", None),
    ],
)
def test_cluster_names_parse_back_to_their_service(name: str, expected: ClusterName | None) -> None:
    """A mesh cluster name gives its service, protocol and port; anything else gives None."""
    assert parse_cluster_name(name, mesh_domain="aether.internal") == expected


def test_the_authority_pattern_matches_mesh_names_only() -> None:
    """The on-demand pattern takes `<sa>.<ns>.<domain>[:port]`, with the domain's dots escaped."""
    pattern = re.compile(mesh_authority_regex("aether.internal"))
    assert pattern.match("web.default.aether.internal")
    assert pattern.match("web.default.aether.internal:8080")
    assert not pattern.match("web.default.aetherXinternal")
    assert not pattern.match("example.com")
    assert not pattern.match("a.b.c.aether.internal")
    assert not pattern.match("web.default.aether.internal:http")
