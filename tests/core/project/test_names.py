"""Tests of `aether.core.project.names`: the contract's names, ports and their parsing."""

from __future__ import annotations

import re

from aether.core.project.names import (
    app_cluster_name,
    capture_listener_name,
    inbound_listener_name,
    l4_tcp_listener_name,
    mesh_authority_regex,
    outbound_listener_name,
    pod_token,
    spiffe_id,
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


def test_identity_names_follow_the_contract() -> None:
    """A service key `<ns>/<sa>` gives the SPIFFE ID of the contract; a trust domain its bundle's SDS name."""
    assert spiffe_id("shop/db", trust_domain="example.org") == "spiffe://example.org/ns/shop/sa/db"
    assert trust_bundle_name("example.org") == "spiffe://example.org"


def test_the_authority_pattern_matches_mesh_names_only() -> None:
    """The on-demand pattern takes `<sa>.<ns>.<domain>[:port]`, with the domain's dots escaped."""
    pattern = re.compile(mesh_authority_regex("aether.internal"))
    assert pattern.match("web.default.aether.internal")
    assert pattern.match("web.default.aether.internal:8080")
    assert not pattern.match("web.default.aetherXinternal")
    assert not pattern.match("example.com")
    assert not pattern.match("a.b.c.aether.internal")
    assert not pattern.match("web.default.aether.internal:http")
