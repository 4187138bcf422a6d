"""The OpenTelemetry SDK's metric and span data as OTLP messages (`aether.proto.otlp.v1`, wire-compatible with OTLP).

Only what the SDK produces for our instruments is encoded: sums, gauges and explicit-bucket histograms (an
exponential histogram is never configured here); exemplars are left out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from opentelemetry.sdk.metrics.export import Gauge, Histogram, MetricsData, Sum
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from aether.proto.otlp.v1 import otlp_pb2 as otlp

__all__ = ["encode_metrics", "encode_spans", "metric_points"]


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


def metric_points(data: MetricsData) -> int:
    """How many data points `data` holds (what a failed export drops)."""
    return sum(
        len(metric.data.data_points)
        for resource_metrics in data.resource_metrics
        for scope_metrics in resource_metrics.scope_metrics
        for metric in scope_metrics.metrics
    )


def _span(span: ReadableSpan) -> otlp.Span:
    context = span.context
    assert context is not None, "a finished SDK span always has a context"
    encoded = otlp.Span(
        trace_id=context.trace_id.to_bytes(16, "big"),
        span_id=context.span_id.to_bytes(8, "big"),
        flags=int(context.trace_flags),
        name=span.name,
        kind=otlp.Span.SpanKind.ValueType(
            int(span.kind.value) + 1
        ),  # the SDK's INTERNAL is 0, OTLP's SPAN_KIND_INTERNAL is 1
        start_time_unix_nano=span.start_time or 0,
        end_time_unix_nano=span.end_time or 0,
        attributes=_attributes(span.attributes),
        events=[
            otlp.Span.Event(
                time_unix_nano=event.timestamp, name=event.name, attributes=_attributes(event.attributes)
            )
            for event in span.events
        ],
        status=otlp.Status(
            code=otlp.Status.StatusCode.ValueType(int(span.status.status_code.value)),
            message=span.status.description or "",
        ),
    )
    if span.parent is not None:
        encoded.parent_span_id = span.parent.span_id.to_bytes(8, "big")
    return encoded


def encode_spans(spans: Iterable[ReadableSpan]) -> otlp.ExportTraceServiceRequest:
    """The OTLP export request of finished spans, grouped by resource and scope (in the order first seen)."""
    groups: dict[tuple[int, int], tuple[Resource, InstrumentationScope | None, list[otlp.Span]]] = {}
    for span in spans:
        key = (id(span.resource), id(span.instrumentation_scope))
        groups.setdefault(key, (span.resource, span.instrumentation_scope, []))[2].append(_span(span))
    return otlp.ExportTraceServiceRequest(
        resource_spans=[
            otlp.ResourceSpans(
                resource=_resource(resource),
                scope_spans=[otlp.ScopeSpans(scope=_scope(scope), spans=encoded)],
            )
            for resource, scope, encoded in groups.values()
        ]
    )
