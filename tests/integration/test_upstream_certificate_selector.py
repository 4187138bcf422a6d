"""What a design of per-caller client certificates without one transport socket per caller relies on (issue 21,
target 4), held against the real Envoy: one upstream TLS socket whose certificate Envoy's on-demand selector
(`envoy.tls.certificate_selectors.on_demand_secret`, mapper `envoy.tls.upstream_certificate_mappers.
filter_state_override`) fetches over SDS by the name the caller's listener put in the filter state
`envoy.tls.certificate_mappers.on_demand_secret`, served by `XdsServer`'s standalone SDS service.

Two callers on one Envoy reach one upstream cluster; the callee sees each caller's own SPIFFE ID. The selector's
protos are not in xds-protos: the bootstrap is JSON, which Envoy parses itself.
"""

from __future__ import annotations

import functools
import socket
from pathlib import Path
from typing import Any

import httpx
import trio

from aether.core.project.secrets import svid_secret
from aether.core.snapshot import Resource, Snapshot
from aether.envoy.process import open_envoy
from aether.identity.mint import TestCA
from aether.rpc.listen import ListenAddress, serve_grpc
from aether.testing.envoy import wait_for
from aether.xds.cache import SnapshotCache
from aether.xds.server import XdsServer

TRUST_DOMAIN = "selector.test"
CALLERS = (f"spiffe://{TRUST_DOMAIN}/ns/x/sa/a", f"spiffe://{TRUST_DOMAIN}/ns/x/sa/b")
CALLEE = f"spiffe://{TRUST_DOMAIN}/ns/x/sa/callee"
SECRET_NAME_KEY = "envoy.tls.certificate_mappers.on_demand_secret"
HOST = "127.0.0.1"


def _port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def _address(port: int) -> dict[str, Any]:
    return {"socket_address": {"address": HOST, "port_value": port}}


def _static(name: str, port: int, **more: Any) -> dict[str, Any]:
    endpoints = [{"lb_endpoints": [{"endpoint": {"address": _address(port)}}]}]
    return {
        "name": name,
        "type": "STATIC",
        "connect_timeout": "2s",
        "load_assignment": {"cluster_name": name, "endpoints": endpoints},
        **more,
    }


def _listener(
    name: str, port: int, *, route: dict[str, Any], caller: str = "", **more: Any
) -> dict[str, Any]:
    filters: list[dict[str, Any]] = []
    if caller:

        def value(key: str, factory: str) -> dict[str, Any]:
            return {
                "object_key": key,
                "factory_key": factory,
                "format_string": {"text_format_source": {"inline_string": caller}},
                "shared_with_upstream": "ONCE",
            }

        filters.append(
            {
                "name": "envoy.filters.network.set_filter_state",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.network.set_filter_state.v3.Config",
                    # The hashable value keys the upstream pools (two callers never share a connection); the
                    # string names the caller's secret.
                    "on_new_connection": [
                        value("aether.source_identity", "envoy.hashable_string"),
                        value(SECRET_NAME_KEY, "envoy.string"),
                    ],
                },
            }
        )
    filters.append(
        {
            "name": "envoy.filters.network.http_connection_manager",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3"
                ".HttpConnectionManager",
                "stat_prefix": name,
                "forward_client_cert_details": "SANITIZE_SET",
                "set_current_client_cert_details": {"uri": True},
                "http_filters": [
                    {
                        "name": "envoy.filters.http.router",
                        "typed_config": {
                            "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
                        },
                    }
                ],
                "route_config": {
                    "virtual_hosts": [
                        {"name": name, "domains": ["*"], "routes": [{"match": {"prefix": "/"}, **route}]}
                    ]
                },
            },
        }
    )
    return {"name": name, "address": _address(port), "filter_chains": [{"filters": filters, **more}]}


def _inline(data: bytes) -> dict[str, str]:
    return {"inline_string": data.decode()}


async def _echo_xfcc(port: int, seen: list[str], *, task_status: trio.TaskStatus[None]) -> None:
    """A plain HTTP/1.1 app answering 200 and recording each request's `x-forwarded-client-cert`."""
    listeners = await trio.open_tcp_listeners(port, host=HOST)
    task_status.started()

    async def handle(stream: trio.SocketStream) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = await stream.receive_some()
            if not chunk:
                return
            data += chunk
        for line in data.decode().split("\r\n"):
            if line.lower().startswith("x-forwarded-client-cert:"):
                seen.append(line.split(":", 1)[1].strip())
        await stream.send_all(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\nconnection: close\r\n\r\nok\n")
        await stream.aclose()

    await trio.serve_listeners(handle, listeners)


async def test_one_upstream_socket_presents_each_callers_own_certificate_fetched_on_demand(
    tmp_path: Path,
) -> None:
    """Each caller's listener names its SPIFFE ID; the one TLS socket of the cluster presents that SVID."""
    ca = TestCA(trust_domain=TRUST_DOMAIN)
    callee = ca.issue(CALLEE)
    cache = SnapshotCache()
    secrets = [Resource.from_message(svid_secret(ca.issue(caller).svid())) for caller in CALLERS]
    cache.set_snapshot(Snapshot.build(node_id="caller", resources=secrets))
    server = XdsServer(cache)
    sds, app, callee_port, caller_ports = _port(), _port(), _port(), (_port(), _port())
    selector = {
        "name": "envoy.tls.certificate_selectors.on_demand_secret",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.cert_selectors.on_demand_secret.v3"
            ".Config",
            "config_source": {
                "resource_api_version": "V3",
                "api_config_source": {
                    "api_type": "GRPC",
                    "transport_api_version": "V3",
                    "grpc_services": [{"envoy_grpc": {"cluster_name": "sds"}}],
                },
            },
            "certificate_mapper": {
                "name": "envoy.tls.upstream_certificate_mappers.filter_state_override",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.cert_mappers"
                    ".filter_state_override.v3.Config",
                    "default_value": CALLERS[0],
                },
            },
        },
    }
    upstream_tls = {
        "name": "envoy.transport_sockets.tls",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
            "common_tls_context": {
                "custom_tls_certificate_selector": selector,
                "validation_context": {
                    "trusted_ca": _inline(ca.bundle_pem),
                    "match_typed_subject_alt_names": [{"san_type": "URI", "matcher": {"exact": CALLEE}}],
                },
            },
        },
    }
    http2 = {
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
            "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
            "explicit_http_config": {"http2_protocol_options": {}},
        }
    }
    caller_bootstrap = {
        "node": {"id": "caller", "cluster": "caller"},
        "admin": {"address": _address(0)},
        "static_resources": {
            "listeners": [
                _listener(f"caller{index}", port, route={"route": {"cluster": "callee"}}, caller=caller)
                for index, (caller, port) in enumerate(zip(CALLERS, caller_ports, strict=True))
            ],
            "clusters": [
                _static("sds", sds, typed_extension_protocol_options=http2),
                _static("callee", callee_port, transport_socket=upstream_tls),
            ],
        },
    }
    downstream_tls = {
        "name": "envoy.transport_sockets.tls",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
            "require_client_certificate": True,
            "common_tls_context": {
                "tls_certificates": [
                    {
                        "certificate_chain": _inline(callee.cert_chain_pem),
                        "private_key": _inline(callee.private_key_pem),
                    }
                ],
                "validation_context": {"trusted_ca": _inline(ca.bundle_pem)},
            },
        },
    }
    callee_bootstrap = {
        "node": {"id": "callee", "cluster": "callee"},
        "admin": {"address": _address(0)},
        "static_resources": {
            "listeners": [
                _listener(
                    "callee",
                    callee_port,
                    route={"route": {"cluster": "app"}},
                    transport_socket=downstream_tls,
                )
            ],
            "clusters": [_static("app", app)],
        },
    }
    seen: list[str] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        await nursery.start(
            functools.partial(serve_grpc, server.services(), listen=ListenAddress.tcp(host=HOST, port=sds))
        )
        await nursery.start(functools.partial(_echo_xfcc, app, seen))
        async with (
            open_envoy(callee_bootstrap, work_dir=tmp_path / "callee"),
            open_envoy(caller_bootstrap, work_dir=tmp_path / "caller"),
            httpx.AsyncClient() as client,
        ):
            for port in caller_ports:
                # The first connection of a caller waits for its secret (fetched on demand).
                async def answered(port: int = port) -> bool:
                    try:
                        response = await client.get(f"http://{HOST}:{port}/", timeout=5)
                    except httpx.HTTPError:
                        return False
                    return response.status_code == 200

                await wait_for(answered, timeout=20)
            seen.clear()
            for port in (*caller_ports, *caller_ports):
                assert (await client.get(f"http://{HOST}:{port}/", timeout=5)).status_code == 200
        nursery.cancel_scope.cancel()
    assert [f"URI={caller}" in xfcc for caller, xfcc in zip(CALLERS * 2, seen, strict=True)] == [True] * 4
