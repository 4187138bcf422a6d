"""Builders of Envoy v3 xDS resources for tests: clusters, load assignments, listeners and route configurations.

The messages are xds-protos classes; xds-protos ships no type stubs, so mypy sees every message as `Any`.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import Any

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import address_pb2, base_pb2, config_source_pb2
from envoy.config.endpoint.v3 import endpoint_components_pb2, endpoint_pb2
from envoy.config.listener.v3 import listener_components_pb2, listener_pb2
from envoy.config.route.v3 import route_components_pb2, route_pb2
from envoy.extensions.filters.http.router.v3 import router_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)
from google.protobuf import any_pb2, duration_pb2

# The type URLs are the core's; they are re-exported here so a test imports its resources from one place.
from aether.core.snapshot import CLUSTER_TYPE, ENDPOINT_TYPE, LISTENER_TYPE, ROUTE_TYPE, SECRET_TYPE

__all__ = [
    "CLUSTER_TYPE",
    "ENDPOINT_TYPE",
    "LISTENER_TYPE",
    "LOOPBACK",
    "ROUTE_TYPE",
    "SECRET_TYPE",
    "make_cluster",
    "make_invalid_cluster",
    "make_listener",
    "make_load_assignment",
    "make_route_configuration",
    "pick_free_port",
]

LOOPBACK = "127.0.0.1"
"""The address tests bind and route to: never a routable interface."""

_HTTP_CONNECTION_MANAGER = "envoy.filters.network.http_connection_manager"
_ROUTER = "envoy.filters.http.router"


def make_cluster(
    name: str,
    *,
    eds: bool = True,
    endpoints: Sequence[tuple[str, int]] = (),
    connect_timeout_ms: int = 1000,
) -> Any:
    """Build a Cluster whose endpoints come from EDS over ADS, or a STATIC one with inline endpoints.

    Args:
        name: The cluster name; an EDS cluster asks for the ClusterLoadAssignment of the same name.
        eds: True for `type: EDS` with `eds_config.ads`; False for `type: STATIC` with `endpoints` inline.
        endpoints: `(host, port)` pairs for a STATIC cluster; must be empty for an EDS cluster.
        connect_timeout_ms: The upstream connect timeout in milliseconds.

    Returns:
        An `envoy.config.cluster.v3.Cluster`.

    Raises:
        ValueError: If `endpoints` is given for an EDS cluster.
    """
    cluster = cluster_pb2.Cluster(name=name, connect_timeout=_duration_ms(connect_timeout_ms))
    if eds:
        if endpoints:
            raise ValueError(
                f"cluster {name!r}: an EDS cluster takes no inline endpoints (got {endpoints!r})"
            )
        cluster.type = cluster_pb2.Cluster.EDS
        cluster.eds_cluster_config.eds_config.CopyFrom(_ads_config_source())
    else:
        cluster.type = cluster_pb2.Cluster.STATIC
        cluster.load_assignment.CopyFrom(make_load_assignment(name, endpoints))
    return cluster


def make_invalid_cluster(name: str) -> Any:
    """Build a Cluster that Envoy rejects: its connect timeout is negative (-1 s).

    Envoy NACKs it over xDS with `Invalid duration: Expected positive duration`, and refuses to start with it
    in a static bootstrap.
    """
    cluster = make_cluster(name)
    cluster.connect_timeout.CopyFrom(duration_pb2.Duration(seconds=-1))
    return cluster


def make_load_assignment(cluster_name: str, endpoints: Sequence[tuple[str, int]]) -> Any:
    """Build a ClusterLoadAssignment with one locality holding `endpoints`.

    Args:
        cluster_name: The cluster the assignment belongs to.
        endpoints: `(host, port)` pairs, in the order Envoy will list them.

    Returns:
        An `envoy.config.endpoint.v3.ClusterLoadAssignment`.
    """
    locality = endpoint_components_pb2.LocalityLbEndpoints(
        lb_endpoints=[
            endpoint_components_pb2.LbEndpoint(
                endpoint=endpoint_components_pb2.Endpoint(address=_socket_address(host, port))
            )
            for host, port in endpoints
        ]
    )
    return endpoint_pb2.ClusterLoadAssignment(cluster_name=cluster_name, endpoints=[locality])


def make_listener(
    name: str,
    *,
    port: int,
    route_config_name: str | None = None,
    route_config: Any = None,
    host: str = LOOPBACK,
) -> Any:
    """Build a Listener running the HTTP connection manager with the router filter.

    Routes come from RDS over ADS (`route_config_name`) or are inline (`route_config`, for static bootstraps);
    exactly one of the two is given.

    Args:
        name: The listener name; also the HCM stat prefix.
        port: The TCP port to listen on.
        route_config_name: The RouteConfiguration to ask for over RDS.
        route_config: A RouteConfiguration to embed.
        host: The address to bind.

    Returns:
        An `envoy.config.listener.v3.Listener`.

    Raises:
        ValueError: If neither or both of `route_config_name` and `route_config` are given.
    """
    manager = hcm_pb2.HttpConnectionManager(
        stat_prefix=name,
        http_filters=[hcm_pb2.HttpFilter(name=_ROUTER, typed_config=_pack(router_pb2.Router()))],
    )
    if (route_config_name is None) == (route_config is None):
        raise ValueError(
            f"listener {name!r}: give exactly one of route_config_name and route_config "
            f"(got {route_config_name!r} and {route_config!r})"
        )
    if route_config_name is not None:
        manager.rds.route_config_name = route_config_name
        manager.rds.config_source.CopyFrom(_ads_config_source())
    else:
        manager.route_config.CopyFrom(route_config)
    chain = listener_components_pb2.FilterChain(
        filters=[listener_components_pb2.Filter(name=_HTTP_CONNECTION_MANAGER, typed_config=_pack(manager))]
    )
    return listener_pb2.Listener(name=name, address=_socket_address(host, port), filter_chains=[chain])


def make_route_configuration(
    name: str,
    *,
    routes: Sequence[tuple[str, str]] = (),
    direct: Sequence[tuple[str, str]] = (),
) -> Any:
    """Build a RouteConfiguration with one virtual host matching every domain.

    Direct responses come first, so an exact path wins over a prefix route.

    Args:
        name: The route configuration name.
        routes: `(path_prefix, cluster_name)` pairs, matched in order.
        direct: `(exact_path, body)` pairs answered by Envoy itself with 200 and `body`.

    Returns:
        An `envoy.config.route.v3.RouteConfiguration`.
    """
    entries = [
        route_components_pb2.Route(
            match=route_components_pb2.RouteMatch(path=path),
            direct_response=route_components_pb2.DirectResponseAction(
                status=200, body=base_pb2.DataSource(inline_string=body)
            ),
        )
        for path, body in direct
    ]
    entries.extend(
        route_components_pb2.Route(
            match=route_components_pb2.RouteMatch(prefix=prefix),
            route=route_components_pb2.RouteAction(cluster=cluster_name),
        )
        for prefix, cluster_name in routes
    )
    virtual_host = route_components_pb2.VirtualHost(name=name, domains=["*"], routes=entries)
    return route_pb2.RouteConfiguration(name=name, virtual_hosts=[virtual_host])


_HANDED_OUT: set[int] = set()
"""Every port `pick_free_port` returned in this process: the kernel may offer a released port again at once, and a
test that picks two ports before binding either would get the same one twice."""


def pick_free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listened on a moment ago, and that this process was never given.

    The port is free when this returns but not reserved: hand it to the listener soon.
    """
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((LOOPBACK, 0))
            port: int = probe.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def _ads_config_source() -> Any:
    return config_source_pb2.ConfigSource(
        ads=config_source_pb2.AggregatedConfigSource(),
        resource_api_version=config_source_pb2.V3,
    )


def _socket_address(host: str, port: int) -> Any:
    return address_pb2.Address(socket_address=address_pb2.SocketAddress(address=host, port_value=port))


def _duration_ms(milliseconds: int) -> duration_pb2.Duration:
    duration = duration_pb2.Duration()
    duration.FromMilliseconds(milliseconds)
    return duration


def _pack(message: Any) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed
