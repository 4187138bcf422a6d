"""GatewayProjector: views built incrementally equal fresh views, including when what a route's parents resolve
to changes without the route or the edge's listeners changing."""

from __future__ import annotations

from aether.core.gateway import GatewayProjector, GatewayStatistics, gateway_view
from aether.core.state import State
from aether.testing import fold_events, gateway_object_deleted, gateway_object_upserted
from aether.testing.gateway_objects import edge_gateway_events, gateway_api_object

FOREIGN = gateway_api_object(
    "Gateway",
    "foreign",
    {"gatewayClassName": "other", "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]},
    namespace="edge",
)
ROUTE = gateway_api_object("HTTPRoute", "r", {"parentRefs": [{"name": "foreign", "namespace": "edge"}]})


def _parents(state: State) -> list[tuple[str, str]]:
    view = GatewayProjector().view(state)
    return [
        (condition.reason, condition.message)
        for parent in view.status["HTTPRoute/default/r"].parents
        for condition in parent.conditions
        if condition.type == "Accepted"
    ]


def test_a_parent_gateway_appearing_and_going_is_followed() -> None:
    """A reference to another class's Gateway is not ours; once that Gateway is gone it is NoMatchingParent."""
    projector = GatewayProjector()
    state = fold_events(
        *edge_gateway_events(), gateway_object_upserted(FOREIGN), gateway_object_upserted(ROUTE)
    )
    assert projector.view(state) == gateway_view(state)
    assert _parents(state) == []
    state = fold_events(gateway_object_deleted(FOREIGN.meta), state=state)
    assert projector.view(state) == gateway_view(state)
    assert _parents(state) == [("NoMatchingParent", "Gateway edge/foreign not found")]


def test_a_refused_edge_gateway_is_named_in_the_route_status() -> None:
    """A Gateway of the edge's class that the schema refuses: its routes say why they have no parent."""
    refused = gateway_api_object(
        "Gateway", "foreign", {"gatewayClassName": "aether", "listeners": []}, namespace="edge"
    )
    projector = GatewayProjector()
    state = fold_events(
        *edge_gateway_events(), gateway_object_upserted(FOREIGN), gateway_object_upserted(ROUTE)
    )
    projector.view(state)
    state = fold_events(gateway_object_upserted(refused), state=state)
    assert projector.view(state) == gateway_view(state)
    assert _parents(state) == [
        (
            "NoMatchingParent",
            "Gateway edge/foreign is not accepted: spec.listeners: must have at least 1 item(s) (got 0)",
        )
    ]


def test_one_route_changed_costs_that_route() -> None:
    """Changing one of three routes parses, resolves and translates that route only, and builds one virtual host."""

    def route(name: str, prefix: str) -> object:
        spec = {
            "parentRefs": [{"name": "edge", "namespace": "edge"}],
            "hostnames": [f"{name}.example.com"],
            "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": prefix}}]}],
        }
        return gateway_api_object("HTTPRoute", name, spec)

    projector = GatewayProjector()
    state = fold_events(
        *edge_gateway_events(), *(gateway_object_upserted(route(name, "/a")) for name in ("a", "b", "c"))
    )
    projector.view(state)
    assert projector.statistics() == GatewayStatistics(
        views=1, routes=3, parsed=5, resolved=3, translated=3, built=3
    )
    state = fold_events(gateway_object_upserted(route("b", "/changed")), state=state)
    assert projector.view(state) == gateway_view(state)
    assert projector.statistics() == GatewayStatistics(
        views=2, routes=3, parsed=1, resolved=1, translated=1, built=1
    )


def test_route_changes_past_the_chain_limit_stay_incremental() -> None:
    """More route changes than a change chain holds: the next chain names the link it replaced (`after`), and
    the projector's view stays the full one across the cut."""
    from aether.core.state.kube import GATEWAY_CHAIN_LIMIT

    def route(version: int) -> object:
        spec = {
            "parentRefs": [{"name": "edge", "namespace": "edge"}],
            "hostnames": ["a.example.com"],
            "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": f"/v{version}"}}]}],
        }
        return gateway_api_object("HTTPRoute", "a", spec)

    projector = GatewayProjector()
    state = fold_events(*edge_gateway_events(), gateway_object_upserted(route(0)))
    projector.view(state)
    for version in range(1, GATEWAY_CHAIN_LIMIT + 3):
        state = fold_events(gateway_object_upserted(route(version)), state=state)
        assert projector.view(state) == gateway_view(state)
        assert projector.statistics().parsed == 1
