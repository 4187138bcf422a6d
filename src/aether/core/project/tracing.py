"""Envoy's OpenTelemetry tracer on HTTP connection managers, when the MeshConfig enables tracing.

Envoy sends spans to a cluster of its bootstrap (the OpenTelemetry collector's, which `aether bootstrap
--otlp-endpoint` declares together with the stats sink): the projection cannot see the bootstrap, so whoever runs
it says which cluster that is (`collector_cluster`; empty: none, and no tracing whatever the MeshConfig says).
"""

from __future__ import annotations

from typing import Any

import attrs
from envoy.config.core.v3 import grpc_service_pb2
from envoy.config.trace.v3 import http_tracer_pb2, opentelemetry_pb2
from envoy.type.v3 import percent_pb2

from aether.core.events.kube import MeshConfig
from aether.core.project.messages import pack

OPENTELEMETRY_TRACER = "envoy.tracers.opentelemetry"
SPAN_NAME = "%REQ(:METHOD)% %ROUTE_NAME%"
"""The name of Envoy's server span (a substitution format): the request's method and the route it matched."""


@attrs.frozen(kw_only=True)
class Tracing:
    """Where and how much an HTTP connection manager traces."""

    collector_cluster: str
    """The bootstrap's static cluster of the collector's OTLP/gRPC receiver."""
    service_name: str
    """The `service.name` of the spans (the role: `aether-edge`, or the pod's service)."""
    sample_per_million: int
    """The share of requests that start a trace, in millionths."""


def tracing_of(mesh: MeshConfig, *, collector_cluster: str, service_name: str) -> Tracing | None:
    """The tracing `mesh` asks for, or None when it is off or no collector cluster is declared."""
    if not mesh.tracing_enabled or not collector_cluster:
        return None
    return Tracing(
        collector_cluster=collector_cluster,
        service_name=service_name,
        sample_per_million=mesh.trace_sample_per_million,
    )


def add_tracing(manager: Any, tracing: Tracing | None) -> Any:
    """Give HTTP connection manager `manager` the OpenTelemetry tracer of `tracing` (None: leave it untraced)."""
    if tracing is None:
        return manager
    config = opentelemetry_pb2.OpenTelemetryConfig(
        grpc_service=grpc_service_pb2.GrpcService(
            envoy_grpc=grpc_service_pb2.GrpcService.EnvoyGrpc(cluster_name=tracing.collector_cluster)
        ),
        service_name=tracing.service_name,
    )
    manager.tracing.provider.CopyFrom(
        http_tracer_pb2.Tracing.Http(name=OPENTELEMETRY_TRACER, typed_config=pack(config))
    )
    # Envoy names a span `ingress`/`egress` by default: the method and the matched route tell requests apart.
    manager.tracing.operation = SPAN_NAME
    manager.tracing.random_sampling.CopyFrom(percent_pb2.Percent(value=tracing.sample_per_million / 10_000))
    return manager
