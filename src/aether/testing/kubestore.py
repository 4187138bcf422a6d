"""The object store behind the test Kubernetes API server: etcd-like revisions, history, compaction and watches.

Every write bumps one global revision (the `resourceVersion` of lists, watch events and objects), as etcd's
does behind a real API server; the store keeps the changes of a bounded window, so it can list a collection as
it was at a past revision (consistent paging) and start a watch from one, until compaction forgets it.
"""

from __future__ import annotations

import collections
import copy
import datetime
import uuid
from collections.abc import Iterable, Iterator

import attrs

from aether.kube.resources import BUILTIN_RESOURCES, JsonObject, ResourceType, object_key
from aether.sync import LatestValue

__all__ = ["DEFAULT_HISTORY_LIMIT", "ObjectStore", "StoredChange", "TooOldError", "WatchSubscription"]

DEFAULT_HISTORY_LIMIT = 1000
"""Changes kept for watches and paging: the real watch cache keeps 100 to 1,000 per kind; tests lower it to force
410 Gone."""

StorageKey = tuple[str, str]
"""One storage per kind, whatever the served version: `(group, plural)`."""


class TooOldError(LookupError):
    """`revision` is older than the oldest the store can still serve (`floor`)."""

    def __init__(self, revision: int, *, floor: int) -> None:
        super().__init__(revision, floor)
        self.revision = revision
        self.floor = floor

    def __str__(self) -> str:
        return f"too old resource version: {self.revision} ({self.floor})"


@attrs.frozen(kw_only=True)
class StoredChange:
    """One write: the object after it (for DELETED, its last state) and before it (None for ADDED)."""

    revision: int
    storage: StorageKey
    type: str
    """ADDED, MODIFIED or DELETED."""
    object: JsonObject
    previous: JsonObject | None


def storage_of(resource: ResourceType) -> StorageKey:
    """Return the storage key of `resource` (shared by every served version of its kind)."""
    return (resource.group, resource.plural)


class WatchSubscription:
    """A watcher's buffer: the store appends its storage's changes at write time, the server drains them.

    Buffering at write time keeps a slow watcher's events safe from a compaction that runs meanwhile,
    as the real watch cache's per-watcher channels do.
    """

    def __init__(self, storage: StorageKey) -> None:
        self.storage = storage
        self.pending: collections.deque[StoredChange] = collections.deque()
        self.dropped = False
        """Set by `ObjectStore.drop_watches`: the server cuts this watch's connection."""
        self.bookmark_requested = False
        self._wakes = LatestValue(0)
        """How often the store woke this watch."""
        self._waited = 0
        """The wakes `wait` has returned for: one made while the server was busy is not lost."""

    def wake(self) -> None:
        """Wake the task serving this watch."""
        self._wakes.set(self._wakes.value + 1)

    async def wait(self) -> None:
        """Block until the store appended a change or woke this watch since the last `wait` returned."""
        waited = self._waited
        self._waited = await self._wakes.wait_value(lambda wakes: wakes > waited)


class ObjectStore:
    """Objects by kind and key, a global revision, the recent changes, and the open watches.

    Args:
        resources: The served kinds (each (group, plural) gets one storage).
        history_limit: How many changes to keep; older ones are compacted away as writes arrive.
        revision: The revision of the empty store (real clusters start far from 0; so may tests).
    """

    def __init__(
        self,
        *,
        resources: Iterable[ResourceType] = BUILTIN_RESOURCES,
        history_limit: int = DEFAULT_HISTORY_LIMIT,
        revision: int = 1,
    ) -> None:
        self.kinds: dict[StorageKey, ResourceType] = {}
        for resource in resources:
            self.kinds.setdefault(storage_of(resource), resource)
        self.revision = revision
        self.floor = revision
        """Watches and exact lists are served from any revision >= floor; older ones get 410 Gone."""
        self.history_limit = history_limit
        self._objects: dict[StorageKey, dict[str, JsonObject]] = {key: {} for key in self.kinds}
        self._history: collections.deque[StoredChange] = collections.deque()
        self._subscriptions: set[WatchSubscription] = set()
        self._watches: LatestValue[tuple[int, int]] = LatestValue((0, 0))
        """`(open_watches, watches_started)`, set whenever either changes."""
        self.watches_started = 0
        """Watches opened since the store was made."""

    # Writes ---------------------------------------------------------------------------------------------

    def create(self, resource: ResourceType, obj: JsonObject) -> JsonObject:
        """Store a new object; return it as stored (with resourceVersion, uid, creationTimestamp, generation).

        Raises:
            ValueError: If the object lacks a name, or a namespace its kind needs.
            FileExistsError: If an object with its key exists (the API's 409 AlreadyExists).
        """
        stored = self._prepare(resource, obj)
        objects = self._objects[storage_of(resource)]
        key = object_key(stored)
        if key in objects:
            raise FileExistsError(f"{resource.plural} {key!r} already exists; update it instead")
        metadata = stored["metadata"]
        metadata["uid"] = str(uuid.UUID(int=self.revision + 1))
        metadata["creationTimestamp"] = _now()
        metadata["generation"] = 1
        return self._write(resource, "ADDED", stored, previous=None)

    def update(self, resource: ResourceType, obj: JsonObject) -> JsonObject:
        """Replace an object; return it as stored. Its generation grows when its `spec` changed.

        Raises:
            ValueError: If the object lacks a name, or a namespace its kind needs.
            LookupError: If no object has its key (the API's 404 NotFound).
        """
        stored = self._prepare(resource, obj)
        key = object_key(stored)
        previous = self._objects[storage_of(resource)].get(key)
        if previous is None:
            raise LookupError(f"{resource.plural} {key!r} not found; create it first")
        metadata = stored["metadata"]
        for field in ("uid", "creationTimestamp"):
            metadata[field] = previous["metadata"][field]
        changed = stored.get("spec") != previous.get("spec")
        metadata["generation"] = previous["metadata"]["generation"] + (1 if changed else 0)
        return self._write(resource, "MODIFIED", stored, previous=previous)

    def put(self, resource: ResourceType, obj: JsonObject) -> JsonObject:
        """Create the object, or update it if its key exists (what `kubectl apply` amounts to here)."""
        if object_key(self._prepare(resource, obj)) in self._objects[storage_of(resource)]:
            return self.update(resource, obj)
        return self.create(resource, obj)

    def delete(self, resource: ResourceType, *, name: str, namespace: str = "") -> JsonObject:
        """Delete an object; return its last state, which carries the deletion's revision.

        Raises:
            LookupError: If no such object exists.
        """
        key = f"{namespace}/{name}" if namespace else name
        objects = self._objects[storage_of(resource)]
        previous = objects.get(key)
        if previous is None:
            raise LookupError(f"{resource.plural} {key!r} not found")
        return self._write(resource, "DELETED", copy.deepcopy(previous), previous=previous)

    def compact(self, *, revision: int | None = None) -> None:
        """Forget the changes up to `revision` (all of them by default): watches from before it get 410 Gone."""
        target = self.revision if revision is None else min(revision, self.revision)
        while self._history and self._history[0].revision <= target:
            self._history.popleft()
        self.floor = max(self.floor, target)

    def _prepare(self, resource: ResourceType, obj: JsonObject) -> JsonObject:
        if storage_of(resource) not in self._objects:
            raise ValueError(f"resource {resource!s}: not served by this store")
        stored = copy.deepcopy(obj)
        metadata = stored.setdefault("metadata", {})
        if not metadata.get("name"):
            raise ValueError(f"{resource.plural}: metadata.name is required (got {metadata.get('name')!r})")
        if resource.namespaced and not metadata.get("namespace"):
            raise ValueError(f"{resource.plural} {metadata['name']!r}: metadata.namespace is required")
        if not resource.namespaced:
            metadata.pop("namespace", None)
        stored["apiVersion"] = resource.api_version
        stored["kind"] = resource.kind
        return stored

    def _write(
        self, resource: ResourceType, kind: str, stored: JsonObject, *, previous: JsonObject | None
    ) -> JsonObject:
        self.revision += 1
        stored["metadata"]["resourceVersion"] = str(self.revision)
        storage = storage_of(resource)
        key = object_key(stored)
        if kind == "DELETED":
            del self._objects[storage][key]
        else:
            self._objects[storage][key] = stored
        change = StoredChange(
            revision=self.revision, storage=storage, type=kind, object=stored, previous=previous
        )
        self._history.append(change)
        while len(self._history) > self.history_limit:
            self.floor = self._history.popleft().revision
        for subscription in self._subscriptions:
            if subscription.storage == storage:
                subscription.pending.append(change)
                subscription.wake()
        return copy.deepcopy(stored)

    # Reads ----------------------------------------------------------------------------------------------

    def get(self, resource: ResourceType, *, name: str, namespace: str = "") -> JsonObject | None:
        """Return a copy of the object stored under that key, or None."""
        found = self._objects[storage_of(resource)].get(f"{namespace}/{name}" if namespace else name)
        return None if found is None else copy.deepcopy(found)

    def objects_at(self, storage: StorageKey, *, revision: int) -> dict[str, JsonObject]:
        """Return the storage's objects as they were at `revision` (by key; the objects are shared, not copied).

        Raises:
            TooOldError: If `revision` is older than the history kept.
            ValueError: If `revision` is newer than the store's.
        """
        if revision < self.floor:
            raise TooOldError(revision, floor=self.floor)
        if revision > self.revision:
            raise ValueError(f"too large resource version: {revision}, current: {self.revision}")
        objects = dict(self._objects[storage])
        # Undo the newer changes, newest first: what remains is the state at `revision` (MVCC, as etcd reads).
        for change in reversed(self._history):
            if change.revision <= revision:
                break
            if change.storage != storage:
                continue
            key = object_key(change.object)
            if change.previous is None:
                del objects[key]
            else:
                objects[key] = change.previous
        return objects

    def subscribe(self, storage: StorageKey, *, after: int) -> WatchSubscription:
        """Open a watch on `storage` holding every change newer than `after`, and every later one as it happens.

        Raises:
            TooOldError: If changes after `after` were compacted away.
        """
        if after < self.floor:
            raise TooOldError(after, floor=self.floor)
        subscription = WatchSubscription(storage)
        subscription.pending.extend(self._changes_after(storage, after))
        self._subscriptions.add(subscription)
        self.watches_started += 1
        self._notify_watches()
        return subscription

    def unsubscribe(self, subscription: WatchSubscription) -> None:
        """Close a watch opened by `subscribe`."""
        self._subscriptions.discard(subscription)
        self._notify_watches()

    async def wait_watches(self, *, open_count: int = 1, started: int = 0) -> None:
        """Block until at least `open_count` watches are open and `started` were ever opened."""
        await self._watches.wait_value(lambda watches: watches[0] >= open_count and watches[1] >= started)

    def _notify_watches(self) -> None:
        self._watches.set((self.open_watches, self.watches_started))

    def drop_watches(self) -> int:
        """Cut every open watch (the server aborts their connections); return how many there were."""
        for subscription in self._subscriptions:
            subscription.dropped = True
            subscription.wake()
        return len(self._subscriptions)

    def request_bookmarks(self) -> None:
        """Ask every open watch that allows bookmarks to send one now."""
        for subscription in self._subscriptions:
            subscription.bookmark_requested = True
            subscription.wake()

    @property
    def open_watches(self) -> int:
        """The number of watches open now."""
        return len(self._subscriptions)

    def _changes_after(self, storage: StorageKey, after: int) -> Iterator[StoredChange]:
        return (c for c in self._history if c.revision > after and c.storage == storage)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
