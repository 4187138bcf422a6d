"""A source of events from a manifest directory: the objects of its YAML files, and their pods as the registry.

It reads the directory and sends the events that take what the log holds to this reading (`aether.kube.baseline`:
at start-up, the objects of the replayed state; unchanged objects send nothing, vanished ones their deletion), and, with `offline_registry`, when the pods changed, the registry snapshot they stand for (`aether.kube.offline`):
a stand-in for the registrar where there is none. The edge role and `aether demo` use it; in a cluster the watches
replace it. Hidden files are not read, so renaming `web-1.yaml` to `.web-1.yaml` deletes what it defined.

Bad input never loses objects. A file that cannot be read at all (not YAML) changes nothing: the last good reading
stays, and `error` names the file and document. A document that is not a valid object is skipped and listed in
`problems`, and the objects that document defined in the last good reading stay: a typo while editing never
deletes what was being edited.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import attrs
import trio

from aether.core.events import Event, Record
from aether.core.reduce import fold_all
from aether.core.state import EMPTY_STATE, State
from aether.kube.baseline import Baseline, event_object, logged_objects
from aether.kube.convert import object_events
from aether.kube.manifests import ManifestDirectory, ManifestError, manifest_files
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

    polls: int
    """Checks of the directory's listing after the first reading (a reading follows a change that held still)."""
    readings: int
    """Successful readings of the directory."""
    failed_readings: int
    """Readings that failed (unreadable files); the previous reading stayed in force."""
    events_sent: int
    objects: int
    """Objects in the last successful reading."""


class ManifestSource:
    """A running manifest directory source (handed to the parent by `serve_manifest_directory`).

    Args:
        directory: The manifest directory.
        offline_registry: Send the registry snapshot the pods stand for.
        logged: The replayed state of the log the events go to: the first reading is compared with what it holds
            (unchanged objects send nothing, objects deleted meanwhile are deleted).
    """

    def __init__(
        self, directory: Path, *, offline_registry: bool = True, logged: State = EMPTY_STATE
    ) -> None:
        self.directory = directory
        self._offline_registry = offline_registry
        self._reading = ManifestDirectory()
        self._baseline = Baseline(logged_objects(logged))
        self._logged: State | None = logged
        """The replayed state, until the first reading's registry snapshot was compared with its registry."""
        self._registry: tuple[Event, ...] = ()
        self._readings = self._failed = self._sent = self._polls = 0
        self.error: str | None = None
        """Why the latest reading failed (None when it succeeded)."""

    @property
    def reading(self) -> ManifestDirectory:
        """The reading in force: the objects the events sent so far built."""
        return self._reading

    @property
    def problems(self) -> tuple[str, ...]:
        """The documents the reading in force skipped, and the latest reading's failure, as messages."""
        found = tuple(str(problem) for problem in self._reading.problems)
        return (*found, self.error) if self.error else found

    def statistics(self) -> ManifestSourceStatistics:
        """Return the source's counters."""
        return ManifestSourceStatistics(
            polls=self._polls,
            readings=self._readings,
            failed_readings=self._failed,
            events_sent=self._sent,
            objects=len(self._reading.objects),
        )

    def failed(self, error: ManifestError) -> None:
        """Record a reading that failed: the last good one stays in force."""
        self._failed += 1
        self.error = str(error)

    def changes(self, reading: ManifestDirectory, *, observed_at: int) -> list[Event]:
        """Take `reading` (keeping what its skipped documents defined before); return the events from what the log
        holds to it (deletions, then upserts, in key order), then (`offline_registry`) the registry snapshot if the
        pods changed."""
        reading = _keep_last_good(self._reading, reading)
        self.error = None
        upserts = [
            event
            for key, item in reading.objects.items()
            for event in object_events(
                item.body, source=SOURCE, observed_at=observed_at, known=key in self._baseline
            )
        ]
        # An object of a skipped document stays: a typo while editing never deletes what was being edited.
        present = {problem.key for problem in reading.problems if problem.key}
        present.update(found[0] for event in upserts if (found := event_object(event)) is not None)
        events = self._baseline.vanished(present, source=SOURCE, observed_at=observed_at)
        events += self._baseline.changed(upserts)
        if self._offline_registry:
            state = fold_offline(
                reading.events(source=SOURCE, observed_at=observed_at), source=SOURCE, observed_at=observed_at
            )
            registry = registry_events(state, source=SOURCE, observed_at=observed_at)
            if self._logged is not None and _holds_registry(self._logged, registry):
                self._registry = registry
            # Compared without the observation time: the same pods at another time are the same registry.
            if [_timeless(event) for event in registry] != [_timeless(event) for event in self._registry]:
                events.extend(registry)
                self._registry = registry
        self._logged = None
        self._reading = reading
        return events


def _holds_registry(logged: State, registry: tuple[Event, ...]) -> bool:
    """True when the registry of `logged` is the one `registry` (a snapshot) makes."""
    records = (Record(seq=logged.seq + seq, event=event) for seq, event in enumerate(registry, 1))
    return fold_all(logged, records).registry == logged.registry


def _keep_last_good(previous: ManifestDirectory, reading: ManifestDirectory) -> ManifestDirectory:
    """Return `reading` plus the objects of `previous` defined by documents that `reading` had to skip."""
    skipped = {(problem.path, problem.index) for problem in reading.problems}
    kept = {
        key: item
        for key, item in previous.objects.items()
        if (item.path, item.index) in skipped and key not in reading.objects
    }
    if not kept:
        return reading
    objects = {**reading.objects, **kept}
    return ManifestDirectory(
        objects={key: objects[key] for key in sorted(objects)}, problems=reading.problems
    )


def _timeless(event: Event) -> Event:
    return attrs.evolve(event, observed_at=0)


async def serve_manifest_directory(
    directory: Path,
    *,
    send: trio.MemorySendChannel[Event],
    poll_interval: float = POLL_INTERVAL,
    offline_registry: bool = True,
    logged: State = EMPTY_STATE,
    clock: Callable[[], int] = time.time_ns,
    task_status: trio.TaskStatus[ManifestSource] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Send the events of `directory`'s manifests to `send`, then every change, until cancelled.

    With `offline_registry`, the pods also stand in for the registrar (where there is none, as for an edge fed
    from a directory); without it, endpoints come from a registrar.

    `logged` is the replayed state of the log `send` feeds (`journal.state`): the first reading sends only what
    changed since, and deletes what vanished while the source was down. The first reading's events are sent before
    `task_status.started`; the first reading must succeed.

    Raises:
        ManifestError: The first reading failed (later failures are logged, and the last good reading stays).

    A change is read once the directory's listing (paths, sizes, modification times) has held still for one
    `poll_interval`, so a file caught half-written is not read; an edit shows after two to three intervals.

    Error handling:
        A reading that fails after the first is logged with the file and document at fault, and read again when
        the files change: a half-saved file must not delete every object it held.
    """
    source = ManifestSource(directory, offline_registry=offline_registry, logged=logged)
    async with send:
        applied = await trio.to_thread.run_sync(_listing, directory)
        reading = await trio.to_thread.run_sync(ManifestDirectory.read, directory)
        await _send_all(send, source, source.changes(reading, observed_at=clock()))
        source._readings += 1  # counted once its events are sent: a reader of the counter sees them queued
        task_status.started(source)
        seen = applied
        while True:
            await trio.sleep(poll_interval)
            listing = await trio.to_thread.run_sync(_listing, directory)
            source._polls += 1
            # Read only a listing that held still for a whole poll interval: an editor that truncates, then
            # writes, must not be read in between (an empty file would delete everything it defined).
            stable, seen = listing == seen, listing
            if listing == applied or not stable:
                continue
            applied = listing
            try:
                reading = await trio.to_thread.run_sync(ManifestDirectory.read, directory)
            except ManifestError as exc:
                source.failed(exc)
                _log.warning("manifests %s: %s; keeping the last good reading", directory, exc)
                continue
            if reading.problems != source.reading.problems:  # said once, not at every reading
                for problem in reading.problems:
                    _log.warning("manifests %s: %s", directory, problem)
            await _send_all(send, source, source.changes(reading, observed_at=clock()))
            source._readings += 1


_Listing = tuple[tuple[str, int, int], ...]


def _listing(directory: Path) -> _Listing:
    """The manifest files of `directory` with their sizes and modification times (what a change changes)."""
    entries = []
    try:
        paths = manifest_files(directory)
    except ManifestError:
        return ()
    for path in paths:
        try:
            info = path.stat()
        except FileNotFoundError:  # removed between the listing and the stat: the next poll sees it gone
            continue
        entries.append((path.as_posix(), info.st_size, info.st_mtime_ns))
    return tuple(entries)


async def _send_all(send: trio.MemorySendChannel[Event], source: ManifestSource, events: list[Event]) -> None:
    for event in events:
        await send.send(event)
        source._sent += 1
