"""Tests of `aether.core.project.clusters`: service clusters, app clusters, the passthrough cluster."""

from __future__ import annotations

import pytest
from envoy.extensions.transport_sockets.tls.v3 import tls_pb2
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2

from aether.core.project.clusters import (
    app_cluster,
    passthrough_cluster,
    service_cluster,
    service_cluster_resource,
)
from aether.core.project.tls import PER_CALLER, PLAINTEXT, UpstreamIdentity
from aether.core.snapshot import Resource
from aether.testing import make_pod
from tests.core.project._helpers import DB_ID, WEB_ID, as_dict, unpack

_OPTIONS = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
_IDENTITY = PER_CALLER


def test_an_http_service_cluster_is_eds_over_ads_with_http2() -> None:
    """EDS from ADS, HTTP/2 upstream, no panic routing, a retry budget, outlier detection."""
    cluster = service_cluster(
        "db.shop.aether.internal", identity=PLAINTEXT, peer=DB_ID, trust_domain="aether.internal", http=True
    )
    document = as_dict(cluster)
    options = document.pop("typed_extension_protocol_options")
    assert document == {
        "name": "db.shop.aether.internal",
        "type": "EDS",
        "eds_cluster_config": {"eds_config": {"ads": {}, "resource_api_version": "V3"}},
        "connect_timeout": "2s",
        "circuit_breakers": {"thresholds": [{"max_retries": 16}]},
        "outlier_detection": {
            "consecutive_5xx": 5,
            "interval": "10s",
            "base_ejection_time": "30s",
            "max_ejection_percent": 50,
            "split_external_local_origin_errors": True,
            "consecutive_local_origin_failure": 3,
        },
        "common_lb_config": {"healthy_panic_threshold": {}},
    }
    assert options == {
        _OPTIONS: {
            "@type": f"type.googleapis.com/{_OPTIONS}",
            "common_http_protocol_options": {"idle_timeout": "30s"},
            "explicit_http_config": {"http2_protocol_options": {}},
        }
    }


def test_a_port_cluster_sends_its_port_as_sni_with_alpn_h2() -> None:
    """`…:<port>` clusters name the callee's port chain by SNI."""
    cluster = service_cluster(
        "db.shop.aether.internal:9090",
        identity=_IDENTITY,
        peer=DB_ID,
        trust_domain="aether.internal",
        http=True,
        sni="9090",
    )
    context = unpack(cluster.transport_socket.typed_config, tls_pb2.UpstreamTlsContext)
    assert (context.sni, list(context.common_tls_context.alpn_protocols)) == ("9090", ["h2"])


def test_a_tcp_service_cluster_has_neither_alpn_nor_sni_nor_http_options() -> None:
    """The TCP floor: raw bytes in TLS, selected on the callee by the absence of ALPN and SNI."""
    cluster = service_cluster(
        "tcp:db.shop.aether.internal",
        identity=_IDENTITY,
        peer=DB_ID,
        trust_domain="aether.internal",
        http=False,
        sni="9",
    )
    context = unpack(cluster.transport_socket.typed_config, tls_pb2.UpstreamTlsContext)
    assert (context.sni, list(context.common_tls_context.alpn_protocols)) == ("", [])
    assert not cluster.typed_extension_protocol_options


def test_an_app_cluster_dials_loopback_from_inside_the_pod_namespace() -> None:
    """With a network namespace, the socket is made in it (bind config) and dials the app on loopback."""
    cluster = app_cluster(make_pod("web-1", netns="/var/run/netns/cni-1"), 8080)
    endpoint = {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 8080}}}}
    assert as_dict(cluster) == {
        "name": "app_web-1.default_8080",
        "type": "STATIC",
        "connect_timeout": "2s",
        "load_assignment": {
            "cluster_name": "app_web-1.default_8080",
            "endpoints": [{"lb_endpoints": [endpoint]}],
        },
        "upstream_bind_config": {
            "source_address": {
                "address": "127.0.0.1",
                "port_value": 0,
                "network_namespace_filepath": "/var/run/netns/cni-1",
            }
        },
    }


def test_an_app_cluster_in_local_mode_dials_the_pod_ip() -> None:
    """Without a namespace, the app is reached on the pod's first IP."""
    cluster = app_cluster(make_pod("web-1", ips=("10.0.0.7", "fd00::7")), 9090)
    address = cluster.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address
    assert (address.address, address.port_value) == ("10.0.0.7", 9090)
    assert not cluster.HasField("upstream_bind_config")


def test_the_passthrough_cluster_goes_to_the_original_destination_marked() -> None:
    """ORIGINAL_DST with the cluster-provided balancer, SO_MARK 0xae7e before bind (the default state), and the
    downstream's HTTP version."""
    cluster = passthrough_cluster()
    document = as_dict(cluster)
    options = unpack(
        cluster.typed_extension_protocol_options[_OPTIONS], http_protocol_options_pb2.HttpProtocolOptions
    )
    assert (document["type"], document["lb_policy"]) == ("ORIGINAL_DST", "CLUSTER_PROVIDED")
    assert document["upstream_bind_config"] == {
        "socket_options": [
            {
                "description": "SO_MARK: never capture a passthrough connection again",
                "level": "1",
                "name": "36",
                "int_value": str(0xAE7E),
            }
        ]
    }
    assert options.HasField("use_downstream_protocol_config")


@pytest.mark.parametrize(
    "identity",
    [
        PLAINTEXT,
        UpstreamIdentity(secret=WEB_ID),
        PER_CALLER,
        UpstreamIdentity(secret=WEB_ID, sds_cluster="spire"),
    ],
)
@pytest.mark.parametrize(
    ("http", "sni", "subsets"), [(True, "", ()), (True, "9090", (("app",),)), (False, "", ())]
)
def test_a_cluster_built_in_parts_is_the_cluster_serialized(
    identity: UpstreamIdentity, http: bool, sni: str, subsets: tuple[tuple[str, ...], ...]
) -> None:
    """The parts (its name, the fields of its kind before and after its transport socket, shared by every cluster
    of the kind, and the socket) join into the very bytes the whole message serializes to."""
    arguments = {
        "identity": identity,
        "peer": DB_ID,
        "trust_domain": "td",
        "http": http,
        "sni": sni,
        "subsets": subsets,
    }
    resource = service_cluster_resource("db.default.aether.internal", **arguments)
    assert resource == Resource.from_message(
        service_cluster("db.default.aether.internal", **arguments), references=("db.default.aether.internal",)
    )
    other = service_cluster_resource("web.default.aether.internal", **{**arguments, "peer": WEB_ID})
    assert len(resource.parts) == (3 if identity.plaintext else 4)
    assert resource.parts[1] is other.parts[1]
    assert resource.parts[-1] is other.parts[-1]
