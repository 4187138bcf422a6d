"""The incremental Gateway view is the full one: a `GatewayProjector` fed state after state, which parses and
resolves only the routes the reducer's change chain names and rebuilds only the virtual hosts and mesh services
they touch, builds after any sequence of changes exactly the view `gateway_view` builds from scratch (statuses,
shadowed matches across mesh, L4, UDP and edge, mesh frontends, UDP clusters included)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aether.core.events import Event
from aether.core.gateway import GatewayProjector, gateway_view
from aether.testing import builders, fold_events
from property_tests.gateway_strategies import base_events, gateway_events, l4_routes, routes, tied_routes

ROUTE_CHANGES = st.one_of(
    routes().map(builders.gateway_object_upserted),
    routes().map(lambda item: builders.gateway_object_deleted(item.meta)),
    l4_routes().map(builders.gateway_object_upserted),
    l4_routes().map(lambda item: builders.gateway_object_deleted(item.meta)),
)
"""Route changes only: what the incremental path takes (a deletion of a route not held is a rejection)."""


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    start=st.one_of(st.lists(gateway_events(), max_size=10), tied_routes()),
    changes=st.lists(st.one_of(ROUTE_CHANGES, ROUTE_CHANGES, ROUTE_CHANGES, gateway_events()), max_size=25),
)
def test_incremental_view_equals_the_full_view(start: list[Event], changes: list[Event]) -> None:
    """After every change the projector's view equals a fresh view of the same state."""
    state = fold_events(*base_events(), *start)
    projector = GatewayProjector()
    assert projector.view(state) == gateway_view(state)
    for event in changes:
        state = fold_events(event, state=state)
        assert projector.view(state) == gateway_view(state)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    start=st.lists(gateway_events(), max_size=10), changes=st.lists(ROUTE_CHANGES, min_size=1, max_size=10)
)
def test_route_changes_parse_only_the_changed_routes(start: list[Event], changes: list[Event]) -> None:
    """A view after route changes parses at most the routes changed since the last view (the chain is read)."""
    state = fold_events(*base_events(), *start)
    projector = GatewayProjector()
    projector.view(state)
    for event in changes:
        state = fold_events(event, state=state)
    view = projector.view(state)
    assert projector.statistics().parsed <= len(changes)
    assert view == gateway_view(state)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(start=st.lists(gateway_events(), max_size=10), changes=st.lists(ROUTE_CHANGES, min_size=1, max_size=8))
def test_status_changes_name_every_changed_status(start: list[Event], changes: list[Event]) -> None:
    """What the controller's reconcile diffs (`status_changes`) includes every key whose status differs from the
    previous view's, or is None (a view from scratch)."""
    state = fold_events(*base_events(), *start)
    projector = GatewayProjector()
    before = projector.view(state).status
    for event in changes:
        state = fold_events(event, state=state)
        after = projector.view(state).status
        named = projector.status_changes()
        if named is not None:
            differ = {key for key in set(before).union(after) if before.get(key) != after.get(key)}
            assert differ <= named
        before = after
