"""`pip install .` gives a working OTLP exporter in one step, though xds-protos ships stale copies of
opentelemetry-proto's generated modules (infra-findings section 5): we depend on neither opentelemetry-proto nor the
upstream OTLP exporters, and encode with our own wire-compatible messages (`aether.proto.otlp.v1`)."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys


def test_the_package_requires_nothing_that_clashes_with_xds_protos() -> None:
    names = {
        re.split(r"[ ;<>=!~\[]", requirement, maxsplit=1)[0].lower()
        for requirement in importlib.metadata.requires("aether-mesh") or []
        if "extra ==" not in requirement
    }
    assert {"opentelemetry-sdk", "opentelemetry-api", "xds-protos"} <= names
    assert not {
        name for name in names if name.startswith("opentelemetry-exporter") or name == "opentelemetry-proto"
    }


def test_the_exporter_imports_and_encodes_beside_envoys_protos() -> None:
    """In the installed environment (one `pip install`), with xds-protos' own opentelemetry protos loaded first
    (Envoy's OpenTelemetry access logger imports them), the exporter imports, encodes real SDK metrics, and never
    loads `opentelemetry.proto`'s modules itself."""
    code = """
import sys
from envoy.extensions.access_loggers.open_telemetry.v3 import logs_service_pb2  # xds-protos' copies of OTLP
before = {name for name in sys.modules if name.startswith("opentelemetry.proto")}
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from aether.telemetry.exporter import OtlpHttpMetricExporter
from aether.telemetry.spans import SpanExporter, Tracer
from aether.telemetry.otlp import encode_metrics
from aether.proto.otlp.v1 import otlp_pb2
reader = InMemoryMetricReader()
meter = MeterProvider(metric_readers=[reader]).get_meter("aether")
meter.create_counter("aether.xds.pushes", unit="{response}").add(3, {"aether.xds.type": "CDS"})
body = encode_metrics(reader.get_metrics_data()).SerializeToString()
metric = otlp_pb2.ExportMetricsServiceRequest.FromString(body).resource_metrics[0].scope_metrics[0].metrics[0]
assert (metric.name, metric.unit, metric.sum.data_points[0].as_int) == ("aether.xds.pushes", "{response}", 3), metric
after = {name for name in sys.modules if name.startswith("opentelemetry.proto")}
assert after == before, after - before
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
