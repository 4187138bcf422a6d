"""The reader's fast path: what the peer sent is one DATA frame on an open stream (an xDS request or ACK).

h2 reads every frame through its frame buffer, hyperframe's frame objects and its connection and stream state
machines. For the one case every gRPC request stream repeats, a single DATA frame without flags on a stream that
can receive, all that work comes down to its effects: the two inbound flow-control windows shrink by the frame's
length, and the stream counts the body's bytes. `receive_data_frame` does exactly that and hands the payload to
purerpc's connection as h2's `DataReceived` event would (message split and size limit there); anything else
(another frame type, flags such as END_STREAM or PADDED, more or less than one whole frame, a stream that cannot
receive, a window or content length the frame would break, h2 holding part of a frame) returns None, and the
caller gives the bytes to h2 unchanged, so h2 alone judges every other case and raises every error.
"""

from __future__ import annotations

import h2.events
from h2.connection import ConnectionState
from h2.stream import StreamState
from purerpc.grpclib.connection import GRPCConnection
from purerpc.grpclib.events import Event as GRPCEvent

__all__ = ["receive_data_frame"]

_HEADER = 9
"""RFC 9113 section 4.1: length (24 bits), type, flags, stream identifier (31 bits after a reserved bit)."""

_RECEIVING = (StreamState.OPEN, StreamState.HALF_CLOSED_LOCAL)
"""The stream states in which h2 takes DATA without changing state (`h2.stream` transitions on RECV_DATA)."""

_CONNECTION_OPEN = (ConnectionState.CLIENT_OPEN, ConnectionState.SERVER_OPEN)
"""The connection states in which h2 takes DATA without changing state."""


def receive_data_frame(connection: GRPCConnection, data: bytes) -> list[GRPCEvent] | None:
    """Take `data`, if it is exactly one DATA frame without flags on a stream that can receive; else None.

    Returns:
        The gRPC events of the frame (`GRPCConnection.receive_data`'s for the same bytes), or None, having
        changed nothing: give `data` to `connection.receive_data`.
    """
    if len(data) < _HEADER or data[3] != 0 or data[4] != 0:  # type DATA (0), no flags
        return None
    length = int.from_bytes(data[:3], "big")
    if len(data) != _HEADER + length:
        return None
    machine = connection.h2_connection
    incoming = machine.incoming_buffer
    if incoming.data or incoming._preamble_len or incoming._headers_buffer:
        return None  # h2 holds part of a frame, still expects the preamble, or a header block goes on
    if length > machine.max_inbound_frame_size or machine.state_machine.state not in _CONNECTION_OPEN:
        return None
    stream_id = int.from_bytes(data[5:9], "big") & 0x7FFF_FFFF
    stream = machine.streams.get(stream_id)
    if (
        stream is None
        or stream.state_machine.state not in _RECEIVING
        or stream._expected_content_length is not None
        or stream_id not in connection.message_read_buffers
    ):
        return None
    connection_window = machine._inbound_flow_control_window_manager
    stream_window = stream._inbound_window_manager
    if length > connection_window.current_window_size or length > stream_window.current_window_size:
        return None  # h2 raises the flow-control error
    # What `H2Connection._receive_data_frame` and `H2Stream.receive_data` change for such a frame; their state
    # machines stay in the same state and make no frames.
    connection_window.current_window_size -= length
    stream_window.current_window_size -= length
    stream._actual_content_length += length
    event = h2.events.DataReceived()
    event.stream_id = stream_id
    event.data = data[_HEADER:]
    event.flow_controlled_length = length
    events: list[GRPCEvent] = connection._data_received(event)
    return events
