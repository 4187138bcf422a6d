"""What a role exports, from its command line: `--otlp-endpoint`, `--otel-enabled`, `--trace-export`,
`--trace-sampling`.

Nothing is exported unless `--otlp-endpoint` is given together with `--otel-enabled` (metrics) or `--trace-export`
(traces); a flag without the endpoint is refused, so a mistyped deployment does not silently export nothing.
"""

from __future__ import annotations

import argparse
from typing import Any

import attrs

from aether.telemetry.endpoint import OtlpEndpoint

__all__ = ["TelemetryConfig", "add_telemetry_arguments", "telemetry_config"]


def _ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (give a ratio from 0 to 1)") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{value} is outside 0..1 (0 samples no trace, 1 samples every one)")
    return value


def _endpoint(text: str) -> OtlpEndpoint:
    try:
        return OtlpEndpoint.parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


@attrs.frozen(kw_only=True)
class TelemetryConfig:
    """A role's telemetry: off unless an endpoint and at least one signal are given."""

    service_name: str
    """`service.name` of the resource: `aether-agent`, `aether-registrar`, ..."""
    endpoint: OtlpEndpoint | None = None
    metrics: bool = False
    traces: bool = False
    sampling: float = 1.0
    """The ratio of changes traced (parent-based: every span of a sampled change is kept)."""
    export_interval: float = 10.0
    """Seconds between metric exports (and the longest a span waits in the queue)."""
    export_timeout: float = 5.0
    """Seconds one export may take before it is abandoned (its data dropped and counted)."""
    queue_size: int = 2048
    """Spans held for export at most: beyond it new spans are dropped and counted, never queued."""

    @property
    def enabled(self) -> bool:
        return self.endpoint is not None and (self.metrics or self.traces)


def add_telemetry_arguments(parser: Any) -> None:
    """Add the OTLP options to a role's parser (`aether.telemetry.telemetry_config` reads them)."""
    group = parser.add_argument_group("telemetry (OpenTelemetry, pushed over OTLP/HTTP)")
    group.add_argument(
        "--otlp-endpoint",
        type=_endpoint,
        metavar="URL",
        help="the collector's OTLP/HTTP receiver, e.g. http://127.0.0.1:4318",
    )
    group.add_argument("--otel-enabled", action="store_true", help="export metrics to --otlp-endpoint")
    group.add_argument("--trace-export", action="store_true", help="export traces to --otlp-endpoint")
    group.add_argument(
        "--trace-sampling",
        type=_ratio,
        default=1.0,
        metavar="RATIO",
        help="ratio of changes traced (default 1)",
    )
    group.add_argument(
        "--otel-export-interval", type=float, default=10.0, metavar="SECONDS", help=argparse.SUPPRESS
    )


def telemetry_config(arguments: argparse.Namespace, *, service_name: str) -> TelemetryConfig:
    """The telemetry options of a parsed command line.

    Raises:
        ValueError: `--otel-enabled` or `--trace-export` without `--otlp-endpoint`.
    """
    endpoint: OtlpEndpoint | None = arguments.otlp_endpoint
    if endpoint is None and (arguments.otel_enabled or arguments.trace_export):
        raise ValueError(
            "--otel-enabled and --trace-export need --otlp-endpoint URL (the collector's OTLP/HTTP)"
        )
    if arguments.otel_export_interval <= 0:
        raise ValueError(f"--otel-export-interval {arguments.otel_export_interval}: give a positive number")
    return TelemetryConfig(
        service_name=service_name,
        endpoint=endpoint,
        metrics=arguments.otel_enabled,
        traces=arguments.trace_export,
        sampling=arguments.trace_sampling,
        export_interval=arguments.otel_export_interval,
    )
