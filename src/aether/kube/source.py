"""A role's Kubernetes source: watches turned into log events with `aether.kube.convert`, and sent to the journal.

The agent watches Services, Gateway API objects, ReferenceGrants and its node's pods (`MESH_QUERIES` plus
`node_pod_query`); the edge the same objects, the Namespaces and the TLS Secrets its listeners reference
(`aether.kube.access.EDGE_QUERIES`). Both run this one source, so an object becomes the same events in either log.

Each watch is a reflector; one owner task keeps what the log holds per key (`aether.kube.baseline`), so an upsert
is told apart from a first sighting, an object that did not change appends nothing, and a re-list (after a 410,
or at start-up) becomes deletions of what vanished plus upserts of what changed. At start-up the baseline is the
journal's replayed state: objects deleted while the role was down are deleted from the log by the first list.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable, Sequence

import attrs
import trio

from aether.core.events import Event, Pod
from aether.core.state import State
from aether.kube.access import MESH_RESOURCES
from aether.kube.api import KubeClient
from aether.kube.baseline import Baseline, logged_objects
from aether.kube.convert import ObjectError, deletion_events, object_events, object_meta
from aether.kube.endpoints import MANAGED_SELECTOR
from aether.kube.resources import PODS, JsonObject
from aether.kube.watch import (
    Deleted,
    Reflector,
    Resumed,
    Synced,
    Update,
    Upserted,
    WatchInterrupted,
    WatchQuery,
    serve_reflectors,
)
from aether.rpc.backoff import DEFAULT_BACKOFF, Backoff

__all__ = [
    "MESH_QUERIES",
    "SOURCE",
    "KubeSourceStatistics",
    "known_objects",
    "node_pod_query",
    "serve_kube_source",
]

LOG = logging.getLogger("aether.kube.source")

SOURCE = "kubernetes"
"""The `source` of every event this sends."""

MESH_QUERIES: tuple[WatchQuery, ...] = tuple(WatchQuery(resource=resource) for resource in MESH_RESOURCES)
"""What every node reads (`aether.kube.access.MESH_RESOURCES`, the table the agent's RBAC is checked against)."""


def node_pod_query(node_name: str) -> WatchQuery:
    """The meshed pods scheduled on `node_name` (the API server filters by `spec.nodeName`).

    Safe beside the CNI: an upsert from this watch carries no sandbox, and the pod reducer keeps the network
    namespace and container the CNI recorded for the same incarnation.
    """
    return WatchQuery(
        resource=PODS, label_selector=MANAGED_SELECTOR, field_selector=f"spec.nodeName={node_name}"
    )


@attrs.frozen(kw_only=True)
class KubeSourceStatistics:
    """Counters of a running Kubernetes source."""

    events: int
    """Events sent to the journal."""
    resyncs: int
    """Lists folded (the first of each watch, and every re-list)."""
    rejected: int
    """Objects `aether.kube.convert` could not read (each logged)."""
    interrupted: tuple[str, ...]
    """The watches that lost the API server and have not resumed."""


class _KubeSource:
    """The owner task's state: what the log holds of the watched objects (`aether.kube.baseline`)."""

    def __init__(self, *, known: Baseline, clock: Callable[[], int]) -> None:
        self._known = known
        self._clock = clock
        self._interrupted: set[str] = set()
        self._counts = {"events": 0, "resyncs": 0, "rejected": 0}

    def statistics(self) -> KubeSourceStatistics:
        return KubeSourceStatistics(interrupted=tuple(sorted(self._interrupted)), **self._counts)

    def fold(self, query: WatchQuery, update: Update) -> list[Event]:
        """Return the events of one reflector update that change what the log holds, and remember them."""
        now = self._clock()
        match update:
            case Synced(objects=objects):
                self._counts["resyncs"] += 1
                listed = {key: obj for obj in objects if (key := self._key(obj)) is not None}
                events = self._known.vanished(
                    listed, source=SOURCE, observed_at=now, kind=query.resource.kind
                )
                for key, obj in sorted(listed.items()):
                    events += self._converted(object_events, obj, at=now, known=key in self._known)
                return self._sent(self._known.changed(events))
            case Upserted(object=obj):
                key = self._key(obj)
                if key is None:
                    return []
                events = self._converted(object_events, obj, at=now, known=key in self._known)
                return self._sent(self._known.changed(events))
            case Deleted(object=obj):
                if self._key(obj) is None:
                    return []
                return self._sent(self._known.changed(self._converted(deletion_events, obj, at=now)))
            case WatchInterrupted():
                self._interrupted.add(str(query))
                return []
            case Resumed():
                self._interrupted.discard(str(query))
                return []
            case _:  # pragma: no cover - the type checker proves this unreachable
                raise AssertionError(f"reflector update {update!r}: unknown type (a bug)")

    def _key(self, obj: JsonObject) -> str | None:
        try:
            return object_meta(obj).key
        except ObjectError as error:
            self._reject(error)
            return None

    def _converted(
        self, convert: Callable[..., tuple[Event, ...]], obj: JsonObject, *, at: int, **options: bool
    ) -> list[Event]:
        try:
            return list(convert(obj, source=SOURCE, observed_at=at, **options))
        except ObjectError as error:
            self._reject(error)
            return []

    def _reject(self, error: ObjectError) -> None:
        self._counts["rejected"] += 1
        LOG.warning("kubernetes object skipped: %s", error)

    def _sent(self, events: list[Event]) -> list[Event]:
        self._counts["events"] += len(events)
        return events


def known_objects(state: State, *, queries: Iterable[WatchQuery]) -> Baseline:
    """Return what `state` holds of the kinds `queries` watch: the baseline the source diffs its lists against.

    Seeds the source after a restart: the first list sends only what changed while the role was down, and
    deletes what vanished. Pods the log holds are compared with but not deleted by the first list: the agent's
    node's pods also come from the CNI, and only the CNI may remove those (the edge watches no pods).
    """
    objects = logged_objects(state, kinds={query.resource.kind for query in queries})
    return Baseline(objects, kept=[key for key, item in objects.items() if isinstance(item, Pod)])


async def serve_kube_source(
    client: KubeClient,
    send: trio.abc.SendChannel[Event],
    *,
    queries: Sequence[WatchQuery] = MESH_QUERIES,
    known: Baseline | None = None,
    backoff: Backoff = DEFAULT_BACKOFF,
    rng: random.Random | None = None,
    clock: Callable[[], int] = time.time_ns,
    task_status: trio.TaskStatus[Callable[[], KubeSourceStatistics]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Watch `queries` and send their events to `send` (the journal's) until cancelled.

    Args:
        client: The API client.
        send: Where events go; closed when this returns.
        queries: What to watch (`MESH_QUERIES`, plus `node_pod_query(node)` for the node's pods).
        known: Objects the log already holds (`known_objects(journal.state, queries=...)`).
        backoff: Waits between failed lists and watches.
        rng: The jitter's source.
        clock: Nanoseconds since the epoch, stamped on each event as its `observed_at`.

    `task_status.started` hands back a function returning the source's statistics.

    Error handling: the reflectors retry failures with backoff and re-list on 410; an object that does not
    convert is logged and skipped (counted in `rejected`), and the rest goes on.
    """
    source = _KubeSource(known=known or Baseline(), clock=clock)
    reflectors = [Reflector(client, query, backoff=backoff, rng=rng) for query in queries]
    updates_send, updates_receive = trio.open_memory_channel[tuple[WatchQuery, Update]](0)
    async with send, updates_receive, trio.open_nursery() as nursery:
        await nursery.start(serve_reflectors, reflectors, updates_send)
        task_status.started(source.statistics)
        async for query, update in updates_receive:
            for event in source.fold(query, update):
                await send.send(event)
