"""Tests of aether.rpc.data_frames: the reader's DATA-frame fast path against h2 itself.

Each test feeds the same client bytes to two server connections: one reads them as `aether.rpc.compat._listen`
does (`receive_data_frame`, else h2), the other through h2 alone. Their gRPC events, their flow-control windows
and what they send back (WINDOW_UPDATE frames once the messages are acknowledged) must be the same; each case
also says which path it took.
"""

from __future__ import annotations

import struct
from typing import Any

import h2.config
import h2.connection
import h2.exceptions
import hyperframe.frame
import pytest
from purerpc.grpclib.config import GRPCConfiguration
from purerpc.grpclib.connection import GRPCConnection
from purerpc.grpclib.events import MessageReceived, RequestEnded
from purerpc.grpclib.exceptions import UnsupportedMessageEncodingError

from aether.rpc.compat import apply_purerpc_fixes
from aether.rpc.data_frames import receive_data_frame

apply_purerpc_fixes()  # the size limit and message split the fast path hands over to (`_data_received`)

MAX_MESSAGE_LENGTH = 1_000


def _message(payload: bytes, *, compressed: bool = False) -> bytes:
    return struct.pack(">?I", compressed, len(payload)) + payload


def _data_frame(stream_id: int, payload: bytes, *, flags: tuple[str, ...] = (), pad: int = 0) -> bytes:
    frame = hyperframe.frame.DataFrame(stream_id, data=payload, flags=flags)
    if pad:
        frame.flags.add("PADDED")
        frame.pad_length = pad
    return bytes(frame.serialize())


class Pair:
    """A client and two server connections that have read the same opening (preamble, SETTINGS, `streams`' HEADERS)."""

    def __init__(self, *, streams: int = 1) -> None:
        self.client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.client.initiate_connection()
        for stream_id in range(1, 2 * streams, 2):
            self.client.send_headers(
                stream_id,
                [
                    (":method", "POST"),
                    (":scheme", "http"),
                    (":path", "/aether.test.Echo/Bidi"),
                    (":authority", "localhost"),
                    ("te", "trailers"),
                    ("content-type", "application/grpc+proto"),
                ],
            )
        opening = self.client.data_to_send()
        config = GRPCConfiguration(client_side=False, max_message_length=MAX_MESSAGE_LENGTH)
        self.fast, self.plain = GRPCConnection(config), GRPCConnection(config)
        for server in (self.fast, self.plain):
            server.initiate_connection()
            server.receive_data(opening)
            server.data_to_send()

    def feed(self, data: bytes) -> bool:
        """Give `data` to both servers; return whether the fast path took it. Their events must agree."""
        taken = receive_data_frame(self.fast, data)
        fast = taken if taken is not None else self.fast.receive_data(data)
        plain = self.plain.receive_data(data)
        assert _described(fast) == _described(plain)
        self.events = fast
        return taken is not None

    def acknowledge(self) -> None:
        """Acknowledge every message received on both, as a stream's receive does."""
        for server in (self.fast, self.plain):
            for event in self.events:
                if isinstance(event, MessageReceived):
                    server.acknowledge_received_data(event.stream_id, event.flow_controlled_length)

    def assert_same_state(self) -> None:
        fast, plain = self.fast.h2_connection, self.plain.h2_connection
        assert _windows(fast) == _windows(plain)
        assert self.fast.data_to_send() == self.plain.data_to_send()
        assert fast.incoming_buffer.data == plain.incoming_buffer.data


def _described(events: list[Any]) -> list[tuple[Any, ...]]:
    return [(type(event).__name__, *sorted(vars(event).items())) for event in events]


def _windows(machine: h2.connection.H2Connection) -> tuple[Any, ...]:
    return (
        machine._inbound_flow_control_window_manager.current_window_size,
        machine.state_machine.state,
        sorted(
            (
                stream_id,
                stream.state_machine.state,
                stream._inbound_window_manager.current_window_size,
                stream._actual_content_length,
            )
            for stream_id, stream in machine.streams.items()
        ),
    )


def _messages(events: list[Any]) -> list[bytes]:
    return [event.data for event in events if isinstance(event, MessageReceived)]


def test_one_frame_one_message_takes_the_fast_path() -> None:
    pair = Pair()
    assert pair.feed(_data_frame(1, _message(b"ack")))
    assert _messages(pair.events) == [b"ack"]
    pair.acknowledge()
    pair.assert_same_state()


def test_several_messages_in_one_frame() -> None:
    pair = Pair()
    assert pair.feed(_data_frame(1, _message(b"one") + _message(b"") + _message(b"three")))
    assert _messages(pair.events) == [b"one", b"", b"three"]
    pair.acknowledge()
    pair.assert_same_state()


def test_a_message_split_across_frames() -> None:
    pair = Pair()
    whole = _message(b"x" * 300)
    assert pair.feed(_data_frame(1, whole[:3]))  # not even the whole prefix
    assert pair.events == []
    assert pair.feed(_data_frame(1, whole[3:100]))
    assert pair.events == []
    assert pair.feed(_data_frame(1, whole[100:] + _message(b"next")[:2]))
    assert _messages(pair.events) == [b"x" * 300]
    assert pair.feed(_data_frame(1, _message(b"next")[2:]))
    assert _messages(pair.events) == [b"next"]
    pair.acknowledge()
    pair.assert_same_state()


def test_a_compressed_message_goes_through_the_buffer() -> None:
    """purerpc's buffer decompresses (and here refuses the unknown encoding): the same error either way."""
    pair = Pair()
    frame = _data_frame(1, _message(b"zz", compressed=True))
    with pytest.raises(UnsupportedMessageEncodingError) as fast:
        receive_data_frame(pair.fast, frame)
    with pytest.raises(UnsupportedMessageEncodingError) as plain:
        pair.plain.receive_data(frame)
    assert str(fast.value) == str(plain.value)


@pytest.mark.parametrize(
    "frame",
    [
        pytest.param(_data_frame(1, _message(b"end"), flags=("END_STREAM",)), id="end-stream"),
        pytest.param(_data_frame(1, _message(b"padded"), pad=7), id="padding"),
        pytest.param(_data_frame(1, _message(b"a")) + _data_frame(1, _message(b"b")), id="two-frames"),
        pytest.param(
            _data_frame(1, _message(b"a")) + _data_frame(3, _message(b"b")), id="interleaved-streams"
        ),
        pytest.param(
            _data_frame(1, _message(b"a"))
            + bytes(hyperframe.frame.WindowUpdateFrame(0, window_increment=9).serialize()),
            id="data-then-window-update",
        ),
        pytest.param(bytes(hyperframe.frame.PingFrame(0, opaque_data=b"12345678").serialize()), id="ping"),
    ],
)
def test_anything_else_falls_back_to_h2(frame: bytes) -> None:
    pair = Pair(streams=2)
    assert not pair.feed(frame)
    assert pair.events or pair.fast.h2_connection._data_to_send  # h2 read it: messages, an end, a PING's ACK
    pair.acknowledge()
    pair.assert_same_state()


def test_end_stream_on_data_ends_the_request() -> None:
    pair = Pair()
    assert pair.feed(_data_frame(1, _message(b"first")))
    assert not pair.feed(_data_frame(1, _message(b"last"), flags=("END_STREAM",)))
    assert [type(event) for event in pair.events] == [MessageReceived, RequestEnded]
    # The stream is half-closed (remote) now: DATA on it is h2's to refuse (it resets the stream).
    assert not pair.feed(_data_frame(1, _message(b"late")))
    pair.assert_same_state()


def test_a_frame_cut_in_two_reads_falls_back_until_h2_has_read_it() -> None:
    pair = Pair()
    frame = _data_frame(1, _message(b"y" * 50))
    assert not pair.feed(frame[:20])
    assert pair.events == []
    assert not pair.feed(frame[20:] + _data_frame(1, _message(b"z"))[:0])
    assert _messages(pair.events) == [b"y" * 50]
    assert pair.feed(_data_frame(1, _message(b"z")))  # h2 holds nothing now
    pair.assert_same_state()


def test_a_frame_over_the_stream_window_is_h2s_flow_control_error() -> None:
    """purerpc's streams open with a window of twice the message limit: a frame over it is refused by h2."""
    pair = Pair()
    window = pair.fast.h2_connection.streams[1]._inbound_window_manager.current_window_size
    assert pair.feed(
        _data_frame(1, _message(b"w" * (window // 2 - 5)))
    )  # unacknowledged: half the window left
    frame = _data_frame(1, _message(b"w" * (window // 2 - 4)))  # one byte more than that
    assert receive_data_frame(pair.fast, frame) is None
    for server in (pair.fast, pair.plain):
        with pytest.raises(h2.exceptions.FlowControlError):
            server.receive_data(frame)


def test_window_updates_go_out_as_h2_would_send_them() -> None:
    """Acknowledging what the fast path read opens the windows with the same WINDOW_UPDATE frames."""
    pair = Pair()
    for _ in range(8):
        assert pair.feed(_data_frame(1, _message(b"v" * 900)))
        pair.acknowledge()
        pair.assert_same_state()


def test_data_on_a_stream_never_opened_falls_back() -> None:
    pair = Pair()
    frame = _data_frame(5, _message(b"?"))
    assert receive_data_frame(pair.fast, frame) is None
    with pytest.raises(h2.exceptions.ProtocolError):
        pair.fast.receive_data(frame)
