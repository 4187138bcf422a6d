"""Envoy's own spans through a real collector: the edge's projection, with a MeshConfig that traces every request
and `EdgeOptions.collector_cluster` naming the bootstrap's collector cluster, makes a real Envoy send OTLP spans of
a request it serves to rotel, which exports them to the sink the test reads."""

from __future__ import annotations

import functools
import urllib.error
import urllib.request
from pathlib import Path

import trio

from aether.core.project.edge import EDGE_TRACE_SERVICE, EdgeOptions, project_edge
from aether.core.snapshot import ROUTE_TYPE, Snapshot
from aether.core.state import State
from aether.envoy.bootstrap import OTEL_CLUSTER, ads_bootstrap
from aether.envoy.process import open_envoy
from aether.plane.plane import open_plane
from aether.proto.otlp.v1 import otlp_pb2 as otlp
from aether.rpc.listen import ListenAddress
from aether.testing import gateway_object_upserted, make_mesh_config, mesh_config_updated
from aether.testing.envoy import wait_for
from aether.testing.gateway_objects import EDGE_LISTENER, edge_gateway_events, gateway_api_object
from aether.testing.otlp_collector import OtlpSink, open_otlp_sink, open_rotel
from aether.testing.xds_resources import pick_free_port
from aether.xds.server import XdsServer
from tests.telemetry.test_collector import _acked

NODE = "edge-0"
CONVERGE = 30
"""Seconds for Envoy to converge and for its spans to cross the collector (Envoy flushes spans every 5 s)."""


def _project(state: State, now: int) -> Snapshot:
    del now
    options = EdgeOptions(bind="127.0.0.1", cleartext=True, collector_cluster=OTEL_CLUSTER)
    return project_edge(state, node_id=NODE, options=options)


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers={"Host": "shop.example"}), timeout=5
        ) as r:
            return int(r.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def _attributes(span: otlp.Span) -> dict[str, str]:
    return {kv.key: kv.value.string_value for kv in span.attributes}


async def test_a_request_through_a_traced_edge_reaches_the_collector_as_an_envoy_span(tmp_path: Path) -> None:
    """Tracing at 100%: one request through the edge gives a server span of service `aether-edge` at the collector,
    named by its method and the route it matched."""
    listener_port = pick_free_port()
    xds = ListenAddress.parse(f"127.0.0.1:{pick_free_port()}")
    route = gateway_api_object(
        "HTTPRoute",
        "web",
        {
            "parentRefs": [{"name": "edge", "namespace": "edge"}],
            "hostnames": ["shop.example"],
            "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/"}}]}],
        },
    )
    with open_otlp_sink() as sink:
        async with (
            open_rotel(sink, work_dir=tmp_path / "rotel") as collector,
            open_plane(tmp_path / "log", project=_project) as plane,
            trio.open_nursery() as nursery,
        ):
            bound = await nursery.start(
                functools.partial(plane.serve, xds=xds, admin_socket=tmp_path / "admin.sock", parts={})
            )
            async with plane.journal.sender() as send:
                await send.send(
                    mesh_config_updated(
                        make_mesh_config(tracing_enabled=True, trace_sample_per_million=1_000_000)
                    )
                )
                for event in edge_gateway_events(listeners=[{**EDGE_LISTENER, "port": listener_port}]):
                    await send.send(event)
                await send.send(gateway_object_upserted(route))
            bootstrap = ads_bootstrap(
                node_id=NODE,
                xds_tcp=(bound.host, bound.port),
                delta=True,
                otlp_grpc=("127.0.0.1", collector.grpc_port),
            )
            server = plane.server
            async with open_envoy(bootstrap, work_dir=tmp_path / "envoy", wait_live=False):
                await wait_for(lambda: _synced(server), timeout=CONVERGE)
                status = await trio.to_thread.run_sync(_get, f"http://127.0.0.1:{listener_port}/cart")
                assert status != 404, "the route did not match: the request never reached it"
                await wait_for(lambda: _has_spans(sink), timeout=CONVERGE)
            nursery.cancel_scope.cancel()
    spans = sink.spans(service=EDGE_TRACE_SERVICE)
    assert spans, f"no span of {EDGE_TRACE_SERVICE!r}: services {sorted(sink.services())}"
    span = spans[0]
    assert span.kind == otlp.Span.SPAN_KIND_SERVER, span
    assert span.name == "GET HTTPRoute/default/web/rule/0/match/0", span.name  # SPAN_NAME: method and route
    attributes = _attributes(span)
    assert attributes.get("http.method") == "GET", attributes
    assert attributes.get("http.url", "").endswith("/cart"), attributes
    assert attributes.get("node_id") == NODE, attributes


async def _synced(server: XdsServer) -> bool:
    return bool(_acked(server, ROUTE_TYPE))


async def _has_spans(sink: OtlpSink) -> bool:
    return bool(sink.spans(service=EDGE_TRACE_SERVICE))
