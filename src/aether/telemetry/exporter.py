"""OTLP/HTTP export on the standard library's `http.client`: the SDK's metric exporter, and the transport our own
span exporter (`aether.telemetry.spans`) posts through.

They run on their own threads (the SDK's periodic metric reader, `SpanExporter`'s), never on trio's: a collector
that is down, slow or answers garbage costs those threads a bounded wait (`timeout`) and the data of that export,
which is dropped and counted (`ExportStatistics`), never a role's work.

Why not `opentelemetry-exporter-otlp-proto-http`: it imports `opentelemetry.proto`, whose generated modules
xds-protos overwrites with stale copies when both are installed in one `pip install` (infra-findings section 5).
We encode into our own wire-compatible copy of the OTLP messages (`aether.proto.otlp.v1`) instead.
"""

from __future__ import annotations

import http.client
import logging
import ssl
import threading
import time
from collections.abc import Sequence
from typing import Any

import attrs
from google.protobuf.message import DecodeError
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData

from aether.proto.otlp.v1 import otlp_pb2 as otlp
from aether.telemetry.endpoint import OtlpEndpoint
from aether.telemetry.otlp import add_histograms, encode_metrics, metric_points

__all__ = ["ExportStatistics", "OtlpHttpMetricExporter", "OtlpHttpTransport"]

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
        self.timeout = timeout
        self._connection: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()
        self.exports = self.failures = self.dropped = 0
        self._failing = False

    def _connect(self) -> http.client.HTTPConnection:
        if self._endpoint.scheme == "https":
            return http.client.HTTPSConnection(
                self._endpoint.host,
                self._endpoint.port,
                timeout=self.timeout,
                context=ssl.create_default_context(),
            )
        return http.client.HTTPConnection(self._endpoint.host, self._endpoint.port, timeout=self.timeout)

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

    def _post_checked(self, body: bytes, *, items: int, response: Any, rejected: str) -> bool:
        """Post `body`; parse the answer as `response` (counting its partially rejected `rejected` items)."""
        answer = self.post(body, items=items)
        if answer is None:
            return False
        try:
            parsed = response.FromString(answer)
        except DecodeError as error:
            self.answered_garbage(items, error)
            return False
        count = getattr(parsed.partial_success, rejected)
        if count:
            self.rejected(count, parsed.partial_success.error_message)
        return True

    def post_metrics(self, body: bytes, *, items: int) -> bool:
        """Post an encoded `ExportMetricsServiceRequest` of `items` data points; True when it was accepted."""
        return self._post_checked(
            body, items=items, response=otlp.ExportMetricsServiceResponse, rejected="rejected_data_points"
        )

    def post_traces(self, body: bytes, *, items: int) -> bool:
        """Post an encoded `ExportTraceServiceRequest` of `items` spans; True when it was accepted."""
        return self._post_checked(
            body, items=items, response=otlp.ExportTraceServiceResponse, rejected="rejected_spans"
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
        self.histograms: Sequence[Any] = ()
        """Our light histograms (`aether.telemetry.instruments.LightHistogram`), added to each export."""

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        request = encode_metrics(metrics_data)
        added = add_histograms(request, self.histograms, now=time.time_ns())
        body = request.SerializeToString()
        if self.transport.post_metrics(body, items=metric_points(metrics_data) + added):
            return MetricExportResult.SUCCESS
        return MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self.transport.close()
