"""Pre-encoded messages on a server stream: encode once for many streams, and send without a task hand-off.

A server that sends the same message on many streams (the registrar's fan-out of one change to thousands of
watchers) serializes it once and hands the bytes to each stream:

- from the handler's response iterator, yielded as an `EncodedMessage` (purerpc calls `SerializeToString`, which
  returns the bytes);
- or, from any task, with a `StreamSender` of the stream (`current_server_stream` in its handler): the message's DATA
  frames are charged to the flow-control windows as h2 itself charges them, and the socket is written at the end of
  the scheduler tick, on the trio thread or by the send thread (`aether.rpc.compat.send_soon`). No await, no task
  switch, no h2 frame objects.
  When the stream's flow-control window cannot take the messages whole, nothing is sent and it returns False:
  the caller keeps them and sends them from the handler, which waits for the window.

The two must not interleave on one stream: a message yielded by the handler is in the h2 buffer once the yield
returns, so the handler and the `StreamSender` caller take turns (see `aether.registrar.broadcaster.Watcher`).
"""

from __future__ import annotations

import contextvars
from collections.abc import Sequence

from h2.connection import ConnectionState
from h2.stream import StreamState
from purerpc.grpc_socket import GRPCStream, GRPCStreamState

from aether.rpc.compat import send_soon

__all__ = ["EncodedMessage", "StreamSender", "current_server_stream"]

_SENDABLE = (StreamState.OPEN, StreamState.HALF_CLOSED_REMOTE)
_OPEN = (GRPCStreamState.OPEN, GRPCStreamState.HALF_CLOSED_REMOTE)
_CONNECTION_CLOSED = ConnectionState.CLOSED

CURRENT_STREAM: contextvars.ContextVar[GRPCStream | None] = contextvars.ContextVar(
    "aether_current_server_stream", default=None
)
"""Set by `aether.rpc.listen.serve_grpc` in the task that handles each stream."""


def current_server_stream() -> GRPCStream | None:
    """Return the stream whose handler is running (None outside `aether.rpc.listen.serve_grpc` handlers)."""
    return CURRENT_STREAM.get()


_PREFIX = 5
"""A gRPC message's prefix: not compressed (one byte), then its length (four)."""

_SMALLEST_MAX_FRAME_SIZE = 16_384


class _LastFramed:
    """The last message framed, and it framed (one tuple, replaced whole): the same bytes go to many streams, and
    are framed once. The message is held, so no other bytes object can take its identity."""

    last: tuple[bytes, bytes] = (b"", bytes(_PREFIX))


def _framed(message: bytes) -> bytes:
    """`message` with its gRPC prefix; the bytes of the last message given are not framed again."""
    last, framed = _LastFramed.last
    if message is not last:
        framed = b"\x00" + len(message).to_bytes(4, "big") + message
        _LastFramed.last = (message, framed)
    return framed


class EncodedMessage:
    """A message already serialized: yield it from a handler's response iterator instead of the message object.

    Args:
        data: The serialized message (`Message.SerializeToString()`).
    """

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def SerializeToString(self) -> bytes:  # the protobuf method purerpc calls
        return self.data


class StreamSender:
    """Sends serialized messages on one server stream at once (`send_nowait`), from any task.

    Args:
        stream: The stream (`current_server_stream()` in its handler); its response must have started, as purerpc
            starts it before calling the handler.
    """

    __slots__ = (
        "_connection_machine",
        "_h2_connection",
        "_h2_stream",
        "_header_tail",
        "_limit",
        "_socket",
        "_stream",
        "_stream_machine",
    )

    def __init__(self, stream: GRPCStream) -> None:
        self._stream = stream
        connection = stream._grpc_connection
        self._h2_connection = connection.h2_connection
        stream_id: int = stream.stream_id
        # Kept, not looked up: h2 forgets a stream that closed, and the closed state is what `send_nowait` checks.
        self._h2_stream = self._h2_connection.streams[stream_id]
        # Each lives as long as its stream or connection: kept, one object less to reach per message.
        self._stream_machine = self._h2_stream.state_machine
        self._connection_machine = self._h2_connection.state_machine
        self._socket = stream._socket
        self._limit: int = connection.config.max_message_length
        # The last five bytes of each DATA frame's header: type DATA (0), no flags, the stream identifier.
        self._header_tail = b"\x00\x00" + stream_id.to_bytes(4, "big")

    def send_nowait(self, messages: Sequence[bytes]) -> bool:
        """Send the serialized `messages` now, whole, or return False having sent nothing.

        False when the stream's or connection's flow-control window is too small for all of them, a message is
        over the connection's size limit, or the stream or connection has ended: the caller then sends them
        through the handler (`EncodedMessage`), which waits for the window or raises the error.
        """
        # A stream that failed (reset, its connection gone: `aether.rpc.compat`) is CLOSED too.
        if (
            self._stream._state not in _OPEN
            or self._stream_machine.state not in _SENDABLE
            or self._connection_machine.state is _CONNECTION_CLOSED
        ):
            return False
        limit = self._limit
        if len(messages) == 1:
            body = _framed(messages[0])
            if len(body) - _PREFIX > limit:
                return False
        else:
            framed: list[bytes] = []
            for message in messages:
                if len(message) > limit:
                    return False
                framed.append(_framed(message))
            body = b"".join(framed)
        size = len(body)
        h2_connection = self._h2_connection
        h2_stream = self._h2_stream
        if size > h2_stream.outbound_flow_control_window or size > h2_connection.outbound_flow_control_window:
            return False
        # RFC 9113 section 4.1: length (24 bits), type, flags, stream identifier; then the payload. No frame of
        # the smallest maximum size (section 6.5.2) is ever too large: the peer's setting is read only past it.
        if size <= _SMALLEST_MAX_FRAME_SIZE or size <= h2_connection.max_outbound_frame_size:
            data = size.to_bytes(3, "big") + self._header_tail + body
        else:
            frame_size: int = h2_connection.max_outbound_frame_size
            data = b"".join(
                len(chunk).to_bytes(3, "big") + self._header_tail + chunk
                for chunk in (body[start : start + frame_size] for start in range(0, size, frame_size))
            )
        # Charged as `H2Connection.send_data` and `H2Stream.send_data` charge them.
        h2_connection.outbound_flow_control_window -= size
        h2_stream.outbound_flow_control_window -= size
        send_soon(self._socket, data)
        return True
