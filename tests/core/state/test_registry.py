"""Tests of `aether.core.state.registry`: the registry's history of the steps that replaced endpoint maps."""

from __future__ import annotations

import attrs
import immutables

from aether.core.state import MAX_ENDPOINT_STEPS, RegistryState, State, decode_state, encode_state
from aether.testing import (
    endpoint_added,
    endpoint_removed,
    endpoint_updated,
    endpoints_snapshot_received,
    fold_events,
    make_endpoint,
    registry_service_added,
    registry_service_removed,
)

WEB = make_endpoint("10.0.0.1", service="default/web")
DB = make_endpoint("10.0.1.1", service="shop/db")
CART = make_endpoint("10.0.2.1", service="shop/cart")


def _synced() -> State:
    """The registry after a snapshot at version 5: web, db and cart, one endpoint each."""
    return fold_events(endpoints_snapshot_received(WEB, DB, CART, version="5"))


def test_one_upsert_names_its_service_only() -> None:
    """An endpoint upsert's step names the one service whose map it replaced."""
    before = _synced()
    after = fold_events(endpoint_updated(attrs.evolve(DB, weight=7), version="6"), state=before)
    assert after.registry.changed_since(before.registry.endpoints) == frozenset({"shop/db"})


def test_the_steps_since_an_earlier_state_are_joined() -> None:
    """Across several steps (a removal, a run of upserts folded as one step, a catalog removal) the history names
    every service whose map was replaced since, and nothing between two equal states."""
    start = _synced()
    removed = fold_events(endpoint_removed(WEB, version="6"), state=start)
    run = fold_events(
        endpoint_added(make_endpoint("10.0.1.2", service="shop/db"), version="7"),
        endpoint_updated(attrs.evolve(DB, weight=3), version="8"),
        state=removed,
    )
    gone = fold_events(registry_service_removed("shop/cart", version="9"), state=run)
    assert gone.registry.changed_since(start.registry.endpoints) == frozenset(
        {"default/web", "shop/db", "shop/cart"}
    )
    assert gone.registry.changed_since(run.registry.endpoints) == frozenset({"shop/cart"})
    assert gone.registry.changed_since(gone.registry.endpoints) == frozenset()


def test_a_step_that_replaces_no_map_adds_no_history() -> None:
    """A catalog addition and a rejected upsert keep the maps and the history as they were."""
    before = fold_events(endpoint_updated(attrs.evolve(DB, weight=7), version="6"), state=_synced())
    after = fold_events(
        registry_service_added("shop/new", version="7"),
        endpoint_added(make_endpoint("10.0.9.9", service="shop/unknown"), version="8"),
        state=before,
    )
    assert after.registry.endpoints is before.registry.endpoints
    assert after.registry.history is before.registry.history


def test_a_snapshot_starts_without_history() -> None:
    """A new snapshot replaces every map: the registry cannot say what changed since the maps before it."""
    before = fold_events(endpoint_updated(attrs.evolve(DB, weight=7), version="6"), state=_synced())
    after = fold_events(endpoints_snapshot_received(WEB, DB, version="7"), state=before)
    assert after.registry.history is None
    assert after.registry.changed_since(before.registry.endpoints) is None


def test_maps_the_history_does_not_lead_from_are_unknown() -> None:
    """Maps of another lineage (equal but not the same objects), or maps replaced without a step, give None."""
    state = fold_events(endpoint_updated(attrs.evolve(DB, weight=7), version="6"), state=_synced())
    equal = immutables.Map(state.registry.endpoints.items())
    assert state.registry.changed_since(equal) is None
    unrecorded = attrs.evolve(state.registry, endpoints=equal)
    assert unrecorded.changed_since(state.registry.endpoints) is None


def test_the_history_is_no_part_of_the_registry_s_value() -> None:
    """Two registries with the same content are equal whatever their history; the codec keeps none."""
    state = fold_events(endpoint_updated(attrs.evolve(DB, weight=7), version="6"), state=_synced())
    assert state.registry.history is not None
    assert attrs.evolve(state.registry, history=None) == state.registry
    decoded = decode_state(encode_state(state))
    assert decoded == state
    assert decoded.registry.history is None


def test_the_chain_holds_at_most_max_endpoint_steps() -> None:
    """A chain as deep as the bound starts afresh at the next step: the step before still answers, older maps are
    unknown."""
    state = _synced()
    first = fold_events(endpoint_updated(attrs.evolve(DB, weight=2), version="6"), state=state)
    state = first
    for step in range(MAX_ENDPOINT_STEPS - 1):
        state = fold_events(
            endpoint_updated(attrs.evolve(DB, weight=3 + step), version=str(7 + step)), state=state
        )
    assert state.registry.history is not None
    assert state.registry.history.depth == MAX_ENDPOINT_STEPS
    assert state.registry.changed_since(first.registry.endpoints) == frozenset({"shop/db"})
    last = fold_events(endpoint_updated(attrs.evolve(WEB, weight=9), version="100"), state=state)
    assert last.registry.changed_since(state.registry.endpoints) == frozenset({"default/web"})
    assert last.registry.changed_since(first.registry.endpoints) is None


def test_history_to_leaves_out_services_whose_map_is_the_same_object() -> None:
    """The services given are a superset: a step lists only those whose map it replaced."""
    registry = _synced().registry
    endpoints = registry.endpoints.set("shop/db", immutables.Map())
    step = registry.history_to(endpoints, changed=("shop/db", "default/web", "shop/none"))
    assert step is not None
    assert (step.before, step.after, step.services, step.previous, step.depth) == (
        registry.endpoints,
        endpoints,
        frozenset({"shop/db"}),
        None,
        1,
    )
    assert registry.history_to(registry.endpoints, changed=("shop/db",)) is registry.history
    assert RegistryState().changed_since(immutables.Map()) is None
