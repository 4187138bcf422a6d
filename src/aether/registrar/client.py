"""The agent's registrar client: watches WatchEndpoints and turns the stream into registry events for the log.

The protocol (resume points, resyncs, filter changes) is `aether.registrar.watch_machine.WatchMachine`'s; the client
pumps streams through it. Broken streams reconnect with jittered exponential backoff and resume from the last
version seen.
"""

from __future__ import annotations

import logging
import random
import ssl
import time
from collections.abc import Callable, Iterable

import attrs
import purerpc
import trio
from purerpc.grpclib.events import ResponseEnded
from purerpc.grpclib.exceptions import raise_status

from aether.core.events.base import Event
from aether.proto.registrar.v1 import registrar_pb2
from aether.registrar.errors import InvalidRequestError
from aether.registrar.server import SERVICE_NAME
from aether.registrar.watch_machine import SyncKind, WatchMachine, WatchProtocolError
from aether.rpc.backoff import DEFAULT_BACKOFF, Backoff
from aether.rpc.calls import CONNECT_TIMEOUT, CONNECTION_ERRORS, open_grpc_socket
from aether.rpc.compat import apply_purerpc_fixes
from aether.rpc.listen import ListenAddress
from aether.telemetry import RegistrarMetrics, current_telemetry

__all__ = [
    "CONNECT_TIMEOUT",
    "RegistrarClient",
    "RegistrarClientStatistics",
    "WatchScope",
    "serve_registrar_client",
]

LOG = logging.getLogger("aether.registrar.client")


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


class RegistrarClient:
    """One agent's watch of the registrar; build it with `serve_registrar_client`, which hands it out when started.

    The protocol's decisions are the `WatchMachine`'s; the client opens streams, pumps messages into it, appends
    the events it returns and backs off between streams.
    """

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
        self._services = services
        self._send = send
        self._clock = clock
        self._backoff = backoff
        self._rng = rng
        # Invariant: the events of one output are all sent before the machine gets its next input; a send that
        # does not complete ends the client (a closed journal) or the stream on a refilter, which forgets the
        # resume point anyway.
        self._machine = WatchMachine(
            cluster_name=cluster_name, node_name=node_name, last_version=last_version
        )
        self._restart: trio.CancelScope | None = None
        self._synced = trio.Event()
        self._connects = self._failures = self._resyncs = self._resumes = self._events_sent = 0
        self._resync_counter = RegistrarMetrics.of(current_telemetry()).resyncs

    def refilter(self) -> None:
        """Restart the watch with `services()` read anew, with a full resync (a new filter has no resume point)."""
        self._machine.refilter()
        if self._restart is not None:
            self._restart.cancel()

    def reconnect(self) -> None:
        """Drop the connection and dial again at once, resuming where the watch was (the TLS context's trust
        changed: the open connection was verified with the old one)."""
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
            last_version=self._machine.last_version,
            synced=self._machine.synced,
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
                finally:
                    self._restart = None
                    synced = self._machine.disconnect()
            if restart.cancelled_caught:
                failures = 0
                continue
            # A stream that had synced proved the registrar healthy: start the backoff over.
            failures = 1 if not failed or synced else failures + 1
            self._failures += 1
            await trio.sleep(self._backoff.delay(failures, rng=self._rng))

    async def _watch_once(self) -> None:
        request = self._machine.connect(self._services())
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
        while True:
            message = await stream.receive_message()
            if message is None:
                event = stream.end_stream_event
                if isinstance(event, ResponseEnded):
                    raise_status(event.status)
                raise purerpc.UnavailableError("the watch stream ended without a status")
            output = self._machine.receive_message(message, now=self._clock())
            for one in output.events:
                await self._send.send(one)
                self._events_sent += 1
            if output.synced is SyncKind.RESYNC:
                self._resyncs += 1
                self._resync_counter.add(1, {"aether.registrar.side": "agent"})
            elif output.synced is SyncKind.RESUME:
                self._resumes += 1
            if output.synced is not None:
                self._synced.set()


class WatchScope:
    """The services a control plane's registrar watches are scoped to: its demand, as its projection last found it.

    Pass it as `serve_registrar_client(services=scope)` and `attach` the client; the projection calls `update`
    after each snapshot (the agent with its dependency set, the edge with its backends' mesh services). A change
    restarts every attached watch with a full resync under the new filter; an unchanged set does nothing.
    """

    def __init__(self) -> None:
        self._services: frozenset[str] = frozenset()
        self._clients: list[RegistrarClient] = []

    def __call__(self) -> frozenset[str]:
        """The services in scope (what a watch reads at each connect)."""
        return self._services

    def attach(self, client: RegistrarClient) -> None:
        """Refilter `client` whenever the scope changes."""
        self._clients.append(client)

    def update(self, services: Iterable[str]) -> None:
        """Set the services in scope; refilter the attached watches if they changed."""
        scoped = frozenset(services)
        if scoped == self._services:
            return
        self._services = scoped
        for client in self._clients:
            client.refilter()


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
