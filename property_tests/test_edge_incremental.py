"""The incremental edge snapshot is the full one: an `EdgeProjector` fed view after view (of one
`GatewayProjector`), which re-projects only the listeners, route tables, virtual hosts, routes, clusters and secrets
whose inputs changed, gives after every change exactly the snapshot `edge_snapshot` builds from scratch for the
same state: every resource's bytes, digest and references, and every type's version."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aether.core.events import Event
from aether.core.events.kube import KubeObject
from aether.core.gateway import GatewayProjector, GatewayView, gateway_view
from aether.core.project.edge import EdgeOptions, edge_snapshot
from aether.core.project.edge_projector import EdgeProjector
from aether.core.snapshot import TYPE_ORDER, Snapshot
from aether.core.state import State
from aether.testing import builders, fold_events
from property_tests.gateway_strategies import (
    base_events,
    edge_events,
    edge_starts,
    gateway_events,
    routes,
    tied_routes,
)

CHANGES = st.one_of(
    routes().map(builders.gateway_object_upserted),
    routes().map(builders.gateway_object_upserted),
    routes().map(lambda item: builders.gateway_object_deleted(item.meta)),
    gateway_events(),
    edge_events(),
    edge_events(),
)
"""Route changes (what the incremental view takes) and everything else the edge snapshot reads."""

OPTIONS = st.builds(
    EdgeOptions,
    bind=st.sampled_from(["0.0.0.0", "127.0.0.1"]),
    cleartext=st.booleans(),
    spire_sds_cluster=st.sampled_from(["", "spire_agent"]),
    collector_cluster=st.sampled_from(["", "opentelemetry_collector"]),
)


def _assert_same(actual: Snapshot, expected: Snapshot) -> None:
    """The two snapshots hold the same resources, byte for byte, with the same versions."""
    assert actual == expected
    for type_url in TYPE_ORDER:
        assert actual.version(type_url) == expected.version(type_url)
        held, wanted = actual.of_type(type_url), expected.of_type(type_url)
        assert {name: item.body for name, item in held.items()} == {
            name: item.body for name, item in wanted.items()
        }


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    options=OPTIONS,
    start=st.one_of(edge_starts(), edge_starts(), tied_routes()),
    changes=st.lists(CHANGES, max_size=25),
)
def test_incremental_edge_snapshot_equals_the_full_one(
    options: EdgeOptions, start: list[Event], changes: list[Event]
) -> None:
    """After every change the projector's snapshot equals `edge_snapshot` of a fresh view of the same state."""
    state: State = fold_events(*base_events(), *start)
    views = GatewayProjector()
    projector = EdgeProjector(node_id="edge-0", options=options)
    for event in (None, *changes):
        if event is not None:
            state = fold_events(event, state=state)
        expected = edge_snapshot(gateway_view(state), state, node_id="edge-0", options=options)
        actual = projector.project(views.view(state), state)
        assert actual.consistent() == ()
        _assert_same(actual, expected)


def _routes_by_vhost(view: GatewayView) -> dict[str, set[int]]:
    return {
        vhost.name: {id(route) for route in vhost.routes}
        for listener in view.edge_listeners
        for vhost in listener.virtual_hosts
    }


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(start=edge_starts(), change=routes())
def test_one_route_changed_serializes_only_the_routes_the_view_gave_anew(
    start: list[Event], change: KubeObject
) -> None:
    """A projection serializes only the routes that its view's virtual hosts did not hold as the same objects
    before (a changed route, and the routes of a virtual host it brought), and nothing when the state did not
    change."""
    state = fold_events(*base_events(), *start)
    views = GatewayProjector()
    projector = EdgeProjector(node_id="edge-0", options=EdgeOptions())
    before = views.view(state)
    projector.project(before, state)
    projector.project(views.view(state), state)
    assert (projector.statistics().routes_serialized, projector.statistics().upserted) == (0, 0)
    state = fold_events(builders.gateway_object_upserted(change), state=state)
    after = views.view(state)
    projector.project(after, state)
    held = _routes_by_vhost(before)
    anew = sum(len(routes - held.get(name, set())) for name, routes in _routes_by_vhost(after).items())
    assert projector.statistics().routes_serialized <= anew
