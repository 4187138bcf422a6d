"""Shared helpers of the projection tests: decoding snapshot resources, and a small realistic mesh."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.extensions.transport_sockets.tls.v3 import secret_pb2
from google.protobuf import json_format

from aether.core.events import Event, Health, Protocol
from aether.core.snapshot import (
    CLUSTER_TYPE,
    ENDPOINT_TYPE,
    LISTENER_TYPE,
    ROUTE_TYPE,
    SECRET_TYPE,
    Resource,
    Snapshot,
)
from aether.testing import (
    AT,
    endpoints_snapshot_received,
    make_endpoint,
    make_pod,
    make_svid,
    make_trust_bundle,
    mesh_config_updated,
    on_demand_cluster_requested,
    pod_added,
    svid_rotated,
    trust_bundle_rotated,
)

NODE = "node-a"
WEB_ID = "spiffe://aether.internal/ns/default/sa/web"
DB_ID = "spiffe://aether.internal/ns/shop/sa/db"
BUNDLE = "spiffe://aether.internal"
SECOND = 1_000_000_000

MESSAGE_TYPES: dict[str, Any] = {
    CLUSTER_TYPE: cluster_pb2.Cluster,
    ENDPOINT_TYPE: endpoint_pb2.ClusterLoadAssignment,
    LISTENER_TYPE: listener_pb2.Listener,
    ROUTE_TYPE: route_pb2.RouteConfiguration,
    SECRET_TYPE: secret_pb2.Secret,
}


def decode(resource: Resource) -> Any:
    """Return the Envoy message `resource` holds."""
    message = MESSAGE_TYPES[resource.type_url]()
    message.ParseFromString(resource.body)
    return message


def messages(snapshot: Snapshot, type_url: str) -> dict[str, Any]:
    """Return the snapshot's resources of `type_url` as messages, by name."""
    return {name: decode(resource) for name, resource in sorted(snapshot.of_type(type_url).items())}


def as_dict(message: Any) -> dict[str, Any]:
    """Return `message` as JSON-ready dicts, field names as in the proto (Envoy's YAML spelling)."""
    document: dict[str, Any] = json_format.MessageToDict(message, preserving_proto_field_name=True)
    return document


def unpack(packed: Any, cls: Any) -> Any:
    """Return the `cls` message packed in the Any `packed`."""
    message = cls()
    assert packed.Unpack(message), f"{packed.type_url!r} is not a {cls.DESCRIPTOR.full_name}"
    return message


def hcm_of(chain: Any) -> Any:
    """Return the HTTP connection manager of a filter chain (its last filter)."""
    return unpack(chain.filters[-1].typed_config, hcm_pb2.HttpConnectionManager)


def routed_clusters(route_configuration: Any) -> set[str]:
    """Return the clusters a route table names directly (not through `cluster_header`)."""
    return {
        route.route.cluster
        for vhost in route_configuration.virtual_hosts
        for route in vhost.routes
        if route.HasField("route") and route.route.cluster
    }


def mesh_events(*, at: int = AT) -> tuple[Event, ...]:
    """A small realistic node: two pods (one in a network namespace, one in local mode), SVIDs and the bundle,
    endpoints of four services (one TCP, one with an extra port, one in another zone), and an on-demand request."""
    return (
        mesh_config_updated(at=at),
        pod_added(
            make_pod(
                "web-1",
                netns="/var/run/netns/cni-web-1",
                ips=("10.0.0.1",),
                annotations={
                    "config.aether.io/upstreams": "shop/db, shop/cache",
                    "endpoint.aether.io/ports": "9090",
                },
            ),
            at=at,
        ),
        pod_added(make_pod("db-0", namespace="shop", service_account="db", ips=("10.0.0.2",)), at=at),
        svid_rotated(make_svid(WEB_ID), at=at),
        svid_rotated(make_svid(DB_ID), at=at),
        trust_bundle_rotated(make_trust_bundle(), at=at),
        endpoints_snapshot_received(
            make_endpoint(
                "10.0.0.1",
                service="default/web",
                ports=(8080, 9090),
                node_name=NODE,
                region="eu",
                zone="eu-a",
            ),
            make_endpoint("10.0.0.2", service="shop/db", node_name=NODE, region="eu", zone="eu-a"),
            make_endpoint("10.0.1.2", service="shop/db", region="eu", zone="eu-b", weight=512),
            make_endpoint("10.0.2.2", service="shop/db", region="us", zone="us-a", health=Health.DRAINING),
            make_endpoint(
                "10.0.1.3", service="shop/cache", protocol=Protocol.TCP, port=6379, region="eu", zone="eu-b"
            ),
            make_endpoint("10.0.1.4", service="shop/api", ports=(8080, 8443), region="eu", zone="eu-a"),
            at=at,
        ),
        on_demand_cluster_requested("api.shop.aether.internal:8443", at=at),
    )


def names_of(resources: Iterable[Resource]) -> list[str]:
    """Return the names of `resources`, sorted."""
    return sorted(resource.name for resource in resources)
