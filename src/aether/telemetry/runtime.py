"""The process's telemetry: started once by a role's command from its `TelemetryConfig`, read by the adapters.

Off (the default, and whenever no endpoint or signal is configured) nothing of the SDK is imported or created: the
adapters get no-op instruments (`aether.telemetry.instruments`) and no tracer, and skip tracing with one `is None`.
On, the SDK's `MeterProvider` with a periodic reader, and our own light tracer (`aether.telemetry.spans`: parent-based
ratio sampling, a bounded span queue) export over OTLP/HTTP from their own threads.

Like `logging`'s loggers, the running telemetry is process-wide (`current_telemetry`): a role installs it before it
builds its adapters (`telemetry_running`), which take their instruments when they are made.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import attrs

from aether.telemetry.config import TelemetryConfig

__all__ = ["OFF", "Telemetry", "TelemetryStatistics", "current_telemetry", "telemetry_running"]

SCOPE = "aether"
"""The instrumentation scope of every meter and tracer."""


@attrs.frozen(kw_only=True)
class TelemetryStatistics:
    """Exports and drops per signal (`None` for a signal that is off)."""

    metrics: Any = None
    """`ExportStatistics` of the metric exporter."""
    traces: Any = None
    """`ExportStatistics` of the span exporter (its queue's overflow included in `dropped`)."""


class Telemetry:
    """Meters and a tracer, or nothing: `meter` and `tracer` are None for a signal that is off."""

    def __init__(
        self,
        *,
        meter: Any = None,
        tracer: Any = None,
        shutdown: tuple[Any, ...] = (),
        metric_exporter: Any = None,
        span_processor: Any = None,
    ) -> None:
        self.meter = meter
        """An `opentelemetry.metrics.Meter`, or None."""
        self.tracer = tracer
        """Our light `aether.telemetry.spans.Tracer`, or None."""
        self.instruments: dict[str, Any] = {}
        """Our light counters and histograms by name (`aether.telemetry.instruments`)."""
        self.histograms: list[Any] = []
        """Our `LightHistogram`s, which the metric exporter adds to each export."""
        self.changes: Any = None
        """The `ChangeTracer` every adapter shares (made by `aether.telemetry.change_tracer`)."""
        self._shutdown = shutdown
        self._metric_exporter = metric_exporter
        self._span_processor = span_processor

    def statistics(self) -> TelemetryStatistics:
        return TelemetryStatistics(
            metrics=None if self._metric_exporter is None else self._metric_exporter.transport.statistics(),
            traces=None if self._span_processor is None else self._span_processor.statistics(),
        )

    def shutdown(self) -> None:
        """Export what is pending (bounded by the export timeout) and stop the export threads."""
        for provider in self._shutdown:
            provider.shutdown()


OFF = Telemetry()
"""Telemetry that is off: no SDK object exists."""

_current = OFF


def current_telemetry() -> Telemetry:
    """The process's running telemetry (`OFF` unless a role started one)."""
    return _current


def _start(config: TelemetryConfig) -> Telemetry:
    # Imported here: a role with telemetry off never loads the SDK.
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource

    from aether.telemetry.exporter import OtlpHttpMetricExporter, OtlpHttpTransport
    from aether.telemetry.spans import SpanExporter, Tracer

    assert config.endpoint is not None
    resource = Resource.create({"service.name": config.service_name})
    meter = tracer = metric_exporter = span_processor = None
    providers: list[Any] = []
    if config.metrics:
        metric_exporter = OtlpHttpMetricExporter(config.endpoint, timeout=config.export_timeout)
        reader = PeriodicExportingMetricReader(
            metric_exporter,
            export_interval_millis=config.export_interval * 1000,
            export_timeout_millis=config.export_timeout * 1000,
        )
        meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
        meter = meter_provider.get_meter(SCOPE)
        providers.append(meter_provider)
    if config.traces:
        span_processor = SpanExporter(
            OtlpHttpTransport(config.endpoint, path="/v1/traces", timeout=config.export_timeout),
            service_name=config.service_name,
            queue_size=config.queue_size,
            interval=min(config.export_interval, 1.0),
        )
        tracer = Tracer(span_processor, sampling=config.sampling)
        providers.append(tracer)
    telemetry = Telemetry(
        meter=meter,
        tracer=tracer,
        shutdown=tuple(providers),
        metric_exporter=metric_exporter,
        span_processor=span_processor,
    )
    if metric_exporter is not None:
        metric_exporter.histograms = telemetry.histograms
    if meter is not None:
        _observe_drops(meter, telemetry)
    return telemetry


def _observe_drops(meter: Any, telemetry: Telemetry) -> None:
    from opentelemetry.metrics import CallbackOptions, Observation

    def dropped(options: CallbackOptions) -> list[Observation]:
        statistics = telemetry.statistics()
        return [
            Observation(signal.dropped, {"aether.telemetry.signal": name})
            for name, signal in (("metrics", statistics.metrics), ("traces", statistics.traces))
            if signal is not None
        ]

    meter.create_observable_counter(
        "aether.telemetry.dropped",
        callbacks=[dropped],
        unit="{item}",
        description="Data points and spans lost to a collector that was down, slow or answered garbage",
    )


@contextlib.contextmanager
def telemetry_running(config: TelemetryConfig) -> Iterator[Telemetry]:
    """Start `config`'s telemetry (or none, when it is off), make it current for the block, then shut it down."""
    global _current
    telemetry = _start(config) if config.enabled else OFF
    previous, _current = _current, telemetry
    try:
        yield telemetry
    finally:
        _current = previous
        telemetry.shutdown()
