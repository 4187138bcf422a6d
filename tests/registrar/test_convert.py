"""Wire conversions: endpoints and watch events survive a round trip; the defaults of unset fields."""

from __future__ import annotations

import pytest

from aether.core.events.registry import Endpoint, Health, HealthCheckMode, Protocol
from aether.proto.registrar.v1 import registrar_pb2
from aether.proto.registry.v1 import registry_pb2
from aether.registrar.convert import (
    DEFAULT_WEIGHT,
    change_from_proto,
    change_to_proto,
    endpoint_from_proto,
    endpoint_to_proto,
    filter_from_proto,
)
from aether.registrar.errors import InvalidRequestError
from aether.registrar.snapshot import Change, ServiceFilter, apply, empty_snapshot, resync
from tests.registrar._builders import WEB, register, unregister

FULL = Endpoint(
    service=WEB,
    protocol=Protocol.TCP,
    ip="fd00::5",
    port=9000,
    ports=(9000, 9001),
    weight=7,
    region="eu",
    zone="eu-1",
    metadata={"version": "v2"},
    labels={"app": "web", "version": "v2"},
    health=Health.DRAINING,
    health_check_mode=HealthCheckMode.ACTIVE,
    namespace="shop",
    pod_name="web-0",
    node_name="node-a",
    node_ip="192.0.2.1",
    cluster_name="east",
)


def test_an_endpoint_survives_the_round_trip() -> None:
    """Every field of the endpoint model goes to the wire and back unchanged."""
    assert endpoint_from_proto(endpoint_to_proto(FULL), service=WEB, protocol=Protocol.TCP) == FULL


def test_unset_weight_is_the_default_and_ports_are_sorted_once() -> None:
    """Weight 0 means 1024; ports [9, 8, 9] become (8, 9)."""
    message = registry_pb2.ServiceEndpoint(ip="10.0.0.1", port=8, ports=[9, 8, 9])
    endpoint = endpoint_from_proto(message, service=WEB, protocol=Protocol.HTTP)
    assert (endpoint.weight, endpoint.ports) == (DEFAULT_WEIGHT, (8, 9))


def test_every_watch_event_survives_the_round_trip() -> None:
    """Changes of registering, updating, unregistering, and of a full resync, read back equal."""
    snapshot = empty_snapshot()
    changes: list[Change] = []
    for mutation in (
        register("10.0.0.1"),
        register("10.0.0.1", weight=3),
        unregister("10.0.0.1"),
        register("10.0.0.2"),
    ):
        snapshot, made = apply(snapshot, mutation)
        changes.extend(made)
    changes.extend(resync(snapshot, last_version=None))
    assert [change_from_proto(change_to_proto(change)) for change in changes] == changes


def test_unknown_enum_values_are_refused() -> None:
    """An event type or health this registrar does not know is an error naming the field."""
    with pytest.raises(InvalidRequestError, match=r"^type: must be a known EventType \(got 9\)$"):
        change_from_proto(registrar_pb2.WatchEndpointsResponse(type=9, version="1"))  # type: ignore[arg-type]
    message = registry_pb2.ServiceEndpoint(ip="10.0.0.1", port=80, health=8)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match=r"^endpoint.health: must be a known Health \(got 8\)$"):
        endpoint_from_proto(message, service=WEB, protocol=Protocol.HTTP)


def test_filter_unset_is_everything_and_set_but_empty_is_nothing() -> None:
    """The filter's presence decides: unset wants every service, an empty set none."""
    assert filter_from_proto(registrar_pb2.WatchEndpointsRequest()) == ServiceFilter()
    empty = registrar_pb2.WatchEndpointsRequest(filter=registrar_pb2.ServiceFilter())
    assert filter_from_proto(empty) == ServiceFilter(services=frozenset())
