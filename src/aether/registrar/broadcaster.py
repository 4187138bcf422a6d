"""Fan-out of registry changes to watchers, each with its own bounded buffer (sans-IO: no trio, no clock).

Publishing never waits for a watcher: a watcher whose buffer would overflow is disconnected at once
(it resyncs when it reconnects), so one slow agent never holds back the registry or the other agents.

Fan-out to thousands of watchers is cheap because a change is encoded once per publish (`encode`), and a watcher
whose stream can take the bytes right away gets them from `publish` itself (`deliver`): no per-watcher encoding, no
buffering, no task to wake. Only a watcher whose stream cannot take them now (its flow-control window is used up)
buffers them, and its stream sends them when it can. A publish of several changes (the registrar publishes what
arrived during its last publish at once) hands each watcher all it wants of them in one `deliver`: the cost is per
publish and watcher, plus a list append per change a watcher wants.
"""

from __future__ import annotations

import enum
import itertools
from collections import deque
from collections.abc import Callable, Iterable, Sequence

import attrs

from aether.registrar.snapshot import Change, ServiceFilter, visible

__all__ = [
    "DEFAULT_WATCHER_BUFFER",
    "Broadcaster",
    "BroadcasterStatistics",
    "Watcher",
    "WatcherEnd",
]

_NO_SERVICE = ServiceFilter(services=frozenset())
"""A filter that wants no service: what it still sees goes to every watcher (catalog changes, completions)."""

DEFAULT_WATCHER_BUFFER = 4096
"""How many undelivered changes a watcher may have before it is disconnected.

Large enough to ride out a burst (a node draining a few hundred pods), small enough that a stuck agent costs
at most a few MiB; past it, a resync (one snapshot) is cheaper than the backlog.
"""


class WatcherEnd(enum.Enum):
    """Why the broadcaster disconnected a watcher."""

    FELL_BEHIND = "fell-behind"
    """Its buffer overflowed; it must reconnect to resync."""
    REPLACED = "replaced"
    """A newer watch with the same name (cluster/node) took its place."""


Deliver = Callable[[Sequence[bytes]], bool]
"""Sends encoded changes on a watcher's stream at once, all of them, or returns False having sent none."""


class Watcher:
    """One watch stream's buffer of changes not yet delivered.

    Get one from `Broadcaster.subscribe`; the stream `take`s the pending changes whenever `wake` is called.

    With `deliver`, changes go straight to the stream while the stream is `idle` (it sent all it took, and nothing
    is pending): `publish` hands their encoded bytes to `deliver`, and only what `deliver` refuses is buffered (and
    `wake` called). Invariant: the stream and `deliver` take turns, so changes reach the stream in order: `take`
    stops direct delivery, and `idle` starts it again once nothing is pending. A new watcher starts busy (its
    stream sends its first sync), so the stream calls `idle` first.
    """

    __slots__ = (
        "_deliver",
        "_direct",
        "_pending",
        "_wake",
        "capacity",
        "delivered",
        "delivered_directly",
        "end",
        "fell_behind_by",
        "name",
        "service_filter",
        "watcher_id",
    )

    def __init__(
        self,
        *,
        watcher_id: int,
        name: str,
        service_filter: ServiceFilter,
        capacity: int,
        wake: Callable[[], None],
        deliver: Deliver | None = None,
    ) -> None:
        self.watcher_id = watcher_id
        """Unique within its broadcaster."""
        self.name = name
        """`<cluster>/<node>`, or "" for an anonymous watcher (never replaced)."""
        self.service_filter = service_filter
        self.capacity = capacity
        self._wake = wake
        self._deliver = deliver
        self._direct = False
        self._pending: deque[Change] = deque()
        self.end: WatcherEnd | None = None
        """Why it was disconnected; None while connected."""
        self.fell_behind_by = 0
        """When it fell behind: how many changes it had not received."""
        self.delivered = 0
        """Changes taken or delivered so far."""
        self.delivered_directly = 0
        """Of those, the changes `deliver` sent."""

    def take(self) -> tuple[Change, ...]:
        """Return and forget the pending changes, oldest first; direct delivery stops until `idle`."""
        self._direct = False
        taken = tuple(self._pending)
        self._pending.clear()
        self.delivered += len(taken)
        return taken

    def idle(self) -> bool:
        """The stream sent everything it took: return whether nothing is pending (then it may wait for `wake`),
        and if so let `deliver` take new changes directly again."""
        if self._pending or self.end is not None:
            return False
        self._direct = self._deliver is not None
        return True

    @property
    def pending(self) -> int:
        """How many changes wait to be taken."""
        return len(self._pending)

    def _hand(self, wanted: Sequence[Change], encoded: Sequence[bytes]) -> int:
        """Deliver `wanted` (the changes of a publish it wants, in order; `encoded`: their bytes, or empty if it is
        not `_direct`) or buffer them (past capacity it ends, FELL_BEHIND); return how many `deliver` sent."""
        if self._direct:
            assert self._deliver is not None, "direct only with deliver; this is a bug"
            if self._deliver(encoded):
                self.delivered += len(wanted)
                self.delivered_directly += len(wanted)
                return len(wanted)
            self._direct = False  # the stream sends these (when its window opens), then calls `idle`
        self._buffer(wanted)
        return 0

    def _buffer(self, wanted: Sequence[Change]) -> bool:
        """Buffer `wanted` for the stream to take, or (past capacity) disconnect the watcher and return False."""
        if len(self._pending) + len(wanted) > self.capacity:
            self.fell_behind_by = len(self._pending) + len(wanted)
            self._end(WatcherEnd.FELL_BEHIND)
            return False
        self._pending.extend(wanted)
        self._wake()
        return True

    def _end(self, end: WatcherEnd) -> None:
        self.end = end
        self._direct = False
        self._pending.clear()
        self._wake()


@attrs.frozen(kw_only=True)
class BroadcasterStatistics:
    """Counters of a `Broadcaster`."""

    watchers: int
    """Watchers connected now."""
    subscribed_total: int
    published_changes: int
    publishes: int
    """`publish` calls with changes: `published_changes / publishes` is how many changes one fan-out carried."""
    fell_behind_total: int
    """Watchers disconnected because their buffer overflowed."""
    replaced_total: int
    """Watchers disconnected because a newer watch with the same name subscribed."""
    delivered_directly_total: int
    """Changes that `publish` handed to a watcher's stream itself (`deliver`), buffering nothing."""


class Broadcaster:
    """Delivers every published change to every connected watcher whose filter wants it.

    Args:
        capacity: Each watcher's buffer size (`DEFAULT_WATCHER_BUFFER`).
        encode: A change's bytes on the wire, for watchers with `deliver`: called once per change published.
    """

    def __init__(
        self, *, capacity: int = DEFAULT_WATCHER_BUFFER, encode: Callable[[Change], bytes] | None = None
    ) -> None:
        if capacity < 1:
            raise ValueError(f"capacity: must be at least 1 (got {capacity!r})")
        self._capacity = capacity
        self._encode = encode
        self._watchers: dict[int, Watcher] = {}
        self._by_name: dict[str, Watcher] = {}
        # Invariant: a watcher with a filter is in `_by_service[s]` for each service s of its filter; one without
        # (every service) is in `_unfiltered`. An endpoint change then costs O(watchers that want it), not O(all).
        self._by_service: dict[str, dict[int, Watcher]] = {}
        self._unfiltered: dict[int, Watcher] = {}
        self._ids = itertools.count(1)
        self._subscribed = 0
        self._published = 0
        self._publishes = 0
        self._fell_behind = 0
        self._replaced = 0
        self._delivered_directly = 0

    def subscribe(
        self,
        *,
        name: str = "",
        service_filter: ServiceFilter,
        wake: Callable[[], None],
        deliver: Deliver | None = None,
    ) -> Watcher:
        """Add a watcher that receives every change published from now on (see `Watcher` for `deliver`, which is
        used only if the broadcaster has `encode`).

        A watcher already subscribed under the same non-empty `name` is disconnected (`WatcherEnd.REPLACED`):
        an agent that reconnects leaves no ghost stream behind.
        """
        previous = self._by_name.get(name) if name else None
        if previous is not None:
            self._replaced += 1
            self._remove(previous)
            previous._end(WatcherEnd.REPLACED)
        watcher = Watcher(
            watcher_id=next(self._ids),
            name=name,
            service_filter=service_filter,
            capacity=self._capacity,
            wake=wake,
            deliver=deliver if self._encode is not None else None,
        )
        self._watchers[watcher.watcher_id] = watcher
        if name:
            self._by_name[name] = watcher
        services = service_filter.services
        if services is None:
            self._unfiltered[watcher.watcher_id] = watcher
        for service in services or ():
            self._by_service.setdefault(service, {})[watcher.watcher_id] = watcher
        self._subscribed += 1
        return watcher

    def unsubscribe(self, watcher: Watcher) -> None:
        """Forget `watcher` (its stream ended); a no-op if it was already disconnected."""
        if self._watchers.get(watcher.watcher_id) is watcher:
            self._remove(watcher)

    def publish(self, changes: tuple[Change, ...]) -> tuple[Watcher, ...]:
        """Deliver or buffer `changes` for every watcher that wants them (each gets those it wants, in order, in one
        `deliver`); return the watchers this disconnected for falling behind."""
        self._published += len(changes)
        self._publishes += bool(changes)
        if len(changes) == 1 and not visible(changes[0], _NO_SERVICE):
            return self._publish_endpoint_change(changes[0])
        # Which changes each watcher wants, from the index (no filter checked): O(deliveries), not O(changes x
        # watchers). Filled change by change, so each watcher's list is in publish order.
        wanted: dict[Watcher, list[int]] = {}
        for index, change in enumerate(changes):
            groups: Iterable[Iterable[Watcher]]
            if visible(change, _NO_SERVICE):
                groups = (self._watchers.values(),)
            else:
                groups = (self._unfiltered.values(), self._by_service.get(change.service, {}).values())
            for group in groups:
                for watcher in group:
                    indices = wanted.get(watcher)
                    if indices is None:
                        wanted[watcher] = [index]
                    else:
                        indices.append(index)
        encode = self._encode
        encoded: list[bytes] = []  # encoded when the first idle watcher needs them, shared by all
        dropped: list[Watcher] = []
        directly = 0
        for watcher, indices in wanted.items():
            every = len(indices) == len(changes)
            chosen_bytes: Sequence[bytes] = ()
            if watcher._direct:
                if not encoded:
                    assert encode is not None, "direct only with encode; this is a bug"
                    encoded = [encode(change) for change in changes]
                chosen_bytes = encoded if every else [encoded[index] for index in indices]
            directly += watcher._hand(
                changes if every else [changes[index] for index in indices], chosen_bytes
            )
            if watcher.end is not None:
                self._drop(watcher, dropped)
        self._delivered_directly += directly
        return tuple(dropped)

    def _publish_endpoint_change(self, change: Change) -> tuple[Watcher, ...]:
        """`publish` of one change of one service's endpoints, the common case when idle: the index names exactly
        the watchers that want it, and no per-watcher list is built."""
        indexed = self._by_service.get(change.service)
        if not indexed and not self._unfiltered:
            return ()
        encode = self._encode
        encoded: list[bytes] = []  # encoded when the first idle watcher needs it, shared by all
        single = (change,)
        dropped: list[Watcher] = []
        directly = 0
        for group in (self._unfiltered, indexed):
            if not group:
                continue
            for watcher in tuple(group.values()):  # copied: a watcher that falls behind leaves the index
                # `_hand` inlined: this loop runs once per delivery of every change published alone.
                if watcher._direct:
                    if not encoded:
                        assert encode is not None, "direct only with encode; this is a bug"
                        encoded.append(encode(change))
                    assert watcher._deliver is not None, "direct only with deliver; this is a bug"
                    if watcher._deliver(encoded):
                        watcher.delivered += 1
                        watcher.delivered_directly += 1
                        directly += 1
                        continue
                    watcher._direct = False  # the stream sends it (when its window opens), then calls `idle`
                if not watcher._buffer(single):
                    self._drop(watcher, dropped)
        self._delivered_directly += directly
        return tuple(dropped)

    def _drop(self, watcher: Watcher, dropped: list[Watcher]) -> None:
        """`watcher` fell behind in this publish: out of the broadcaster, in the list `publish` returns."""
        self._fell_behind += 1
        self._remove(watcher)
        dropped.append(watcher)

    def statistics(self) -> BroadcasterStatistics:
        """Return the broadcaster's counters."""
        return BroadcasterStatistics(
            watchers=len(self._watchers),
            subscribed_total=self._subscribed,
            published_changes=self._published,
            publishes=self._publishes,
            fell_behind_total=self._fell_behind,
            replaced_total=self._replaced,
            delivered_directly_total=self._delivered_directly,
        )

    def _remove(self, watcher: Watcher) -> None:
        del self._watchers[watcher.watcher_id]
        self._unfiltered.pop(watcher.watcher_id, None)
        for service in watcher.service_filter.services or ():
            indexed = self._by_service.get(service, {})
            indexed.pop(watcher.watcher_id, None)
            if not indexed:
                self._by_service.pop(service, None)
        if watcher.name and self._by_name.get(watcher.name) is watcher:
            del self._by_name[watcher.name]
