"""Small snapshots for the stream machine tests: clusters with their load assignments, and routes."""

from __future__ import annotations

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.endpoint.v3 import endpoint_pb2

from aether.core.snapshot import Resource, Snapshot
from aether.testing.xds_resources import make_route_configuration

NODE = "node-a"


def cluster(name: str, *, timeout_ms: int = 250) -> Resource:
    """An EDS cluster `name` needing the load assignment of the same name."""
    message = cluster_pb2.Cluster(name=name, type=cluster_pb2.Cluster.EDS)
    message.connect_timeout.FromMilliseconds(timeout_ms)
    return Resource.from_message(message, references=[name])


def assignment(name: str, *ports: int) -> Resource:
    """The load assignment of cluster `name`: one endpoint on 127.0.0.1 per port."""
    message = endpoint_pb2.ClusterLoadAssignment(cluster_name=name)
    group = message.endpoints.add()
    for port in ports:
        address = group.lb_endpoints.add().endpoint.address.socket_address
        address.address, address.port_value = "127.0.0.1", port
    return Resource.from_message(message)


def route(name: str, *, cluster_name: str) -> Resource:
    """A route configuration `name` sending every path to `cluster_name`."""
    return Resource.from_message(make_route_configuration(name, routes=[("/", cluster_name)]))


def snapshot(*resources: Resource, seq: int = 1, not_found: tuple[str, ...] = ()) -> Snapshot:
    """A snapshot of `NODE` holding `resources`."""
    return Snapshot.build(node_id=NODE, seq=seq, resources=resources, not_found=not_found)
