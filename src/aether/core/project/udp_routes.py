"""A UDPRoute's weighted cluster as Envoy resources: the cluster `udproute:<name>.<namespace>` and its endpoints.

One locality per backend (in backendRef order, told apart by `sub_zone` `backend-<i>`), weighted by the backendRef's
weight, with locality-weighted load balancing: Envoy picks a locality in proportion to the weights, then an endpoint
of it (see `aether.core.gateway.udp_routes`). A backend's endpoints are its mesh service's registry endpoints whose
pod labels include its Service's selector, one per IP, at the backend's UDP port, in plaintext (datagrams go
straight to the app, as `udp:` clusters' do). Only healthy (or unspecified) endpoints are listed: Envoy scales a
locality's weight by the share of its endpoints that are healthy, so listing the others would move weight between
backends; a backend without a healthy endpoint has no locality and the others share its part.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import base_pb2
from envoy.config.endpoint.v3 import endpoint_components_pb2, endpoint_pb2
from envoy.type.v3 import percent_pb2
from google.protobuf import wrappers_pb2

from aether.core.events.registry import Endpoint, Health
from aether.core.gateway.udp_routes import UdpBackend, UdpRouteCluster
from aether.core.order import sorted_items
from aether.core.project.messages import ads, socket_address
from aether.core.reduce.annotations import MAX_WEIGHT
from aether.core.snapshot import Resource

__all__ = ["udp_route_assignment", "udp_route_cluster_message", "udp_route_resources"]

_SERVING = (Health.UNSPECIFIED, Health.HEALTHY)

EndpointsOf = Callable[[str], Mapping[Any, Endpoint] | None]
"""A mesh service's registry endpoints (None when it has none)."""


def udp_route_cluster_message(name: str) -> Any:
    """Return the EDS cluster `name` of a UDPRoute, balancing over its backends' localities by weight."""
    return cluster_pb2.Cluster(
        name=name,
        type=cluster_pb2.Cluster.EDS,
        eds_cluster_config=cluster_pb2.Cluster.EdsClusterConfig(eds_config=ads()),
        common_lb_config=cluster_pb2.Cluster.CommonLbConfig(
            locality_weighted_lb_config=cluster_pb2.Cluster.CommonLbConfig.LocalityWeightedLbConfig(),
            # As every service cluster: never send to an unhealthy endpoint (none is listed anyway).
            healthy_panic_threshold=percent_pb2.Percent(value=0),
        ),
    )


def _selected(endpoints: Iterable[Endpoint], backend: UdpBackend) -> list[Endpoint]:
    """The serving endpoints of `endpoints` whose labels include the backend's selector, one per IP, by IP."""
    by_ip: dict[str, Endpoint] = {}
    for endpoint in endpoints:
        labels = endpoint.labels
        if endpoint.health in _SERVING and all(labels.get(key) == value for key, value in backend.selector):
            by_ip.setdefault(endpoint.ip, endpoint)
    return [endpoint for _, endpoint in sorted_items(by_ip)]


def udp_route_assignment(cluster: UdpRouteCluster, endpoints_of: EndpointsOf) -> Any:
    """Return the ClusterLoadAssignment of `cluster`: a locality per backend with a serving endpoint."""
    assignment = endpoint_pb2.ClusterLoadAssignment(cluster_name=cluster.name)
    for index, backend in enumerate(cluster.backends):
        held = endpoints_of(backend.service)
        members = _selected((item for _, item in sorted_items(held)) if held else (), backend)
        if not members:
            continue
        assignment.endpoints.append(
            endpoint_components_pb2.LocalityLbEndpoints(
                locality=base_pb2.Locality(sub_zone=f"backend-{index}"),
                load_balancing_weight=wrappers_pb2.UInt32Value(value=min(backend.weight, MAX_WEIGHT)),
                lb_endpoints=[
                    endpoint_components_pb2.LbEndpoint(
                        endpoint=endpoint_components_pb2.Endpoint(
                            address=socket_address(member.ip, backend.port)
                        ),
                        load_balancing_weight=wrappers_pb2.UInt32Value(value=min(member.weight, MAX_WEIGHT)),
                    )
                    for member in members
                ],
            )
        )
    return assignment


def udp_route_resources(cluster: UdpRouteCluster, endpoints_of: EndpointsOf) -> tuple[Resource, Resource]:
    """Return the cluster and load assignment of `cluster`, from its backends' registry endpoints."""
    return (
        Resource.from_message(udp_route_cluster_message(cluster.name), references=(cluster.name,)),
        Resource.from_message(udp_route_assignment(cluster, endpoints_of)),
    )
