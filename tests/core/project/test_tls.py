"""Tests of `aether.core.project.tls`: which certificate callers present, and the TLS contexts."""

from __future__ import annotations

from envoy.config.cluster.v3 import cluster_pb2
from envoy.extensions.transport_sockets.tls.v3 import tls_pb2

from aether.core.project.names import XDS_CLUSTER
from aether.core.project.tls import (
    PER_CALLER,
    PLAINTEXT,
    UpstreamIdentity,
    apply_upstream_tls,
    fallback_identity,
    upstream_identity,
)
from aether.testing import make_svid
from tests.core.project._helpers import DB_ID, WEB_ID, as_dict, unpack

OTHER_ID = "spiffe://aether.internal/ns/ops/sa/agent"
_ADS = {"ads": {}, "resource_api_version": "V3"}
_VALIDATION = {
    "default_validation_context": {
        "match_typed_subject_alt_names": [{"san_type": "URI", "matcher": {"exact": DB_ID}}]
    },
    "validation_context_sds_secret_config": {"name": "spiffe://aether.internal", "sds_config": _ADS},
}


def test_no_svid_at_all_means_plaintext() -> None:
    """Only a node holding no SVID whatsoever goes plaintext; any SVID makes its clusters per caller."""
    assert upstream_identity({}) == PLAINTEXT
    assert PLAINTEXT.plaintext
    assert upstream_identity({OTHER_ID: make_svid(OTHER_ID)}) is PER_CALLER
    assert not PER_CALLER.plaintext


def test_the_fallback_is_the_first_local_identity_holding_an_svid() -> None:
    """Local identities holding an SVID come first (sorted); without one, the first SVID the node holds."""
    svids = {WEB_ID: make_svid(WEB_ID), DB_ID: make_svid(DB_ID), OTHER_ID: make_svid(OTHER_ID)}
    assert fallback_identity([WEB_ID, DB_ID, "spiffe://aether.internal/ns/x/sa/no-svid"], svids) == WEB_ID
    assert fallback_identity([WEB_ID], {OTHER_ID: make_svid(OTHER_ID), DB_ID: make_svid(DB_ID)}) == OTHER_ID
    assert fallback_identity([WEB_ID], {}) == ""


def test_a_plaintext_cluster_gets_no_transport_socket() -> None:
    """Plaintext leaves the cluster as it is."""
    cluster = cluster_pb2.Cluster(name="db.shop.aether.internal")
    apply_upstream_tls(cluster, PLAINTEXT, peer=DB_ID, trust_domain="aether.internal", alpn=("h2",))
    assert cluster == cluster_pb2.Cluster(name="db.shop.aether.internal")


def test_one_secret_is_the_cluster_s_one_socket() -> None:
    """An identity of one secret (the edge's SVID) is the cluster's transport socket, from ADS."""
    cluster = cluster_pb2.Cluster(name="db.shop.aether.internal")
    apply_upstream_tls(
        cluster,
        UpstreamIdentity(secret=OTHER_ID),
        peer=DB_ID,
        trust_domain="aether.internal",
        alpn=("h2",),
        sni="9090",
    )
    context = unpack(cluster.transport_socket.typed_config, tls_pb2.UpstreamTlsContext)
    assert cluster.transport_socket.name == "envoy.transport_sockets.tls"
    assert as_dict(context) == {
        "common_tls_context": {
            "tls_certificate_sds_secret_configs": [{"name": OTHER_ID, "sds_config": _ADS}],
            "combined_validation_context": _VALIDATION,
            "alpn_protocols": ["h2"],
        },
        "sni": "9090",
    }
    assert not cluster.transport_socket_matches


def test_a_per_caller_cluster_presents_the_secret_the_caller_names() -> None:
    """One socket whose certificate the on-demand selector fetches over SDS from the bootstrap's xDS cluster, by
    the name in the caller's filter state (`caller:fallback` when it names none): nothing of the callers in it."""
    cluster = cluster_pb2.Cluster(name="db.shop.aether.internal")
    apply_upstream_tls(cluster, PER_CALLER, peer=DB_ID, trust_domain="aether.internal", alpn=())
    context = unpack(cluster.transport_socket.typed_config, tls_pb2.UpstreamTlsContext)
    grpc = {"envoy_grpc": {"cluster_name": XDS_CLUSTER}}
    assert as_dict(context) == {
        "common_tls_context": {
            "custom_tls_certificate_selector": {
                "name": "envoy.tls.certificate_selectors.on_demand_secret",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.cert_selectors"
                    ".on_demand_secret.v3.Config",
                    "config_source": {
                        "api_config_source": {
                            "api_type": "GRPC",
                            "transport_api_version": "V3",
                            "grpc_services": [grpc],
                        },
                        "resource_api_version": "V3",
                    },
                    "certificate_mapper": {
                        "name": "envoy.tls.upstream_certificate_mappers.filter_state_override",
                        "typed_config": {
                            "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.cert_mappers"
                            ".filter_state_override.v3.Config",
                            "default_value": "caller:fallback",
                        },
                    },
                },
            },
            "combined_validation_context": _VALIDATION,
        }
    }
    assert not cluster.transport_socket_matches
    assert not cluster.HasField("transport_socket_matcher")
