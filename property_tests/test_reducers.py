"""Properties of `fold`: total, deterministic, idempotent, invariant-keeping, and faithful to both codecs."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import attrs
import pytest
from hypothesis import HealthCheck, Phase, event, find, given, settings
from hypothesis import strategies as st

from aether.core.events import (
    EVENT_TYPES,
    EndpointsSnapshotReceived,
    Event,
    Record,
    decode_event,
    encode_event,
)
from aether.core.reduce import fold, fold_all, fold_event
from aether.core.state import (
    EMPTY_STATE,
    MAX_ENDPOINT_STEPS,
    MAX_REJECTIONS,
    Diagnostics,
    State,
    decode_state,
    encode_state,
    state_digest,
)
from aether.core.state.kube import index_slices
from property_tests.strategies import EVENT_STRATEGIES, event_sequences, events, records, upsert_runs

PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _domain(state: State) -> State:
    """The state without what is about the log position and the inputs (seq, rejections)."""
    return attrs.evolve(state, seq=0, diagnostics=Diagnostics())


def test_every_event_type_has_a_strategy() -> None:
    """Every event type of the catalog has a strategy in `strategies.py`, and no other type has one (STYLE T4)."""
    assert set(EVENT_STRATEGIES) == set(EVENT_TYPES)


@pytest.mark.parametrize("cls", EVENT_TYPES, ids=lambda cls: cls.__name__)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_each_strategy_draws_its_own_event_type(cls: type[Event], data: st.DataObject) -> None:
    """The strategy registered for an event type draws instances of exactly that type."""
    assert type(data.draw(EVENT_STRATEGIES[cls])) is cls


_REACHABLE: dict[str, Callable[[State], bool]] = {
    "pods": lambda state: len(state.pods) >= 2,
    "endpoints": lambda state: state.registry.endpoint_count() >= 2,
    "synced": lambda state: state.registry.synced,
    "kube-services": lambda state: bool(state.kube.services),
    "gateway-objects": lambda state: bool(state.kube.gateway_objects),
    "reference-grants": lambda state: bool(state.kube.reference_grants),
    "mesh-config": lambda state: state.kube.mesh_config.mesh_domain == "mesh.local",
    "identity": lambda state: bool(state.identity.svids) and bool(state.identity.trust_bundles),
    "nacks": lambda state: any(item.nacked_version for item in state.feedback.streams.values()),
    "on-demand": lambda state: bool(state.feedback.on_demand),
    "rejections": lambda state: len(state.diagnostics.rejections) >= 3,
}
"""States the strategies must be able to reach, each holding some kind of object."""


@pytest.mark.parametrize("name", sorted(_REACHABLE))
def test_the_strategies_populate_every_part_of_the_state(name: str) -> None:
    """Folding generated records reaches states that hold every kind of object (the strategies are useful)."""
    reached = _REACHABLE[name]
    find(
        records(),
        lambda items: reached(fold_all(EMPTY_STATE, items)),
        settings=settings(max_examples=2000, deadline=None, database=None, phases=[Phase.generate]),
    )


@PROPERTY
@given(records(), events())
def test_fold_never_raises_on_any_event_in_any_reachable_state(
    items: tuple[Record, ...], event: Event
) -> None:
    """Any event folds without raising from any state reachable by folding, and the result's seq is its record's."""
    state = fold_all(EMPTY_STATE, items)
    after = fold(state, Record(seq=state.seq + 1, event=event))
    assert after.seq == state.seq + 1


@PROPERTY
@given(records())
def test_fold_is_deterministic(items: tuple[Record, ...]) -> None:
    """Folding the same records twice gives equal states with equal digests."""
    first = fold_all(EMPTY_STATE, items)
    second = fold_all(EMPTY_STATE, items)
    assert first == second
    assert state_digest(first) == state_digest(second)


@PROPERTY
@given(records())
def test_folding_runs_of_upserts_as_one_step_gives_the_state_of_folding_one_by_one(
    items: tuple[Record, ...],
) -> None:
    """`fold_all` (through `fold_many`, which folds runs of endpoint upserts as one step) equals `fold_event` applied
    to each record in turn, down to the checkpoint's bytes."""
    one_by_one = EMPTY_STATE
    for record in items:
        one_by_one = fold_event(one_by_one, record.event, seq=record.seq)
    batched = fold_all(EMPTY_STATE, items)
    assert batched == one_by_one
    assert encode_state(batched) == encode_state(one_by_one)
    upserts = sum(type(record.event).__name__ in ("EndpointAdded", "EndpointUpdated") for record in items)
    event("has endpoint upserts" if upserts else "no endpoint upserts")


@PROPERTY
@given(records())
def test_the_state_seq_is_the_last_record_seq(items: tuple[Record, ...]) -> None:
    """After folding records, the state's seq is the last record's seq (0 when there is none)."""
    state = fold_all(EMPTY_STATE, items)
    assert state.seq == (items[-1].seq if items else 0)


@PROPERTY
@given(event_sequences(), st.data())
def test_folding_an_event_again_leaves_the_domain_state_unchanged(
    sequence: tuple[Event, ...], data: st.DataObject
) -> None:
    """Every event is an upsert or a delete by nature: a second delivery at the next seq changes no domain state.

    Only `seq` and `diagnostics` may differ. Rejections are about inputs, not the mesh: a repeated delete of
    something already gone is recorded as a rejection, by design, so the domain state is what must not change.
    The repeated event is either one of the sequence (a redelivery) or a fresh one.
    """
    candidates = [events()] + ([st.sampled_from(sequence)] if sequence else [])
    event = data.draw(st.one_of(candidates), label="event")
    state = fold_all(EMPTY_STATE, (Record(seq=seq, event=item) for seq, item in enumerate(sequence, 1)))
    once = fold(state, Record(seq=state.seq + 1, event=event))
    twice = fold(once, Record(seq=once.seq + 1, event=event))
    assert _domain(twice) == _domain(once)


@PROPERTY
@given(records())
def test_every_reachable_state_keeps_the_invariants(items: tuple[Record, ...]) -> None:
    """Registry, pods, the EndpointSlice index and diagnostics keep their invariants after any sequence of
    records."""
    state = fold_all(EMPTY_STATE, items)
    registry = state.registry
    assert set(registry.endpoints) <= set(registry.services)
    assert all(registry.services.values())
    for service, items_of_service in registry.endpoints.items():
        assert len(items_of_service) > 0
        for endpoint_key, endpoint in items_of_service.items():
            assert endpoint.service == service
            assert endpoint_key == (endpoint.protocol, endpoint.ip)
    for pod_key, record in state.pods.items():
        assert pod_key == record.pod.key
    assert len(state.diagnostics.rejections) <= MAX_REJECTIONS
    assert state.diagnostics.rejected_total >= len(state.diagnostics.rejections)
    for subject, rejection in state.diagnostics.rejections.items():
        assert rejection.subject == subject
        assert 1 <= rejection.seq <= state.seq
    # The EndpointSlice index the reducer keeps is what the slices held give, whatever the order of changes.
    assert state.kube.slices_by_service == index_slices(state.kube.endpoint_slices)


@PROPERTY
@given(records())
def test_the_state_codec_round_trips_every_reachable_state(items: tuple[Record, ...]) -> None:
    """Decoding an encoded reachable state gives an equal state, with the same digest and the same bytes."""
    state = fold_all(EMPTY_STATE, items)
    payload = encode_state(state)
    decoded = decode_state(payload)
    assert decoded == state
    assert encode_state(decoded) == payload
    assert state_digest(decoded) == state_digest(state)


@PROPERTY
@given(events())
def test_the_event_codec_round_trips_every_event(event: Event) -> None:
    """Decoding an encoded event gives an equal event, and encoding that again gives the same bytes."""
    payload = encode_event(event)
    decoded = decode_event(payload)
    assert decoded == event
    assert encode_event(decoded) == payload


def _replaced(before: State, after: State) -> frozenset[str]:
    """The services whose endpoint map is not the same object in both states."""
    old, new = before.registry.endpoints, after.registry.endpoints
    return frozenset(service for service in {*old, *new} if old.get(service) is not new.get(service))


@PROPERTY
@given(st.one_of(records(), upsert_runs()), st.data())
def test_the_registry_history_names_exactly_the_services_whose_endpoint_maps_were_replaced(
    items: tuple[Record, ...], data: st.DataObject
) -> None:
    """Between two states of a fold, `changed_since` names exactly the services whose maps the steps between
    replaced (one step: those whose map is not the same object), and answers unless a snapshot came between.

    Folded one record at a time, then from a drawn state on with runs of upserts as one step (`fold_all`): the
    second gives a superset of the maps that differ, the union of the first's steps.
    """
    assert len(items) < MAX_ENDPOINT_STEPS  # no chain runs out here: every step is remembered
    states = [EMPTY_STATE]
    for record in items:
        states.append(fold_event(states[-1], record.event, seq=record.seq))
    steps = [_replaced(before, after) for before, after in itertools.pairwise(states)]
    snapshots = [
        type(record.event) is EndpointsSnapshotReceived
        and after.registry.endpoints is not before.registry.endpoints
        for record, (before, after) in zip(items, itertools.pairwise(states), strict=True)
    ]
    for first, second in itertools.combinations(range(len(states)), 2):
        got = states[second].registry.changed_since(states[first].registry.endpoints)
        if any(snapshots[first:second]):
            assert got is None
        else:
            assert got == frozenset().union(*steps[first:second])
    start = data.draw(st.integers(0, len(items)), label="start")
    batched = fold_all(states[start], items[start:])
    assert batched == states[-1]
    got = batched.registry.changed_since(states[start].registry.endpoints)
    if not any(snapshots[start:]):
        assert got is not None
        assert _replaced(states[start], batched) <= got <= frozenset().union(*steps[start:])
    event("a snapshot between" if any(snapshots) else "no snapshot between")
