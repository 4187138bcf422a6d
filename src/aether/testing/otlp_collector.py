"""A real OpenTelemetry collector for tests (`rotel`, a Rust collector shipped in a PyPI wheel) and the OTLP/HTTP
sink it exports to, which the test reads.

    our process / Envoy ──OTLP (HTTP or gRPC)──▶ rotel ──OTLP/HTTP──▶ OtlpSink (in the test, on loopback)

The sink decodes with `aether.proto.otlp.v1` (wire-compatible with OTLP), so what it reads went through a collector
that knows nothing of Aether: a name, unit or field that is wrong on the wire would not survive the trip.
"""

from __future__ import annotations

import contextlib
import gzip
import http.server
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import attrs
import rotel  # type: ignore[import-untyped]
import trio

from aether.proto.otlp.v1 import otlp_pb2 as otlp
from aether.telemetry import OtlpEndpoint, TelemetryConfig, telemetry_running
from aether.testing.xds_resources import pick_free_port

__all__ = ["Collector", "OtlpSink", "open_otlp_sink", "open_rotel", "point_value", "telemetry_through_rotel"]

ROTEL_AGENT = Path(rotel.__file__).parent / "rotel-agent"


class OtlpSink:
    """What the collector exported to us: every metrics and traces request, decoded, in arrival order."""

    def __init__(self) -> None:
        self.port = 0
        self._lock = threading.Lock()
        self._metrics: list[otlp.ExportMetricsServiceRequest] = []
        self._traces: list[otlp.ExportTraceServiceRequest] = []

    def receive(self, path: str, body: bytes) -> bytes:
        if path == "/v1/metrics":
            with self._lock:
                self._metrics.append(otlp.ExportMetricsServiceRequest.FromString(body))
            return otlp.ExportMetricsServiceResponse().SerializeToString()
        if path == "/v1/traces":
            with self._lock:
                self._traces.append(otlp.ExportTraceServiceRequest.FromString(body))
            return otlp.ExportTraceServiceResponse().SerializeToString()
        return b""

    def metrics(self, *, service: str) -> dict[str, list[otlp.Metric]]:
        """Every metric exported by `service` (its resource's `service.name`), by name, oldest first."""
        found: dict[str, list[otlp.Metric]] = {}
        with self._lock:
            requests = list(self._metrics)
        for request in requests:
            for resource_metrics in request.resource_metrics:
                if _service(resource_metrics.resource) != service:
                    continue
                for scope in resource_metrics.scope_metrics:
                    for metric in scope.metrics:
                        found.setdefault(metric.name, []).append(metric)
        return found

    def latest(self, name: str, *, service: str) -> otlp.Metric | None:
        """The last export of metric `name` by `service` (cumulative: it holds every value so far)."""
        exported = self.metrics(service=service).get(name)
        return exported[-1] if exported else None

    def spans(self, *, service: str) -> list[otlp.Span]:
        with self._lock:
            requests = list(self._traces)
        return [
            span
            for request in requests
            for resource_spans in request.resource_spans
            if _service(resource_spans.resource) == service
            for scope in resource_spans.scope_spans
            for span in scope.spans
        ]

    def services(self) -> set[str]:
        with self._lock:
            requests = list(self._metrics)
        return {_service(rm.resource) for request in requests for rm in request.resource_metrics}


def _service(resource: otlp.Resource) -> str:
    for attribute in resource.attributes:
        if attribute.key == "service.name":
            return attribute.value.string_value
    return ""


def point_value(metric: otlp.Metric, **attributes: str) -> float | None:
    """The value of `metric`'s data point whose attributes include `attributes` (a histogram: its count)."""
    points: Any
    if metric.HasField("sum"):
        points = metric.sum.data_points
    elif metric.HasField("gauge"):
        points = metric.gauge.data_points
    else:
        for point in metric.histogram.data_points:
            if _has(point.attributes, attributes):
                return float(point.count)
        return None
    for point in points:
        if _has(point.attributes, attributes):
            return float(point.as_int) if point.HasField("as_int") else point.as_double
    return None


def _has(found: Any, wanted: dict[str, str]) -> bool:
    values = {kv.key: kv.value.string_value for kv in found}
    return all(values.get(key) == value for key, value in wanted.items())


@contextlib.contextmanager
def open_otlp_sink() -> Iterator[OtlpSink]:
    """Serve an OTLP/HTTP receiver on 127.0.0.1 (a port of its own: `sink.port`) for the block."""
    sink = OtlpSink()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            answer = sink.receive(self.path, body)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    sink.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, name="otlp-sink", daemon=True)
    thread.start()
    try:
        yield sink
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@attrs.frozen(kw_only=True)
class Collector:
    """A running rotel: where it receives OTLP."""

    http_port: int
    grpc_port: int

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"


async def _listening(port: int) -> bool:
    try:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
    except OSError:
        return False
    await stream.aclose()
    return True


def _log_file(work_dir: Path) -> Any:
    work_dir.mkdir(parents=True, exist_ok=True)
    return (work_dir / "rotel.log").open("wb")


@contextlib.asynccontextmanager
async def open_rotel(sink: OtlpSink, *, work_dir: Path) -> AsyncIterator[Collector]:
    """Run rotel for the block: OTLP in over gRPC and HTTP on loopback, out over OTLP/HTTP to `sink`."""
    collector = Collector(http_port=pick_free_port(), grpc_port=pick_free_port())
    log = _log_file(work_dir)
    command = [
        str(ROTEL_AGENT),
        "start",
        "--otlp-grpc-endpoint",
        f"127.0.0.1:{collector.grpc_port}",
        "--otlp-http-endpoint",
        f"127.0.0.1:{collector.http_port}",
        "--exporter",
        "otlp",
        "--otlp-exporter-protocol",
        "http",
        "--otlp-exporter-endpoint",
        f"http://127.0.0.1:{sink.port}",
        "--batch-timeout",
        "100ms",
    ]
    with log:
        process = await trio.lowlevel.open_process(command, stdout=log, stderr=log)
        try:
            with trio.fail_after(30):
                while not (await _listening(collector.http_port) and await _listening(collector.grpc_port)):
                    if process.poll() is not None:
                        raise RuntimeError(
                            f"rotel exited with {process.returncode}: see {work_dir / 'rotel.log'}"
                        )
                    await trio.sleep(0.02)
            yield collector
        finally:
            process.terminate()
            with trio.move_on_after(5) as waited:
                await process.wait()
            if waited.cancelled_caught:
                process.kill()
                await process.wait()


@contextlib.asynccontextmanager
async def telemetry_through_rotel(
    work_dir: Path, *, service_name: str, metrics: bool = False, traces: bool = False
) -> AsyncIterator[OtlpSink]:
    """This process's telemetry as `service_name` (metrics and/or traces, exported every 0.2 s) running through a
    real rotel in `work_dir` for the block; yields the sink rotel exports to (readable after the block too)."""
    with open_otlp_sink() as sink:
        async with open_rotel(sink, work_dir=work_dir) as collector:
            config = TelemetryConfig(
                service_name=service_name,
                endpoint=OtlpEndpoint.parse(collector.http_url),
                metrics=metrics,
                traces=traces,
                export_interval=0.2,
            )
            with telemetry_running(config):
                yield sink
