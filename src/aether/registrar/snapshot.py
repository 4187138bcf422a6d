"""The registrar's sans-IO core: a versioned registry snapshot, the changes each mutation makes, and resync plans.

Everything here is a pure function of values: the server owns one `RegistrySnapshot`, applies mutations to it
with `apply`, persists and broadcasts the changes, and answers a watcher's resume with `resync`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

import attrs
import immutables

from aether.core.events.registry import Endpoint, EndpointKey, Protocol
from aether.core.values import freeze_strs

__all__ = [
    "ALL_SERVICES",
    "HISTORY_LIMIT",
    "Change",
    "ChangeKind",
    "EndpointRegistered",
    "EndpointsReplaced",
    "EndpointsUnregistered",
    "EndpointsUpdated",
    "Mutation",
    "RegistrySnapshot",
    "ServiceFilter",
    "StoreUpdate",
    "apply",
    "apply_update",
    "empty_snapshot",
    "resync",
    "snapshot_of",
    "visible",
]

HISTORY_LIMIT = 10_000
"""How many changes a snapshot keeps to answer resumes.

An agent that reconnects within this many changes gets only what it missed; past it, a full resync.
At a few hundred bytes a change this is a few MiB, and it covers a restart of every pod of a large cluster.
"""


class ChangeKind(enum.IntEnum):
    """What a watch event says; the values are the wire `EventType`'s."""

    FULL_SNAPSHOT = 1
    ENDPOINT_ADDED = 2
    ENDPOINT_REMOVED = 3
    ENDPOINT_UPDATED = 4
    SNAPSHOT_COMPLETE = 5
    SERVICE_ADDED = 6
    SERVICE_REMOVED = 7


@attrs.frozen(kw_only=True)
class Change:
    """One watch event at `version`.

    `endpoint` is set for ENDPOINT_ADDED, ENDPOINT_UPDATED and FULL_SNAPSHOT (but the opening one);
    ENDPOINT_REMOVED names its endpoint with `service`, `protocol` and `ip`; SERVICE_* carry `service` only;
    SNAPSHOT_COMPLETE carries only the version.
    """

    kind: ChangeKind
    version: int
    service: str = ""
    protocol: Protocol = Protocol.UNSPECIFIED
    ip: str = ""
    endpoint: Endpoint | None = None


@attrs.frozen(kw_only=True)
class EndpointRegistered:
    """A RegisterEndpoint call: add `endpoint`, or replace the one with the same (service, protocol, ip)."""

    endpoint: Endpoint


@attrs.frozen(kw_only=True)
class EndpointsUnregistered:
    """An UnregisterEndpoint call: remove the service's endpoints with these IPs, whatever their protocol."""

    service: str
    ips: tuple[str, ...] = attrs.field(converter=freeze_strs)


Mutation = EndpointRegistered | EndpointsUnregistered
"""A change a client asks the registrar for (RegisterEndpoint, UnregisterEndpoint)."""


@attrs.frozen(kw_only=True)
class EndpointsUpdated:
    """The store changed underneath the registrar: these endpoints were written, those keys deleted.

    Sent by a backend whose store others also change (another registrar replica on the same etcd, Kubernetes).
    An upsert replaces the endpoint with the same (service, protocol, ip); removing an unknown key is no change.
    """

    upserted: tuple[Endpoint, ...] = ()
    removed: tuple[EndpointKey, ...] = ()
    version: int | None = None
    """The store's version of the state after this update (greater than any before), or None: the registrar's next."""


@attrs.frozen(kw_only=True)
class EndpointsReplaced:
    """The store holds exactly `endpoints` now (a re-list: after a compaction, a reconnect, or a first list).

    The registrar diffs it against its snapshot, so watchers see only what differs, never a gap or a duplicate.
    """

    endpoints: tuple[Endpoint, ...]
    version: int | None = None
    """The store's version of this listing (greater than any before), or None: the registrar's next."""


StoreUpdate = EndpointsUpdated | EndpointsReplaced
"""A change the store made that the registrar did not (folded in with `apply_update`)."""


@attrs.frozen(kw_only=True)
class ServiceFilter:
    """Which services' endpoints a watcher wants; `services=None` means all of them."""

    services: frozenset[str] | None = None

    def wants(self, service: str) -> bool:
        """Return whether endpoint events of `service` pass the filter."""
        return self.services is None or service in self.services


ALL_SERVICES = ServiceFilter()


@attrs.frozen(kw_only=True)
class RegistrySnapshot:
    """The whole registry at `version`, and the changes that led to it (the last `HISTORY_LIMIT` or so).

    Invariant: `services[name]` is the number of endpoints of `name` (any protocol), and never 0.
    Invariant: `history` holds the changes of every version in `history_floor + 1 .. version`.
    """

    version: int = 0
    endpoints: immutables.Map[EndpointKey, Endpoint] = immutables.Map()
    services: immutables.Map[str, int] = immutables.Map()
    history: immutables.Map[int, tuple[Change, ...]] = immutables.Map()
    history_floor: int = 0
    """The newest version a resume cannot be answered from history for: resumes from older versions resync."""
    history_size: int = 0
    """The number of changes in `history`."""

    def sorted_endpoints(self) -> tuple[Endpoint, ...]:
        """Every endpoint, sorted by (service, protocol, ip)."""
        return tuple(self.endpoints[key] for key in sorted(self.endpoints.keys()))

    def catalog(self) -> tuple[str, ...]:
        """The services with at least one endpoint, sorted."""
        return tuple(sorted(self.services.keys()))


def empty_snapshot(*, version: int = 0) -> RegistrySnapshot:
    """Return a registry without endpoints at `version`, with no history before it."""
    return RegistrySnapshot(version=version, history_floor=version)


def snapshot_of(endpoints: Iterable[Endpoint], *, version: int) -> RegistrySnapshot:
    """Return a registry holding `endpoints` at `version`, with no history before it (a restored checkpoint)."""
    snapshot = empty_snapshot()
    for endpoint in endpoints:
        snapshot, _ = apply(snapshot, EndpointRegistered(endpoint=endpoint))
    return RegistrySnapshot(
        version=version, endpoints=snapshot.endpoints, services=snapshot.services, history_floor=version
    )


def apply(
    snapshot: RegistrySnapshot, mutation: Mutation, *, history_limit: int = HISTORY_LIMIT
) -> tuple[RegistrySnapshot, tuple[Change, ...]]:
    """Apply `mutation`: return the new snapshot and the changes it made, all at the new version.

    A mutation that changes nothing (re-registering an equal endpoint, unregistering unknown IPs) returns
    the snapshot unchanged and no changes; anything else bumps the version by one.
    A service's first endpoint is announced by SERVICE_ADDED before its ENDPOINT_ADDED; its last endpoint's
    ENDPOINT_REMOVED is followed by SERVICE_REMOVED.
    """
    edit = _Edit(snapshot, version=snapshot.version + 1)
    match mutation:
        case EndpointRegistered(endpoint=endpoint):
            edit.upsert(endpoint)
        case EndpointsUnregistered(service=service, ips=ips):
            for ip in sorted(set(ips)):
                for protocol in Protocol:
                    edit.remove((service, protocol, ip))
        case _:  # pragma: no cover - the type checker proves this unreachable
            raise TypeError(f"mutation: unknown type {type(mutation).__name__!r}")
    if not edit.changes:
        return snapshot, ()
    return edit.finish(history_limit=history_limit), tuple(edit.changes)


def apply_update(
    snapshot: RegistrySnapshot, update: StoreUpdate, *, history_limit: int = HISTORY_LIMIT
) -> tuple[RegistrySnapshot, tuple[Change, ...]]:
    """Fold a change the store made underneath the registrar: return the new snapshot and its changes.

    The new version is `update.version` when the store assigns versions (it must be greater than
    `snapshot.version`), else `snapshot.version + 1`. With a store version the snapshot moves to it even when
    nothing changed (an etcd put of an equal value still makes a revision), so a caller waiting for a write's
    version is released; without one, an update that changes nothing returns the snapshot unchanged.
    Removals come first (in key order), then upserts (in key order): a service that loses its last endpoint and
    gains another in one update gets SERVICE_REMOVED then SERVICE_ADDED.

    Raises:
        ValueError: `update.version` is not greater than `snapshot.version` (a backend bug).
    """
    if update.version is not None and update.version <= snapshot.version:
        raise ValueError(
            f"store update: version must be greater than {snapshot.version} (got {update.version!r})"
        )
    edit = _Edit(snapshot, version=snapshot.version + 1 if update.version is None else update.version)
    match update:
        case EndpointsReplaced(endpoints=endpoints):
            wanted = {endpoint.key: endpoint for endpoint in endpoints}
            for key in sorted(set(snapshot.endpoints.keys()) - wanted.keys()):
                edit.remove(key)
            for key in sorted(wanted):
                edit.upsert(wanted[key])
        case EndpointsUpdated(upserted=upserted, removed=removed):
            for key in sorted(set(removed)):
                edit.remove(key)
            for endpoint in sorted(upserted, key=lambda one: one.key):
                edit.upsert(endpoint)
        case _:  # pragma: no cover - the type checker proves this unreachable
            raise TypeError(f"update: unknown type {type(update).__name__!r}")
    if not edit.changes and update.version is None:
        return snapshot, ()
    return edit.finish(history_limit=history_limit), tuple(edit.changes)


class _Edit:
    """The endpoints and service counts of a snapshot being changed at `version`, and the changes so far."""

    def __init__(self, snapshot: RegistrySnapshot, *, version: int) -> None:
        self.snapshot = snapshot
        self.version = version
        self.endpoints = snapshot.endpoints.mutate()
        self.services = snapshot.services.mutate()
        self.changes: list[Change] = []

    def upsert(self, endpoint: Endpoint) -> None:
        previous = self.endpoints.get(endpoint.key)
        if previous == endpoint:
            return
        if previous is None:
            count = self.services.get(endpoint.service, 0)
            if count == 0:
                self.changes.append(
                    Change(kind=ChangeKind.SERVICE_ADDED, version=self.version, service=endpoint.service)
                )
            self.services[endpoint.service] = count + 1
        kind = ChangeKind.ENDPOINT_ADDED if previous is None else ChangeKind.ENDPOINT_UPDATED
        self.changes.append(_endpoint_change(kind, endpoint, version=self.version))
        self.endpoints[endpoint.key] = endpoint

    def remove(self, key: EndpointKey) -> None:
        if key not in self.endpoints:
            return
        service, protocol, ip = key
        del self.endpoints[key]
        self.changes.append(
            Change(
                kind=ChangeKind.ENDPOINT_REMOVED,
                version=self.version,
                service=service,
                protocol=protocol,
                ip=ip,
            )
        )
        self.services[service] -= 1
        if self.services[service] == 0:
            del self.services[service]
            self.changes.append(
                Change(kind=ChangeKind.SERVICE_REMOVED, version=self.version, service=service)
            )

    def finish(self, *, history_limit: int) -> RegistrySnapshot:
        history, floor, size = _remember(
            self.snapshot, self.version, tuple(self.changes), limit=history_limit
        )
        return RegistrySnapshot(
            version=self.version,
            endpoints=self.endpoints.finish(),
            services=self.services.finish(),
            history=history,
            history_floor=floor,
            history_size=size,
        )


def _endpoint_change(kind: ChangeKind, endpoint: Endpoint, *, version: int) -> Change:
    return Change(
        kind=kind,
        version=version,
        service=endpoint.service,
        protocol=endpoint.protocol,
        ip=endpoint.ip,
        endpoint=endpoint,
    )


def _remember(
    snapshot: RegistrySnapshot, version: int, changes: tuple[Change, ...], *, limit: int
) -> tuple[immutables.Map[int, tuple[Change, ...]], int, int]:
    history = snapshot.history.mutate()
    if changes:
        history[version] = changes
    size = snapshot.history_size + len(changes)
    floor = snapshot.history_floor
    # Evict whole versions, oldest first: a resume is answered from history only if every change after it is there.
    # Versions a store skipped (etcd revisions of other keys) have no entry; the floor jumps to the next one kept.
    # Stepping through skipped versions costs O(1) each, amortized over the registry's life (the floor only rises).
    while size > limit and floor < version:
        floor += 1
        size -= len(history.pop(floor, ()))
    return history.finish(), floor, size


def visible(change: Change, service_filter: ServiceFilter) -> bool:
    """Return whether a watcher with `service_filter` gets `change`: the catalog and completions go to all."""
    if change.kind in (ChangeKind.SERVICE_ADDED, ChangeKind.SERVICE_REMOVED, ChangeKind.SNAPSHOT_COMPLETE):
        return True
    if change.kind is ChangeKind.FULL_SNAPSHOT and change.endpoint is None:
        return True
    return service_filter.wants(change.service)


def resync(
    snapshot: RegistrySnapshot, *, last_version: int | None, service_filter: ServiceFilter = ALL_SERVICES
) -> tuple[Change, ...]:
    """Return what a watcher that last saw `last_version` (None: nothing) needs to be current, then SNAPSHOT_COMPLETE.

    - `last_version` is the current version: only SNAPSHOT_COMPLETE.
    - It is older, and history still holds every change since: those changes (filtered), in order.
    - Otherwise (too old, newer than this registry, or None): a full resync, which is an opening FULL_SNAPSHOT
      without endpoint, the whole catalog as SERVICE_ADDED, then one FULL_SNAPSHOT per (filtered) endpoint.
    """
    version = snapshot.version
    complete = Change(kind=ChangeKind.SNAPSHOT_COMPLETE, version=version)
    if last_version is not None and snapshot.history_floor <= last_version <= version:
        missed = (
            change
            for missed_version in range(last_version + 1, version + 1)
            for change in snapshot.history.get(missed_version, ())
        )
        return (*_filtered(missed, service_filter), complete)
    opening = Change(kind=ChangeKind.FULL_SNAPSHOT, version=version)
    catalog = (
        Change(kind=ChangeKind.SERVICE_ADDED, version=version, service=service)
        for service in snapshot.catalog()
    )
    entries = (
        _endpoint_change(ChangeKind.FULL_SNAPSHOT, endpoint, version=version)
        for endpoint in snapshot.sorted_endpoints()
        if service_filter.wants(endpoint.service)
    )
    return (opening, *catalog, *entries, complete)


def _filtered(changes: Iterable[Change], service_filter: ServiceFilter) -> tuple[Change, ...]:
    return tuple(change for change in changes if visible(change, service_filter))
