"""The directory source: a folder of Kubernetes YAML, watched, turned into the events a Kubernetes watch would give.

Every `interval` the source compares the folder's listing (paths, sizes, modification times) with the last one.
When it changed, it reads the folder (`aether.kube.manifests.ManifestDirectory`) and sends the events that take
the previous reading to the new one: deletions, then upserts, each in key order. Hidden files are not read, so
renaming `cart-2.yaml` to `.cart-2.yaml` deletes the pod and renaming it back brings it back.

A file that cannot be read at all (not YAML) changes nothing: the source keeps the last good reading and reports
the file and document. A document that is not a valid object is skipped and reported the same way, and the objects
that document held in the last good reading stay, so a typo never deletes what it was editing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import attrs
import trio

from aether.core.events import Event
from aether.kube.manifests import ManifestDirectory, ManifestError, manifest_files

__all__ = ["DirectorySource", "serve_directory_source"]

LOG = logging.getLogger("aether.demo.source")
SOURCE = "directory"
"""The `source` of the events this source sends."""

_Listing = tuple[tuple[str, int, int], ...]


def _listing(directory: Path) -> _Listing:
    entries = []
    for path in manifest_files(directory):
        try:
            info = path.stat()
        except FileNotFoundError:  # removed between listing and stat: the next poll sees it gone
            continue
        entries.append((path.as_posix(), info.st_size, info.st_mtime_ns))
    return tuple(entries)


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


@attrs.define
class DirectorySource:
    """A watched manifest folder; `serve_directory_source` runs it."""

    directory: Path
    reading: ManifestDirectory = attrs.Factory(ManifestDirectory)
    """The last good reading (what the events sent so far built)."""
    error: str | None = None
    """Why the latest change could not be read (None when it could)."""
    readings: int = 0
    """Readings that produced events."""
    events_sent: int = 0
    last_change_ns: int = 0
    """When the last reading that produced events was sent (the source's clock)."""
    _listing: _Listing = ()

    @property
    def problems(self) -> tuple[str, ...]:
        """The documents skipped by the last reading, and a file that could not be read, as messages."""
        found = tuple(str(problem) for problem in self.reading.problems)
        return (*found, self.error) if self.error else found

    def poll(self, *, observed_at: int) -> tuple[Event, ...]:
        """Read the folder if its listing changed; return the events of what changed (none if nothing did)."""
        try:
            listing = _listing(self.directory)
        except ManifestError as exc:
            self.error = str(exc)
            return ()
        if listing == self._listing:
            return ()
        self._listing = listing
        try:
            reading = _keep_last_good(self.reading, ManifestDirectory.read(self.directory))
        except ManifestError as exc:
            self.error = str(exc)
            LOG.warning("%s: kept the last good objects", exc)
            return ()
        self.error = None
        events = reading.changes_since(self.reading, source=SOURCE, observed_at=observed_at)
        for problem in reading.problems:
            LOG.warning("%s", problem)
        self.reading = reading
        if events:
            self.readings += 1
            self.events_sent += len(events)
            self.last_change_ns = observed_at
        return events


async def serve_directory_source(
    directory: Path,
    *,
    send: trio.MemorySendChannel[Event],
    interval: float = 0.1,
    clock: Callable[[], int] = time.time_ns,
    task_status: trio.TaskStatus[DirectorySource] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Watch `directory` and send its changes on `send` until cancelled; the first reading is sent before
    `task_status.started` (so the log holds every object when the caller goes on).

    Args:
        directory: The manifest folder.
        send: Where events go (`journal.sender()`); not closed here.
        interval: Seconds between polls.
        clock: Nanoseconds since the epoch, for the events' `observed_at`.
        task_status: Receives the `DirectorySource` (its reading, problems and counters).
    """
    source = DirectorySource(directory=directory)
    for event in source.poll(observed_at=clock()):
        await send.send(event)
    task_status.started(source)
    while True:
        await trio.sleep(interval)
        for event in source.poll(observed_at=clock()):
            await send.send(event)
