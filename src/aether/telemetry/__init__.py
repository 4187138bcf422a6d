"""OpenTelemetry for every role: metrics and traces pushed over OTLP/HTTP to a collector (`--otlp-endpoint`).

Off by default and then free: no SDK object exists, instruments are no-ops, tracing is one `is None` test.
The core never imports this package: the adapters (journal, publisher, xDS server, registrar, mesh-dns) record.
"""

from aether.telemetry.config import TelemetryConfig, add_telemetry_arguments, telemetry_config
from aether.telemetry.endpoint import DEFAULT_OTLP_GRPC_PORT, DEFAULT_OTLP_HTTP_PORT, OtlpEndpoint
from aether.telemetry.instruments import (
    NOOP,
    CniMetrics,
    ControllerMetrics,
    Counter,
    DnsMetrics,
    Histogram,
    JournalMetrics,
    RegistrarMetrics,
    XdsMetrics,
    observe,
)
from aether.telemetry.runtime import OFF, Telemetry, TelemetryStatistics, current_telemetry, telemetry_running
from aether.telemetry.traces import (
    TRACEPARENT,
    ChangeTrace,
    ChangeTracer,
    PushTrace,
    RemoteParent,
    change_tracer,
    client_span,
    parse_traceparent,
    record_remote,
    record_span,
)

__all__ = [
    "DEFAULT_OTLP_GRPC_PORT",
    "DEFAULT_OTLP_HTTP_PORT",
    "NOOP",
    "OFF",
    "TRACEPARENT",
    "ChangeTrace",
    "ChangeTracer",
    "CniMetrics",
    "ControllerMetrics",
    "Counter",
    "DnsMetrics",
    "Histogram",
    "JournalMetrics",
    "OtlpEndpoint",
    "PushTrace",
    "RegistrarMetrics",
    "RemoteParent",
    "Telemetry",
    "TelemetryConfig",
    "TelemetryStatistics",
    "XdsMetrics",
    "add_telemetry_arguments",
    "change_tracer",
    "client_span",
    "current_telemetry",
    "observe",
    "parse_traceparent",
    "record_remote",
    "record_span",
    "telemetry_config",
    "telemetry_running",
]
