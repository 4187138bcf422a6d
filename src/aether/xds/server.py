"""The ADS server: purerpc handlers that drive one stream machine per stream (SotW or Delta).

A handler reads requests, converts them with the stream machine, sends the responses, and hands the feedback events
(ACK, NACK, on-demand requests) to the owner of the node's log. It makes no protocol decisions of its own.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import attrs
import purerpc
import trio
from envoy.service.discovery.v3 import discovery_pb2

from aether.core.events import Event
from aether.core.snapshot import Snapshot
from aether.xds.cache import SnapshotCache
from aether.xds.delta import DeltaStream
from aether.xds.protocol import ProtocolError, StatusCode, StreamOutput, TypeStatusRow
from aether.xds.sotw import SotwStream

SERVICE_NAME = "envoy.service.discovery.v3.AggregatedDiscoveryService"
_REQUESTS_ENDED = object()
"""Put in a stream's channel when its request iterator ends (Envoy closed the stream or went away)."""
LOG = logging.getLogger("aether.xds")

_STATUS_ERRORS: dict[StatusCode, type[Exception]] = {
    StatusCode.INVALID_ARGUMENT: purerpc.InvalidArgumentError,
    StatusCode.RESOURCE_EXHAUSTED: purerpc.ResourceExhaustedError,
    StatusCode.FAILED_PRECONDITION: purerpc.FailedPreconditionError,
}


@attrs.frozen(kw_only=True)
class StreamStatus:
    """One connected stream: its node, its mode and where each type stands."""

    stream_id: int
    node_id: str
    mode: str
    """`sotw` or `delta`."""
    types: tuple[TypeStatusRow, ...]


@attrs.frozen(kw_only=True)
class XdsServerStatistics:
    """Counters of the server."""

    streams_open: int
    streams_total: int
    responses_sent: int
    protocol_errors: int


FeedbackSink = Callable[[Event], Any]
"""Receives each feedback event (awaited if it returns an awaitable): the agent appends it to the node's log."""


class XdsServer:
    """Serves the snapshots of a `SnapshotCache` over ADS, both SotW and Delta.

    Args:
        cache: Where snapshots are published.
        feedback: A memory channel's send side for ACK, NACK and on-demand events, or None to drop them.
        clock: Returns the time feedback events carry (ns since the epoch); the wall clock by default.
    """

    def __init__(
        self,
        cache: SnapshotCache,
        *,
        feedback: trio.MemorySendChannel[Event] | None = None,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self._cache = cache
        self._feedback = feedback
        self._clock = clock
        self._handler_nursery: trio.Nursery | None = None
        self._machines: dict[int, SotwStream | DeltaStream] = {}
        self._ids = itertools.count(1)
        self._streams_total = 0
        self._responses = 0
        self._errors = 0

    def service(self) -> purerpc.Service:
        """Return the purerpc service definition (both ADS methods)."""
        service = purerpc.Service(SERVICE_NAME)
        service.add_method(
            "StreamAggregatedResources",
            self._sotw,
            purerpc.RPCSignature(
                purerpc.Cardinality.STREAM_STREAM,
                discovery_pb2.DiscoveryRequest,
                discovery_pb2.DiscoveryResponse,
            ),
        )
        service.add_method(
            "DeltaAggregatedResources",
            self._delta,
            purerpc.RPCSignature(
                purerpc.Cardinality.STREAM_STREAM,
                discovery_pb2.DeltaDiscoveryRequest,
                discovery_pb2.DeltaDiscoveryResponse,
            ),
        )
        return service

    async def serve(self, *, task_status: trio.TaskStatus[trio.Nursery] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the tasks that pump requests and watch snapshots for every stream; run until cancelled.

        Call this before serving the service (`aether.rpc.listen.serve_grpc`): handlers need its nursery.
        """
        async with trio.open_nursery() as handler_nursery:
            self._handler_nursery = handler_nursery
            task_status.started(handler_nursery)
            await trio.sleep_forever()

    def status(self) -> tuple[StreamStatus, ...]:
        """Return every connected stream's per-type status, by stream id."""
        return tuple(
            StreamStatus(
                stream_id=stream_id,
                node_id=machine.node_id or "",
                mode="delta" if isinstance(machine, DeltaStream) else "sotw",
                types=machine.status(),
            )
            for stream_id, machine in sorted(self._machines.items())
        )

    def statistics(self) -> XdsServerStatistics:
        """Return the server's counters."""
        return XdsServerStatistics(
            streams_open=len(self._machines),
            streams_total=self._streams_total,
            responses_sent=self._responses,
            protocol_errors=self._errors,
        )

    async def _sotw(self, requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
        async for response in self._stream(requests, SotwStream()):
            yield response

    async def _delta(self, requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
        async for response in self._stream(requests, DeltaStream()):
            yield response

    async def _stream(
        self, requests: AsyncIterator[Any], machine: SotwStream | DeltaStream
    ) -> AsyncIterator[Any]:
        nursery = self._handler_nursery
        assert nursery is not None, "XdsServer.serve() must run before streams are served; this is a bug"
        stream_id = next(self._ids)
        self._machines[stream_id] = machine
        self._streams_total += 1
        # Buffer 0: the pump waits until the handler takes each request, so requests keep their order and the
        # watcher's "latest snapshot wins" holds (it re-reads the cache after each hand-off).
        send, receive = trio.open_memory_channel[Any](0)
        # Each helper task gets its own cancel scope (a scope is entered once); both end with the stream.
        scopes = [trio.CancelScope()]
        nursery.start_soon(self._pump, requests, send.clone(), scopes[0])
        watching = False
        try:
            async with receive, send:
                async for item in receive:
                    if item is _REQUESTS_ENDED:
                        break
                    output = self._step(machine, item)
                    if not watching and machine.node_id is not None:
                        watching = True
                        scopes.append(trio.CancelScope())
                        nursery.start_soon(self._watch, machine.node_id, send.clone(), scopes[-1])
                    await self._emit(output.events)
                    for response in output.responses:
                        self._responses += 1
                        yield response
        except ProtocolError as exc:
            self._errors += 1
            LOG.warning("xds stream %d closed: %s", stream_id, exc)
            raise _STATUS_ERRORS[exc.code](str(exc)) from exc
        finally:
            for scope in scopes:
                scope.cancel()
            del self._machines[stream_id]

    def _step(self, machine: SotwStream | DeltaStream, item: Any) -> StreamOutput:
        now = self._clock()
        if isinstance(item, Snapshot):
            if isinstance(machine, DeltaStream):
                return machine.publish(item, now=now)
            return machine.publish(item)
        return machine.receive(item, now=now)

    async def _emit(self, events: tuple[Event, ...]) -> None:
        if self._feedback is None:
            return
        for event in events:
            await self._feedback.send(event)

    async def _pump(
        self, requests: AsyncIterator[Any], send: trio.MemorySendChannel[Any], scope: trio.CancelScope
    ) -> None:
        with scope:
            async with send:
                try:
                    async for request in requests:
                        await send.send(request)
                except purerpc.RpcFailedError:
                    pass  # the peer reset the stream or went away
                # The handler holds other senders (the watcher's), so closing ours would not end its loop: say it.
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    await send.send(_REQUESTS_ENDED)

    async def _watch(self, node_id: str, send: trio.MemorySendChannel[Any], scope: trio.CancelScope) -> None:
        with scope:
            async with send:
                seen = None
                while True:
                    seen = await self._cache.wait_newer(node_id, seen=seen)
                    try:
                        await send.send(seen)
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        return
