"""The broadcaster: per-watcher filtered, bounded buffers; a slow watcher is cut off alone."""

from __future__ import annotations

import pytest

from aether.registrar.broadcaster import Broadcaster, BroadcasterStatistics, Watcher, WatcherEnd
from aether.registrar.snapshot import ServiceFilter, apply, empty_snapshot
from tests.registrar._builders import DB, WEB, register


class _Rings:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def test_every_watcher_gets_what_its_filter_wants_and_is_woken() -> None:
    """All-services watcher gets both changes; a DB watcher gets only the catalog change of WEB."""
    broadcaster = Broadcaster(capacity=10)
    rings = _Rings()
    everything = broadcaster.subscribe(service_filter=ServiceFilter(), wake=rings)
    only_db = broadcaster.subscribe(service_filter=ServiceFilter(services=frozenset({DB})), wake=rings)
    _, changes = apply(empty_snapshot(), register("10.0.0.1"))
    assert broadcaster.publish(changes) == ()
    assert everything.take() == changes
    assert only_db.take() == changes[:1]
    assert (everything.take(), rings.count, everything.delivered) == ((), 2, 2)


def test_a_watcher_past_its_buffer_is_disconnected_and_the_others_go_on() -> None:
    """Capacity 3: the watcher that never takes overflows on the 4th change; the one that takes keeps going."""
    broadcaster = Broadcaster(capacity=3)
    slow = broadcaster.subscribe(name="c/slow", service_filter=ServiceFilter(), wake=lambda: None)
    fast = broadcaster.subscribe(name="c/fast", service_filter=ServiceFilter(), wake=lambda: None)
    snapshot = empty_snapshot()
    dropped: list[Watcher] = []
    for index in range(1, 4):
        snapshot, changes = apply(snapshot, register(f"10.0.0.{index}"))
        dropped.extend(broadcaster.publish(changes))
        assert fast.take() == changes
    assert dropped == [slow]
    assert (slow.end, slow.fell_behind_by, slow.pending) == (WatcherEnd.FELL_BEHIND, 4, 0)
    assert fast.end is None
    assert broadcaster.statistics() == BroadcasterStatistics(
        watchers=1, subscribed_total=2, published_changes=4, fell_behind_total=1, replaced_total=0
    )


def test_a_new_watch_with_the_same_name_replaces_the_old_one() -> None:
    """An agent reconnecting leaves no ghost: the older watcher ends REPLACED and gets nothing more."""
    broadcaster = Broadcaster(capacity=3)
    old = broadcaster.subscribe(name="c/node", service_filter=ServiceFilter(), wake=lambda: None)
    new = broadcaster.subscribe(name="c/node", service_filter=ServiceFilter(), wake=lambda: None)
    _, changes = apply(empty_snapshot(), register("10.0.0.1"))
    broadcaster.publish(changes)
    assert (old.end, old.take(), new.take()) == (WatcherEnd.REPLACED, (), changes)
    broadcaster.unsubscribe(old)
    broadcaster.unsubscribe(new)
    assert broadcaster.statistics().watchers == 0


def test_capacity_must_be_positive() -> None:
    """A watcher needs room for at least one change."""
    with pytest.raises(ValueError, match=r"^capacity: must be at least 1 \(got 0\)$"):
        Broadcaster(capacity=0)


def test_endpoint_changes_wake_only_the_watchers_that_want_them() -> None:
    """A second WEB endpoint (no catalog change) reaches the unfiltered and the WEB watchers, not the DB one, which
    is not even woken; a replaced or unsubscribed watcher is out of the index."""
    broadcaster = Broadcaster(capacity=10)
    rings = {name: _Rings() for name in ("all", "web", "db", "gone")}
    everything = broadcaster.subscribe(service_filter=ServiceFilter(), wake=rings["all"])
    web = broadcaster.subscribe(
        name="c/web", service_filter=ServiceFilter(services=frozenset({WEB})), wake=rings["web"]
    )
    only_db = broadcaster.subscribe(service_filter=ServiceFilter(services=frozenset({DB})), wake=rings["db"])
    gone = broadcaster.subscribe(service_filter=ServiceFilter(services=frozenset({WEB})), wake=rings["gone"])
    broadcaster.unsubscribe(gone)
    snapshot, _ = apply(empty_snapshot(), register("10.0.0.1"))
    _, changes = apply(snapshot, register("10.0.0.2"))
    assert broadcaster.publish(changes) == ()
    assert (everything.take(), web.take(), only_db.take(), gone.take()) == (changes, changes, (), ())
    assert {name: ring.count for name, ring in rings.items()} == {"all": 1, "web": 1, "db": 0, "gone": 0}
    replacement = broadcaster.subscribe(
        name="c/web", service_filter=ServiceFilter(services=frozenset({DB})), wake=rings["web"]
    )
    _, changes = apply(snapshot, register("10.0.0.3"))
    broadcaster.publish(changes)
    assert (web.end, web.take(), replacement.take()) == (WatcherEnd.REPLACED, (), ())
