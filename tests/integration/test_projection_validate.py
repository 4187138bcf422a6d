"""Projected node snapshots against real Envoy (1.40): `envoy --mode validate` accepts them, and they carry traffic.

A snapshot becomes a bootstrap through `aether.core.project.bootstrap.static_bootstrap` (what `aether render
--format bootstrap` prints): EDS clusters become STATIC with their load assignment inline, RDS is inlined with
`validate_clusters` on (so Envoy also checks every cluster a route names), secrets are static (Envoy parses the
real certificates minted by `aether.identity.mint.TestCA`), and ADS stays only for what cannot be static.

`network_namespace_filepath` is not opened by validation; the paths still point at files the test creates.
"""

from __future__ import annotations

import json
import socket
import struct
from pathlib import Path
from typing import Any

import pytest
import trio

from aether.cli.render_command import OutputFormat, RenderRequest, render
from aether.core.events import Event, Health, Protocol
from aether.core.events.kube import ServicePort
from aether.core.project import project_node
from aether.core.snapshot import CLUSTER_TYPE, LISTENER_TYPE, Snapshot
from aether.envoy.process import open_envoy
from aether.http1 import HttpConnection, HttpResponse, http_request
from aether.identity.mint import TestCA
from aether.testing import (
    AT,
    endpoints_snapshot_received,
    fold_events,
    kube_service_upserted,
    make_endpoint,
    make_kube_service,
    make_pod,
    make_trust_bundle,
    mesh_config_updated,
    on_demand_cluster_requested,
    pod_added,
    svid_rotated,
    trust_bundle_rotated,
)
from aether.testing.envoy import snapshot_bootstrap, validate_config
from tests.core.project._helpers import NODE
from tests.needs import ROOT, needs

VALIDATE_TIMEOUT = 60
"""Seconds `envoy --mode validate` gets (it takes well under one; the margin absorbs a loaded CI machine)."""
CONVERGE = 10
"""Seconds the running Envoy gets to answer (it takes milliseconds)."""

XDS_CLUSTER = {
    "name": "xds_cluster",
    "type": "STATIC",
    "connect_timeout": "1s",
    "typed_extension_protocol_options": {
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
            "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
            "explicit_http_config": {"http2_protocol_options": {}},
        }
    },
    "load_assignment": {
        "cluster_name": "xds_cluster",
        "endpoints": [
            {"lb_endpoints": [{"endpoint": {"address": {"pipe": {"path": "/run/aether/xds.sock"}}}}]}
        ],
    },
}


def validate(snapshot: Snapshot, work_dir: Path) -> str:
    """Run `envoy --mode validate` on the snapshot's static bootstrap; return Envoy's output (assert it accepted)."""
    return validate_config(snapshot_bootstrap(snapshot), work_dir / "validate", what="the projected snapshot")


DEMO_MANIFESTS = Path(__file__).resolve().parents[2] / "examples" / "demo"

# --- realistic states ---

TRUST_DOMAIN = "aether.internal"


def _svid(ca: TestCA, service: str) -> Event:
    namespace, account = service.split("/")
    return svid_rotated(ca.issue(f"spiffe://{TRUST_DOMAIN}/ns/{namespace}/sa/{account}").svid())


def _netns(work_dir: Path, name: str) -> str:
    path = work_dir / "netns" / name
    path.parent.mkdir(exist_ok=True)
    path.touch()
    return str(path)


def realistic_events(work_dir: Path, *, identities: bool) -> list[Event]:
    """Five pods (three in network namespaces, two in local mode, one of them without an SVID), endpoints of
    twelve services over three zones (TCP ones, extra ports, every health), and on-demand requests: live, expired,
    and for a service the registry does not know."""
    ca = TestCA(TRUST_DOMAIN)
    pods = [
        make_pod(
            "web-1",
            netns=_netns(work_dir, "web-1"),
            ips=("10.0.0.1",),
            annotations={
                "config.aether.io/upstreams": "shop/db, shop/cache, shop/api, billing/ledger",
                "endpoint.aether.io/ports": "9090, 9091=h2",
            },
        ),
        make_pod(
            "web-2",
            netns=_netns(work_dir, "web-2"),
            ips=("10.0.0.2",),
            annotations={"config.aether.io/upstreams": "shop/db"},
        ),
        make_pod(
            "db-0",
            namespace="shop",
            service_account="db",
            netns=_netns(work_dir, "db-0"),
            ips=("10.0.0.3",),
            annotations={"endpoint.aether.io/protocol": "tcp", "endpoint.aether.io/port": "5432"},
        ),
        make_pod(
            "batch-1",
            namespace="jobs",
            service_account="batch",
            ips=("10.0.0.4",),
            annotations={"config.aether.io/upstreams": "shop/api"},
        ),
        make_pod("tool-1", namespace="ops", service_account="tool", ips=("fd00::5",)),
    ]
    zones = (("eu", "eu-a"), ("eu", "eu-b"), ("us", "us-a"))
    endpoints = [
        make_endpoint(
            "10.0.0.1",
            service="default/web",
            ports=(8080, 9090, 9091),
            node_name=NODE,
            region="eu",
            zone="eu-a",
        ),
        make_endpoint(
            "10.0.0.3",
            service="shop/db",
            protocol=Protocol.TCP,
            port=5432,
            node_name=NODE,
            region="eu",
            zone="eu-a",
        ),
        make_endpoint(
            "10.0.1.3", service="shop/db", protocol=Protocol.TCP, port=5432, region="eu", zone="eu-b"
        ),
        make_endpoint(
            "10.0.1.4", service="shop/cache", protocol=Protocol.TCP, port=6379, region="us", zone="us-a"
        ),
    ]
    for index, service in enumerate(("shop/api", "billing/ledger", *(f"team{n}/svc{n}" for n in range(8)))):
        for replica in range(3):
            region, zone = zones[(index + replica) % 3]
            endpoints.append(
                make_endpoint(
                    f"10.{index + 10}.0.{replica + 1}",
                    service=service,
                    ports=(8080, 8443) if index % 2 else (),
                    weight=100 * (replica + 1),
                    region=region,
                    zone=zone,
                    health=tuple(Health)[replica % 4],
                )
            )
    events: list[Event] = [
        mesh_config_updated(),
        trust_bundle_rotated(make_trust_bundle(bundle_pem=ca.bundle_pem)),
    ]
    events += [pod_added(pod) for pod in pods]
    if identities:
        events += [_svid(ca, service) for service in ("default/web", "shop/db", "jobs/batch")]
    events.append(endpoints_snapshot_received(*endpoints))
    events += [
        on_demand_cluster_requested("svc3.team3.aether.internal", at=AT),
        on_demand_cluster_requested("svc4.team4.aether.internal:8080", at=AT),
        on_demand_cluster_requested("svc5.team5.aether.internal:8443", at=AT),
        on_demand_cluster_requested("svc6.team6.aether.internal", at=AT - 3_600 * 10**9),
        on_demand_cluster_requested("ghost.nowhere.aether.internal:80", at=AT),
        # HTTP/3 (`aether.core.project.quic`): a caller's own cluster of a service and of one of its extra ports.
        on_demand_cluster_requested("quic:web.default@svc3.team3.aether.internal", at=AT),
        on_demand_cluster_requested("quic:batch.jobs@svc5.team5.aether.internal:8443", at=AT),
    ]
    return events


@pytest.mark.parametrize(("node_name", "identities"), [(NODE, True), (NODE, False), ("", True)])
def test_projected_snapshots_pass_envoy_validation(tmp_path: Path, node_name: str, identities: bool) -> None:
    """Every projection of a realistic node (mTLS and plaintext, one node and local mode) passes validation."""
    state = fold_events(*realistic_events(tmp_path, identities=identities))
    snapshot = project_node(state, node_name=node_name, now=AT)
    assert snapshot.consistent() == ()
    quic = {"quic:web.default@svc3.team3.aether.internal", "quic:batch.jobs@svc5.team5.aether.internal:8443"}
    # A plaintext node has no HTTP/3 (QUIC is TLS): its `quic:` names get the caller's own plaintext HTTP/2 cluster.
    assert snapshot.not_found == frozenset({"ghost.nowhere.aether.internal:80"})
    # 5 pods x (outbound, inbound) + 3 in netns x (capture, l4), + 5 x the QUIC inbound with identities
    assert len(snapshot.of_type(LISTENER_TYPE)) == 16 + (5 if identities else 0)
    assert quic <= set(snapshot.of_type(CLUSTER_TYPE))
    assert "svc6.team6.aether.internal" not in snapshot.of_type(CLUSTER_TYPE)  # expired
    validate(snapshot, tmp_path)


def test_a_node_serving_udp_services_passes_envoy_validation(tmp_path: Path) -> None:
    """Per-destination UDP listeners (transparent, in the pod's namespace, `udp_proxy` by matcher) and their
    plaintext `udp:` clusters are accepted by Envoy."""
    pod = make_pod(
        "web-1",
        netns=_netns(tmp_path, "web-1"),
        annotations={"config.aether.io/upstreams": "metrics/statsd, games/lobby"},
    )
    services = [
        make_kube_service(
            "statsd",
            namespace="metrics",
            cluster_ip="10.96.5.5",
            ports=[
                ServicePort(name="metrics", port=8125, target_port="9125", protocol="UDP"),
                ServicePort(name="admin", port=8127, protocol="UDP"),
            ],
        ),
        make_kube_service(
            "lobby", namespace="games", cluster_ip="10.96.6.6", ports=[ServicePort(port=7777, protocol="UDP")]
        ),
    ]
    state = fold_events(
        mesh_config_updated(),
        pod_added(pod),
        *(kube_service_upserted(service) for service in services),
        endpoints_snapshot_received(
            make_endpoint("10.0.5.1", service="metrics/statsd"),
            make_endpoint("10.0.6.1", service="games/lobby", health=Health.UNHEALTHY),
        ),
    )
    snapshot = project_node(state, node_name=NODE, now=AT)
    assert snapshot.consistent() == ()
    assert sorted(name for name in snapshot.of_type(LISTENER_TYPE) if name.startswith("udp_")) == [
        "udp_web-1.default_10.96.5.5_8125",
        "udp_web-1.default_10.96.5.5_8127",
        "udp_web-1.default_10.96.6.6_7777",
    ]
    validate(snapshot, tmp_path)


def test_validation_catches_a_broken_snapshot(tmp_path: Path) -> None:
    """The harness is not vacuous: a snapshot whose trust bundle is no certificate is refused."""
    events = realistic_events(tmp_path, identities=True)
    broken = fold_events(*events, trust_bundle_rotated(make_trust_bundle(bundle_pem=b"not a certificate")))
    with pytest.raises(AssertionError, match="Failed to load trusted CA certificates"):
        validate(project_node(broken, node_name=NODE, now=AT), tmp_path)


# --- traffic through a running Envoy ---

CALLER_IP, CALLEE_IP, IDLE_IP = "127.0.0.2", "127.0.0.3", "127.0.0.4"


class App:
    """The callee's application: answers `/ok` with the request's XFCC, `/forge` with a forged outcome header,
    `/503` with its own 503, and resets the connection on `/reset`; counts requests per path."""

    def __init__(self) -> None:
        self.hits: dict[str, int] = {}

    async def handle(self, stream: trio.SocketStream) -> None:
        async with stream:
            connection = HttpConnection(stream, client=False, peer="caller's proxy")
            request = await connection.receive_request()
            if request is None:
                return
            path = request.target
            self.hits[path] = self.hits.get(path, 0) + 1
            if path == "/reset":
                # SO_LINGER 0: close with a TCP RST, the app "crashing" after it received the request.
                stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                return
            status, extra = {
                "/forge": (200, [("x-aether-outcome", "undelivered")]),
                "/503": (503, []),
            }.get(path, (200, []))
            body = json.dumps({"xfcc": request.headers.get("x-forwarded-client-cert", "")}).encode()
            await connection.send_response(status, headers=[*extra, ("connection", "close")], body=body)


async def _request(host: str, port: int, method: str, path: str, *, authority: str) -> HttpResponse:
    body = b"x" if method == "POST" else b""
    return await http_request(
        host, port, method, path, headers={"host": authority}, body=body, timeout=CONVERGE
    )


async def _stat(envoy: Any, name: str) -> int:
    stats: dict[str, int] = await envoy.stats()
    return stats.get(name, 0)


@needs(ROOT)  # Envoy binds transparent listeners (IP_TRANSPARENT needs CAP_NET_ADMIN)
async def test_projected_config_carries_mtls_traffic_and_retries_by_outcome(tmp_path: Path) -> None:
    """Two local-mode pods on loopback addresses call each other through one Envoy running the projected config:
    each caller presents its own SVID (the callee sees it in XFCC), and retries follow the callee's outcome."""
    ca = TestCA(TRUST_DOMAIN)
    with socket.socket() as probe:
        probe.bind((CALLEE_IP, 0))
        app_port = probe.getsockname()[1]
    state = fold_events(
        mesh_config_updated(),
        trust_bundle_rotated(make_trust_bundle(bundle_pem=ca.bundle_pem)),
        pod_added(
            make_pod("web-1", ips=(CALLER_IP,), annotations={"config.aether.io/upstreams": "db, idle"})
        ),
        pod_added(
            make_pod(
                "db-0",
                service_account="db",
                ips=(CALLEE_IP,),
                annotations={"endpoint.aether.io/port": str(app_port)},
            )
        ),
        _svid(ca, "default/web"),
        _svid(ca, "default/db"),
        endpoints_snapshot_received(
            make_endpoint(CALLEE_IP, service="default/db", port=app_port),
            make_endpoint(IDLE_IP, service="default/idle", port=app_port),  # an inbound whose app is down
        ),
        pod_added(
            make_pod(
                "idle-0",
                service_account="idle",
                ips=(IDLE_IP,),
                annotations={"endpoint.aether.io/port": str(app_port)},
            )
        ),
        _svid(ca, "default/idle"),
        # What the callers' first requests ask for on demand (a static bootstrap has no xDS server to ask).
        *(
            on_demand_cluster_requested(f"quic:{caller}.default@{callee}.default.aether.internal", at=AT)
            for caller, callee in (("web", "db"), ("db", "db"), ("web", "idle"))
        ),
    )
    app = App()
    db = "db.default.aether.internal"
    web_id, db_id = (f"spiffe://{TRUST_DOMAIN}/ns/default/sa/{sa}" for sa in ("web", "db"))
    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(app_port, host=CALLEE_IP)
        await nursery.start(trio.serve_listeners, app.handle, listeners)
        async with open_envoy(
            snapshot_bootstrap(project_node(state, node_name=NODE, now=AT), admin_port=0),
            work_dir=tmp_path / "envoy",
        ) as envoy:
            status, headers, body = await _request(CALLER_IP, 18081, "GET", "/ok", authority=db)
            assert status == 200
            xfcc = json.loads(body)["xfcc"]
            assert f"URI={web_id}" in xfcc
            # Over HTTP/3 Envoy knows the verified peer but not its own certificate's SAN: no `By=` element.
            assert "By=" not in xfcc or f"By={db_id}" in xfcc  # the HTTP/2 fallback has it
            status, _, body = await _request(CALLEE_IP, 18081, "GET", "/ok", authority=db)
            assert f"URI={db_id}" in json.loads(body)["xfcc"]  # the other caller, its own certificate
            status, headers, _ = await _request(CALLER_IP, 18081, "GET", "/forge", authority=db)
            assert (status, "x-aether-outcome" in headers) == (200, False)
            status, headers, _ = await _request(CALLER_IP, 18081, "GET", "/503", authority=db)
            assert (status, app.hits["/503"]) == (503, 3)  # the app's own 503: retried twice
            status, headers, _ = await _request(CALLER_IP, 18081, "POST", "/reset", authority=db)
            assert (status, headers.get("x-aether-outcome"), app.hits["/reset"]) == (502, "unanswered", 1)
            status, headers, _ = await _request(CALLER_IP, 18081, "GET", "/reset", authority=db)
            assert (status, headers.get("x-aether-outcome"), app.hits["/reset"]) == (502, "unanswered", 4)
            # Nothing listens behind idle-0's inbound: even a POST is retried, and reported undelivered.
            status, headers, _ = await _request(
                CALLER_IP, 18081, "POST", "/down", authority="idle.default.aether.internal"
            )
            assert (status, headers.get("x-aether-outcome")) == (503, "undelivered")
            assert (
                await _stat(
                    envoy, "cluster.app_idle-0.default_" + str(app_port) + ".upstream_cx_connect_fail"
                )
                == 3
            )
            # Every request above rode HTTP/3 from the caller's own `quic:` cluster (`aether.core.project.quic`).
            stats = await envoy.stats()
            quic = f"cluster.quic_web.default@{db}"  # Envoy's stat names spell the cluster's `:` as `_`
            assert stats.get(f"{quic}.upstream_cx_http3_total", 0) >= 1
            assert stats.get(f"{quic}.upstream_http3_broken", 0) == 0
            status, _, body = await _request(CALLER_IP, 18081, "GET", "/x", authority="example.com")
            assert (status, body) == (
                404,
                b"aether: the Host header names no mesh service; expected <serviceAccount>.<namespace>.aether.internal[:<port>]\n",
            )
        nursery.cancel_scope.cancel()


def test_a_captured_render_of_the_demo_manifests_passes_envoy_validation(tmp_path: Path) -> None:
    """`aether render --node demo` of the demo's manifests renders every pod as the CNI joins it (capture and L4
    listeners in its namespace), and Envoy accepts the bootstrap."""
    request = RenderRequest(manifests=DEMO_MANIFESTS, node="demo", output_format=OutputFormat.BOOTSTRAP)
    bootstrap = json.loads(render(request))
    listeners = {item["name"] for item in bootstrap["static_resources"]["listeners"]}
    assert {"capture_cart-1.shop", "l4_tcp_cart-1.shop", "inbound_cart-1.shop"} <= listeners
    validate_config(bootstrap, tmp_path, what="the captured render of examples/demo")


@needs(ROOT)  # Envoy binds transparent listeners (IP_TRANSPARENT needs CAP_NET_ADMIN)
async def test_a_callers_quic_cluster_of_an_extra_port_reaches_that_port_over_http3(tmp_path: Path) -> None:
    """`Host: db...:<extra port>` names the caller's `quic:` cluster of that port: SNI `<port>.db.default.<td>`
    (covered by the SVID's wildcard DNS SAN) selects the callee's QUIC chain of that port, not the primary's."""
    ca = TestCA(TRUST_DOMAIN)
    ports = []
    for _ in range(2):
        with socket.socket() as probe:
            probe.bind((CALLEE_IP, 0))
            ports.append(probe.getsockname()[1])
    primary, extra = ports
    db = "db.default.aether.internal"
    state = fold_events(
        mesh_config_updated(),
        trust_bundle_rotated(make_trust_bundle(bundle_pem=ca.bundle_pem)),
        pod_added(make_pod("web-1", ips=(CALLER_IP,), annotations={"config.aether.io/upstreams": "db"})),
        pod_added(
            make_pod(
                "db-0",
                service_account="db",
                ips=(CALLEE_IP,),
                annotations={"endpoint.aether.io/port": str(primary), "endpoint.aether.io/ports": str(extra)},
            )
        ),
        _svid(ca, "default/web"),
        _svid(ca, "default/db"),
        endpoints_snapshot_received(
            make_endpoint(CALLEE_IP, service="default/db", port=primary, ports=(extra,))
        ),
        on_demand_cluster_requested(f"quic:web.default@{db}:{extra}", at=AT),
    )
    seen: list[int] = []

    def app(port: int) -> Any:
        async def handle(stream: trio.SocketStream) -> None:
            async with stream:
                connection = HttpConnection(stream, client=False, peer="caller's proxy")
                if await connection.receive_request() is None:
                    return
                seen.append(port)
                await connection.send_response(200, headers=[("connection", "close")], body=b"ok")

        return handle

    async with trio.open_nursery() as nursery:
        for port in ports:
            listeners = await trio.open_tcp_listeners(port, host=CALLEE_IP)
            await nursery.start(trio.serve_listeners, app(port), listeners)
        async with open_envoy(
            snapshot_bootstrap(project_node(state, node_name=NODE, now=AT), admin_port=0),
            work_dir=tmp_path / "envoy",
        ) as envoy:
            status, _, _ = await _request(CALLER_IP, 18081, "GET", "/", authority=f"{db}:{extra}")
            assert (status, seen) == (200, [extra])
            quic = f"cluster.quic_web.default@{db}:{extra}".replace(":", "_", 1)
            assert await _stat(envoy, f"{quic}.upstream_cx_http3_total") == 1
            assert await _stat(envoy, f"{quic}.upstream_http3_broken") == 0
        nursery.cancel_scope.cancel()
