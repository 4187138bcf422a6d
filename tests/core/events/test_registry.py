"""Tests of `aether.core.events.registry`: the endpoint value and the subjects of registry events."""

from __future__ import annotations

from aether.core.events import Endpoint, Health, HealthCheckMode, Protocol
from aether.testing import (
    endpoint_added,
    endpoint_removed,
    endpoint_updated,
    endpoints_snapshot_completed,
    endpoints_snapshot_received,
    make_endpoint,
    registry_service_added,
    registry_service_removed,
)


def test_an_endpoint_key_is_service_protocol_and_ip() -> None:
    """`Endpoint.key` is `(service, protocol, ip)`."""
    assert make_endpoint("fd00::1", service="shop/db", protocol=Protocol.TCP).key == (
        "shop/db",
        Protocol.TCP,
        "fd00::1",
    )


def test_an_endpoint_has_the_registrar_defaults() -> None:
    """An endpoint defaults to HTTP on 8080, weight 1024, health and health-check mode unspecified."""
    endpoint = Endpoint(service="default/web", ip="10.0.0.1")
    assert (endpoint.protocol, endpoint.port, endpoint.ports, endpoint.weight) == (
        Protocol.HTTP,
        8080,
        (),
        1024,
    )
    assert (endpoint.health, endpoint.health_check_mode) == (Health.UNSPECIFIED, HealthCheckMode.UNSPECIFIED)


def test_the_enums_carry_the_wire_values() -> None:
    """Protocol, health and health-check mode values are those of the wire enums."""
    assert [(item.name, item.value) for item in Protocol] == [("UNSPECIFIED", 0), ("HTTP", 1), ("TCP", 2)]
    assert [item.value for item in Health] == [0, 1, 2, 3]
    assert [item.value for item in HealthCheckMode] == [0, 1, 2]


def test_registry_events_name_their_subjects() -> None:
    """Endpoint events are about `endpoint/<service>/<protocol>/<ip>`, catalog events about the service."""
    tcp = make_endpoint("10.0.0.1", service="shop/db", protocol=Protocol.TCP)
    assert endpoint_added(tcp).subject == "endpoint/shop/db/tcp/10.0.0.1"
    assert endpoint_updated(tcp).subject == "endpoint/shop/db/tcp/10.0.0.1"
    assert endpoint_removed(tcp).subject == "endpoint/shop/db/tcp/10.0.0.1"
    assert endpoints_snapshot_received(tcp).subject == "registry"
    assert endpoints_snapshot_completed().subject == "registry"
    assert registry_service_added("shop/db").subject == "service/shop/db"
    assert registry_service_removed("shop/db").subject == "service/shop/db"
