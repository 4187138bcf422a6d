"""A source of events from a manifest directory: the objects of its YAML files, and their pods as the registry.

It reads the directory, sends the events that take the last reading to this one (`ManifestDirectory.changes_since`),
and, when the pods changed, the registry snapshot they stand for (`aether.kube.offline`): a stand-in for the
registrar where there is no cluster. The edge role (and `aether demo`) use it; in a cluster the watches replace it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import attrs
import trio

from aether.core.events import Event
from aether.kube.manifests import ManifestDirectory, ManifestError
from aether.kube.offline import fold_offline, registry_events

__all__ = ["POLL_INTERVAL", "ManifestSource", "ManifestSourceStatistics", "serve_manifest_directory"]

POLL_INTERVAL = 1.0
"""Seconds between two readings: edits show up within a second, and re-reading a small directory costs little."""
SOURCE = "directory"
"""The source of the events it sends."""

_log = logging.getLogger(__name__)


@attrs.frozen(kw_only=True)
class ManifestSourceStatistics:
    """What a `ManifestSource` did so far."""

    readings: int
    """Successful readings of the directory."""
    failed_readings: int
    """Readings that failed (unreadable files); the previous reading stayed in force."""
    events_sent: int
    objects: int
    """Objects in the last successful reading."""


class ManifestSource:
    """A running manifest directory source (handed to the parent by `serve_manifest_directory`)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._reading = ManifestDirectory()
        self._registry: tuple[Event, ...] = ()
        self._readings = self._failed = self._sent = 0

    def statistics(self) -> ManifestSourceStatistics:
        """Return the source's counters."""
        return ManifestSourceStatistics(
            readings=self._readings,
            failed_readings=self._failed,
            events_sent=self._sent,
            objects=len(self._reading.objects),
        )

    def _next_events(self, reading: ManifestDirectory, *, now: int) -> list[Event]:
        """The events from the last reading to `reading`, then the registry snapshot if the pods changed."""
        events = list(reading.changes_since(self._reading, source=SOURCE, observed_at=now))
        state = fold_offline(reading.events(source=SOURCE, observed_at=now), source=SOURCE, observed_at=now)
        registry = registry_events(state, source=SOURCE, observed_at=now)
        # Compared without the observation time: the same pods at another time are the same registry.
        if [_timeless(event) for event in registry] != [_timeless(event) for event in self._registry]:
            events.extend(registry)
            self._registry = registry
        self._reading = reading
        return events


def _timeless(event: Event) -> Event:
    return attrs.evolve(event, observed_at=0)


async def serve_manifest_directory(
    directory: Path,
    *,
    send: trio.MemorySendChannel[Event],
    poll_interval: float = POLL_INTERVAL,
    clock: Callable[[], int] = time.time_ns,
    task_status: trio.TaskStatus[ManifestSource] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Send the events of `directory`'s manifests to `send`, then every change, until cancelled.

    The first reading's events are sent before `task_status.started`; the first reading must succeed.

    Raises:
        ManifestError: The first reading failed (later failures are logged, and the last good reading stays).

    Error handling:
        A reading that fails after the first is logged with the file and document at fault, and retried at the
        next poll: a half-saved file must not delete every object it held.
    """
    source = ManifestSource(directory)
    async with send:
        reading = await trio.to_thread.run_sync(ManifestDirectory.read, directory)
        await _send_all(send, source, source._next_events(reading, now=clock()))
        source._readings += 1  # counted once its events are sent: a reader of the counter sees them queued
        task_status.started(source)
        while True:
            await trio.sleep(poll_interval)
            try:
                reading = await trio.to_thread.run_sync(ManifestDirectory.read, directory)
            except ManifestError as exc:
                source._failed += 1
                _log.warning("manifests %s: %s; keeping the last good reading", directory, exc)
                continue
            await _send_all(send, source, source._next_events(reading, now=clock()))
            source._readings += 1


async def _send_all(send: trio.MemorySendChannel[Event], source: ManifestSource, events: list[Event]) -> None:
    for event in events:
        await send.send(event)
        source._sent += 1
