"""The incremental view's moves, one by one: each step's view equals a fresh one, and only the changed route is
parsed (what the property test `property_tests/test_gateway_incremental.py` checks on random sequences)."""

from __future__ import annotations

from typing import Any

from aether.core.events import Event
from aether.core.events.kube import KubeService, ObjectMeta, ServicePort
from aether.core.gateway import GatewayProjector, gateway_view
from aether.testing import builders, fold_events, gateway_object_deleted, gateway_object_upserted
from aether.testing.gateway_objects import edge_gateway_events, gateway_api_object

EDGE = {"name": "edge", "namespace": "edge"}
WEB = {"group": "", "kind": "Service", "name": "web", "port": 80}


def _route(name: str, *, at: int, hosts: list[str], path: str = "/a", parents: Any = None) -> Any:
    spec = {
        "parentRefs": parents or [EDGE],
        "hostnames": hosts,
        "rules": [
            {
                "matches": [{"path": {"type": "PathPrefix", "value": path}}],
                "backendRefs": [{"name": "web", "port": 80}],
            }
        ],
    }
    return gateway_api_object("HTTPRoute", name, spec, creation_timestamp=f"2024-01-01T00:00:0{at}Z")


def _steps(*steps: Event) -> None:
    web = KubeService(
        meta=ObjectMeta(kind="Service", namespace="default", name="web"),
        selector={"app": "web"},
        ports=[ServicePort(port=80)],
        cluster_ip="10.96.0.10",
    )
    state = fold_events(*edge_gateway_events(), builders.kube_service_upserted(web))
    projector = GatewayProjector()
    projector.view(state)
    for step in steps:
        state = fold_events(step, state=state)
        assert projector.view(state) == gateway_view(state)
        assert projector.statistics().parsed <= 1


def test_an_older_route_takes_a_claimed_match_and_gives_it_back() -> None:
    """The same match on one host: the older route claims it whenever it comes, the newer one's status says so."""
    newer = _route("newer", at=5, hosts=["a.example.com"])
    older = _route("older", at=1, hosts=["a.example.com"])
    _steps(
        gateway_object_upserted(newer),
        gateway_object_upserted(older),
        gateway_object_upserted(_route("third", at=3, hosts=["a.example.com"])),
        gateway_object_deleted(older.meta),
        gateway_object_deleted(newer.meta),
    )


def test_a_wildcard_host_comes_and_goes() -> None:
    """A `*.example.com` route serves the exact domains of other routes and its own."""
    wildcard = _route("wild", at=2, hosts=["*.example.com"], path="/w")
    _steps(
        gateway_object_upserted(_route("a", at=1, hosts=["a.example.com"])),
        gateway_object_upserted(wildcard),
        gateway_object_upserted(_route("b", at=3, hosts=["b.example.com"], path="/w")),
        gateway_object_upserted(_route("wild", at=2, hosts=["*.example.com", "c.example.com"], path="/w")),
        gateway_object_deleted(wildcard.meta),
    )


def test_a_route_moves_from_the_edge_to_a_service_and_back() -> None:
    """Edge and mesh pieces (and the Service's frontends) follow one route's parents."""
    _steps(
        gateway_object_upserted(_route("r", at=1, hosts=["a.example.com"])),
        gateway_object_upserted(_route("r", at=1, hosts=[], parents=[WEB])),
        gateway_object_upserted(_route("s", at=2, hosts=[], parents=[WEB])),
        gateway_object_upserted(_route("r", at=1, hosts=["a.example.com"], parents=[EDGE, WEB])),
        gateway_object_deleted(_route("s", at=2, hosts=[]).meta),
    )


def test_a_tcp_route_on_a_service_changes() -> None:
    """L4 routing is recomputed when an L4 route changes: the older TCPRoute keeps the port."""

    def tcp(name: str, at: int) -> Any:
        spec = {"parentRefs": [WEB], "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}
        return gateway_api_object("TCPRoute", name, spec, creation_timestamp=f"2024-01-01T00:00:0{at}Z")

    _steps(
        gateway_object_upserted(tcp("t2", 2)),
        gateway_object_upserted(tcp("t1", 1)),
        gateway_object_deleted(tcp("t1", 1).meta),
    )
