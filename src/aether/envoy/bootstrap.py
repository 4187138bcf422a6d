"""Bootstraps that point an Envoy at its control plane over ADS (`ads_bootstrap`), with the admin API on loopback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aether.core.project.names import XDS_CLUSTER

__all__ = [
    "DEFAULT_NODE_CLUSTER",
    "OTEL_CLUSTER",
    "SPIRE_SDS_CLUSTER",
    "XDS_CLUSTER",
    "ads_bootstrap",
    "loopback_admin",
    "otel_stats_sink",
]


SPIRE_SDS_CLUSTER = "spire_agent"
"""The bootstrap cluster of the SPIRE agent's Workload API socket, whose SDS serves the edge its SVID and bundle
(`aether.core.project.edge.EdgeOptions.spire_sds_cluster`)."""

DEFAULT_NODE_CLUSTER = "aether-test"
"""The `node.cluster` every bootstrap built here reports."""

OTEL_CLUSTER = "otel_collector"
"""The name of the bootstrap cluster that points Envoy's OpenTelemetry stats sink at the collector; its tracer too,
when the projection is told the bootstrap declares it (`EdgeOptions.collector_cluster`, `project_node`)."""

_XDS_KEEPALIVE = {"interval": "2s", "timeout": "1s"}
# HTTP/2 PINGs on the xDS connection, so Envoy notices a vanished control plane within about 3 s.

_XDS_RETRY_BACKOFF = {"base_interval": "0.1s", "max_interval": "0.5s"}
# How soon Envoy redials its ADS stream after it failed: Envoy's default (0.5 s, doubling up to 30 s, jittered) grows
# while the plane is down, so a plane that takes seconds to start (the agent: 2-5 s of imports on a loaded machine)
# then waits seconds more for its Envoy. The `faults` restart loops measured Envoy SYNCED again after the restarted
# plane answered, over 10 kill -9 restarts: default backoff, edge max 3.2 s, agent p50 0.54 s and max 7.0 s (4 of 10
# over 1 s); with this one, edge max 0.47 s, agent max 0.50 s (50 restarts each). Redialling a local plane costs one
# connect every half second at most while it is down.


def ads_bootstrap(
    *,
    node_id: str,
    xds_unix_socket: Path | None = None,
    xds_tcp: tuple[str, int] | None = None,
    delta: bool = False,
    admin_port: int = 0,
    spire_socket: Path | None = None,
    otlp_grpc: tuple[str, int] | None = None,
    stats_flush_interval: str = "10s",
) -> dict[str, Any]:
    """Build a bootstrap that takes CDS and LDS (and so EDS and RDS) from one ADS stream.

    Args:
        node_id: The `node.id` Envoy sends on the first request of the stream.
        xds_unix_socket: The control plane's Unix socket.
        xds_tcp: The control plane's `(host, port)`; give exactly one of this and `xds_unix_socket`.
        delta: True for incremental xDS (`DELTA_GRPC`), False for state of the world (`GRPC`).
        admin_port: The admin port on 127.0.0.1; 0 lets Envoy pick one (see `Envoy.admin_address`).
        spire_socket: The SPIRE agent's Workload API socket: declare it as the static cluster `SPIRE_SDS_CLUSTER`
            (HTTP/2), so the edge's transport sockets can take their secrets from SPIRE's SDS.
        otlp_grpc: The OpenTelemetry collector's OTLP/gRPC receiver `(host, port)`: Envoy pushes its stats there
            every `stats_flush_interval` (`otel_stats_sink`); None for no stats sink.

    Returns:
        The bootstrap as JSON-ready dicts.

    Raises:
        ValueError: If neither or both control-plane addresses are given.
    """
    if (xds_unix_socket is None) == (xds_tcp is None):
        raise ValueError(
            f"ads bootstrap: give exactly one of xds_unix_socket and xds_tcp (got {xds_unix_socket!r} and {xds_tcp!r})"
        )
    if xds_unix_socket is not None:
        address: dict[str, Any] = {"pipe": {"path": str(xds_unix_socket)}}
    else:
        assert xds_tcp is not None
        address = {"socket_address": {"address": xds_tcp[0], "port_value": xds_tcp[1]}}
    ads_source = {"ads": {}, "resource_api_version": "V3"}
    clusters = [_grpc_cluster(XDS_CLUSTER, address)]
    if spire_socket is not None:
        clusters.append(_grpc_cluster(SPIRE_SDS_CLUSTER, {"pipe": {"path": str(spire_socket)}}))
    if otlp_grpc is not None:
        sink, otel_cluster = otel_stats_sink(otlp_grpc)
        clusters.append(otel_cluster)
    bootstrap: dict[str, Any] = {
        "node": {"id": node_id, "cluster": DEFAULT_NODE_CLUSTER},
        "dynamic_resources": {
            "ads_config": {
                "api_type": "DELTA_GRPC" if delta else "GRPC",
                "transport_api_version": "V3",
                "set_node_on_first_message_only": True,
                "grpc_services": [
                    {
                        "envoy_grpc": {
                            "cluster_name": XDS_CLUSTER,
                            "retry_policy": {"retry_back_off": dict(_XDS_RETRY_BACKOFF)},
                        }
                    }
                ],
            },
            "cds_config": dict(ads_source),
            "lds_config": dict(ads_source),
        },
        "static_resources": {"clusters": clusters},
        "admin": loopback_admin(admin_port),
    }
    if otlp_grpc is not None:
        bootstrap["stats_sinks"] = [sink]
        bootstrap["stats_flush_interval"] = stats_flush_interval
    return bootstrap


def _grpc_cluster(name: str, address: dict[str, Any]) -> dict[str, Any]:
    """A static cluster of one gRPC server (the control plane, or the SPIRE agent's socket)."""
    return {
        "name": name,
        "type": "STATIC",
        "connect_timeout": "1s",
        # https://www.envoyproxy.io/docs/envoy/latest/api-docs/xds_protocol#aggregated-discovery-service:
        # gRPC needs HTTP/2 to the control plane.
        "typed_extension_protocol_options": {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": {
                    "http2_protocol_options": {"connection_keepalive": dict(_XDS_KEEPALIVE)}
                },
            }
        },
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": address}}]}],
        },
    }


def otel_stats_sink(collector: tuple[str, int]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Envoy's OpenTelemetry stats sink (`envoy.stat_sinks.open_telemetry`) and the static cluster it pushes to:
    OTLP/gRPC to the collector at `(host, port)`, tags as attributes under their extracted names (so
    `cluster.upstream_rq` carries `envoy.cluster_name` instead of the cluster's name inside the metric's)."""
    cluster = {
        "name": OTEL_CLUSTER,
        "type": "STRICT_DNS",
        "connect_timeout": "1s",
        "typed_extension_protocol_options": {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": {"http2_protocol_options": {}},
            }
        },
        "load_assignment": {
            "cluster_name": OTEL_CLUSTER,
            "endpoints": [
                {
                    "lb_endpoints": [
                        {
                            "endpoint": {
                                "address": {
                                    "socket_address": {"address": collector[0], "port_value": collector[1]}
                                }
                            }
                        }
                    ]
                }
            ],
        },
    }
    sink = {
        "name": "envoy.stat_sinks.open_telemetry",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.stat_sinks.open_telemetry.v3.SinkConfig",
            "grpc_service": {"envoy_grpc": {"cluster_name": OTEL_CLUSTER}},
            "emit_tags_as_attributes": True,
            "use_tag_extracted_name": True,
        },
    }
    return sink, cluster


def loopback_admin(port: int) -> dict[str, Any]:
    """The bootstrap's `admin` block: the admin API on 127.0.0.1 at `port` (0: Envoy picks one)."""
    # A literal, not `aether.core.project.names.LOOPBACK`: importing the projection would cost the Envoy guard
    # (`python -m aether.envoy.guard`, which imports this package) a third of a second at every start.
    return {"address": {"socket_address": {"address": "127.0.0.1", "port_value": port}}}
