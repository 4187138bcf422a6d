"""The ADS server: purerpc handlers that drive one stream machine per stream (SotW or Delta).

A handler reads requests, converts them with the stream machine, sends the responses, and hands the feedback events
(ACK, NACK, on-demand requests) to the owner of the node's log. It makes no protocol decisions of its own.
Each stream runs as one task with its own cancel scope and helper nursery: however a stream ends (the client closes,
resets or goes away, sends junk or breaks the protocol), only that stream ends.
"""

from __future__ import annotations

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
from aether.telemetry import current_telemetry
from aether.xds.cache import SnapshotCache
from aether.xds.delta import DeltaStream
from aether.xds.instrumentation import StreamTelemetry, XdsTelemetry
from aether.xds.protocol import ProtocolError, StatusCode, StreamMachine, StreamOutput, TypeStatusRow
from aether.xds.sotw import SotwStream

SERVICE_NAME = "envoy.service.discovery.v3.AggregatedDiscoveryService"
SDS_SERVICE_NAME = "envoy.service.secret.v3.SecretDiscoveryService"
"""The standalone SDS service, for the config sources that cannot be ADS: Envoy's on-demand upstream certificate
selector (`envoy.tls.certificate_selectors.on_demand_secret`) crashes Envoy 1.40 with `ads`, and works with a gRPC
`api_config_source` (tests/integration/test_upstream_certificate_selector.py)."""
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
        self._machines: dict[int, StreamMachine] = {}
        self._ids = itertools.count(1)
        self._streams_total = 0
        self._responses = 0
        self._errors = 0
        self._telemetry = XdsTelemetry(current_telemetry(), machines=self._machines.values)

    def service(self) -> purerpc.Service:
        """Return the purerpc service definition (both ADS methods)."""
        return self._service(SERVICE_NAME, sotw="StreamAggregatedResources", delta="DeltaAggregatedResources")

    def services(self) -> tuple[purerpc.Service, purerpc.Service]:
        """Return ADS and the standalone SDS service (`StreamSecrets`, `DeltaSecrets`): the same streams, whose
        requests name their type (an SDS stream asks for secrets only)."""
        return self.service(), self._service(SDS_SERVICE_NAME, sotw="StreamSecrets", delta="DeltaSecrets")

    def _service(self, name: str, *, sotw: str, delta: str) -> purerpc.Service:
        service = purerpc.Service(name)
        service.add_method(
            sotw,
            self._sotw,
            purerpc.RPCSignature(
                purerpc.Cardinality.STREAM_STREAM,
                _RawRequest,
                discovery_pb2.DiscoveryResponse,
            ),
        )
        service.add_method(
            delta,
            self._delta,
            purerpc.RPCSignature(
                purerpc.Cardinality.STREAM_STREAM,
                _RawRequest,
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
                mode=machine.mode,
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

    async def _sotw(self, requests: AsyncIterator[_RawRequest]) -> AsyncIterator[Any]:
        async for response in self._stream(requests, SotwStream()):
            yield response

    async def _delta(self, requests: AsyncIterator[_RawRequest]) -> AsyncIterator[Any]:
        async for response in self._stream(requests, DeltaStream()):
            yield response

    async def _stream(
        self, requests: AsyncIterator[_RawRequest], machine: StreamMachine
    ) -> AsyncIterator[Any]:
        """The purerpc handler of one stream: yield what the stream's task sends, until it ends.

        An async generator cannot own a nursery across its yields, so the stream runs as one task in the server's
        nursery (`_run_stream`), under a cancel scope of its own that this handler cancels when it ends.
        """
        nursery = self._handler_nursery
        assert nursery is not None, "XdsServer.serve() must run before streams are served; this is a bug"
        stream_id = next(self._ids)
        scope = trio.CancelScope()
        send, receive = trio.open_memory_channel[Any](0)
        nursery.start_soon(self._run_stream, stream_id, machine, requests, send, scope)
        try:
            async for item in receive:
                if isinstance(item, _Refused):
                    raise _STATUS_ERRORS[item.error.code](str(item.error)) from item.error
                yield item
        finally:
            # Invariant: the scope is cancelled before the channel closes, so the stream's task is cancelled
            # instead of finding its channel broken (purerpc closes this handler when the peer goes away).
            scope.cancel()
            receive.close()

    async def _run_stream(
        self,
        stream_id: int,
        machine: StreamMachine,
        requests: AsyncIterator[_RawRequest],
        responses: trio.MemorySendChannel[Any],
        scope: trio.CancelScope,
    ) -> None:
        """Serve one stream: pump its requests through `machine`, send what it returns to the handler.

        Error handling: every way a stream ends ends only this stream. The client half-closes or goes away
        (`purerpc.RpcFailedError` from its requests, logged at debug), a request breaks the protocol or does not
        decode (`ProtocolError`, logged at warning, sent to the handler as the stream's status), or the handler
        ends (this task's scope is cancelled). Any other exception is a bug and propagates.
        """
        self._machines[stream_id] = machine
        self._streams_total += 1
        try:
            with scope:
                async with responses:
                    ending = await self._serve_requests(machine, requests, responses)
                    node = machine.node_id
                    if isinstance(ending, ProtocolError):
                        self._errors += 1
                        LOG.warning("xds stream %d closed: %s", stream_id, ending)
                        await responses.send(_Refused(error=ending))
                    elif ending is None:
                        LOG.debug("xds stream %d of node %r: the client closed its requests", stream_id, node)
                    else:
                        LOG.debug("xds stream %d of node %r ended: %s", stream_id, node, ending)
        finally:
            del self._machines[stream_id]

    async def _serve_requests(
        self,
        machine: StreamMachine,
        requests: AsyncIterator[_RawRequest],
        responses: trio.MemorySendChannel[Any],
    ) -> ProtocolError | purerpc.RpcFailedError | None:
        """Feed `machine` the stream's requests and its node's snapshots; return how the stream ended.

        Returns:
            The protocol error that ends it, the failure of its requests (the peer went away), or None when the
            client closed its requests.
        """
        # Buffer 0: the pump waits until this loop takes each request, so requests keep their order and the
        # watcher's "latest snapshot wins" holds (it re-reads the cache after each hand-off).
        send, receive = trio.open_memory_channel[Any](0)
        recorder: StreamTelemetry | None = self._telemetry.stream() if self._telemetry.enabled else None
        async with send, receive, trio.open_nursery() as helpers:
            try:
                helpers.start_soon(self._pump, requests, send.clone())
                watching = False
                async for item in receive:
                    if isinstance(item, _RequestsEnded):
                        return item.failure
                    try:
                        output = self._step(machine, item)
                    except ProtocolError as exc:
                        return exc
                    if not watching and machine.node_id is not None:
                        watching = True
                        helpers.start_soon(self._watch, machine.node_id, send.clone())
                    if recorder is not None:
                        recorder.feedback(output.events)
                        if isinstance(item, Snapshot):
                            recorder.seq = item.seq
                    await self._emit(output.events)
                    for response in output.responses:
                        await responses.send(response)
                        self._responses += 1
                        if recorder is not None:
                            recorder.sent(response, node_id=machine.node_id or "")
                raise AssertionError("the request channel closed while its pump ran; this is a bug")
            finally:
                if recorder is not None:
                    recorder.ended()
                # Invariant: the helpers are cancelled before the channels close (so none finds one broken).
                helpers.cancel_scope.cancel()

    def _step(self, machine: StreamMachine, item: _RawRequest | Snapshot) -> StreamOutput:
        now = self._clock()
        if isinstance(item, Snapshot):
            return machine.publish(item, now=now)
        return machine.receive_bytes(item.data, now=now)

    async def _emit(self, events: tuple[Event, ...]) -> None:
        if self._feedback is None:
            return
        for event in events:
            await self._feedback.send(event)

    async def _pump(self, requests: AsyncIterator[_RawRequest], send: trio.MemorySendChannel[Any]) -> None:
        async with send:
            try:
                async for request in requests:
                    await send.send(request)
            except purerpc.RpcFailedError as exc:
                # The peer reset the stream or went away (`PeerGoneError`), or sent a message over the size limit
                # (`MessageTooLargeError`, its status already sent by aether.rpc.compat).
                await send.send(_RequestsEnded(failure=exc))
                return
            # The loop holds other senders (the watcher's), so closing ours would not end it: say it.
            await send.send(_RequestsEnded(failure=None))

    async def _watch(self, node_id: str, send: trio.MemorySendChannel[Any]) -> None:
        async with send:
            seen = None
            while True:
                seen = await self._cache.wait_newer(node_id, seen=seen)
                await send.send(seen)


class _RawRequest:
    """The request type purerpc decodes into: it keeps the bytes, so the stream machine decodes them.

    purerpc calls ``ParseFromString`` on a new instance for each message received, and would let a
    `DecodeError` out of the handler's request iterator; the machine turns one into a `ProtocolError`.
    """

    def __init__(self) -> None:
        self.data = b""

    def ParseFromString(self, data: bytes) -> None:  # the name purerpc calls
        self.data = data


@attrs.frozen(kw_only=True)
class _RequestsEnded:
    """Put in a stream's request channel when its request iterator ends."""

    failure: purerpc.RpcFailedError | None
    """Why, when the peer went away; None when it closed its requests (half-close)."""


@attrs.frozen(kw_only=True)
class _Refused:
    """Sent to a stream's handler instead of a response: end the stream with this error's status."""

    error: ProtocolError
