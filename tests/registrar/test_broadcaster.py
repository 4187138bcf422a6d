"""The broadcaster: per-watcher filtered, bounded buffers; a slow watcher is cut off alone."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from aether.registrar.broadcaster import Broadcaster, BroadcasterStatistics, Watcher, WatcherEnd
from aether.registrar.snapshot import Change, ServiceFilter, apply, empty_snapshot
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
        watchers=1,
        subscribed_total=2,
        published_changes=4,
        publishes=3,
        fell_behind_total=1,
        replaced_total=0,
        delivered_directly_total=0,
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


class _Stream:
    """What a watch stream's `deliver` stands for: takes encoded changes while `open`, refuses them when not."""

    def __init__(self) -> None:
        self.open = True
        self.sent: list[bytes] = []

    def __call__(self, encoded: Sequence[bytes]) -> bool:
        if self.open:
            self.sent.extend(encoded)
        return self.open


class _Encoder:
    """Encodes a change as its IP (or kind), counting calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, change: Change) -> bytes:
        self.calls += 1
        return (change.ip or change.kind.name).encode()


def test_an_idle_watcher_gets_each_change_from_publish_encoded_once_for_all() -> None:
    """Three idle watchers with `deliver`: publish encodes each change once and hands the bytes to every stream;
    nothing is buffered and no one is woken."""
    encoder = _Encoder()
    broadcaster = Broadcaster(capacity=10, encode=encoder)
    rings = _Rings()
    streams = [_Stream() for _ in range(3)]
    watchers = [
        broadcaster.subscribe(service_filter=ServiceFilter(), wake=rings, deliver=stream)
        for stream in streams
    ]
    assert all(watcher.idle() for watcher in watchers)
    _snapshot, changes = apply(empty_snapshot(), register("10.0.0.1"))
    broadcaster.publish(changes)
    assert [stream.sent for stream in streams] == [[b"SERVICE_ADDED", b"10.0.0.1"]] * 3
    assert (encoder.calls, rings.count, [watcher.pending for watcher in watchers]) == (2, 0, [0, 0, 0])
    assert [watcher.delivered_directly for watcher in watchers] == [2, 2, 2]
    assert broadcaster.statistics().delivered_directly_total == 6


def test_a_watcher_gets_changes_in_order_across_direct_and_buffered_delivery() -> None:
    """A new watcher is busy (its first sync): changes buffer. Once idle, they go direct; a refusal (window full)
    buffers that change and the ones after it, even when the stream could take them again, until the stream took
    them all and is idle again."""
    broadcaster = Broadcaster(capacity=10, encode=_Encoder())
    rings = _Rings()
    stream = _Stream()
    watcher = broadcaster.subscribe(service_filter=ServiceFilter(), wake=rings, deliver=stream)
    snapshot = empty_snapshot()
    published: list[Change] = []
    for index in range(1, 6):
        if index == 2:
            assert watcher.take() == tuple(published)
            assert watcher.idle()
        if index == 3:
            stream.open = False
        if index == 4:
            stream.open = True
        snapshot, changes = apply(snapshot, register(f"10.0.0.{index}"))
        published.extend(changes)
        broadcaster.publish(changes)
    assert stream.sent == [b"10.0.0.2"]
    assert [change.ip for change in watcher.take()] == ["10.0.0.3", "10.0.0.4", "10.0.0.5"]
    assert watcher.idle()
    assert rings.count == 4
    snapshot, changes = apply(snapshot, register("10.0.0.6"))
    broadcaster.publish(changes)
    assert stream.sent == [b"10.0.0.2", b"10.0.0.6"]
    assert (watcher.delivered, watcher.delivered_directly) == (7, 2)  # the first registration adds WEB too


def test_a_watcher_whose_stream_refuses_falls_behind_past_its_buffer() -> None:
    """The slow-watcher rule holds with direct delivery: a stream that keeps refusing (its reader stopped) buffers
    up to capacity 2, then the watcher is disconnected."""
    broadcaster = Broadcaster(capacity=2, encode=_Encoder())
    stream = _Stream()
    stream.open = False
    watcher = broadcaster.subscribe(
        name="c/slow", service_filter=ServiceFilter(), wake=lambda: None, deliver=stream
    )
    assert watcher.idle()
    snapshot = empty_snapshot()
    dropped: list[Watcher] = []
    for index in range(1, 4):
        snapshot, changes = apply(snapshot, register(f"10.0.0.{index}"))
        dropped.extend(broadcaster.publish(changes))
    assert dropped == [watcher]
    assert (watcher.end, watcher.fell_behind_by, watcher.idle()) == (WatcherEnd.FELL_BEHIND, 3, False)
    assert stream.sent == []


def test_without_encode_deliver_is_never_used() -> None:
    """`deliver` needs the bytes: a broadcaster without `encode` buffers for every watcher."""
    broadcaster = Broadcaster(capacity=10)
    stream = _Stream()
    watcher = broadcaster.subscribe(service_filter=ServiceFilter(), wake=lambda: None, deliver=stream)
    assert watcher.idle()
    _, changes = apply(empty_snapshot(), register("10.0.0.1"))
    broadcaster.publish(changes)
    assert (stream.sent, watcher.take()) == ([], changes)


def test_a_publish_of_several_changes_hands_each_watcher_what_it_wants_in_one_delivery() -> None:
    """Four changes published at once (the registrar's group commit): the unfiltered stream gets all four in one
    `deliver`, the WEB and DB streams theirs (the catalog change, then their endpoints, in order) in one each; a
    watcher of another service gets the catalog change only; a busy watcher buffers its share, in order."""
    broadcaster = Broadcaster(capacity=10, encode=_Encoder())
    calls: dict[str, list[list[bytes]]] = {}

    def stream(name: str) -> Callable[[Sequence[bytes]], bool]:
        def deliver(encoded: Sequence[bytes]) -> bool:
            calls.setdefault(name, []).append(list(encoded))
            return True

        return deliver

    def watcher(name: str, services: frozenset[str] | None) -> Watcher:
        subscribed = broadcaster.subscribe(
            service_filter=ServiceFilter(services=services), wake=lambda: None, deliver=stream(name)
        )
        assert subscribed.idle()
        return subscribed

    watcher("all", None)
    watcher("web", frozenset({WEB}))
    watcher("db", frozenset({DB}))
    watcher("other", frozenset({"shop/other"}))
    busy = broadcaster.subscribe(service_filter=ServiceFilter(services=frozenset({DB})), wake=lambda: None)
    snapshot, first = apply(empty_snapshot(), register("10.0.0.1"))  # WEB's SERVICE_ADDED, then its endpoint
    snapshot, second = apply(snapshot, register("10.0.0.2"))
    _, third = apply(snapshot, register("10.0.1.1", service=DB))  # DB's SERVICE_ADDED, then its endpoint
    changes = first + second + third
    assert broadcaster.publish(changes) == ()
    assert calls == {
        "all": [[b"SERVICE_ADDED", b"10.0.0.1", b"10.0.0.2", b"SERVICE_ADDED", b"10.0.1.1"]],
        "web": [[b"SERVICE_ADDED", b"10.0.0.1", b"10.0.0.2", b"SERVICE_ADDED"]],
        "db": [[b"SERVICE_ADDED", b"SERVICE_ADDED", b"10.0.1.1"]],
        "other": [[b"SERVICE_ADDED", b"SERVICE_ADDED"]],
    }
    assert busy.take() == (changes[0], changes[3], changes[4])
    statistics = broadcaster.statistics()
    assert (statistics.published_changes, statistics.publishes) == (5, 1)
    assert statistics.delivered_directly_total == 5 + 4 + 3 + 2
