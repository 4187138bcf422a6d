"""ClusterLoadAssignments from registry endpoints: address, health, weight, locality and priority.

Every endpoint is dialled at `<pod ip>:18008`, the callee's mesh inbound listener (a `udp:` cluster's at its UDP port). Priority prefers the node's own
zone, then its region: 0 for the same zone, 1 for the same region, 2 elsewhere; when the node's locality is unknown
every endpoint is priority 0 (Envoy fails over from one priority to the next only when the first has too few
healthy endpoints, so a preference never strands traffic).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from envoy.config.core.v3 import base_pb2, health_check_pb2
from envoy.config.endpoint.v3 import endpoint_components_pb2, endpoint_pb2
from google.protobuf import wrappers_pb2

from aether.core.events.registry import Endpoint, Health
from aether.core.gateway.ir import SelectorKeys
from aether.core.order import sorted_items
from aether.core.project.messages import socket_address
from aether.core.project.names import MESH_INBOUND_PORT
from aether.core.project.subsets import endpoint_metadata
from aether.core.reduce.annotations import MAX_WEIGHT

Locality = tuple[str, str]
"""`(region, zone)`."""

SAME_ZONE, SAME_REGION, ELSEWHERE = 0, 1, 2

_HEALTH = {
    Health.UNSPECIFIED: health_check_pb2.HEALTHY,  # the registry's contract: unspecified counts as healthy
    Health.HEALTHY: health_check_pb2.HEALTHY,
    Health.UNHEALTHY: health_check_pb2.UNHEALTHY,
    Health.DRAINING: health_check_pb2.DRAINING,
}


def node_locality(endpoints: Iterable[Endpoint], *, node_name: str) -> Locality | None:
    """Return the locality of `node_name`: that of the registry endpoints it hosts (the first, sorted, if several).

    Returns None (unknown) for an empty node name or when none of `endpoints` is on the node with a region.
    """
    if not node_name:
        return None
    seen = sorted(
        {(item.region, item.zone) for item in endpoints if item.node_name == node_name and item.region}
    )
    return seen[0] if seen else None


def priority(endpoint: Endpoint, *, locality: Locality | None) -> int:
    """Return the endpoint's priority as seen from a node in `locality`."""
    if locality is None:
        return SAME_ZONE
    region, zone = locality
    if endpoint.region != region:
        return ELSEWHERE
    return SAME_ZONE if endpoint.zone == zone else SAME_REGION


def _lb_endpoint(endpoint: Endpoint, subsets: SelectorKeys, port: int) -> Any:
    result = endpoint_components_pb2.LbEndpoint(
        endpoint=endpoint_components_pb2.Endpoint(address=socket_address(endpoint.ip, port)),
        health_status=_HEALTH[endpoint.health],
        # Envoy sums the weights of a locality into a uint32; the registry does not bound them, pods do.
        load_balancing_weight=wrappers_pb2.UInt32Value(value=min(endpoint.weight, MAX_WEIGHT)),
    )
    if subsets:
        metadata = endpoint_metadata(endpoint.labels, subsets)
        if metadata is not None:
            result.metadata.CopyFrom(metadata)
    return result


def load_assignment(
    cluster_name: str,
    endpoints: Iterable[Endpoint],
    *,
    locality: Locality | None,
    subsets: SelectorKeys = (),
    port: int = MESH_INBOUND_PORT,
) -> Any:
    """Return the ClusterLoadAssignment of `cluster_name` holding `endpoints`, each dialled at its IP and `port`.

    Endpoints are grouped by (priority, region, zone), groups in that order and endpoints by IP within a group
    (one per IP). With `subsets` (the cluster's selector key sets), each endpoint carries its labels of those keys.
    The port is the mesh inbound, but for a `udp:` cluster, whose datagrams go straight to the app's UDP port.
    """
    groups: dict[tuple[int, str, str], dict[str, Endpoint]] = {}
    for endpoint in endpoints:
        key = (priority(endpoint, locality=locality), endpoint.region, endpoint.zone)
        groups.setdefault(key, {})[endpoint.ip] = endpoint
    return endpoint_pb2.ClusterLoadAssignment(
        cluster_name=cluster_name,
        endpoints=[
            endpoint_components_pb2.LocalityLbEndpoints(
                locality=base_pb2.Locality(region=region, zone=zone),
                priority=level,
                lb_endpoints=[_lb_endpoint(item, subsets, port) for _, item in sorted_items(members)],
            )
            for (level, region, zone), members in sorted_items(groups)
        ],
    )
