"""The agent's registrar client: watches WatchEndpoints and turns the stream into registry events for the log.

A resync becomes one `EndpointsSnapshotReceived` and its `EndpointsSnapshotCompleted`; a resume's changes map one
to one. Broken streams reconnect with jittered exponential backoff and resume from the last version seen.
"""

from __future__ import annotations

import enum
import logging
import random
import ssl
import time
from collections.abc import Callable

import attrs
import purerpc
import trio
from purerpc.grpclib.events import ResponseEnded
from purerpc.grpclib.exceptions import raise_status

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
from aether.registrar.server import SERVICE_NAME
from aether.registrar.snapshot import Change, ChangeKind
from aether.rpc.backoff import DEFAULT_BACKOFF, Backoff
from aether.rpc.calls import CONNECT_TIMEOUT, CONNECTION_ERRORS, open_grpc_socket
from aether.rpc.compat import apply_purerpc_fixes
from aether.rpc.listen import ListenAddress

__all__ = [
    "CONNECT_TIMEOUT",
    "RegistrarClient",
    "RegistrarClientStatistics",
    "WatchProtocolError",
    "serve_registrar_client",
]

LOG = logging.getLogger("aether.registrar.client")

SOURCE = "registrar"
"""The `source` of every event the client sends."""


class WatchProtocolError(RegistrarError):
    """The registrar's watch stream broke the resync protocol (an event where it cannot be); the client reconnects."""

    def __init__(self, change: Change, *, phase: str) -> None:
        super().__init__(change, phase)
        self.change = change
        self.phase = phase

    def __str__(self) -> str:
        return f"watch event {self.change.kind.name} at version {self.change.version!r}: not allowed {self.phase}"


@attrs.frozen(kw_only=True)
class RegistrarClientStatistics:
    """Counters of a `RegistrarClient`."""

    connects: int
    """Watch streams opened (the first and every reconnect)."""
    failures: int
    """Connection attempts or streams that failed (each followed by a backoff)."""
    resyncs: int
    """Full resyncs completed (each sent one `EndpointsSnapshotReceived`)."""
    resumes: int
    """Resumes completed (a stream that began with changes or SNAPSHOT_COMPLETE, not a full resync)."""
    events_sent: int
    last_version: int | None
    """The newest version whose changes were all sent; None before the first sync."""
    synced: bool
    """True once a (re)sync completed on the current stream."""


# What a broken connection or stream raises; the client logs it, backs off and reconnects (STYLE E10).
# Not trio's BrokenResourceError: that is the journal's channel closing, which ends the client.
_TRANSIENT: tuple[type[Exception], ...] = (
    *CONNECTION_ERRORS,
    InvalidRequestError,  # an event change_from_proto refused
    WatchProtocolError,
)


class _Phase(enum.Enum):
    FIRST = "as the first event"
    RESYNCING = "during a full resync"
    LIVE = "after the sync completed"


class RegistrarClient:
    """One agent's watch of the registrar; build it with `serve_registrar_client`, which hands it out when started."""

    def __init__(
        self,
        *,
        target: ListenAddress,
        cluster_name: str,
        node_name: str,
        services: Callable[[], frozenset[str] | None],
        send: trio.MemorySendChannel[Event],
        clock: Callable[[], int],
        backoff: Backoff,
        rng: random.Random,
        last_version: int | None,
        tls: ssl.SSLContext | None,
    ) -> None:
        self._target = target
        self._tls = tls
        self._cluster_name = cluster_name
        self._node_name = node_name
        self._services = services
        self._send = send
        self._clock = clock
        self._backoff = backoff
        self._rng = rng
        # Invariant: every change of versions <= _version has been sent; of _partial_version only the first
        # _partial_count (a resume re-sends the whole version, and those are skipped).
        self._version = last_version
        self._partial_version: int | None = None
        self._partial_count = 0
        self._restart: trio.CancelScope | None = None
        self._refiltered = False
        self._synced = trio.Event()
        self._stream_synced = False
        self._last_stream_synced = False
        self._position = 0
        """How many changes of `_partial_version` the current stream delivered."""
        self._connects = self._failures = self._resyncs = self._resumes = self._events_sent = 0

    def refilter(self) -> None:
        """Restart the watch with `services()` read anew, with a full resync (a new filter has no resume point)."""
        # The watch task forgets its position itself, when it restarts: it may be between sending an event
        # and recording its version right now, and it owns that state.
        self._refiltered = True
        if self._restart is not None:
            self._restart.cancel()

    async def wait_synced(self) -> None:
        """Return once the first (re)sync completed and its events were sent."""
        await self._synced.wait()

    def statistics(self) -> RegistrarClientStatistics:
        """Return the client's counters."""
        return RegistrarClientStatistics(
            connects=self._connects,
            failures=self._failures,
            resyncs=self._resyncs,
            resumes=self._resumes,
            events_sent=self._events_sent,
            last_version=self._version,
            synced=self._stream_synced,
        )

    async def serve(self) -> None:
        """Watch until cancelled, reconnecting after every failure."""
        apply_purerpc_fixes()
        failures = 0
        while True:
            failed = False
            with trio.CancelScope() as restart:
                self._restart = restart
                try:
                    await self._watch_once()
                except* _TRANSIENT as group:
                    failed = True
                    LOG.warning("registrar watch on %s failed: %r", self._target, group.exceptions[0])
            self._restart = None
            self._stream_synced = False
            if restart.cancelled_caught:
                failures = 0
                continue
            # A stream that had synced proved the registrar healthy: start the backoff over.
            failures = 1 if not failed or self._last_stream_synced else failures + 1
            self._failures += 1
            await trio.sleep(self._backoff.delay(failures, rng=self._rng))

    async def _watch_once(self) -> None:
        self._last_stream_synced = False
        self._position = 0
        if self._refiltered:
            self._refiltered = False
            self._version = None
            self._partial_version = None
            self._partial_count = 0
        services = self._services()
        request = registrar_pb2.WatchEndpointsRequest(
            cluster_name=self._cluster_name,
            node_name=self._node_name,
            last_version="" if self._version is None else str(self._version),
        )
        if services is not None:
            request.filter.services.extend(sorted(services))
        async with open_grpc_socket(self._target, tls=self._tls) as grpc_socket:
            stream = await grpc_socket.start_request(
                "http" if self._tls is None else "https",
                SERVICE_NAME,
                "WatchEndpoints",
                registrar_pb2.WatchEndpointsRequest.DESCRIPTOR.full_name,
                str(self._target),
            )
            stream.expect_message_type(registrar_pb2.WatchEndpointsResponse)
            await stream.send_message(request)
            await stream.close()
            self._connects += 1
            await self._consume(stream)

    async def _consume(self, stream: purerpc.Stream) -> None:
        phase = _Phase.FIRST
        services: list[str] = []
        endpoints: list[Endpoint] = []
        while True:
            message = await stream.receive_message()
            if message is None:
                event = stream.end_stream_event
                if isinstance(event, ResponseEnded):
                    raise_status(event.status)
                raise purerpc.UnavailableError("the watch stream ended without a status")
            change = change_from_proto(message)
            if change.kind is ChangeKind.FULL_SNAPSHOT and change.endpoint is None:
                if phase is _Phase.RESYNCING:
                    raise WatchProtocolError(change, phase=phase.value)
                phase = _Phase.RESYNCING
                services.clear()
                endpoints.clear()
                continue
            if phase is _Phase.RESYNCING:
                if change.kind is ChangeKind.SERVICE_ADDED:
                    services.append(change.service)
                elif change.kind is ChangeKind.FULL_SNAPSHOT and change.endpoint is not None:
                    endpoints.append(change.endpoint)
                elif change.kind is ChangeKind.SNAPSHOT_COMPLETE:
                    version = str(change.version)
                    await self._emit(
                        EndpointsSnapshotReceived(
                            observed_at=self._clock(),
                            source=SOURCE,
                            version=version,
                            endpoints=endpoints,
                            services=services,
                        )
                    )
                    await self._emit(
                        EndpointsSnapshotCompleted(observed_at=self._clock(), source=SOURCE, version=version)
                    )
                    self._completed(change.version, resync=True)
                    phase = _Phase.LIVE
                else:
                    raise WatchProtocolError(change, phase=phase.value)
                continue
            if change.kind is ChangeKind.FULL_SNAPSHOT or (
                change.version < max(self._version or 0, self._partial_version or 0)
            ):
                raise WatchProtocolError(change, phase=phase.value)
            if change.kind is ChangeKind.SNAPSHOT_COMPLETE:
                if phase is _Phase.FIRST:
                    await self._emit(
                        EndpointsSnapshotCompleted(
                            observed_at=self._clock(), source=SOURCE, version=str(change.version)
                        )
                    )
                    self._completed(change.version, resync=False)
                    phase = _Phase.LIVE
                else:
                    # Invariant: completions only close a sync; one in a live stream would be a server bug.
                    raise WatchProtocolError(change, phase=phase.value)
                continue
            await self._change(change)

    async def _change(self, change: Change) -> None:
        """Send one incremental change, unless a previous stream already sent it (see the invariant in __init__)."""
        if self._partial_version is not None and change.version != self._partial_version:
            # A newer version began (the caller refuses older ones): the partial one is complete.
            self._version = self._partial_version
            self._partial_version = None
        if self._partial_version is None:
            self._partial_version = change.version
            self._partial_count = 0
            self._position = 0
        self._position += 1
        if self._position <= self._partial_count:
            return  # a previous stream sent it before it broke
        await self._emit(_event_of(change, observed_at=self._clock()))
        self._partial_count += 1

    def _completed(self, version: int, *, resync: bool) -> None:
        self._version = version
        self._partial_version = None
        self._partial_count = 0
        if resync:
            self._resyncs += 1
        else:
            self._resumes += 1
        self._stream_synced = self._last_stream_synced = True
        self._synced.set()

    async def _emit(self, event: Event) -> None:
        await self._send.send(event)
        self._events_sent += 1


def _event_of(change: Change, *, observed_at: int) -> Event:
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
        case _:
            raise WatchProtocolError(change, phase="as an incremental change")


async def serve_registrar_client(
    *,
    target: ListenAddress,
    cluster_name: str,
    node_name: str,
    services: Callable[[], frozenset[str] | None],
    send: trio.MemorySendChannel[Event],
    clock: Callable[[], int] = time.time_ns,
    backoff: Backoff = DEFAULT_BACKOFF,
    rng: random.Random | None = None,
    last_version: int | None = None,
    tls: ssl.SSLContext | None = None,
    task_status: trio.TaskStatus[RegistrarClient] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Watch the registrar at `target` and send its registry events on `send` until cancelled.

    Starts at once (`task_status.started(client)`), before any connection: the agent serves what its log holds
    while the registrar is away. Call `client.wait_synced()` to wait for the first sync.

    Args:
        target: The registrar's address (TCP, or a Unix socket).
        cluster_name: Sent with the watch (with `node_name`, names the watcher on the registrar).
        node_name: This node's name.
        services: Returns the services whose endpoints this node wants (None: all); read at each (re)connect.
            Call `client.refilter()` when its answer changes.
        send: Where events go (`journal.sender()`); the client does not close it.
        clock: Nanoseconds since the epoch, for `observed_at`.
        backoff: The reconnect policy.
        rng: The jitter's source (a seeded `random.Random` in tests).
        last_version: Resume from this version (the journal's synced registry version), or None for a full sync.
            Only meaningful against the same registrar store: versions carry no store identity.
        tls: Connect with TLS (`aether.rpc.tls.client_tls_context`): the registrar knows this agent by
            its certificate, and refuses its writes for other nodes.
        task_status: Receives the `RegistrarClient` (for `refilter`, `wait_synced`, `statistics`).

    Error handling:
        A connection that cannot be made, a stream that breaks or ends, a non-OK status and a malformed or
        out-of-protocol event are logged and retried after `backoff`, resuming from the last version whose
        changes were all sent. A change partly sent before the break is not sent again.
    """
    client = RegistrarClient(
        target=target,
        cluster_name=cluster_name,
        node_name=node_name,
        services=services,
        send=send,
        clock=clock,
        backoff=backoff,
        rng=random.Random() if rng is None else rng,
        last_version=last_version,
        tls=tls,
    )
    task_status.started(client)
    await client.serve()
