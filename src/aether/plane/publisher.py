"""The step between the projection and the snapshot cache: a snapshot is published only once it is consistent.

An inconsistent snapshot (a cluster without its load assignment, a listener without its routes) would leave Envoy
waiting for the missing resource until its initial fetch timeout; the projection never makes one (a property test
says so), so one is a bug: it is withheld, logged with what it lacks, and counted, and Envoy keeps the last good one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

import attrs

from aether.core.snapshot import Snapshot
from aether.core.state import State
from aether.plane.collector import collector_deferred
from aether.plane.memory import release_memory
from aether.telemetry import JournalMetrics, current_telemetry, observe
from aether.xds.cache import SnapshotCache

__all__ = ["Publisher", "PublisherStatistics"]

LOG = logging.getLogger("aether.plane.publisher")

RELEASE_AFTER_SECONDS = 0.05
"""A projection that took longer built and dropped many messages (a start-up replay, a new identity at 10,000
services): the allocator's free pages go back to the system after it (`aether.plane.memory.release_memory`)."""


@attrs.frozen(kw_only=True)
class PublisherStatistics:
    """What the publisher has done."""

    published: int
    """Snapshots handed to the cache."""
    withheld: int
    """Inconsistent snapshots not published."""
    last_withheld: tuple[str, ...]
    """What the last withheld snapshot lacked (`Snapshot.consistent()`); empty when none was."""


class Publisher:
    """Projects each state the journal folds and publishes the snapshot, unless it is inconsistent (STYLE P10).

    Subscribe it to the journal: `journal.subscribe(publisher)`.
    """

    def __init__(self, cache: SnapshotCache, *, project: Callable[[State, int], Snapshot]) -> None:
        self._cache = cache
        self._project = project
        self._published = 0
        self._withheld = 0
        self._last_withheld: tuple[str, ...] = ()
        self._last: Snapshot | None = None
        telemetry = current_telemetry()
        self._duration = JournalMetrics.of(telemetry).projection_duration
        observe(
            telemetry,
            "aether.snapshot.resources",
            lambda: self._sizes(bytes_=False),
            unit="{resource}",
            description="Resources in the last published snapshot, by xDS type",
        )
        observe(
            telemetry,
            "aether.snapshot.size",
            lambda: self._sizes(bytes_=True),
            unit="By",
            description="Serialized bytes of the last published snapshot, by xDS type",
        )

    def _sizes(self, *, bytes_: bool) -> Iterable[tuple[int, dict[str, str]]]:
        snapshot = self._last
        if snapshot is None:
            return []
        return [
            (
                sum(r.size for r in resources.values()) if bytes_ else len(resources),
                {"aether.xds.type_url": url},
            )
            for url, resources in sorted(snapshot.resources.items())
        ]

    def __call__(self, state: State, now: int) -> None:
        """Project `state` (observed up to `now`) and publish its snapshot if it is consistent."""
        started = time.perf_counter()
        with collector_deferred():
            snapshot = self._project(state, now)
        took = time.perf_counter() - started
        self._duration.record(took)
        if took >= RELEASE_AFTER_SECONDS:
            release_memory()
        problems = snapshot.consistent()  # O(1) for a consistent snapshot
        if problems:
            self._withheld += 1
            self._last_withheld = problems
            LOG.error(
                "snapshot of node %r at seq %d not published, Envoy keeps the previous one: %s"
                " (an inconsistent projection is a bug)",
                snapshot.node_id,
                snapshot.seq,
                "; ".join(problems),
            )
            return
        self._cache.set_snapshot(snapshot)
        self._published += 1
        self._last = snapshot

    def statistics(self) -> PublisherStatistics:
        """Return the publisher's counters."""
        return PublisherStatistics(
            published=self._published, withheld=self._withheld, last_withheld=self._last_withheld
        )
