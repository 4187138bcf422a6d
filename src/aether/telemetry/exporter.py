"""OTLP/HTTP exporters for the OpenTelemetry SDK, on the standard library's `http.client`.

They run on the SDK's own threads (the periodic metric reader, `BoundedSpanProcessor`), never on trio's: a collector
that is down, slow or answers garbage costs those threads a bounded wait (`timeout`) and the data of that export,
which is dropped and counted (`ExportStatistics`), never a role's work.

Why not `opentelemetry-exporter-otlp-proto-http`: it imports `opentelemetry.proto`, whose generated modules
xds-protos overwrites with stale copies when both are installed in one `pip install` (infra-findings section 5).
We encode into our own wire-compatible copy of the OTLP messages (`aether.proto.otlp.v1`) instead.
"""

from __future__ import annotations

import collections
import http.client
import logging
import ssl
import threading
from collections.abc import Sequence
from typing import Any

import attrs
from google.protobuf.message import DecodeError
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from aether.proto.otlp.v1 import otlp_pb2 as otlp
from aether.telemetry.endpoint import OtlpEndpoint
from aether.telemetry.otlp import encode_metrics, encode_spans, metric_points

__all__ = [
    "BoundedSpanProcessor",
    "ExportStatistics",
    "OtlpHttpMetricExporter",
    "OtlpHttpSpanExporter",
    "OtlpHttpTransport",
]

LOG = logging.getLogger("aether.telemetry")


@attrs.frozen(kw_only=True)
class ExportStatistics:
    """What one signal's export has done."""

    exports: int
    """Requests the collector accepted."""
    failures: int
    """Requests that failed: no connection, a timeout, a non-2xx status or an answer that does not parse."""
    dropped: int
    """Items (data points or spans) lost: in failed requests, rejected by the collector or over the queue."""


class OtlpHttpTransport:
    """Posts protobuf bodies to one OTLP/HTTP path, on one kept-alive connection (reopened after any failure)."""

    def __init__(self, endpoint: OtlpEndpoint, *, path: str, timeout: float) -> None:
        self._endpoint = endpoint
        self._path = path
        self._timeout = timeout
        self._connection: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()
        self.exports = self.failures = self.dropped = 0
        self._failing = False

    def _connect(self) -> http.client.HTTPConnection:
        if self._endpoint.scheme == "https":
            return http.client.HTTPSConnection(
                self._endpoint.host,
                self._endpoint.port,
                timeout=self._timeout,
                context=ssl.create_default_context(),
            )
        return http.client.HTTPConnection(self._endpoint.host, self._endpoint.port, timeout=self._timeout)

    def post(self, body: bytes, *, items: int) -> bytes | None:
        """Post `body` (carrying `items` data points or spans); return the answer's body, or None on failure."""
        with self._lock:
            try:
                if self._connection is None:
                    self._connection = self._connect()
                self._connection.request(
                    "POST", self._path, body=body, headers={"Content-Type": "application/x-protobuf"}
                )
                response = self._connection.getresponse()
                answer = response.read()
                if not 200 <= response.status < 300:
                    raise OSError(f"HTTP {response.status} {response.reason}: {answer[:200]!r}")
            except (OSError, http.client.HTTPException) as error:
                self._fail(items, f"{error}")
                return None
            self.exports += 1
            if self._failing:
                self._failing = False
                LOG.warning("otlp export to %s%s works again", self._endpoint, self._path)
            return answer

    def _fail(self, items: int, reason: str) -> None:
        self.failures += 1
        self.dropped += items
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        # At warning once per outage (then at debug): a collector that is down is not the role's error.
        level = logging.DEBUG if self._failing else logging.WARNING
        self._failing = True
        LOG.log(
            level, "otlp export to %s%s failed, %d dropped: %s", self._endpoint, self._path, items, reason
        )

    def answered_garbage(self, items: int, error: Exception) -> None:
        """Count an accepted request whose answer does not parse as its signal's response."""
        with self._lock:
            self.exports -= 1
            self._fail(items, f"the answer is not an OTLP response: {error}")

    def rejected(self, count: int, message: str) -> None:
        with self._lock:
            self.dropped += count
        LOG.warning(
            "otlp collector %s rejected %d items of %s: %s", self._endpoint, count, self._path, message
        )

    def statistics(self) -> ExportStatistics:
        return ExportStatistics(exports=self.exports, failures=self.failures, dropped=self.dropped)

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None


class OtlpHttpMetricExporter(MetricExporter):
    """The SDK's metric exporter over `OtlpHttpTransport` (cumulative temporality, the SDK's default)."""

    def __init__(self, endpoint: OtlpEndpoint, *, timeout: float) -> None:
        super().__init__(preferred_temporality={}, preferred_aggregation={})
        self.transport = OtlpHttpTransport(endpoint, path="/v1/metrics", timeout=timeout)

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        points = metric_points(metrics_data)
        answer = self.transport.post(encode_metrics(metrics_data).SerializeToString(), items=points)
        if answer is None:
            return MetricExportResult.FAILURE
        try:
            response = otlp.ExportMetricsServiceResponse.FromString(answer)
        except DecodeError as error:
            self.transport.answered_garbage(points, error)
            return MetricExportResult.FAILURE
        if response.partial_success.rejected_data_points:
            self.transport.rejected(
                response.partial_success.rejected_data_points, response.partial_success.error_message
            )
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self.transport.close()


class OtlpHttpSpanExporter(SpanExporter):
    """The SDK's span exporter over `OtlpHttpTransport`."""

    def __init__(self, endpoint: OtlpEndpoint, *, timeout: float) -> None:
        self.transport = OtlpHttpTransport(endpoint, path="/v1/traces", timeout=timeout)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        answer = self.transport.post(encode_spans(spans).SerializeToString(), items=len(spans))
        if answer is None:
            return SpanExportResult.FAILURE
        try:
            response = otlp.ExportTraceServiceResponse.FromString(answer)
        except DecodeError as error:
            self.transport.answered_garbage(len(spans), error)
            return SpanExportResult.FAILURE
        if response.partial_success.rejected_spans:
            self.transport.rejected(
                response.partial_success.rejected_spans, response.partial_success.error_message
            )
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.transport.close()


class BoundedSpanProcessor(SpanProcessor):
    """Queues finished sampled spans (at most `queue_size`; more are dropped and counted) and exports them in
    batches from one daemon thread, every `interval` seconds or as soon as a batch is full.

    Ending a span costs an append under a lock: the role's task never waits for the collector.
    """

    def __init__(
        self, exporter: OtlpHttpSpanExporter, *, queue_size: int, interval: float, batch_size: int = 512
    ) -> None:
        self._exporter = exporter
        self._queue: collections.deque[ReadableSpan] = collections.deque()
        self._queue_size = queue_size
        self._batch_size = batch_size
        self._interval = interval
        self._condition = threading.Condition()
        self._stopping = False
        self.overflowed = 0
        self._thread = threading.Thread(target=self._run, name="aether-otlp-spans", daemon=True)
        self._thread.start()

    def on_start(self, span: Span, parent_context: Any = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if not span.context.trace_flags.sampled:
            return
        with self._condition:
            if len(self._queue) >= self._queue_size:
                self.overflowed += 1
                return
            self._queue.append(span)
            if len(self._queue) >= self._batch_size:
                self._condition.notify()

    def _take(self) -> list[ReadableSpan]:
        count = min(len(self._queue), self._batch_size)
        return [self._queue.popleft() for _ in range(count)]

    def _run(self) -> None:
        while True:
            with self._condition:
                if not self._stopping and len(self._queue) < self._batch_size:
                    self._condition.wait(self._interval)
                batch = self._take()
                stopping = self._stopping
            if batch:
                self._exporter.export(batch)
            if stopping and not batch:
                return

    def statistics(self) -> ExportStatistics:
        transport = self._exporter.transport.statistics()
        return attrs.evolve(transport, dropped=transport.dropped + self.overflowed)

    def shutdown(self) -> None:
        with self._condition:
            self._stopping = True
            self._condition.notify()
        self._thread.join(timeout=self._exporter.transport._timeout * 2)
        self._exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        while True:
            with self._condition:
                batch = self._take()
            if not batch:
                return True
            self._exporter.export(batch)
