"""GAMMA frontends in the Gateway view: the ClusterIP and port of each Service an HTTP or gRPC route names as its
parent, with the routes naming it there, and nothing for a Service no route names (even one sharing the service
account) nor for a Service without a ClusterIP."""

from __future__ import annotations

from typing import Any

from aether.core.events.kube import ServicePort
from aether.core.gateway import GatewayView, gateway_view
from aether.testing import (
    fold_events,
    gateway_object_upserted,
    kube_service_upserted,
    make_kube_service,
    make_pod,
    pod_added,
)
from aether.testing.gateway_objects import gateway_api_object

MANAGED = {"aether.io/managed": "true"}


def _route(name: str, parent: str, *, port: int = 0) -> Any:
    ref: dict[str, Any] = {"group": "", "kind": "Service", "name": parent}
    if port:
        ref["port"] = port
    spec = {"parentRefs": [ref], "rules": [{"backendRefs": [{"name": parent, "port": 80}]}]}
    return gateway_object_upserted(gateway_api_object("HTTPRoute", name, spec))


def _view(*routes: Any) -> GatewayView:
    ports = [ServicePort(name="http", port=80), ServicePort(name="admin", port=9000)]
    events = [
        pod_added(make_pod(f"echo-{version}", service_account="echo", labels={**MANAGED, "version": version}))
        for version in ("v1", "v2")
    ]
    events += [
        kube_service_upserted(
            make_kube_service("echo-v1", cluster_ip="10.96.9.1", selector={"version": "v1"}, ports=ports)
        ),
        kube_service_upserted(
            make_kube_service("echo-v2", cluster_ip="10.96.9.2", selector={"version": "v2"}, ports=ports)
        ),
        kube_service_upserted(
            make_kube_service("headless", cluster_ip="None", selector={"version": "v1"}, ports=ports)
        ),
    ]
    return gateway_view(fold_events(*events, *routes))


def test_the_frontends_are_the_routed_services_addresses_only() -> None:
    """Routes naming echo-v2 (every port) and echo-v1 port 80: each Service port takes its own routes, though both
    Services resolve to one mesh service (whose routing would let the older route shadow the other: the same
    match); echo-v1's port 9000 and the headless Service get none."""
    view = _view(_route("a", "echo-v2"), _route("b", "echo-v1", port=80), _route("c", "headless"))
    (frontends,) = view.mesh_frontends.values()
    assert [
        (
            item.service,
            item.address,
            item.port,
            sorted({route.name.split("/rule/")[0] for route in item.all_routes}),
        )
        for item in frontends
    ] == [
        ("default/echo", "10.96.9.1", 80, ["HTTPRoute/default/b"]),
        ("default/echo", "10.96.9.2", 80, ["HTTPRoute/default/a"]),
        ("default/echo", "10.96.9.2", 9000, ["HTTPRoute/default/a"]),
    ]


def test_no_route_no_frontend() -> None:
    """Services alone are no frontends: their requests keep matching by Host."""
    assert dict(_view().mesh_frontends) == {}
