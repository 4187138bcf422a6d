"""Tests of `aether.core.project.listeners`: the four per-pod listeners, in a namespace and in local mode."""

from __future__ import annotations

from typing import Any

from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.extensions.filters.network.set_filter_state.v3 import set_filter_state_pb2
from envoy.extensions.filters.network.tcp_proxy.v3 import tcp_proxy_pb2
from envoy.extensions.transport_sockets.tls.v3 import tls_pb2

from aether.core.project.listeners import (
    capture_listener,
    inbound_listener,
    l4_tcp_listener,
    outbound_listener,
)
from aether.core.state import PodConfig, PodRecord
from aether.testing import make_pod
from tests.core.project._helpers import WEB_ID, as_dict, hcm_of, unpack

NETNS = "/var/run/netns/cni-web-1"


def _record(*, netns: str = NETNS, ports: tuple[int, ...] = (8080,)) -> PodRecord:
    return PodRecord(
        pod=make_pod("web-1", netns=netns, ips=("10.0.0.1",)), config=PodConfig(port=8080, ports=ports)
    )


def _address(listener: Any) -> dict[str, Any]:
    return as_dict(listener.address)["socket_address"]  # type: ignore[no-any-return]


def test_the_outbound_listener_binds_loopback_in_the_pod_namespace() -> None:
    """127.0.0.1:18081 inside the namespace; records the caller's identity and its caller secret; routes by
    `out_http` on demand."""
    listener = outbound_listener(_record(), trust_domain="aether.internal")
    assert listener.name == "outbound_http_web-1.default"
    assert _address(listener) == {
        "address": "127.0.0.1",
        "port_value": 18081,
        "network_namespace_filepath": NETNS,
    }
    (chain,) = listener.filter_chains
    state = unpack(chain.filters[0].typed_config, set_filter_state_pb2.Config)
    assert as_dict(state) == {
        "on_new_connection": [
            {
                "object_key": "aether.source_identity",
                "factory_key": "envoy.hashable_string",
                "format_string": {"text_format_source": {"inline_string": WEB_ID}},
                "shared_with_upstream": "ONCE",
            },
            {
                "object_key": "envoy.tls.certificate_mappers.on_demand_secret",
                "factory_key": "envoy.string",
                "format_string": {"text_format_source": {"inline_string": f"caller:{WEB_ID}"}},
                "shared_with_upstream": "ONCE",
            },
        ]
    }
    manager = hcm_of(chain)
    assert (manager.stat_prefix, manager.rds.route_config_name) == ("out_http_web-1.default", "out_http")
    assert [item.name for item in manager.http_filters] == [
        "envoy.filters.http.on_demand",
        "envoy.filters.http.router",
    ]
    assert as_dict(manager.http_filters[0].typed_config)["odcds"] == {
        "source": {"ads": {}, "resource_api_version": "V3"},
        "timeout": "2s",
    }


def test_local_mode_listeners_bind_the_pod_ip() -> None:
    """Without a namespace every listener binds the pod's first IP."""
    record = _record(netns="")
    listeners = [
        outbound_listener(record, trust_domain="aether.internal"),
        capture_listener(record, trust_domain="aether.internal"),
        l4_tcp_listener(record),
        inbound_listener(record, trust_domain="aether.internal", plaintext=False),
    ]
    assert [(_address(item)["address"], _address(item)["port_value"]) for item in listeners] == [
        ("10.0.0.1", 18081),
        ("10.0.0.1", 18001),
        ("10.0.0.1", 18082),
        ("10.0.0.1", 18008),
    ]


def test_the_capture_listener_sends_http_to_the_mesh_and_the_rest_through() -> None:
    """Transparent 0.0.0.0:18001; original_dst + http_inspector; HTTP into `cap_http`, the rest passed through."""
    listener = capture_listener(_record(), trust_domain="aether.internal")
    assert listener.name == "capture_web-1.default"
    assert _address(listener) == {
        "address": "0.0.0.0",
        "port_value": 18001,
        "network_namespace_filepath": NETNS,
    }
    assert listener.transparent.value
    assert [item.name for item in listener.listener_filters] == [
        "envoy.filters.listener.original_dst",
        "envoy.filters.listener.http_inspector",
    ]
    assert (
        listener.listener_filters_timeout.ToMilliseconds(),
        listener.continue_on_listener_filters_timeout,
    ) == (
        1000,
        True,
    )
    (chain,) = listener.filter_chains
    assert list(chain.filter_chain_match.application_protocols) == ["http/1.0", "http/1.1", "h2c"]
    assert [item.name for item in chain.filters] == [
        "envoy.filters.network.set_filter_state",
        "envoy.filters.network.http_connection_manager",
    ]
    assert hcm_of(chain).rds.route_config_name == "cap_http"
    proxy = unpack(listener.default_filter_chain.filters[0].typed_config, tcp_proxy_pb2.TcpProxy)
    assert proxy.cluster == "passthrough_original_dst"


def test_the_l4_listener_passes_tcp_through() -> None:
    """Transparent 0.0.0.0:18082 with original_dst, tcp_proxy to the original destination."""
    listener = l4_tcp_listener(_record())
    assert listener.name == "l4_tcp_web-1.default"
    assert _address(listener)["port_value"] == 18082
    assert [item.name for item in listener.listener_filters] == ["envoy.filters.listener.original_dst"]
    proxy = unpack(listener.filter_chains[0].filters[0].typed_config, tcp_proxy_pb2.TcpProxy)
    assert (proxy.stat_prefix, proxy.cluster) == ("l4_tcp_web-1.default", "passthrough_original_dst")


def test_the_inbound_listener_terminates_mtls_and_demultiplexes_by_sni_and_alpn() -> None:
    """One chain per app port by SNI, the h2 chain for the primary port, the TCP floor by default; the pod's own
    SVID, client certificates of the trust domain required, XFCC set from the verified peer."""
    listener = inbound_listener(_record(ports=(8080, 9090)), trust_domain="aether.internal", plaintext=False)
    assert listener.name == "inbound_web-1.default"
    assert _address(listener) == {
        "address": "0.0.0.0",
        "port_value": 18008,
        "network_namespace_filepath": NETNS,
    }
    assert [item.name for item in listener.listener_filters] == ["envoy.filters.listener.tls_inspector"]
    chains = {chain.name: chain for chain in listener.filter_chains}
    assert {name: as_dict(chain.filter_chain_match) for name, chain in chains.items()} == {
        # The bare port (HTTP/2 clusters) and its DNS form (the HTTP/3 clusters' TCP fallback).
        "in_web-1.default_8080": {"server_names": ["8080", "8080.web.default.aether.internal"]},
        "in_web-1.default_9090": {"server_names": ["9090", "9090.web.default.aether.internal"]},
        "in_web-1.default": {"application_protocols": ["h2"]},
    }
    routes = {
        name: hcm_of(chain).route_config.virtual_hosts[0].routes[0].route.cluster
        for name, chain in chains.items()
    }
    assert routes == {
        "in_web-1.default_8080": "app_web-1.default_8080",
        "in_web-1.default_9090": "app_web-1.default_9090",
        "in_web-1.default": "app_web-1.default_8080",
    }
    manager = hcm_of(chains["in_web-1.default"])
    assert as_dict(manager)["forward_client_cert_details"] == "SANITIZE_SET"
    assert as_dict(manager)["set_current_client_cert_details"] == {"subject": True, "uri": True}
    assert len(manager.local_reply_config.mappers) == 2
    context = unpack(chains["in_web-1.default"].transport_socket.typed_config, tls_pb2.DownstreamTlsContext)
    assert as_dict(context) == {
        "common_tls_context": {
            "tls_certificate_sds_secret_configs": [
                {"name": WEB_ID, "sds_config": {"ads": {}, "resource_api_version": "V3"}}
            ],
            "combined_validation_context": {
                "default_validation_context": {
                    "match_typed_subject_alt_names": [
                        {"san_type": "URI", "matcher": {"prefix": "spiffe://aether.internal/"}}
                    ]
                },
                "validation_context_sds_secret_config": {
                    "name": "spiffe://aether.internal",
                    "sds_config": {"ads": {}, "resource_api_version": "V3"},
                },
            },
            "alpn_protocols": ["h2", "http/1.1"],
        },
        "require_client_certificate": True,
    }
    floor = listener.default_filter_chain
    assert unpack(floor.filters[0].typed_config, tcp_proxy_pb2.TcpProxy).cluster == "app_web-1.default_8080"
    floor_context = unpack(floor.transport_socket.typed_config, tls_pb2.DownstreamTlsContext)
    assert not floor_context.common_tls_context.alpn_protocols


def test_a_plaintext_inbound_routes_http_by_the_host_port() -> None:
    """No SVID anywhere: no TLS; http_inspector picks the HTTP chain, which routes by the Host header's port;
    forged XFCC is removed; anything else is proxied to the primary port."""
    listener = inbound_listener(_record(ports=(8080, 9090)), trust_domain="aether.internal", plaintext=True)
    assert [item.name for item in listener.listener_filters] == ["envoy.filters.listener.http_inspector"]
    (chain,) = listener.filter_chains
    assert not chain.HasField("transport_socket")
    manager = hcm_of(chain)
    assert manager.forward_client_cert_details == hcm_pb2.HttpConnectionManager.SANITIZE
    assert not manager.HasField("set_current_client_cert_details")
    routes = manager.route_config.virtual_hosts[0].routes
    assert [
        ([header.string_match.suffix for header in route.match.headers], route.route.cluster)
        for route in routes
    ] == [
        ([":8080"], "app_web-1.default_8080"),
        ([":9090"], "app_web-1.default_9090"),
        ([], "app_web-1.default_8080"),
    ]
    assert not listener.default_filter_chain.HasField("transport_socket")
