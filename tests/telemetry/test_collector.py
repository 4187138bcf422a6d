"""Telemetry through a real collector: our journal and xDS server, and a real Envoy, push OTLP to rotel, which
exports to a sink the test reads.

The scenario: the edge's Gateway, N pod registrations, an HTTPRoute and one edit of it, then a cluster Envoy
rejects (the test's projection adds it once pod `broken` is folded: the real projections never make one).
"""

from __future__ import annotations

import functools
from pathlib import Path

import trio

from aether.core.project.edge import EdgeOptions, project_edge
from aether.core.snapshot import CLUSTER_TYPE, ROUTE_TYPE, Resource, Snapshot
from aether.core.state import State
from aether.envoy.bootstrap import ads_bootstrap
from aether.envoy.process import open_envoy
from aether.plane.plane import open_plane
from aether.proto.otlp.v1 import otlp_pb2 as otlp
from aether.rpc.listen import ListenAddress
from aether.telemetry import OtlpEndpoint, TelemetryConfig, telemetry_running
from aether.testing import gateway_object_upserted, make_pod, pod_added
from aether.testing.envoy import wait_for
from aether.testing.gateway_objects import EDGE_LISTENER, edge_gateway_events, gateway_api_object
from aether.testing.otlp_collector import OtlpSink, open_otlp_sink, open_rotel, point_value
from aether.testing.xds_resources import make_invalid_cluster, pick_free_port
from aether.xds.protocol import TypeStatus
from aether.xds.server import XdsServer

NODE = "edge-0"
SERVICE = "aether-edge"
REGISTRATIONS = 3
CONVERGE = 20
"""Seconds for Envoy to converge and for telemetry to cross the collector (well under one; margin for CI load)."""

BROKEN = Resource.from_message(make_invalid_cluster("broken"))


def _route(path: str) -> object:
    return gateway_object_upserted(
        gateway_api_object(
            "HTTPRoute",
            "web",
            {
                "parentRefs": [{"name": "edge", "namespace": "edge"}],
                "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": path}}]}],
            },
        )
    )


def _project(state: State, now: int) -> Snapshot:
    del now
    snapshot = project_edge(state, node_id=NODE, options=EdgeOptions(bind="127.0.0.1", cleartext=True))
    if any(key.endswith("/broken") for key in state.pods):
        return snapshot.with_changes(seq=snapshot.seq, upserted=[BROKEN])
    return snapshot


def _status(server: XdsServer, type_url: str) -> TypeStatus | None:
    for stream in server.status():
        for row in stream.types:
            if row.type_url == type_url:
                return row.status
    return None


def _acked(server: XdsServer, type_url: str) -> str:
    for stream in server.status():
        for row in stream.types:
            if row.type_url == type_url and row.status is TypeStatus.SYNCED:
                return row.acked_version
    return ""


async def _holds(check: object) -> bool:
    return bool(check)


async def _run_scenario(
    tmp_path: Path, *, sink: OtlpSink, collector_http: str, collector_grpc: int
) -> Snapshot:
    """Run the scenario; return the last snapshot published."""
    config = TelemetryConfig(
        service_name=SERVICE,
        endpoint=OtlpEndpoint.parse(collector_http),
        metrics=True,
        traces=True,
        export_interval=0.2,
    )
    listener_port = pick_free_port()
    xds = ListenAddress.parse(f"127.0.0.1:{pick_free_port()}")
    with telemetry_running(config):
        async with open_plane(tmp_path / "log", project=_project) as plane, trio.open_nursery() as nursery:
            bound = await nursery.start(
                functools.partial(plane.serve, xds=xds, admin_socket=tmp_path / "admin.sock", parts={})
            )
            async with plane.journal.sender() as send:
                for event in edge_gateway_events(listeners=[{**EDGE_LISTENER, "port": listener_port}]):
                    await send.send(event)
                await send.send(_route("/v1"))
            bootstrap = ads_bootstrap(
                node_id=NODE,
                xds_tcp=(bound.host, bound.port),
                delta=True,
                otlp_grpc=("127.0.0.1", collector_grpc),
                stats_flush_interval="0.2s",
            )
            server = plane.server
            async with open_envoy(bootstrap, work_dir=tmp_path / "envoy", wait_live=False):
                await wait_for(lambda: _holds(_acked(server, ROUTE_TYPE)), timeout=CONVERGE)
                async with plane.journal.sender() as send:
                    for index in range(REGISTRATIONS):
                        await send.send(pod_added(make_pod(f"web-{index}", node_name=NODE)))
                before = _acked(server, ROUTE_TYPE)
                async with plane.journal.sender() as send:
                    await send.send(_route("/v2"))
                await wait_for(
                    lambda: _holds(_acked(server, ROUTE_TYPE) not in ("", before)), timeout=CONVERGE
                )
                async with plane.journal.sender() as send:
                    await send.send(pod_added(make_pod("broken", node_name=NODE)))
                await wait_for(
                    lambda: _holds(_status(server, CLUSTER_TYPE) is TypeStatus.NACKED), timeout=CONVERGE
                )
                await wait_for(lambda: _holds(ENVOY_STAT in _all_metric_names(sink)), timeout=CONVERGE)
            last = plane.cache.get(NODE)
            assert last is not None
            nursery.cancel_scope.cancel()
    # Leaving `telemetry_running` exported the last metrics and every queued span.
    return last


ENVOY_STAT = "cluster_manager.active_clusters"
"""A stat every Envoy has: it arrived through Envoy's OpenTelemetry stats sink (the bootstrap's) and rotel."""


def _all_metric_names(sink: OtlpSink) -> set[str]:
    return {name for service in sink.services() for name in sink.metrics(service=service)}


def _metric(sink: OtlpSink, name: str) -> otlp.Metric:
    metric = sink.latest(name, service=SERVICE)
    assert metric is not None, f"{name} never reached the sink: {sorted(sink.metrics(service=SERVICE))}"
    return metric


def _attributes(span: otlp.Span) -> dict[str, str | int]:
    return {kv.key: kv.value.string_value or kv.value.int_value for kv in span.attributes}


def _route_edit_trace(spans: list[otlp.Span]) -> tuple[otlp.Span, list[otlp.Span]]:
    """The route edit's event span (the later of the route's two) and every span of its trace."""
    events = [
        span
        for span in spans
        if span.name == "aether.event GatewayObjectUpserted"
        and str(_attributes(span)["aether.event.subject"]).endswith("/web")
    ]
    assert len(events) == 2, [_attributes(span) for span in events]
    edit = max(events, key=lambda span: int(_attributes(span)["aether.log.seq"]))
    return edit, [span for span in spans if span.trace_id == edit.trace_id]


async def test_metrics_and_the_span_chain_of_a_route_edit_reach_a_real_collector(tmp_path: Path) -> None:
    """Names, units and values of the scenario's metrics; the route edit's trace from its event to the ACK; and
    Envoy's own stats, all through rotel."""
    with open_otlp_sink() as sink:
        async with open_rotel(sink, work_dir=tmp_path / "rotel") as collector:
            last = await _run_scenario(
                tmp_path, sink=sink, collector_http=collector.http_url, collector_grpc=collector.grpc_port
            )

            async def delivered() -> bool:
                nacks = sink.latest("aether.xds.nacks", service=SERVICE)
                return nacks is not None and bool(sink.spans(service=SERVICE))

            await wait_for(delivered, timeout=CONVERGE)

    appended = _metric(sink, "aether.journal.events.appended")
    assert appended.unit == "{event}"
    assert appended.sum.is_monotonic
    assert point_value(appended, **{"aether.event.kind": "PodAdded"}) == REGISTRATIONS + 1
    assert (
        point_value(appended, **{"aether.event.kind": "GatewayObjectUpserted"}) == 4
    )  # class, gateway, 2 routes
    assert point_value(appended, **{"aether.event.kind": "ResourceNacked"}) == 1
    nacks = _metric(sink, "aether.xds.nacks")
    assert point_value(nacks, **{"aether.xds.type": "CDS"}) == 1
    assert sum(point.as_int for point in nacks.sum.data_points) == 1
    latency = _metric(sink, "aether.xds.push.duration")
    assert latency.unit == "s"
    assert (point_value(latency, **{"aether.xds.type": "RDS", "aether.xds.outcome": "ack"}) or 0) >= 2
    assert point_value(latency, **{"aether.xds.type": "CDS", "aether.xds.outcome": "nack"}) == 1
    for name in ("aether.log.commit.duration", "aether.projection.duration"):
        assert _metric(sink, name).unit == "s"
        assert _metric(sink, name).histogram.data_points[0].count >= 1
    assert _metric(sink, "aether.snapshot.resources").unit == "{resource}"
    resources = _metric(sink, "aether.snapshot.resources")
    for type_url, published in last.resources.items():
        assert point_value(resources, **{"aether.xds.type_url": type_url}) == len(published), type_url
    size = _metric(sink, "aether.snapshot.size")
    assert point_value(size, **{"aether.xds.type_url": CLUSTER_TYPE}) == sum(
        len(resource.body) for resource in last.resources[CLUSTER_TYPE].values()
    )
    assert _metric(sink, "aether.snapshot.size").unit == "By"
    assert _metric(sink, "aether.xds.pushes").unit == "{response}"

    edit, trace = _route_edit_trace(sink.spans(service=SERVICE))
    by_name = {span.name: span for span in trace}
    root = by_name["aether.change"]
    assert not root.parent_span_id
    assert edit.parent_span_id == root.span_id
    for hop in ("aether.log.commit", "aether.fold", "aether.project", "aether.xds.push RDS"):
        assert by_name[hop].parent_span_id == root.span_id, hop
    push = by_name["aether.xds.push RDS"]
    assert _attributes(push)["aether.log.seq"] == _attributes(root)["aether.log.seq.last"]
    ack = next(
        span for span in trace if span.name == "aether.xds.ack" and span.parent_span_id == push.span_id
    )
    assert ack.status.code != otlp.Status.STATUS_CODE_ERROR
    first, last = (int(_attributes(root)[key]) for key in ("aether.log.seq.first", "aether.log.seq.last"))
    assert first <= int(_attributes(edit)["aether.log.seq"]) <= last
    nack_push = next(
        span
        for span in sink.spans(service=SERVICE)
        if span.name == "aether.xds.push CDS" and span.status.code == otlp.Status.STATUS_CODE_ERROR
    )
    assert "duration" in nack_push.status.message  # Envoy's reason for rejecting `broken`

    assert ENVOY_STAT in _all_metric_names(sink)
