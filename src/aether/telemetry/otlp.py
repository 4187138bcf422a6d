"""The OpenTelemetry SDK's metric data and our tracer's spans as OTLP messages (`aether.proto.otlp.v1`,
wire-compatible with OTLP).

Only what the SDK produces for our instruments is encoded: sums, gauges and explicit-bucket histograms (an
exponential histogram is never configured here); exemplars are left out.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from opentelemetry.sdk.metrics.export import Gauge, Histogram, MetricsData, Sum
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from aether.core.protowire import varint
from aether.proto.otlp.v1 import otlp_pb2 as otlp

__all__ = ["FinishedSpan", "encode_finished_spans", "encode_metrics", "metric_points"]

FinishedSpan = tuple[int, int, int, str, int, int, "Mapping[str, Any] | None", "str | None"]
"""One span of our tracer (`aether.telemetry.spans`): trace id, span id, parent id (0 for a root), name, start and
end (ns since the epoch), attributes, and the error that failed it (None when it did not)."""


def _value(value: Any) -> otlp.AnyValue:
    if isinstance(value, bool):
        return otlp.AnyValue(bool_value=value)
    if isinstance(value, int):
        return otlp.AnyValue(int_value=value)
    if isinstance(value, float):
        return otlp.AnyValue(double_value=value)
    if isinstance(value, str):
        return otlp.AnyValue(string_value=value)
    if isinstance(value, bytes):
        return otlp.AnyValue(bytes_value=value)
    if isinstance(value, Sequence):
        return otlp.AnyValue(array_value=otlp.ArrayValue(values=[_value(item) for item in value]))
    return otlp.AnyValue(string_value=str(value))


def _attributes(attributes: Mapping[str, Any] | None) -> list[otlp.KeyValue]:
    return [otlp.KeyValue(key=key, value=_value(value)) for key, value in sorted((attributes or {}).items())]


def _resource(resource: Resource) -> otlp.Resource:
    return otlp.Resource(attributes=_attributes(resource.attributes))


def _scope(scope: InstrumentationScope | None) -> otlp.InstrumentationScope:
    if scope is None:
        return otlp.InstrumentationScope()
    return otlp.InstrumentationScope(name=scope.name, version=scope.version or "")


def _number_point(point: Any) -> otlp.NumberDataPoint:
    encoded = otlp.NumberDataPoint(
        attributes=_attributes(point.attributes),
        start_time_unix_nano=point.start_time_unix_nano or 0,
        time_unix_nano=point.time_unix_nano,
    )
    if isinstance(point.value, int):
        encoded.as_int = point.value
    else:
        encoded.as_double = point.value
    return encoded


def _histogram_point(point: Any) -> otlp.HistogramDataPoint:
    return otlp.HistogramDataPoint(
        attributes=_attributes(point.attributes),
        start_time_unix_nano=point.start_time_unix_nano,
        time_unix_nano=point.time_unix_nano,
        count=point.count,
        sum=point.sum,
        bucket_counts=list(point.bucket_counts),
        explicit_bounds=list(point.explicit_bounds),
        min=point.min,
        max=point.max,
    )


def _metric(metric: Any) -> otlp.Metric | None:
    data = metric.data
    encoded = otlp.Metric(name=metric.name, description=metric.description or "", unit=metric.unit or "")
    if isinstance(data, Sum):
        encoded.sum.CopyFrom(
            otlp.Sum(
                data_points=[_number_point(point) for point in data.data_points],
                aggregation_temporality=otlp.AggregationTemporality.ValueType(
                    int(data.aggregation_temporality)
                ),
                is_monotonic=data.is_monotonic,
            )
        )
    elif isinstance(data, Gauge):
        encoded.gauge.CopyFrom(otlp.Gauge(data_points=[_number_point(point) for point in data.data_points]))
    elif isinstance(data, Histogram):
        encoded.histogram.CopyFrom(
            otlp.Histogram(
                data_points=[_histogram_point(point) for point in data.data_points],
                aggregation_temporality=otlp.AggregationTemporality.ValueType(
                    int(data.aggregation_temporality)
                ),
            )
        )
    else:  # an exponential histogram: never configured by aether.telemetry
        return None
    return encoded


def encode_metrics(data: MetricsData) -> otlp.ExportMetricsServiceRequest:
    """The OTLP export request of one collection of the SDK's metric reader."""
    return otlp.ExportMetricsServiceRequest(
        resource_metrics=[
            otlp.ResourceMetrics(
                resource=_resource(resource_metrics.resource),
                schema_url=resource_metrics.schema_url or "",
                scope_metrics=[
                    otlp.ScopeMetrics(
                        scope=_scope(scope_metrics.scope),
                        schema_url=scope_metrics.schema_url or "",
                        metrics=[m for m in map(_metric, scope_metrics.metrics) if m is not None],
                    )
                    for scope_metrics in resource_metrics.scope_metrics
                ],
            )
            for resource_metrics in data.resource_metrics
        ]
    )


def add_histograms(request: otlp.ExportMetricsServiceRequest, histograms: Iterable[Any], *, now: int) -> int:
    """Add our light histograms' points (`aether.telemetry.instruments.LightHistogram`) to the SDK's encoded
    `request`, in its first resource's `aether` scope; return how many points were added."""
    metrics = []
    for histogram in histograms:
        points = histogram.points(now)
        if points:
            metrics.append(
                otlp.Metric(
                    name=histogram.name,
                    unit=histogram.unit,
                    description=histogram.description,
                    histogram=otlp.Histogram(
                        data_points=[_histogram_point(point) for point in points],
                        aggregation_temporality=otlp.AGGREGATION_TEMPORALITY_CUMULATIVE,
                    ),
                )
            )
    if not metrics or not request.resource_metrics:
        return 0
    resource = request.resource_metrics[0]
    scope = next((scope for scope in resource.scope_metrics if scope.scope.name == "aether"), None)
    if scope is None:
        scope = resource.scope_metrics.add(scope=otlp.InstrumentationScope(name="aether"))
    scope.metrics.extend(metrics)
    return sum(len(metric.histogram.data_points) for metric in metrics)


def metric_points(data: MetricsData) -> int:
    """How many data points `data` holds (what a failed export drops)."""
    return sum(
        len(metric.data.data_points)
        for resource_metrics in data.resource_metrics
        for scope_metrics in resource_metrics.scope_metrics
        for metric in scope_metrics.metrics
    )


# Our spans are encoded by hand, straight to OTLP's wire format: building protobuf messages (a Span, and a KeyValue
# and an AnyValue per attribute) cost four times the rest of tracing. Tags are `(field << 3) | wire type`.
_pack_fixed64 = struct.Struct("<Q").pack
_pack_double = struct.Struct("<d").pack
_FLAGS_SAMPLED = b"\x85\x01" + struct.pack("<I", 1)  # Span.flags (16, fixed32): sampled
_KIND_INTERNAL = b"\x30\x01"  # Span.kind (6, varint): SPAN_KIND_INTERNAL
_STRINGS_REMEMBERED = 4096
_SPANS_BETWEEN_PAUSES = 32
"""About 0.2 ms of encoding: the role's thread waits at most that for the GIL, not the interpreter's 5 ms switch."""


def _delimited(tag: bytes, payload: bytes) -> bytes:
    return tag + varint(len(payload)) + payload


def _any_value(value: Any) -> bytes:
    if value is True or value is False:
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, int):
        return b"\x18" + varint(value & 0xFFFF_FFFF_FFFF_FFFF)  # int64: two's complement
    if isinstance(value, float):
        return b"\x21" + _pack_double(value)
    return _delimited(b"\x0a", (value if isinstance(value, str) else str(value)).encode())


_string_attributes: dict[tuple[str, str], bytes] = {}
"""Span attributes (field 9) of string values, encoded: kinds, sources, types repeat in every span."""


_keys: dict[str, bytes] = {}
"""Attribute keys (KeyValue.key, 1), encoded: a handful of names."""
_names: dict[str, bytes] = {}
"""Span names (5), encoded: one per hop and event kind."""


def _remembered(cache: dict[str, bytes], text: str, tag: bytes) -> bytes:
    encoded = cache.get(text)
    if encoded is None:
        if len(cache) >= _STRINGS_REMEMBERED:
            cache.clear()
        encoded = cache[text] = _delimited(tag, text.encode())
    return encoded


def _span_attribute(key: str, value: Any) -> bytes:
    if type(value) is str:
        cached = _string_attributes.get((key, value))
        if cached is None:
            if len(_string_attributes) >= _STRINGS_REMEMBERED:
                _string_attributes.clear()
            cached = _string_attributes[key, value] = _delimited(
                b"\x4a", _remembered(_keys, key, b"\x0a") + _delimited(b"\x12", _any_value(value))
            )
        return cached
    return _delimited(b"\x4a", _remembered(_keys, key, b"\x0a") + _delimited(b"\x12", _any_value(value)))


def _finished_span(span: FinishedSpan) -> bytes:
    trace_id, span_id, parent_id, name, start, end, attributes, error = span
    parts = [
        b"\x0a\x10",
        trace_id.to_bytes(16, "big"),
        b"\x12\x08",
        span_id.to_bytes(8, "big"),
        _remembered(_names, name, b"\x2a"),
        _KIND_INTERNAL,
        b"\x39",
        _pack_fixed64(start),
        b"\x41",
        _pack_fixed64(end),
        _FLAGS_SAMPLED,
    ]
    if parent_id:
        parts += (b"\x22\x08", parent_id.to_bytes(8, "big"))
    if attributes:
        parts += [_span_attribute(key, value) for key, value in attributes.items()]
    if error is not None:
        parts.append(_delimited(b"\x7a", _delimited(b"\x12", error.encode()) + b"\x18\x02"))  # Status: ERROR
    return _delimited(b"\x12", b"".join(parts))  # ScopeSpans.spans (2)


def encode_finished_spans(
    spans: Sequence[FinishedSpan], *, service_name: str, pause: Callable[[], None] | None = None
) -> bytes:
    """The serialized OTLP `ExportTraceServiceRequest` of our tracer's finished spans (`aether.telemetry.spans`),
    all of one resource (`service.name`) and of the `aether` scope; `pause()` is called after every
    `_SPANS_BETWEEN_PAUSES` spans (the exporter's thread hands the GIL back to the role's there)."""
    resource = otlp.Resource(attributes=_attributes({"service.name": service_name})).SerializeToString()
    scope = otlp.InstrumentationScope(name="aether").SerializeToString()
    encoded = [_delimited(b"\x0a", scope)]
    for first in range(0, len(spans), _SPANS_BETWEEN_PAUSES):
        if first and pause is not None:
            pause()
        encoded.extend(map(_finished_span, spans[first : first + _SPANS_BETWEEN_PAUSES]))
    scope_spans = b"".join(encoded)
    resource_spans = _delimited(b"\x0a", resource) + _delimited(b"\x12", scope_spans)
    return _delimited(b"\x0a", resource_spans)
