"""Tests of `aether.controller.status_queue`: which objects a reconcile diffs."""

from __future__ import annotations

import immutables

from aether.controller.status_queue import StatusQueue
from aether.core.gateway import ObjectStatus


def _status(name: str, generation: int = 1) -> ObjectStatus:
    return ObjectStatus(kind="HTTPRoute", namespace="default", name=name, generation=generation)


def test_the_first_reconcile_diffs_every_object() -> None:
    assert StatusQueue().take(immutables.Map(), frozenset()) is None


def test_then_the_observed_objects_and_the_changed_statuses() -> None:
    queue = StatusQueue()
    queue.take(immutables.Map(), None)
    queue.observed("HTTPRoute/default/a")
    assert queue.take(immutables.Map(), frozenset({"HTTPRoute/default/b"})) == {
        "HTTPRoute/default/a",
        "HTTPRoute/default/b",
    }
    assert queue.take(immutables.Map(), frozenset()) == set()


def test_a_view_built_from_scratch_is_compared_by_identity() -> None:
    """Without the view's changes, the statuses that are other objects than the last view's are diffed."""
    kept, changed = _status("a"), _status("b")
    queue = StatusQueue()
    queue.take(immutables.Map({"a": kept, "b": changed, "c": _status("c")}), None)
    assert queue.take(immutables.Map({"a": kept, "b": _status("b", 2)}), None) == {"b", "c"}


def test_a_takeover_diffs_every_object_again() -> None:
    queue = StatusQueue()
    queue.take(immutables.Map(), None)
    queue.everything()
    assert queue.take(immutables.Map(), frozenset({"a"})) is None
