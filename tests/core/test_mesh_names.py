"""Tests of `aether.core.mesh_names`: the names of mesh services and their clusters, and their parsing."""

from __future__ import annotations

import pytest

from aether.core.mesh_names import (
    ClusterName,
    http_cluster_name,
    parse_cluster_name,
    service_fqdn,
    split_service,
    tcp_cluster_name,
    udp_cluster_name,
)


def test_service_names_follow_the_contract() -> None:
    """A service key `<ns>/<sa>` gives the FQDN and the cluster names of the contract."""
    assert split_service("shop/db") == ("shop", "db")
    assert service_fqdn("shop/db", mesh_domain="mesh.local") == "db.shop.mesh.local"
    assert http_cluster_name("shop/db", mesh_domain="aether.internal") == "db.shop.aether.internal"
    assert (
        http_cluster_name("shop/db", mesh_domain="aether.internal", port=9090)
        == "db.shop.aether.internal:9090"
    )
    assert tcp_cluster_name("shop/db", mesh_domain="aether.internal") == "tcp:db.shop.aether.internal"
    assert udp_cluster_name("kube/dns", mesh_domain="aether.internal") == "udp:dns.kube.aether.internal"


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
