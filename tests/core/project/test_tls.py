"""Tests of `aether.core.project.tls`: which certificate callers present, and the TLS contexts."""

from __future__ import annotations

from envoy.config.cluster.v3 import cluster_pb2
from envoy.extensions.matching.common_inputs.transport_socket.v3 import transport_socket_inputs_pb2
from envoy.extensions.transport_sockets.tls.v3 import tls_pb2

from aether.core.project.tls import PLAINTEXT, UpstreamIdentity, apply_upstream_tls, upstream_identity
from aether.testing import make_svid
from tests.core.project._helpers import DB_ID, WEB_ID, as_dict, unpack

OTHER_ID = "spiffe://aether.internal/ns/ops/sa/agent"


def test_no_svid_at_all_means_plaintext() -> None:
    """Only a node holding no SVID whatsoever goes plaintext."""
    assert upstream_identity([WEB_ID], {}) == PLAINTEXT
    assert PLAINTEXT.plaintext
    assert PLAINTEXT.presented == ()


def test_each_local_identity_with_an_svid_is_a_source() -> None:
    """Local identities holding an SVID are sources (sorted); the fallback is the first of them."""
    svids = {WEB_ID: make_svid(WEB_ID), DB_ID: make_svid(DB_ID), OTHER_ID: make_svid(OTHER_ID)}
    identity = upstream_identity([WEB_ID, DB_ID, "spiffe://aether.internal/ns/x/sa/no-svid"], svids)
    assert identity == UpstreamIdentity(sources=(WEB_ID, DB_ID), fallback=WEB_ID)
    assert identity.presented == (WEB_ID, DB_ID)
    assert not identity.plaintext


def test_without_a_local_svid_the_first_svid_held_is_presented() -> None:
    """No local workload holds an SVID, but the node holds some: every caller presents the first of those."""
    identity = upstream_identity([WEB_ID], {OTHER_ID: make_svid(OTHER_ID), DB_ID: make_svid(DB_ID)})
    assert identity == UpstreamIdentity(sources=(), fallback=OTHER_ID)
    assert identity.presented == (OTHER_ID,)


def test_a_plaintext_cluster_gets_no_transport_socket() -> None:
    """Plaintext leaves the cluster as it is."""
    cluster = cluster_pb2.Cluster(name="db.shop.aether.internal")
    apply_upstream_tls(cluster, PLAINTEXT, peer=DB_ID, trust_domain="aether.internal", alpn=("h2",))
    assert cluster == cluster_pb2.Cluster(name="db.shop.aether.internal")


def test_a_single_fallback_is_the_cluster_s_one_socket() -> None:
    """With no local source, the fallback certificate is the cluster's transport socket (no matcher)."""
    cluster = cluster_pb2.Cluster(name="db.shop.aether.internal")
    identity = UpstreamIdentity(sources=(), fallback=OTHER_ID)
    apply_upstream_tls(
        cluster, identity, peer=DB_ID, trust_domain="aether.internal", alpn=("h2",), sni="9090"
    )
    context = unpack(cluster.transport_socket.typed_config, tls_pb2.UpstreamTlsContext)
    assert cluster.transport_socket.name == "envoy.transport_sockets.tls"
    assert as_dict(context) == {
        "common_tls_context": {
            "tls_certificate_sds_secret_configs": [
                {"name": OTHER_ID, "sds_config": {"ads": {}, "resource_api_version": "V3"}}
            ],
            "combined_validation_context": {
                "default_validation_context": {
                    "match_typed_subject_alt_names": [{"san_type": "URI", "matcher": {"exact": DB_ID}}]
                },
                "validation_context_sds_secret_config": {
                    "name": "spiffe://aether.internal",
                    "sds_config": {"ads": {}, "resource_api_version": "V3"},
                },
            },
            "alpn_protocols": ["h2"],
        },
        "sni": "9090",
    }
    assert not cluster.transport_socket_matches


def test_sources_get_one_socket_each_chosen_by_the_caller_s_identity() -> None:
    """Each source identity gets a named socket; the matcher maps the filter-state identity to it, and callers
    without their own SVID fall back to the first source."""
    cluster = cluster_pb2.Cluster(name="db.shop.aether.internal")
    identity = UpstreamIdentity(sources=(WEB_ID, DB_ID), fallback=WEB_ID)
    apply_upstream_tls(cluster, identity, peer=DB_ID, trust_domain="aether.internal", alpn=())
    assert [match.name for match in cluster.transport_socket_matches] == [WEB_ID, DB_ID]
    for match in cluster.transport_socket_matches:
        context = unpack(match.transport_socket.typed_config, tls_pb2.UpstreamTlsContext)
        assert [item.name for item in context.common_tls_context.tls_certificate_sds_secret_configs] == [
            match.name
        ]
        assert not context.common_tls_context.alpn_protocols
    matcher = cluster.transport_socket_matcher
    key = unpack(matcher.matcher_tree.input.typed_config, transport_socket_inputs_pb2.FilterStateInput)
    assert key.key == "aether.source_identity"
    chosen = {
        value: unpack(
            on_match.action.typed_config, transport_socket_inputs_pb2.TransportSocketNameAction
        ).name
        for value, on_match in matcher.matcher_tree.exact_match_map.map.items()
    }
    assert chosen == {WEB_ID: WEB_ID, DB_ID: DB_ID}
    fallback = unpack(
        matcher.on_no_match.action.typed_config, transport_socket_inputs_pb2.TransportSocketNameAction
    )
    assert fallback.name == WEB_ID
