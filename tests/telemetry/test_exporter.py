"""A collector that is down, slow or answers garbage: the role's work goes on, nothing grows without bound, and
what is lost is counted."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import trio

from aether.core.project.node import project_node
from aether.core.snapshot import Snapshot
from aether.core.state import State
from aether.plane.plane import open_plane
from aether.proto.otlp.v1 import otlp_pb2 as otlp
from aether.telemetry import OtlpEndpoint, TelemetryConfig, telemetry_running
from aether.telemetry.exporter import OtlpHttpTransport
from aether.telemetry.otlp import encode_finished_spans
from aether.telemetry.spans import SpanExporter, Tracer
from aether.telemetry.traces import ChangeTracer
from aether.testing import make_pod, pod_added
from aether.testing.envoy import wait_for
from aether.testing.xds_resources import pick_free_port

NODE = "node-a"
PODS = 20


def _project(state: State, now: int) -> Snapshot:
    return project_node(state, node_name=NODE, now=now)


@contextlib.contextmanager
def _tcp_server(answer: bytes | None) -> Iterator[tuple[int, threading.Event]]:
    """A TCP server on loopback: each connection gets `answer` after its request, or nothing (None) until the
    returned event is set. Yields its port and that event."""
    listener = socket.create_server(("127.0.0.1", 0))
    release = threading.Event()
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.05)
        connections = []
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            connections.append(connection)
            connection.recv(65536)
            if answer is not None:
                connection.sendall(answer)
            else:
                release.wait()
                connection.close()  # the stalled export fails at once
        for connection in connections:
            connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], release
    finally:
        release.set()
        stop.set()
        thread.join()
        listener.close()


def _config(url: str, *, export_timeout: float = 0.5) -> TelemetryConfig:
    return TelemetryConfig(
        service_name="aether-test",
        endpoint=OtlpEndpoint.parse(url),
        metrics=True,
        traces=True,
        export_interval=0.05,
        export_timeout=export_timeout,
    )


async def _register_pods(tmp_path: Path) -> int:
    """Run a plane, send it `PODS` pods, wait until all are folded; return the journal's seq."""
    async with open_plane(tmp_path / "log", project=_project) as plane:
        async with plane.journal.sender() as send:
            for index in range(PODS):
                await send.send(pod_added(make_pod(f"web-{index}", node_name=NODE)))

        async def folded() -> bool:
            await trio.lowlevel.checkpoint()
            return plane.journal.state.seq >= PODS

        await wait_for(folded, timeout=30)
        return plane.journal.state.seq


async def test_a_collector_that_is_down_costs_the_data_not_the_work(tmp_path: Path) -> None:
    """Nothing listens at the endpoint: every event is folded, and the lost points and spans are counted."""
    with telemetry_running(_config(f"http://127.0.0.1:{pick_free_port()}")) as telemetry:
        assert await _register_pods(tmp_path) == PODS
    statistics = telemetry.statistics()
    assert statistics.metrics.failures >= 1
    assert statistics.metrics.dropped >= 1
    assert statistics.metrics.exports == 0
    assert statistics.traces.failures >= 1
    assert statistics.traces.dropped >= 1


async def test_a_collector_that_never_answers_does_not_hold_up_the_journal(tmp_path: Path) -> None:
    """The collector accepts and stalls (for longer than the test runs): every event is folded while the first
    exports still wait, none of them finished; released, they fail and their data is counted as dropped."""
    config = _config("http://127.0.0.1:1", export_timeout=300)
    with _tcp_server(None) as (port, release):
        config = attrs.evolve(config, endpoint=OtlpEndpoint.parse(f"http://127.0.0.1:{port}"))
        with telemetry_running(config) as telemetry:
            assert await _register_pods(tmp_path) == PODS
            stalled = telemetry.statistics()
            assert (stalled.metrics.exports, stalled.metrics.failures) == (0, 0)
            assert (stalled.traces.exports, stalled.traces.failures) == (0, 0)
            release.set()
    assert telemetry.statistics().traces.dropped >= 1


async def test_a_collector_that_answers_garbage_counts_as_failed(tmp_path: Path) -> None:
    garbage = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\n\xff\xff\xff\xff"
    with (
        _tcp_server(garbage) as (port, _),
        telemetry_running(_config(f"http://127.0.0.1:{port}")) as telemetry,
    ):
        assert await _register_pods(tmp_path) == PODS
    statistics = telemetry.statistics()
    assert statistics.traces.failures >= 1
    assert statistics.traces.dropped >= 1
    assert statistics.traces.exports == 0


def test_the_span_queue_is_bounded_and_its_overflow_counted() -> None:
    """With the exporter stalled, spans beyond the queue's size are dropped at once and counted."""
    with _tcp_server(None) as (port, release):
        transport = OtlpHttpTransport(
            OtlpEndpoint.parse(f"http://127.0.0.1:{port}"), path="/v1/traces", timeout=5
        )
        exporter = SpanExporter(transport, service_name="test", queue_size=8, interval=0.01, batch_size=4)
        tracer = Tracer(exporter, sampling=1.0)
        deadline = time.monotonic() + 30
        while exporter.overflowed == 0 and time.monotonic() < deadline:
            tracer.emit((1, tracer.new_id(), 0, "work", 1, 2, None, None))
        assert exporter.overflowed > 0
        release.set()
        tracer.shutdown()
    assert exporter.statistics().dropped >= exporter.overflowed


def test_spans_encode_as_otlp_with_their_parent_and_status() -> None:
    """The encoding keeps ids, parent, kind, attributes and an error (rotel's round trip is in test_collector)."""
    spans = [
        (7, 1, 0, "parent", 10, 40, None, None),
        (7, 2, 1, "child", 20, 30, {"n": 1}, "rejected"),
    ]
    request = otlp.ExportTraceServiceRequest.FromString(
        encode_finished_spans(spans, service_name="aether-test")
    )
    assert request.resource_spans[0].resource.attributes[0].value.string_value == "aether-test"
    encoded = {span.name: span for span in request.resource_spans[0].scope_spans[0].spans}
    assert encoded["child"].parent_span_id == encoded["parent"].span_id == (1).to_bytes(8, "big")
    assert not encoded["parent"].parent_span_id
    assert encoded["child"].trace_id == encoded["parent"].trace_id == (7).to_bytes(16, "big")
    assert encoded["child"].kind == otlp.Span.SPAN_KIND_INTERNAL
    assert (encoded["child"].start_time_unix_nano, encoded["child"].end_time_unix_nano) == (20, 30)
    assert encoded["child"].attributes[0].value.int_value == 1
    assert encoded["child"].status.code == otlp.Status.STATUS_CODE_ERROR
    assert encoded["child"].status.message == "rejected"
    assert encoded["parent"].status.code == otlp.Status.STATUS_CODE_UNSET


def test_an_unsampled_change_leaves_its_pushes_out() -> None:
    """Parent-based sampling: at ratio 0 no change and none of its pushes is traced; at 1 every push is its
    change's child."""
    for sampling, traced in ((0.0, False), (1.0, True)):
        transport = OtlpHttpTransport(OtlpEndpoint.parse("http://127.0.0.1:1"), path="/v1/traces", timeout=1)
        exporter = SpanExporter(transport, service_name="test", queue_size=64, interval=60)
        changes = ChangeTracer(Tracer(exporter, sampling=sampling, seed=1))
        change = changes.start_change(first_seq=1, last_seq=1, events=[], start=1)
        change.hop("aether.fold", start=1, end=2)
        change.end()
        push = changes.start_push(seq=1, node_id="n", type_name="RDS", version="1", nonce="a")
        assert (push is not None) is traced
        if push is not None:
            push.answered(acked=True)
            assert push.trace_id == change.trace_id
        queued = list(exporter._queue)
        assert len(queued) == (4 if traced else 0)
        assert {span[3] for span in queued} <= {
            "aether.fold",
            "aether.change",
            "aether.xds.ack",
            "aether.xds.push RDS",
        }
        exporter._queue.clear()
        exporter.shutdown()


def test_light_histograms_bucket_as_otlp_says_and_join_the_export() -> None:
    """A value equal to a bound counts in that bound's bucket ((previous, bound]); each point's count is its
    buckets' sum; the points join the SDK's request in the `aether` scope."""
    from aether.telemetry.instruments import LATENCY_BUCKETS, LightHistogram
    from aether.telemetry.otlp import add_histograms

    histogram = LightHistogram("aether.test.duration", unit="s", description="d", started=1)
    for value in (LATENCY_BUCKETS[0], LATENCY_BUCKETS[0] * 1.5, 100.0):
        histogram.record(value, {"k": "v"})
    request = otlp.ExportMetricsServiceRequest(resource_metrics=[otlp.ResourceMetrics()])
    assert add_histograms(request, [histogram], now=5) == 1
    [metric] = request.resource_metrics[0].scope_metrics[0].metrics
    [point] = metric.histogram.data_points
    assert (metric.name, metric.unit) == ("aether.test.duration", "s")
    assert list(point.bucket_counts[:2]) == [1, 1]
    assert point.bucket_counts[-1] == 1
    assert point.count == 3 == sum(point.bucket_counts)
    assert (point.min, point.max, point.start_time_unix_nano, point.time_unix_nano) == (
        LATENCY_BUCKETS[0],
        100.0,
        1,
        5,
    )
    assert metric.histogram.aggregation_temporality == otlp.AGGREGATION_TEMPORALITY_CUMULATIVE
