"""Tests of `aether.core.project.tracing`: Envoy's OpenTelemetry tracer on HTTP connection managers."""

from __future__ import annotations

from envoy.config.trace.v3 import opentelemetry_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2

from aether.core.project.tracing import OPENTELEMETRY_TRACER, SPAN_NAME, add_tracing, tracing_of
from aether.testing import make_mesh_config

TRACED = make_mesh_config(tracing_enabled=True, trace_sample_per_million=12_500)


def test_tracing_needs_both_the_mesh_config_and_a_declared_collector_cluster() -> None:
    assert tracing_of(TRACED, collector_cluster="", service_name="s") is None
    assert tracing_of(make_mesh_config(), collector_cluster="otel_collector", service_name="s") is None
    tracing = tracing_of(TRACED, collector_cluster="otel_collector", service_name="aether-edge")
    assert tracing is not None
    assert (tracing.collector_cluster, tracing.service_name, tracing.sample_per_million) == (
        "otel_collector",
        "aether-edge",
        12_500,
    )


def test_the_tracer_is_opentelemetry_to_the_collector_cluster_sampling_the_mesh_config_rate() -> None:
    manager = add_tracing(
        hcm_pb2.HttpConnectionManager(stat_prefix="x"),
        tracing_of(TRACED, collector_cluster="otel_collector", service_name="shop/web"),
    )
    assert manager.tracing.provider.name == OPENTELEMETRY_TRACER
    config = opentelemetry_pb2.OpenTelemetryConfig()
    assert manager.tracing.provider.typed_config.Unpack(config)
    assert config.grpc_service.envoy_grpc.cluster_name == "otel_collector"
    assert config.service_name == "shop/web"
    assert manager.tracing.random_sampling.value == 1.25  # percent: 12 500 per million
    assert manager.tracing.operation == SPAN_NAME


def test_no_tracing_leaves_the_manager_untouched() -> None:
    manager = add_tracing(hcm_pb2.HttpConnectionManager(stat_prefix="x"), None)
    assert not manager.HasField("tracing")
