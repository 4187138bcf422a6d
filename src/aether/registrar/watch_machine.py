"""The agent's side of the WatchEndpoints protocol, sans-IO: resume points, resyncs and filter changes.

Feed it what happens (a stream opens, a message arrives, the stream ends, the filter changes); it returns the request
to send, the registry events to append and whether a sync completed. `aether.registrar.client` only pumps it.

The protocol (the registrar's side is `aether.registrar.snapshot.resync`):
- a stream opens with one request: the filter, and the newest version whose changes were all appended (the resume
  point; none for a first watch or after a filter change, which has no resume point);
- a full resync is an opening FULL_SNAPSHOT without endpoint, the catalog as SERVICE_ADDED, one FULL_SNAPSHOT per
  endpoint, then SNAPSHOT_COMPLETE: it becomes one `EndpointsSnapshotReceived` and its `EndpointsSnapshotCompleted`;
- a resume is the changes after the resume point, version by version, then SNAPSHOT_COMPLETE: the changes map one to
  one, and the completion becomes `EndpointsSnapshotCompleted`; a stream opened without a resume point must resync;
- after the completion the stream is live: changes map one to one, never to an older version; a new full resync may
  begin (the registrar's store was replaced);
- a stream that breaks inside a version resumes from the version before it, and the registrar sends the whole
  version again: the changes of it already appended are skipped, so no change is appended twice or left out.
"""

from __future__ import annotations

import enum

import attrs

from aether.core.events.base import Event
from aether.core.events.registry import (
    Endpoint,
    EndpointAdded,
    EndpointRemoved,
    EndpointsSnapshotCompleted,
    EndpointsSnapshotReceived,
    EndpointUpdated,
    RegistryServiceAdded,
    RegistryServiceRemoved,
)
from aether.proto.registrar.v1 import registrar_pb2
from aether.registrar.convert import change_from_proto
from aether.registrar.errors import InvalidRequestError, RegistrarError
from aether.registrar.snapshot import Change, ChangeKind

__all__ = ["SOURCE", "SyncKind", "WatchMachine", "WatchOutput", "WatchPhase", "WatchProtocolError"]

SOURCE = "registrar"
"""The `source` of every event the machine returns."""


class WatchPhase(enum.Enum):
    """Where the current stream is; the value says it in an error message."""

    CLOSED = "with no stream open"
    FIRST = "as the first event"
    RESYNCING = "during a full resync"
    LIVE = "after the sync completed"


class SyncKind(enum.Enum):
    """How a sync completed."""

    RESYNC = "resync"
    """A full resync: the events replace the registry."""
    RESUME = "resume"
    """A resume: the changes missed since the resume point, or none."""


class WatchProtocolError(RegistrarError):
    """The registrar's watch stream broke the protocol (an event where it cannot be); the client reconnects."""

    def __init__(self, change: Change, *, phase: str) -> None:
        super().__init__(change, phase)
        self.change = change
        self.phase = phase

    def __str__(self) -> str:
        return f"watch event {self.change.kind.name} at version {self.change.version!r}: not allowed {self.phase}"


@attrs.frozen(kw_only=True)
class WatchOutput:
    """What one input asks of the client."""

    events: tuple[Event, ...] = ()
    """Registry events to append to the log, in order, before the next input."""
    synced: SyncKind | None = None
    """Set when these events complete a sync."""


_NOTHING = WatchOutput()


class WatchMachine:
    """The protocol state of one agent's watch, across its streams. Feed it inputs; do what it returns.

    Args:
        cluster_name: Sent with every request (with `node_name`, names the watcher on the registrar).
        node_name: This node's name.
        last_version: The first stream's resume point (the journal's synced registry version), or None.

    Error handling:
        An input that breaks the protocol raises `WatchProtocolError` (a message that does not decode raises
        `InvalidRequestError`) after closing the stream's phase: the client ends the stream and reconnects, and
        the next stream resumes from the last version whose changes were all returned.
    """

    def __init__(self, *, cluster_name: str, node_name: str, last_version: int | None) -> None:
        self._cluster_name = cluster_name
        self._node_name = node_name
        # Invariant: every change of versions <= _version has been returned; of _partial_version only the first
        # _partial_count (a resume re-sends the whole version, and those are skipped).
        self._version = last_version
        self._partial_version: int | None = None
        self._partial_count = 0
        self._position = 0
        """How many changes of `_partial_version` the current stream delivered."""
        self._refiltered = False
        self._phase = WatchPhase.CLOSED
        self._resume_point: int | None = None
        """The version the current stream was opened to resume from (None: it must resync)."""
        self._services: list[str] = []
        self._endpoints: list[Endpoint] = []
        self._synced = False

    @property
    def phase(self) -> WatchPhase:
        """Where the current stream is."""
        return self._phase

    @property
    def last_version(self) -> int | None:
        """The newest version whose changes were all returned; None before the first sync."""
        return self._version

    @property
    def synced(self) -> bool:
        """True once a sync completed on the current stream."""
        return self._synced

    def refilter(self) -> None:
        """The filter changed: the next stream has no resume point, so it begins with a full resync."""
        self._refiltered = True

    def connect(self, services: frozenset[str] | None) -> registrar_pb2.WatchEndpointsRequest:
        """A new stream opens (a stream still open is over): return its request, for `services` (None: all)."""
        self.disconnect()
        if self._refiltered:
            self._refiltered = False
            self._version = None
            self._partial_version = None
            self._partial_count = 0
        self._phase = WatchPhase.FIRST
        self._resume_point = self._version
        request = registrar_pb2.WatchEndpointsRequest(
            cluster_name=self._cluster_name,
            node_name=self._node_name,
            last_version="" if self._version is None else str(self._version),
        )
        if services is not None:
            request.filter.services.extend(sorted(services))
        return request

    def disconnect(self) -> bool:
        """The stream ended (or broke, or was never opened): forget its partial resync.

        Returns:
            Whether the stream had completed a sync: the registrar proved healthy, so a reconnect backoff starts over.
        """
        synced = self._synced
        self._phase = WatchPhase.CLOSED
        self._position = 0
        self._services = []
        self._endpoints = []
        self._synced = False
        return synced

    def receive_message(self, message: registrar_pb2.WatchEndpointsResponse, *, now: int) -> WatchOutput:
        """Decode one watch event and handle it like `receive`.

        Raises:
            InvalidRequestError: the event does not decode (its type, version, service or endpoint is invalid).
            WatchProtocolError: the event breaks the protocol.
        """
        try:
            change = change_from_proto(message)
        except InvalidRequestError:
            self.disconnect()  # STYLE E7: a defined state first; the stream must end
            raise
        return self.receive(change, now=now)

    def receive(self, change: Change, *, now: int) -> WatchOutput:
        """Handle one watch event observed at `now` (ns since the epoch, the events' `observed_at`).

        Raises:
            WatchProtocolError: the event breaks the protocol (the stream must end).
        """
        phase = self._phase
        if phase is WatchPhase.CLOSED:
            raise self._refused(change)
        if change.kind is ChangeKind.FULL_SNAPSHOT and change.endpoint is None:
            if phase is WatchPhase.RESYNCING:
                raise self._refused(change)
            self._phase = WatchPhase.RESYNCING
            self._services, self._endpoints = [], []
            return _NOTHING
        if phase is WatchPhase.RESYNCING:
            return self._resyncing(change, now=now)
        if phase is WatchPhase.FIRST and self._resume_point is None:
            raise self._refused(change)  # asked without a resume point: only a full resync answers it
        if change.kind is ChangeKind.FULL_SNAPSHOT or (
            change.version < max(self._version or 0, self._partial_version or 0)
        ):
            raise self._refused(change)
        if change.kind is ChangeKind.SNAPSHOT_COMPLETE:
            if phase is not WatchPhase.FIRST:
                # Invariant: completions only close a sync; one in a live stream would be a registrar bug.
                raise self._refused(change)
            event = EndpointsSnapshotCompleted(observed_at=now, source=SOURCE, version=str(change.version))
            return self._completed(change.version, (event,), SyncKind.RESUME)
        return self._change(change, now=now)

    def _resyncing(self, change: Change, *, now: int) -> WatchOutput:
        if change.kind is ChangeKind.SERVICE_ADDED:
            self._services.append(change.service)
        elif change.kind is ChangeKind.FULL_SNAPSHOT and change.endpoint is not None:
            self._endpoints.append(change.endpoint)
        elif change.kind is ChangeKind.SNAPSHOT_COMPLETE:
            version = str(change.version)
            received = EndpointsSnapshotReceived(
                observed_at=now,
                source=SOURCE,
                version=version,
                endpoints=self._endpoints,
                services=self._services,
            )
            completed = EndpointsSnapshotCompleted(observed_at=now, source=SOURCE, version=version)
            return self._completed(change.version, (received, completed), SyncKind.RESYNC)
        else:
            raise self._refused(change)
        return _NOTHING

    def _change(self, change: Change, *, now: int) -> WatchOutput:
        """Return one incremental change's event, unless a previous stream returned it (see the invariant)."""
        if self._partial_version is not None and change.version != self._partial_version:
            # A newer version began (older ones are refused): the partial one is complete.
            self._version = self._partial_version
            self._partial_version = None
        if self._partial_version is None:
            self._partial_version = change.version
            self._partial_count = 0
            self._position = 0
        self._position += 1
        if self._position <= self._partial_count:
            return _NOTHING  # a previous stream returned it before it broke
        self._partial_count += 1
        return WatchOutput(events=(_event_of(change, observed_at=now),))

    def _completed(self, version: int, events: tuple[Event, ...], kind: SyncKind) -> WatchOutput:
        self._version = version
        self._partial_version = None
        self._partial_count = 0
        self._phase = WatchPhase.LIVE
        self._services, self._endpoints = [], []
        self._synced = True
        return WatchOutput(events=events, synced=kind)

    def _refused(self, change: Change) -> WatchProtocolError:
        """Close the stream's phase (STYLE E7: a defined state first) and return the error naming where it was."""
        error = WatchProtocolError(change, phase=self._phase.value)
        self.disconnect()
        return error


def _event_of(change: Change, *, observed_at: int) -> Event:
    """The event of an incremental change (the caller handles FULL_SNAPSHOT and SNAPSHOT_COMPLETE)."""
    version = str(change.version)
    match change.kind:
        case ChangeKind.ENDPOINT_ADDED:
            assert change.endpoint is not None, "change_from_proto sets it; this is a bug"
            return EndpointAdded(
                observed_at=observed_at, source=SOURCE, version=version, endpoint=change.endpoint
            )
        case ChangeKind.ENDPOINT_UPDATED:
            assert change.endpoint is not None, "change_from_proto sets it; this is a bug"
            return EndpointUpdated(
                observed_at=observed_at, source=SOURCE, version=version, endpoint=change.endpoint
            )
        case ChangeKind.ENDPOINT_REMOVED:
            return EndpointRemoved(
                observed_at=observed_at,
                source=SOURCE,
                version=version,
                service=change.service,
                protocol=change.protocol,
                ip=change.ip,
            )
        case ChangeKind.SERVICE_ADDED:
            return RegistryServiceAdded(
                observed_at=observed_at, source=SOURCE, version=version, service=change.service
            )
        case ChangeKind.SERVICE_REMOVED:
            return RegistryServiceRemoved(
                observed_at=observed_at, source=SOURCE, version=version, service=change.service
            )
        case (
            _
        ):  # pragma: no cover - `receive` handles FULL_SNAPSHOT and SNAPSHOT_COMPLETE before it calls this
            raise AssertionError(f"{change.kind.name} is no incremental change; this is a bug")
