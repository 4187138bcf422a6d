"""The ADS server: purerpc handlers that drive one stream machine per stream (SotW or Delta).

A stream's tasks feed its requests and its node's snapshots to the stream machine, each in the task that receives
them, send the responses at once (serialized once, written without a task hand-off), and hand the feedback events
(ACK, NACK, on-demand requests) to the owner of the node's log. They make no protocol decisions of their own.
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
from aether.rpc.direct import EncodedMessage, StreamSender, current_server_stream
from aether.sync import LatestValue
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
    ) -> AsyncIterator[EncodedMessage]:
        """The purerpc handler of one stream: send what the stream's outbox could not send at once, until it ends.

        The stream's tasks step `machine` and hand each response's bytes to the stream's `_Outbox`, which sends them
        on the spot (`aether.rpc.direct.StreamSender`) while nothing waits before them; only what it cannot send
        now (the flow-control window is used up, no direct sender) comes here, to be yielded as the window opens.
        An async generator cannot own a nursery across its yields, so the stream runs as one task in the server's
        nursery (`_run_stream`), under a cancel scope of its own that this handler cancels when it ends.
        """
        nursery = self._handler_nursery
        assert nursery is not None, "XdsServer.serve() must run before streams are served; this is a bug"
        stream_id = next(self._ids)
        scope = trio.CancelScope()
        grpc_stream = current_server_stream()
        outbox = _Outbox(sender=None if grpc_stream is None else StreamSender(grpc_stream))
        nursery.start_soon(self._run_stream, stream_id, machine, requests, outbox, scope)
        try:
            while True:
                seen = outbox.rings.value
                for data in outbox.take():
                    yield EncodedMessage(data)
                if outbox.ended:
                    if isinstance(outbox.ending, ProtocolError):
                        error = outbox.ending
                        raise _STATUS_ERRORS[error.code](str(error)) from error
                    return
                if outbox.idle():  # from now on, the stream's tasks send at once while the window takes it
                    await outbox.rings.wait_changed(seen)
        finally:
            # Invariant: the scope is cancelled before the handler ends, so the stream's task is cancelled
            # instead of sending on a stream that is gone (purerpc closes this handler when the peer goes away).
            scope.cancel()

    async def _run_stream(
        self,
        stream_id: int,
        machine: StreamMachine,
        requests: AsyncIterator[_RawRequest],
        outbox: _Outbox,
        scope: trio.CancelScope,
    ) -> None:
        """Serve one stream: pump its requests and its node's snapshots through `machine`, its responses to `outbox`.

        Error handling: every way a stream ends ends only this stream. The client half-closes or goes away
        (`purerpc.RpcFailedError` from its requests, logged at debug), a request breaks the protocol or does not
        decode (`ProtocolError`, logged at warning, handed to the handler as the stream's status), or the handler
        ends (this task's scope is cancelled). Any other exception is a bug and propagates.
        """
        self._machines[stream_id] = machine
        self._streams_total += 1
        try:
            with scope:
                ending = await self._serve_requests(machine, requests, outbox)
                node = machine.node_id
                if isinstance(ending, ProtocolError):
                    self._errors += 1
                    LOG.warning("xds stream %d closed: %s", stream_id, ending)
                elif ending is None:
                    LOG.debug("xds stream %d of node %r: the client closed its requests", stream_id, node)
                else:
                    LOG.debug("xds stream %d of node %r ended: %s", stream_id, node, ending)
                outbox.end(ending)
        finally:
            del self._machines[stream_id]

    async def _serve_requests(
        self, machine: StreamMachine, requests: AsyncIterator[_RawRequest], outbox: _Outbox
    ) -> ProtocolError | purerpc.RpcFailedError | None:
        """Feed `machine` the stream's requests (here) and its node's snapshots (`_watch`); return how it ended.

        Each request is stepped in the task that receives it, and each snapshot in the task that waits for it: no
        hand-off between them. The two tasks take turns on the machine without a lock: a step and the hand-over of
        its responses to the outbox run without a checkpoint, so responses leave in the order the machine made them.

        Returns:
            The protocol error that ends it, the failure of its requests (the peer went away), or None when the
            client closed its requests.
        """
        recorder: StreamTelemetry | None = self._telemetry.stream() if self._telemetry.enabled else None
        async with trio.open_nursery() as helpers:
            try:
                watching = False
                async for request in requests:
                    try:
                        output = self._step(machine, request)
                    except ProtocolError as exc:
                        return exc
                    if not watching and machine.node_id is not None:
                        watching = True
                        helpers.start_soon(self._watch, machine, outbox, recorder)
                    await self._deliver(machine, output, outbox, recorder)
            except purerpc.RpcFailedError as exc:
                # The peer reset the stream or went away (`PeerGoneError`), or sent a message over the size limit
                # (`MessageTooLargeError`, its status already sent by aether.rpc.compat).
                return exc
            finally:
                if recorder is not None:
                    recorder.ended()
                helpers.cancel_scope.cancel()
            return None

    async def _watch(self, machine: StreamMachine, outbox: _Outbox, recorder: StreamTelemetry | None) -> None:
        node_id = machine.node_id
        assert node_id is not None, "a stream is watched once its node is known; this is a bug"
        seen = None
        while True:
            seen = await self._cache.wait_newer(node_id, seen=seen)
            output = self._step(machine, seen)
            if recorder is not None:
                recorder.seq = seen.seq
            await self._deliver(machine, output, outbox, recorder)

    async def _deliver(
        self, machine: StreamMachine, output: StreamOutput, outbox: _Outbox, recorder: StreamTelemetry | None
    ) -> None:
        """Hand `output`'s responses to `outbox`, each serialized once, before any checkpoint; then append its events."""
        if recorder is not None:
            recorder.feedback(output.events)
        for response in output.responses:
            outbox.send(response.SerializeToString())
            self._responses += 1
            if recorder is not None:
                recorder.sent(response, node_id=machine.node_id or "")
        if self._feedback is not None:
            for event in output.events:
                await self._feedback.send(event)

    def _step(self, machine: StreamMachine, item: _RawRequest | Snapshot) -> StreamOutput:
        now = self._clock()
        if isinstance(item, Snapshot):
            return machine.publish(item, now=now)
        return machine.receive_bytes(item.data, now=now)


class _Outbox:
    """One stream's responses on their way out, in order: sent at once while nothing waits before them, else
    queued for the stream's handler.

    While the outbox is direct, `send` writes a response's bytes with the stream's `StreamSender` (no task woken, no
    copy through h2's buffer). What the sender refuses (the flow-control window is used up, or the message is over
    the size limit: the handler's send raises it) and everything after it is queued, and the handler woken. Invariant:
    the handler and `send` take turns, as `aether.registrar.broadcaster.Watcher` and its stream do: `take` stops
    direct sends, and `idle` starts them again once nothing is queued.
    """

    __slots__ = ("_direct", "_pending", "_sender", "ended", "ending", "rings")

    def __init__(self, *, sender: StreamSender | None) -> None:
        self._sender = sender
        self._direct = False
        """The handler is waiting (`idle`) and nothing is queued: `send` may write at once."""
        self._pending: list[bytes] = []
        self.rings: LatestValue[object] = LatestValue(object())
        """A new token each time the handler has something to do: a ring while it yields is not lost."""
        self.ended = False
        self.ending: ProtocolError | purerpc.RpcFailedError | None = None
        """How the stream ended, once `ended`: the handler ends it with this error's status, if a protocol error."""

    def send(self, data: bytes) -> None:
        """Send one serialized response after every one before it: now if possible, else through the handler."""
        if self._direct:
            assert self._sender is not None, "direct only with a sender; this is a bug"
            if self._sender.send_nowait((data,)):
                return
            self._direct = False
        self._pending.append(data)
        self.rings.set(object())

    def take(self) -> list[bytes]:
        """Return and forget the queued responses, oldest first; direct sends stop until `idle`."""
        taken, self._pending = self._pending, []
        self._direct = False
        return taken

    def idle(self) -> bool:
        """Return True if nothing is queued (the handler sent all it took), and if so let `send` write at once."""
        if self._pending:
            return False
        self._direct = self._sender is not None
        return True

    def end(self, ending: ProtocolError | purerpc.RpcFailedError | None) -> None:
        """Say how the stream ended: the handler sends what is queued, then ends the stream."""
        self.ended, self.ending = True, ending
        self.rings.set(object())


class _RawRequest:
    """The request type purerpc decodes into: it keeps the bytes, so the stream machine decodes them.

    purerpc calls ``ParseFromString`` on a new instance for each message received, and would let a
    `DecodeError` out of the handler's request iterator; the machine turns one into a `ProtocolError`.
    """

    def __init__(self) -> None:
        self.data = b""

    def ParseFromString(self, data: bytes) -> None:  # the name purerpc calls
        self.data = data
