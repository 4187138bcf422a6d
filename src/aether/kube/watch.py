"""List-then-watch (a reflector): one collection kept in sync as typed updates, through restarts and compaction.

The protocol is the one the API documents for informers: list (paged, one consistent version), watch from the
list's version, advance on every event and bookmark, re-watch from the last version when a stream ends or
breaks, and list again only when the server says that version is gone (410). A re-list is sent as `Synced`
with the whole set, so a consumer drops what vanished meanwhile; nothing is lost or sent twice.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence

import attrs
import trio

from aether.kube.api import DEFAULT_PAGE_SIZE, KubeClient, ObjectList, WatchEvent
from aether.kube.errors import KubeError, ResourceExpiredError
from aether.kube.resources import JsonObject, ResourceType
from aether.rpc.backoff import DEFAULT_BACKOFF, Backoff

__all__ = [
    "DEFAULT_WATCH_TIMEOUT",
    "Deleted",
    "Reflector",
    "ReflectorStatistics",
    "Resumed",
    "Synced",
    "Update",
    "Upserted",
    "WatchInterrupted",
    "WatchQuery",
    "serve_reflector",
    "serve_reflectors",
]

LOG = logging.getLogger("aether.kube.watch")

DEFAULT_WATCH_TIMEOUT = (300.0, 600.0)
"""Seconds each watch asks the server to last, drawn in this range: client-go's 5 to 10 minutes, so the
watches of many clients do not all end (and re-open) at once."""


@attrs.frozen(kw_only=True)
class WatchQuery:
    """Which objects to keep in sync: a collection, optionally one namespace, optionally selected."""

    resource: ResourceType
    namespace: str | None = None
    label_selector: str = ""
    field_selector: str = ""

    def __str__(self) -> str:
        where = f" in {self.namespace!r}" if self.namespace else ""
        selectors = ",".join(text for text in (self.label_selector, self.field_selector) if text)
        return f"{self.resource}{where}" + (f" [{selectors}]" if selectors else "")


@attrs.frozen(kw_only=True)
class Synced:
    """The whole selected set at `resource_version` (the first list, and every re-list after a 410).

    Replaces whatever the consumer holds: objects it has that are not here were deleted meanwhile.
    """

    objects: tuple[JsonObject, ...]
    """Sorted by `<namespace>/<name>`."""
    resource_version: str


@attrs.frozen(kw_only=True)
class Upserted:
    """An object was added or changed (or entered the selection) at `resource_version`."""

    object: JsonObject
    resource_version: str


@attrs.frozen(kw_only=True)
class Deleted:
    """An object was deleted (or left the selection); `object` is its last state."""

    object: JsonObject
    resource_version: str


@attrs.frozen(kw_only=True)
class WatchInterrupted:
    """The API server stopped answering (sent once per outage): what the consumer holds may be stale now."""

    reason: str


@attrs.frozen(kw_only=True)
class Resumed:
    """The API server answers again after a `WatchInterrupted`: a list succeeded (its `Synced` came just before),
    or a watch opened (the changes missed meanwhile follow; or, if the server compacted them, a `Synced` does,
    since a watch learns of a 410 only from its first event)."""

    resource_version: str


Update = Synced | Upserted | Deleted | WatchInterrupted | Resumed
"""What a reflector sends, in order."""


@attrs.frozen(kw_only=True)
class ReflectorStatistics:
    """Counters of a `Reflector`."""

    lists: int
    """Complete lists (the first one, and each after a 410)."""
    watches: int
    """Watch streams opened."""
    expired: int
    """410 Gone answers (each followed by a list)."""
    failures: int
    """Lists or watches that failed otherwise (each followed by a backoff)."""
    bookmarks: int
    updates: int
    """Updates sent (Synced, Upserted, Deleted)."""
    resource_version: str
    """Where the next watch starts; empty before the first list."""


class Reflector:
    """Keeps one `WatchQuery` in sync and sends its updates; run it with `run` or `serve_reflector`.

    Args:
        client: The API client.
        query: What to watch.
        backoff: Waits between failed attempts (exponential, jittered).
        rng: The jitter's source (a seeded `random.Random` in tests).
        page_size: Objects per list page.
        watch_timeout: The range each watch's `timeoutSeconds` is drawn from.
        resource_version: Start by watching from here instead of listing (the caller listed already).
    """

    def __init__(
        self,
        client: KubeClient,
        query: WatchQuery,
        *,
        backoff: Backoff = DEFAULT_BACKOFF,
        rng: random.Random | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
        watch_timeout: tuple[float, float] = DEFAULT_WATCH_TIMEOUT,
        resource_version: str = "",
    ) -> None:
        self.client = client
        self.query = query
        self._backoff = backoff
        self._rng = rng or random.Random()
        self._page_size = page_size
        self._watch_timeout = watch_timeout
        self._version = resource_version
        self._interrupted = False
        self._failures = 0
        self._counts = {"lists": 0, "watches": 0, "expired": 0, "failures": 0, "bookmarks": 0, "updates": 0}

    def statistics(self) -> ReflectorStatistics:
        """Return the reflector's counters."""
        return ReflectorStatistics(resource_version=self._version, **self._counts)

    async def list(self) -> ObjectList:
        """List the query's collection whole (one consistent version). Used by `run`, and by owners that need
        the first state before anything else starts.

        Raises:
            KubeError: The list failed.
        """
        query = self.query
        listed = await self.client.list_all(
            query.resource,
            namespace=query.namespace,
            label_selector=query.label_selector,
            field_selector=query.field_selector,
            page_size=self._page_size,
        )
        self._counts["lists"] += 1
        return listed

    async def run(
        self,
        updates: trio.abc.SendChannel[Update],
        *,
        task_status: trio.TaskStatus[Reflector] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Send updates until cancelled (or until `updates` is closed by its receiver).

        `task_status.started(self)` comes once the first list succeeded (or at once when resuming from a
        given version), before its `Synced` is sent, so a parent may start this and then consume.

        Error handling: a 410 lists again at once; any other `KubeError` (refused, broken, a Status) backs off
        with jitter and retries, re-watching from the last version, and logs one warning per failure.
        """
        started = False
        while True:
            if not self._version:
                try:
                    listed = await self.list()
                except KubeError as error:
                    await self._failed(updates, error)
                    continue
                self._version = listed.resource_version
                if not started:
                    task_status.started(self)
                    started = True
                await self._send(
                    updates, Synced(objects=listed.items, resource_version=listed.resource_version)
                )
                await self._recovered(updates)
            if not started:
                task_status.started(self)
                started = True
            try:
                await self._watch(updates)
            except ResourceExpiredError as error:
                self._counts["expired"] += 1
                LOG.info("watch of %s: %s; listing again", self.query, error)
                self._version = ""
            except KubeError as error:
                await self._failed(updates, error)

    async def _watch(self, updates: trio.abc.SendChannel[Update]) -> None:
        query = self.query
        low, high = self._watch_timeout
        async with self.client.open_watch(
            query.resource,
            resource_version=self._version,
            namespace=query.namespace,
            label_selector=query.label_selector,
            field_selector=query.field_selector,
            timeout_seconds=max(1, round(self._rng.uniform(low, high))),
        ) as events:
            self._counts["watches"] += 1
            await self._recovered(updates)
            async for event in events:
                await self._apply(updates, event)
        # The server ended the stream cleanly (its timeout): re-watch from the last version at once.

    async def _apply(self, updates: trio.abc.SendChannel[Update], event: WatchEvent) -> None:
        version = event.resource_version
        match event.type:
            case "BOOKMARK":
                self._counts["bookmarks"] += 1
            case "ADDED" | "MODIFIED":
                await self._send(updates, Upserted(object=event.object, resource_version=version))
            case "DELETED":
                await self._send(updates, Deleted(object=event.object, resource_version=version))
            case _:  # pragma: no cover - KubeClient yields only these types
                raise AssertionError(f"watch event type {event.type!r}: not produced by KubeClient (a bug)")
        if version:
            # Only after the update is handed over: a cancellation before that re-watches from the old version.
            self._version = version

    async def _send(self, updates: trio.abc.SendChannel[Update], update: Update) -> None:
        await updates.send(update)
        self._counts["updates"] += 1

    async def _failed(self, updates: trio.abc.SendChannel[Update], error: KubeError) -> None:
        self._counts["failures"] += 1
        self._failures += 1
        delay = self._backoff.delay(self._failures, rng=self._rng)
        LOG.warning("watch of %s: %s; retrying in %.2f s", self.query, error, delay)
        if not self._interrupted:
            self._interrupted = True
            await updates.send(WatchInterrupted(reason=str(error)))
        await trio.sleep(delay)

    async def _recovered(self, updates: trio.abc.SendChannel[Update]) -> None:
        self._failures = 0
        if self._interrupted:
            self._interrupted = False
            await updates.send(Resumed(resource_version=self._version))


async def serve_reflector(
    client: KubeClient,
    query: WatchQuery,
    updates: trio.abc.SendChannel[Update],
    *,
    backoff: Backoff = DEFAULT_BACKOFF,
    rng: random.Random | None = None,
    page_size: int = DEFAULT_PAGE_SIZE,
    watch_timeout: tuple[float, float] = DEFAULT_WATCH_TIMEOUT,
    task_status: trio.TaskStatus[Reflector] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Keep `query` in sync, sending its updates to `updates`, until cancelled; `started` hands back the Reflector.

    Resource handling: `updates` is closed when this returns or fails.
    """
    reflector = Reflector(
        client, query, backoff=backoff, rng=rng, page_size=page_size, watch_timeout=watch_timeout
    )
    async with updates:
        await reflector.run(updates, task_status=task_status)


async def serve_reflectors(
    reflectors: Sequence[Reflector],
    updates: trio.MemorySendChannel[tuple[WatchQuery, Update]],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run several reflectors into one channel, each update tagged with its reflector's query, until cancelled.

    One channel lets a single owner task hold everything the reflectors report (STYLE C9); each reflector's
    updates keep their order. `task_status.started()` comes once every reflector runs.

    Resource handling: `updates` is closed when this returns or fails.
    """
    async with updates, trio.open_nursery() as nursery:
        for reflector in reflectors:
            inner_send, inner_receive = trio.open_memory_channel[Update](0)
            nursery.start_soon(_run_into, reflector, inner_send)
            nursery.start_soon(_forward, reflector.query, inner_receive, updates.clone())
        task_status.started()


async def _run_into(reflector: Reflector, send: trio.MemorySendChannel[Update]) -> None:
    async with send:
        await reflector.run(send)


async def _forward(
    query: WatchQuery,
    receive: trio.MemoryReceiveChannel[Update],
    send: trio.abc.SendChannel[tuple[WatchQuery, Update]],
) -> None:
    async with receive, send:
        async for update in receive:
            await send.send((query, update))
