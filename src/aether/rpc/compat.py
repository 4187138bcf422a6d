"""Fixes for purerpc 0.8.0, applied in place: Unix sockets, stream resets and disconnects, large messages.

purerpc 0.8.0 (2022) is frozen. Each patch below replaces one private function or class and says why;
`apply_purerpc_fixes` refuses any other version, so an upgrade means reviewing this file first.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import queue
import socket
import struct
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import anyio.abc
import attrs
import h2.errors
import h2.events
import h2.exceptions
import purerpc
import purerpc.grpc_socket
import trio
from purerpc.grpc_socket import GRPCSocket, GRPCStream, GRPCStreamState, SocketWrapper
from purerpc.grpclib.buffers import MessageReadBuffer, MessageWriteBuffer
from purerpc.grpclib.connection import GRPCConnection
from purerpc.grpclib.events import Event as GRPCEvent
from purerpc.grpclib.events import (
    MessageReceived,
    RequestEnded,
    RequestReceived,
    ResponseEnded,
    WindowUpdated,
)
from purerpc.grpclib.exceptions import MessageTooLargeError as PurerpcMessageTooLargeError
from purerpc.grpclib.status import Status, StatusCode

from aether.rpc.data_frames import receive_data_frame
from aether.rpc.errors import MessageTooLargeError, PeerGoneError, PurerpcVersionError

__all__ = [
    "PURERPC_VERSION",
    "apply_purerpc_fixes",
    "cancel_client_stream",
    "flush_nowait",
    "send_soon",
]

PURERPC_VERSION = "0.8.0"
"""The only purerpc release these patches are written for (and read against, line by line)."""

_FAILURE_ATTRIBUTE = "_aether_failure"
"""Set on a `GRPCStream` that failed: a callable returning the exception its receives and sends raise."""


def apply_purerpc_fixes() -> None:
    """Fix purerpc 0.8.0 in place; safe to call any number of times (later calls change nothing).

    The fixes:

    - Unix sockets work: TCP-only socket options are set on TCP sockets only.
    - A stream reset by the peer (RST_STREAM), or a connection that ends, reaches the stream: its
      receives (and so a handler's request iterator) and sends raise `PeerGoneError` instead of hanging.
      Late events for a stream that has already ended are dropped instead of tearing down the connection.
    - Outgoing messages are cut into DATA frames in linear time (upstream copies O(n²) bytes).
    - A message over the size limit (`GRPCConfiguration.max_message_length`) fails only its stream, with
      status RESOURCE_EXHAUSTED and `MessageTooLargeError`'s message; the connection and its other streams go on.
    - A flush writes to a plain (not TLS) socket at once when no write is in flight, instead of waking the
      connection's writer task: one task hand-off less per message (see `flush_nowait`).

    It also sets the ``purerpc`` logger to ERROR unless the application gave it a level: purerpc logs a
    WARNING, without traceback, whenever a peer disconnects or a handler is cancelled.
    Set that logger to DEBUG to see those warnings with their tracebacks.

    Raises:
        PurerpcVersionError: The installed purerpc is not `PURERPC_VERSION`; nothing was patched.
    """
    installed = getattr(purerpc, "__version__", "unknown")
    if installed != PURERPC_VERSION:
        raise PurerpcVersionError(installed=installed, required=PURERPC_VERSION)
    for patch in _PATCHES:
        current = vars(patch.owner)[patch.name]
        if current is patch.replacement:
            continue
        _UPSTREAM[patch.owner, patch.name] = current
        setattr(patch.owner, patch.name, patch.replacement)
    logger = logging.getLogger("purerpc")
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.ERROR)


def _revert_purerpc_fixes() -> None:
    """Put purerpc's own code back. Tests use it to show each defect; nothing else should."""
    for (owner, name), original in _UPSTREAM.items():
        setattr(owner, name, original)
    _UPSTREAM.clear()


@attrs.frozen(kw_only=True)
class _Patch:
    owner: Any
    """The class or module holding the attribute."""
    name: str
    replacement: Any


_UPSTREAM: dict[tuple[Any, str], Any] = {}
"""purerpc's own attributes that the patches replaced, by (owner, name): the wrappers call some of them."""


def _upstream(owner: Any, name: str) -> Any:
    return _UPSTREAM[owner, name]


async def cancel_client_stream(grpc_socket: GRPCSocket, stream: GRPCStream) -> None:
    """Cancel a client's `stream` that has not ended: reset it (RST_STREAM CANCEL, as gRPC clients cancel a call)
    so the server stops answering, and fail it locally so nothing is delivered to it any more.

    purerpc has no way to cancel a call: a client that stops reading leaves the stream open on both sides, and its
    late messages pile up in the stream's buffer. Call it shielded from cancellation (it flushes the socket).
    A stream that already ended, or a connection that is gone, is left as it is.
    """
    if stream.stream_id not in grpc_socket._streams:
        return
    with contextlib.suppress(
        h2.exceptions.ProtocolError, anyio.BrokenResourceError, anyio.ClosedResourceError
    ):
        grpc_socket._grpc_connection.reset_stream(stream.stream_id, h2.errors.ErrorCodes.CANCEL)
        await grpc_socket._socket.flush()
    _fail_stream(
        grpc_socket,
        stream,
        functools.partial(PeerGoneError, stream_id=stream.stream_id, error_code=h2.errors.ErrorCodes.CANCEL),
    )


# --- Fix a: Unix sockets ---------------------------------------------------------------------------


def _set_socket_options(stream: anyio.abc.SocketStream) -> None:
    """Replaces the static method `SocketWrapper._set_socket_options`.

    Upstream sets TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT and TCP_NODELAY on every accepted socket. On AF_UNIX
    the kernel answers ``OSError: [Errno 95] Operation not supported``, purerpc logs it and drops the connection,
    so nothing could be served on a Unix socket. TCP sockets keep upstream's options (and its keepalive).
    """
    raw_socket = stream.extra(anyio.abc.SocketAttribute.raw_socket)
    if raw_socket.family in (socket.AF_INET, socket.AF_INET6):
        _upstream(SocketWrapper, "_set_socket_options")(stream)


# --- Fix b: stream resets and disconnects reach the stream -----------------------------------------


class _StreamReset(GRPCEvent):  # type: ignore[misc]  # purerpc is untyped
    """The peer reset a stream (RST_STREAM); upstream turned h2's `StreamReset` into no event at all."""

    def __init__(self, *, stream_id: int, error_code: int) -> None:
        self.stream_id = stream_id
        self.error_code = error_code


def _stream_reset(self: GRPCConnection, event: h2.events.StreamReset) -> list[GRPCEvent]:
    """Replaces `GRPCConnection._stream_reset`, which returned ``[]``: the reset never reached the stream.

    Also drops the stream's read buffer, which upstream kept for as long as the connection lived.
    """
    self.message_read_buffers.pop(event.stream_id, None)
    return [_StreamReset(stream_id=event.stream_id, error_code=int(event.error_code))]


async def _listen(self: GRPCSocket) -> AsyncIterator[GRPCStream]:
    """Replaces `GRPCSocket._listen`, the read loop of every connection (server and client side).

    Upstream has three defects this fixes:

    - A reset stream (see `_stream_reset`) was never told: a handler waiting for its next request waited until
      a later send failed. Now the stream fails with `PeerGoneError`.
    - When the connection ended, the loop returned without telling the open streams, with the same result,
      and purerpc's connection task waited for those handlers forever. Now every open stream fails.
    - It looked streams up with ``self._streams[stream_id]``: an event for a stream that already ended
      raised KeyError and tore down the connection with all its streams. Now such events are dropped.

    Also: a message over the size limit (`_MessageRejected`) fails its stream; see `_reject_message`. What the peer
    sent is read by `aether.rpc.data_frames.receive_data_frame` when it is one DATA frame on an open stream (h2
    reads everything else), and each event is handed to its stream without a checkpoint per event.
    """
    try:
        while True:
            try:
                data = await self._socket.recv(self._receive_buffer_size)
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return
            events = receive_data_frame(self._grpc_connection, data)
            if events is None:
                events = self._grpc_connection.receive_data(data)
            await self._socket.flush()
            for event in events:
                if isinstance(event, WindowUpdated):
                    # As upstream: wake the senders waiting for flow-control window.
                    if event.stream_id == 0:
                        for stream in self._streams.values():
                            await stream._set_flow_control_update()
                    elif event.stream_id in self._streams:
                        await self._streams[event.stream_id]._set_flow_control_update()
                    continue
                if isinstance(event, RequestReceived):
                    self._allocate_stream(event.stream_id)
                stream = self._streams.get(event.stream_id)
                if stream is None:
                    continue  # the stream already ended or failed: nobody reads its events any more
                if isinstance(event, _StreamReset):
                    _fail_stream(
                        self,
                        stream,
                        functools.partial(
                            PeerGoneError, stream_id=event.stream_id, error_code=event.error_code
                        ),
                    )
                elif isinstance(event, _MessageRejected):
                    await _reject_message(self, stream, event)
                else:
                    # Never blocks (the stream's buffer is unbounded); the receive of this loop is its checkpoint.
                    stream._incoming_events[0].send_nowait(event)
                    if isinstance(event, RequestReceived):
                        yield stream
                    elif isinstance(event, RequestEnded | ResponseEnded):
                        stream._close_remote()
    finally:
        # The connection ended (or this loop was cancelled): no event will ever reach these streams.
        for stream in list(self._streams.values()):
            _fail_stream(
                self, stream, functools.partial(PeerGoneError, stream_id=stream.stream_id, error_code=None)
            )


def _fail_stream(connection: GRPCSocket, stream: GRPCStream, failure: Callable[[], Exception]) -> None:
    """End `stream` for whoever uses it: its receives and sends raise ``failure()`` from now on."""
    setattr(stream, _FAILURE_ATTRIBUTE, failure)
    # Invariant: a failed stream is CLOSED and out of `_streams`, so nothing delivers to it or closes it again
    # (purerpc's own `close` on it raises TypeError, which purerpc's handler wrapper catches and logs).
    stream._state = GRPCStreamState.CLOSED
    connection._streams.pop(stream.stream_id, None)
    connection._grpc_connection.message_read_buffers.pop(stream.stream_id, None)
    # A receive waiting on the closed channel gets EndOfStream (see `_receive`); a send waiting for
    # flow-control window wakes up (see `_wait_flow_control_update`).
    stream._incoming_events[0].close()
    stream._flow_control_update_event.set()


def _raise_if_failed(stream: GRPCStream) -> None:
    failure: Callable[[], Exception] | None = getattr(stream, _FAILURE_ATTRIBUTE, None)
    if failure is not None:
        raise failure()


async def _receive(self: GRPCStream) -> GRPCEvent:
    """Wraps `GRPCStream._receive`: a stream failed by `_fail_stream` raises its failure instead of EndOfStream."""
    try:
        return await _upstream(GRPCStream, "_receive")(self)
    except anyio.EndOfStream:
        _raise_if_failed(self)
        raise AssertionError(
            "a stream's events ended but it has no failure recorded; this is a bug"
        ) from None


async def _send(self: GRPCStream, message: bytes, compress: bool = False) -> None:
    """Wraps `GRPCStream._send`: a failed stream raises its failure instead of writing to a dead stream."""
    _raise_if_failed(self)
    await _upstream(GRPCStream, "_send")(self, message, compress)


async def _wait_flow_control_update(self: GRPCStream) -> None:
    """Wraps `GRPCStream._wait_flow_control_update`: a send waiting for window raises once the stream fails.

    Upstream waits for a WINDOW_UPDATE that a gone peer never sends.
    """
    _raise_if_failed(self)
    await _upstream(GRPCStream, "_wait_flow_control_update")(self)
    _raise_if_failed(self)


# --- Fixes c and d: linear framing, and a size limit that fails one stream cleanly ------------------


class _LinearWriteBuffer(MessageWriteBuffer):  # type: ignore[misc]  # purerpc is untyped
    """Replaces `MessageWriteBuffer` in `purerpc.grpc_socket`, where `GRPCStream._send` frames each message.

    Upstream keeps the message in a `ByteBuffer` whose `popleft` slices off the rest of the message for every
    DATA frame, so cutting n bytes into 16 KiB frames copies about n²/32 KiB bytes: a 30 MiB message copies
    about 28 GiB and, to a peer with a large window, holds the event loop for over a second (1.5 s measured on
    2 cores). Here each frame is a slice of a memoryview: linear.

    A message over the limit raises `MessageTooLargeError`, an `RpcFailedError`, so purerpc ends the stream with
    RESOURCE_EXHAUSTED and that message. Upstream raised its own `MessageTooLargeError`, a ProtocolError, which
    purerpc reports as CANCELLED with ``repr(sys.exc_info())`` (a traceback object's repr) as the message.
    """

    def __init__(self, message_encoding: str | None = None, max_message_length: int = 4 * 2**20) -> None:
        super().__init__(message_encoding, max_message_length)
        self._views: deque[memoryview] = deque()
        self._pending = 0

    def write_message(self, data: bytes, compress: bool = False) -> None:
        if compress:
            data = self.compress(data)
        if len(data) > self._max_message_length:
            raise MessageTooLargeError(length=len(data), limit=self._max_message_length)
        self._views.append(memoryview(struct.pack(">?I", compress, len(data))))
        self._views.append(memoryview(data))
        self._pending += 5 + len(data)

    def data_to_send(self, amount: int) -> bytes:
        chunks: list[memoryview] = []
        while amount > 0 and self._views:
            view = self._views[0]
            chunk = view[:amount]
            if len(chunk) == len(view):
                self._views.popleft()
            else:
                self._views[0] = view[len(chunk) :]
            chunks.append(chunk)
            amount -= len(chunk)
            self._pending -= len(chunk)
        return b"".join(chunks)

    def __len__(self) -> int:
        return self._pending


class _MessageRejected(GRPCEvent):  # type: ignore[misc]  # purerpc is untyped
    """A received message's gRPC header announced more bytes than the limit."""

    def __init__(self, *, stream_id: int, length: int, limit: int) -> None:
        self.stream_id = stream_id
        self.length = length
        self.limit = limit


def _data_received(self: GRPCConnection, event: h2.events.DataReceived) -> list[GRPCEvent]:
    """Replaces `GRPCConnection._data_received`.

    Upstream let purerpc's `MessageTooLargeError` out of `receive_data`, which ended the connection and every
    stream on it. Here the stream's read buffer is dropped and a `_MessageRejected` event tells `_listen` to fail
    that stream alone. Messages completed before the rejected one, in the same DATA frame, are still delivered.

    The bytes that will never be read are acknowledged, or they would shrink the connection's flow-control window
    for good: the rest of the rejected frame, and frames of the stream that arrive before its reset goes out.
    (Upstream also raised KeyError, reading the buffer again, for DATA on a stream without one.)
    """
    buffer: MessageReadBuffer | None = self.message_read_buffers.get(event.stream_id)
    if buffer is None:
        # The stream's message was rejected earlier in this batch of frames; its reset is not sent yet.
        _acknowledge(self, event.stream_id, event.flow_controlled_length)
        return []
    data = event.data
    if (
        buffer._message_length is None  # no message begun in an earlier frame
        and not buffer._buffer._size
        and len(data) >= _PREFIX
        and data[0] == 0  # not compressed
        and int.from_bytes(data[1:_PREFIX], "big") == len(data) - _PREFIX <= buffer._max_message_length
    ):
        # The frame holds exactly one whole message: what the buffer would return for it.
        return [MessageReceived(event.stream_id, data[_PREFIX:], event.flow_controlled_length)]
    rejected: list[GRPCEvent] = []
    try:
        buffer.data_received(data, event.flow_controlled_length)
    except PurerpcMessageTooLargeError:
        del self.message_read_buffers[event.stream_id]
        # MessageReadBuffer has consumed the 5-byte header (its flow-controlled length is kept apart) and holds
        # the start of the message's body; both are unread for good.
        unread = buffer._flow_controlled_length + sum(length for _, length in buffer._buffer._deque)
        _acknowledge(self, event.stream_id, unread)
        rejected.append(
            _MessageRejected(
                stream_id=event.stream_id, length=buffer._message_length, limit=buffer._max_message_length
            )
        )
    received = [
        MessageReceived(event.stream_id, message, length)
        for message, length in buffer.read_all_complete_messages_flowcontrol()
    ]
    return received + rejected


_PREFIX = 5
"""A gRPC message's prefix: compressed or not (one byte), then its length (four)."""


def _acknowledge(connection: GRPCConnection, stream_id: int, length: int) -> None:
    if length > 0:
        connection.h2_connection.acknowledge_received_data(length, stream_id)


async def _reject_message(connection: GRPCSocket, stream: GRPCStream, event: _MessageRejected) -> None:
    """Fail `stream` because its peer sent a message over the limit (see `_data_received`).

    A server stream first ends with status RESOURCE_EXHAUSTED, as gRPC's own servers answer, then is reset with
    NO_ERROR so the client stops sending the rest of the message (RFC 9113 section 8.1). A client stream
    is reset with CANCEL. Either way the stream's user then gets `MessageTooLargeError`.
    """
    failure = functools.partial(MessageTooLargeError, length=event.length, limit=event.limit)
    # h2 has read the whole batch of frames already: a RST_STREAM later in it may have closed the stream (nobody
    # is left to tell), or an END_STREAM makes our trailers close it (nothing is left to reset).
    with contextlib.suppress(h2.exceptions.StreamClosedError):
        if stream.client_side:
            error_code = h2.errors.ErrorCodes.CANCEL
        else:
            error_code = h2.errors.ErrorCodes.NO_ERROR
            if stream.state is GRPCStreamState.OPEN:
                await stream.close(Status(StatusCode.RESOURCE_EXHAUSTED, str(failure())))
        connection._grpc_connection.reset_stream(stream.stream_id, error_code)
    await connection._socket.flush()
    _fail_stream(connection, stream, failure)


# --- Fix e: flushes write at once -----------------------------------------------------------------

_SENDING_ATTRIBUTE = "_aether_sending"
"""Set on a `SocketWrapper` while its writer task has bytes in flight (taken from h2, not all written yet)."""

_RAW_ATTRIBUTE = "_aether_raw_socket"
"""The plain socket under a `SocketWrapper` (None under TLS, whose bytes only the TLS stream may write)."""


async def _writer_thread(self: SocketWrapper) -> None:
    """Replaces `SocketWrapper._writer_thread`, the task that writes what h2 has to send.

    As upstream, but it marks the time its bytes are in flight: `flush_nowait` must not write then, or bytes
    would go out of order. While the send thread (`flush_soon`) has bytes of this connection, it waits for them
    to be written; and it ends only once the send thread is done with the socket (see `_Outlet`).
    """
    try:
        while True:
            outlet: _Outlet | None = getattr(self, _OUTLET_ATTRIBUTE, None)
            if outlet is not None and outlet.busy:
                await outlet.wait_sent()
                continue
            data = self._grpc_connection.data_to_send()
            if data:
                setattr(self, _SENDING_ATTRIBUTE, True)
                try:
                    await self._stream.send(data)
                finally:
                    setattr(self, _SENDING_ATTRIBUTE, False)
            elif self._running:
                await self._flush_event.wait()
                self._flush_event = anyio.Event()
            else:
                return
    finally:
        outlet = getattr(self, _OUTLET_ATTRIBUTE, None)
        if outlet is not None:
            outlet.closed = True  # no new send starts
            if outlet.busy:  # quick: the send thread never blocks on a socket
                with anyio.CancelScope(shield=True):
                    await outlet.wait_sent()


def flush_nowait(wrapper: SocketWrapper) -> None:
    """Write what h2 has to send on `wrapper`'s connection now, as far as the socket takes it; wake the writer
    task for the rest (or for everything, under TLS or while the writer task has a write in flight).

    Upstream's flush only woke the writer task: every message cost a task switch on top of the send. Written
    here, in the caller's task, a message that the socket buffer takes costs one `send` call. Never blocks.
    """
    outlet: _Outlet | None = getattr(wrapper, _OUTLET_ATTRIBUTE, None)
    if outlet is not None and outlet.busy:
        return  # the send thread has bytes of it: what is pending goes with them or after them
    raw = _raw_socket(wrapper)
    if raw is not None and wrapper._running and not getattr(wrapper, _SENDING_ATTRIBUTE, False):
        pending: bytearray = wrapper._grpc_connection.h2_connection._data_to_send
        if not pending:
            return
        del pending[: _send_once(raw, pending)]
        if not pending:
            return
    wrapper._flush_event.set()


def _raw_socket(wrapper: SocketWrapper) -> socket.socket | None:
    """The plain socket under `wrapper` (None under TLS), looked up once."""
    raw: socket.socket | None = getattr(wrapper, _RAW_ATTRIBUTE, _UNKNOWN)
    if raw is _UNKNOWN:
        stream = wrapper._stream
        raw = (
            stream.extra(anyio.abc.SocketAttribute.raw_socket)
            if isinstance(stream, anyio.abc.SocketStream)
            else None
        )
        setattr(wrapper, _RAW_ATTRIBUTE, raw)
    return raw


_UNKNOWN: Any = object()


# --- Sends off the trio thread (for `aether.rpc.direct`) ---------------------------------------------------------

_OUTLET_ATTRIBUTE = "_aether_outlet"
"""Set on a `SocketWrapper` once `flush_soon` used it: its `_Outlet`."""


def send_soon(wrapper: SocketWrapper, data: bytes) -> None:
    """Send `data` (frames h2 has charged to its flow-control windows) on `wrapper`'s connection after what h2 has
    pending for it, at the end of this scheduler tick; never blocks.

    Everything sent within one scheduler tick is one batch, one `send` per connection however many messages it
    has; while nothing else is pending for the connection, `data` does not go through h2's buffer at all. A
    connection's few bytes in the batch (`_INLINE_LIMIT`, what h2 buffered after them included) are written on the
    trio thread at the end of the tick, a fan-out to many connections too; a connection's larger write (a whole
    SotW type) goes to the send thread, where the kernel's copy runs beside the trio thread (a socket send releases
    the GIL). Falls back to h2's buffer and `flush_nowait` under TLS (only the TLS stream may write its socket) and
    once the connection's writer task has ended.
    """
    outlet = _outlet(wrapper)
    if outlet is None or outlet.closed:
        wrapper._grpc_connection.h2_connection._data_to_send += data
        flush_nowait(wrapper)
        return
    pending: bytearray = outlet.h2._data_to_send
    collecting = outlet.collecting
    if collecting is not None:
        if pending:  # after what h2 buffered since: both go in this tick's batch, in order
            pending += data
        else:
            collecting += data
        return
    if pending or outlet.in_flight or getattr(wrapper, _SENDING_ATTRIBUTE, False):
        pending += data  # after those bytes, by the writer task or the batch after them (`_sent`)
        if not outlet.in_flight:
            outlet.thread.add(outlet)
        return
    outlet.collecting = bytearray(data)
    outlet.thread.add(outlet)


def _outlet(wrapper: SocketWrapper) -> _Outlet | None:
    """The connection's state with the send thread, made on first use; None under TLS or once it has ended."""
    outlet: _Outlet | None = getattr(wrapper, _OUTLET_ATTRIBUTE, None)
    if outlet is None:
        raw = _raw_socket(wrapper)
        if raw is None or not wrapper._running:
            return None
        outlet = _Outlet(wrapper, raw, _send_thread())
        setattr(wrapper, _OUTLET_ATTRIBUTE, outlet)
    return outlet


def _flush_soon(wrapper: SocketWrapper) -> None:
    """Send what h2 has pending for the connection from the send thread, soon."""
    outlet = _outlet(wrapper)
    if outlet is None or outlet.closed:
        flush_nowait(wrapper)
    else:
        outlet.thread.add(outlet)


class _Outlet:
    """One connection's state with the send thread (all of it read and written on the trio thread only).

    Invariants: at most one writer has bytes of the connection at a time, the writer task (`_SENDING_ATTRIBUTE`)
    or the send thread (`busy`: bytes `collecting` for this tick's batch, then `in_flight`), each taking h2's
    pending bytes from the front (the batch: `collecting`, then what h2 buffered after it), so they go out in
    order. The send thread writes the connection's own socket object, never a bare descriptor number, and only
    while `in_flight`; the writer task ends (`_writer_thread`) only once not `busy` and with `closed` set, and
    purerpc's connection closes its socket only after its writer task ended (`aether.rpc.listen` and
    `aether.rpc.calls` close the stream around the connection; otherwise the garbage collector closes it, which
    an in-flight batch's reference prevents). So the send thread never writes a descriptor that was closed and
    reused for another connection.
    """

    __slots__ = (
        "closed",
        "collecting",
        "h2",
        "in_flight",
        "queued",
        "sent_event",
        "socket",
        "thread",
        "wrapper",
    )

    def __init__(self, wrapper: SocketWrapper, raw: socket.socket, thread: _SendThread) -> None:
        self.wrapper = wrapper
        self.h2 = wrapper._grpc_connection.h2_connection
        """The connection's h2 state (kept: one object less to reach per batch)."""
        self.socket = raw
        self.thread = thread
        self.queued = False
        """In the send thread's next batch."""
        self.collecting: bytearray | None = None
        """Bytes for the next batch, ahead of what h2 has pending (`send_soon`)."""
        self.in_flight = False
        """The send thread holds bytes of it, not all written yet."""
        self.closed = False
        """Its writer task ended: no send may start."""
        self.sent_event: anyio.Event | None = None
        """Set once `in_flight` clears, for the writer task waiting for it."""

    @property
    def busy(self) -> bool:
        """The send thread has, or is about to have, bytes of the connection: no one else may write it."""
        return self.in_flight or self.collecting is not None

    async def wait_sent(self) -> None:
        """Wait until the send thread has written (or given back) this connection's bytes."""
        if self.sent_event is None:
            self.sent_event = anyio.Event()
        await self.sent_event.wait()


_Batch = list[tuple[_Outlet, bytes | bytearray]]
_Work = _Batch | Callable[[], object] | None
"""What the send thread takes: a batch to write, a call to make (tests hold the thread with one), or None: end."""


_INLINE_LIMIT = 65_536
"""The most bytes of one connection in a tick's batch that are written on the trio thread (`_SendThread._submit`).

A small write through the send thread costs more than its `send`: a lone xDS response (an endpoint change, a few
hundred bytes) two wake-ups of trio's loop and two thread switches; a fan-out (a registrar change to hundreds of
watchers) waits for the GIL after every `send` the thread makes, up to the interpreter's switch interval (5 ms)
each time while the trio thread runs, so its sends spread over the trio thread's idle moments (measured: the last
of 500 watchers got a change 4 to 10 times later at the 99th percentile, for the same CPU). A larger write is
worth the thread: its kernel copy runs beside the trio thread.
"""


class _SendThread:
    """Writes each scheduler tick's batch of connections' bytes (non-blocking sends): each connection's few bytes
    on the trio thread, larger writes in a thread of its own; one per trio run.

    The batch is taken at the end of the tick by a system task (`serve`) that `add` reschedules: no wake-up of
    trio's loop through its wakeup socket, as `run_sync_soon` would make.
    """

    def __init__(self, token: trio.lowlevel.TrioToken) -> None:
        self._token = token
        self._queue: queue.SimpleQueue[_Work] = queue.SimpleQueue()
        self._adding: list[_Outlet] = []
        self._parked: trio.lowlevel.Task | None = None
        """The task of `serve` while it waits for a batch."""
        self._thread = threading.Thread(target=self._run, name="aether-rpc-send", daemon=True)
        self._thread.start()

    def add(self, outlet: _Outlet) -> None:
        """Put `outlet`'s pending bytes in the batch of this scheduler tick (trio thread)."""
        if outlet.queued:
            return
        outlet.queued = True
        self._adding.append(outlet)
        parked = self._parked
        if parked is not None:
            self._parked = None
            trio.lowlevel.reschedule(parked)

    async def serve(self) -> None:
        """Take each tick's batch once the tasks that made it have run (trio thread); at the end, stop the thread."""
        try:
            while True:
                if not self._adding:
                    self._parked = trio.lowlevel.current_task()
                    await trio.lowlevel.wait_task_rescheduled(self._abort)
                else:
                    await trio.lowlevel.checkpoint()
                self._submit()
        finally:
            self.stop()

    def _abort(self, raise_cancel: Any) -> trio.lowlevel.Abort:
        self._parked = None
        return trio.lowlevel.Abort.SUCCEEDED

    def call(self, function: Callable[[], object]) -> None:
        """Call `function` in the send thread once it wrote what it has now (trio thread)."""
        self._queue.put(function)

    def stop(self) -> None:
        """End the thread once it wrote what it has (trio thread)."""
        self._queue.put(None)

    def _submit(self) -> None:
        """Write the tick's batch: each connection's pending bytes, taken from h2, written here if few, else handed
        to the thread."""
        adding, self._adding = self._adding, []
        here: _Batch = []
        batch: _Batch = []
        for outlet in adding:
            outlet.queued = False
            pending: bytearray = outlet.h2._data_to_send
            collecting = outlet.collecting
            data: bytes | bytearray
            if collecting is not None:  # sent even once `closed`: the writer task waits for it
                outlet.collecting = None
                if pending:
                    collecting += pending
                    pending.clear()
                data = collecting  # no one else holds it now
            elif outlet.closed or outlet.in_flight or getattr(outlet.wrapper, _SENDING_ATTRIBUTE, False):
                continue  # the writer task, or `_sent`, takes what is pending
            elif pending:
                data = bytes(pending)
                pending.clear()
            else:
                continue
            outlet.in_flight = True
            (here if len(data) <= _INLINE_LIMIT else batch).append((outlet, data))
        if batch:
            self._queue.put(batch)
        if here:
            _sent(here, [_send_once(outlet.socket, data) for outlet, data in here])

    def _run(self) -> None:  # the send thread
        while (batch := self._queue.get()) is not None:
            if callable(batch):
                batch()
                continue
            sent = [_send_once(outlet.socket, data) for outlet, data in batch]
            try:
                self._token.run_sync_soon(_sent, batch, sent)
            except trio.RunFinishedError:
                return


def _send_once(raw: socket.socket, data: bytes | bytearray) -> int:
    """One non-blocking `send` of `data` on `raw`: the bytes written, 0 when the socket is full (EAGAIN) or broken
    (the writer task then waits for it, or raises for the connection)."""
    try:
        return raw.send(data)
    except OSError:
        return 0


def _sent(batch: _Batch, sent: list[int]) -> None:
    """The send thread wrote `sent` bytes of each of `batch` (trio thread): give back what it did not write."""
    for (outlet, data), count in zip(batch, sent, strict=True):
        outlet.in_flight = False
        pending: bytearray = outlet.h2._data_to_send
        waiting = outlet.sent_event
        if waiting is not None:
            outlet.sent_event = None
            waiting.set()
        if count < len(data):
            pending[:0] = memoryview(data)[count:]
            outlet.wrapper._flush_event.set()  # the writer task waits for the socket, or fails the connection
        elif pending and waiting is None:
            _flush_soon(outlet.wrapper)


_SEND_THREAD: trio.lowlevel.RunVar[_SendThread] = trio.lowlevel.RunVar("aether_rpc_send_thread")


def _send_thread() -> _SendThread:
    """This trio run's send thread, started on first use and stopped when the run ends."""
    try:
        return _SEND_THREAD.get()
    except LookupError:
        pass
    thread = _SendThread(trio.lowlevel.current_trio_token())
    _SEND_THREAD.set(thread)
    trio.lowlevel.spawn_system_task(thread.serve, name="aether-rpc-send-thread")
    return thread


async def _flush(self: SocketWrapper) -> None:
    """Replaces `SocketWrapper.flush`: `flush_nowait`."""
    flush_nowait(self)


_PATCHES = (
    _Patch(owner=SocketWrapper, name="_set_socket_options", replacement=staticmethod(_set_socket_options)),
    _Patch(owner=GRPCConnection, name="_stream_reset", replacement=_stream_reset),
    _Patch(owner=GRPCConnection, name="_data_received", replacement=_data_received),
    _Patch(owner=GRPCSocket, name="_listen", replacement=_listen),
    _Patch(owner=GRPCStream, name="_receive", replacement=_receive),
    _Patch(owner=GRPCStream, name="_send", replacement=_send),
    _Patch(owner=GRPCStream, name="_wait_flow_control_update", replacement=_wait_flow_control_update),
    _Patch(owner=purerpc.grpc_socket, name="MessageWriteBuffer", replacement=_LinearWriteBuffer),
    _Patch(owner=SocketWrapper, name="_writer_thread", replacement=_writer_thread),
    _Patch(owner=SocketWrapper, name="flush", replacement=_flush),
)
"""Every patch: what `apply_purerpc_fixes` sets, and `_revert_purerpc_fixes` undoes."""
