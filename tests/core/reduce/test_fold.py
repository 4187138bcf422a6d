"""Tests of `aether.core.reduce.fold`: the dispatch table and the fold of records."""

from __future__ import annotations

import attrs
import pytest

from aether.core.errors import CoreError, UnknownEvent
from aether.core.events import EVENT_TYPES, PodAdded, Record
from aether.core.reduce import REDUCERS, fold, fold_all
from aether.core.state import EMPTY_STATE, State
from aether.testing import make_pod, one_event_of_each_type, pod_added, pod_removed, records


@attrs.frozen(kw_only=True)
class StrayEvent(PodAdded):
    """A subclass of a catalog event: still not in the dispatch table (dispatch is by exact type)."""


def test_the_dispatch_table_covers_the_catalog_exactly() -> None:
    """`REDUCERS` has one row per event type of the catalog and no other."""
    assert set(REDUCERS) == set(EVENT_TYPES)
    assert len(REDUCERS) == len(EVENT_TYPES)


def test_folding_a_value_that_is_no_event_raises_unknown_event() -> None:
    """A record carrying a non-event raises `UnknownEvent` (a programming error, never bad input)."""
    with pytest.raises(
        UnknownEvent, match=r"^no reducer handles values of type 'str': add it to the dispatch table$"
    ) as caught:
        fold(EMPTY_STATE, Record(seq=1, event="pod_added"))  # type: ignore[arg-type]
    assert isinstance(caught.value, TypeError)
    assert isinstance(caught.value, CoreError)


def test_folding_an_event_type_outside_the_table_raises_unknown_event() -> None:
    """A subclass of a catalog event is not dispatched to its parent's reducer."""
    event = StrayEvent(observed_at=0, source="test", pod=make_pod())
    with pytest.raises(
        UnknownEvent, match=r"^no reducer handles values of type 'StrayEvent': add it to the dispatch table$"
    ):
        fold(EMPTY_STATE, Record(seq=1, event=event))


def test_fold_sets_the_state_seq_to_the_record_seq() -> None:
    """The folded state's seq is the record's, whether the event applied or was rejected."""
    assert fold(EMPTY_STATE, Record(seq=41, event=pod_added(make_pod()))).seq == 41
    assert fold(EMPTY_STATE, Record(seq=42, event=pod_removed())).seq == 42


def test_fold_all_folds_records_in_order() -> None:
    """`fold_all` equals folding each record in turn."""
    items = records(pod_added(make_pod()), pod_removed(), pod_added(make_pod("web-2")))
    stepwise = EMPTY_STATE
    for item in items:
        stepwise = fold(stepwise, item)
    assert fold_all(EMPTY_STATE, items) == stepwise
    assert sorted(stepwise.pods) == ["default/web-2"]
    assert stepwise.seq == 3


def test_fold_all_of_no_records_returns_the_state_itself() -> None:
    """Folding nothing returns the very state given."""
    state = State(seq=9)
    assert fold_all(state, []) is state


def test_folding_one_event_of_each_type_applies_every_one() -> None:
    """The builders' event of each type folds without a rejection, from the empty state."""
    state = fold_all(EMPTY_STATE, records(*one_event_of_each_type()))
    assert state.seq == len(EVENT_TYPES)
    assert state.diagnostics.rejected_total == 0


def test_folding_never_mutates_the_given_state() -> None:
    """A fold returns a new state; the state it started from is unchanged."""
    before = fold_all(EMPTY_STATE, records(pod_added(make_pod())))
    snapshot = attrs.evolve(before)
    fold(before, Record(seq=2, event=pod_removed()))
    assert before == snapshot
    assert sorted(before.pods) == ["default/web-1"]
