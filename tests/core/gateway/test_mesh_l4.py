"""GAMMA L4 in the Gateway view: where a TCPRoute or TLSRoute with a Service parent forwards (the Service's ClusterIP
and ports), and why it does not when the parent cannot be matched by destination."""

from __future__ import annotations

from typing import Any

from aether.core.events.kube import ServicePort
from aether.core.gateway import GatewayView, gateway_view
from aether.testing import fold_events, gateway_object_upserted, kube_service_upserted, make_kube_service
from aether.testing.gateway_objects import gateway_api_object


def _view(spec: dict[str, Any], *, cluster_ip: str = "10.96.0.10") -> GatewayView:
    service = make_kube_service(
        "db", cluster_ip=cluster_ip, ports=[ServicePort(port=5432), ServicePort(port=53, protocol="UDP")]
    )
    route = gateway_api_object("TCPRoute", "db", spec)
    return gateway_view(fold_events(kube_service_upserted(service), gateway_object_upserted(route)))


def _accepted(view: GatewayView) -> list[tuple[str, str]]:
    return [
        (condition.reason, condition.message)
        for parent in view.status["TCPRoute/default/db"].parents
        for condition in parent.conditions
        if condition.type == "Accepted"
    ]


def _parent(name: str, port: int = 0) -> dict[str, Any]:
    ref: dict[str, Any] = {"group": "", "kind": "Service", "name": name}
    if port:
        ref["port"] = port
    return ref


RULES = [{"backendRefs": [{"name": "db", "port": 5432}]}]


def test_without_a_port_every_tcp_port_of_the_service_is_routed() -> None:
    """The parentRef names no port: the Service's TCP ports are routed (its UDP port is not)."""
    view = _view({"parentRefs": [_parent("db")], "rules": RULES})
    (destination,) = view.mesh_l4["default/db"].destinations
    assert (destination.address, destination.port) == ("10.96.0.10", 5432)
    assert _accepted(view) == [("Accepted", "")]


def test_a_port_the_service_lacks_is_no_matching_parent() -> None:
    """Port 5433 is not a port of db; port 53 is UDP: neither can carry the TCPRoute."""
    for port in (5433, 53):
        view = _view({"parentRefs": [_parent("db", port)], "rules": RULES})
        assert _accepted(view) == [("NoMatchingParent", f"Service default/db has no TCP port {port}")]
        assert dict(view.mesh_l4) == {}


def test_a_missing_service_is_no_matching_parent() -> None:
    """The parent Service does not exist."""
    view = _view({"parentRefs": [_parent("nothing", 5432)], "rules": RULES})
    assert _accepted(view) == [("NoMatchingParent", "Service default/nothing not found")]


def test_a_headless_service_is_refused() -> None:
    """`clusterIP: None`: nothing to match connections by."""
    view = _view({"parentRefs": [_parent("db")], "rules": RULES}, cluster_ip="None")
    ((reason, message),) = _accepted(view)
    assert reason == "UnsupportedValue"
    assert message.startswith("Service default/db has no ClusterIP")


def test_two_parent_refs_to_one_destination_route_it_once() -> None:
    """The same Service twice (once with its port): one destination, no conflict with itself."""
    view = _view({"parentRefs": [_parent("db"), _parent("db", 5432)], "rules": RULES})
    assert len(view.mesh_l4["default/db"].destinations) == 1
    status = view.status["TCPRoute/default/db"]
    assert [condition.type for parent in status.parents for condition in parent.conditions] == [
        "Accepted",
        "ResolvedRefs",
        "Accepted",
        "ResolvedRefs",
    ]
