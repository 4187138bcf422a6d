"""Tests of aether.rpc.direct: pre-encoded messages sent from outside purerpc's send path, read by a bare h2 client
(which checks every frame), in order with what the handler yields, within the peer's flow-control window."""

from __future__ import annotations

import contextlib
import functools
import struct
import threading
from collections.abc import AsyncIterator, Callable, Iterator

import h2.events
import purerpc
import pytest
import trio
import trio.testing
from google.protobuf import wrappers_pb2

from aether.rpc import compat
from aether.rpc.direct import EncodedMessage, StreamSender, current_server_stream
from aether.rpc.listen import ListenAddress, serve_grpc
from tests.rpc.test_compat import RawH2Client

SERVICE_NAME = "aether.test.Echo"  # the path `RawH2Client.open` asks for


def send_service(
    handler: Callable[[wrappers_pb2.UInt32Value], AsyncIterator[EncodedMessage]],
) -> purerpc.Service:
    """The test service: `Send`, a count in, a stream of messages out, answered by `handler`."""
    service = purerpc.Service(SERVICE_NAME)
    signature = purerpc.RPCSignature(
        purerpc.Cardinality.UNARY_STREAM, wrappers_pb2.UInt32Value, wrappers_pb2.BytesValue
    )
    service.add_method("Send", handler, signature)
    return service


class Direct:
    """Send: `value` messages sent with `StreamSender.send_nowait` (each return value kept), then one yielded."""

    def __init__(self, *, size: int) -> None:
        self.size = size
        self.accepted: list[bool] = []

    def service(self) -> purerpc.Service:
        return send_service(self._send)

    async def _send(self, request: wrappers_pb2.UInt32Value) -> AsyncIterator[EncodedMessage]:
        stream = current_server_stream()
        assert stream is not None
        sender = StreamSender(stream)
        refused: list[bytes] = []
        for index in range(request.value):
            message = _message(index, size=self.size)
            # Once one is refused, the rest go after it (through the handler), to keep the order.
            accepted = not refused and sender.send_nowait([message])
            self.accepted.append(accepted)
            if not accepted:
                refused.append(message)
        for message in refused:
            yield EncodedMessage(message)
        yield EncodedMessage(_message(request.value, size=self.size))


def _message(index: int, *, size: int) -> bytes:
    return wrappers_pb2.BytesValue(value=bytes([index % 256]) * size).SerializeToString()


@contextlib.asynccontextmanager
async def serving(direct: Direct) -> AsyncIterator[ListenAddress]:
    async with serving_service(direct.service()) as address:
        yield address


@contextlib.asynccontextmanager
async def serving_service(service: purerpc.Service) -> AsyncIterator[ListenAddress]:
    async with trio.open_nursery() as nursery:
        address = await nursery.start(
            functools.partial(serve_grpc, [service], listen=ListenAddress.tcp(host="127.0.0.1", port=0))
        )
        yield address
        nursery.cancel_scope.cancel()


async def _receive_all(client: RawH2Client, stream_id: int) -> tuple[list[bytes], str]:
    """The gRPC messages of `stream_id` until its trailers, and the trailers' grpc-status."""
    body = b""
    while True:
        event = await client.wait_for(
            lambda event: (
                getattr(event, "stream_id", None) == stream_id
                and isinstance(event, h2.events.DataReceived | h2.events.TrailersReceived)
            )
        )
        if isinstance(event, h2.events.TrailersReceived):
            break
        body += event.data
    messages = []
    while body:
        compressed, length = struct.unpack(">?I", body[:5])
        assert not compressed
        messages.append(wrappers_pb2.BytesValue.FromString(body[5 : 5 + length]).value)
        body = body[5 + length :]
    return messages, dict(event.headers)["grpc-status"]


@pytest.mark.parametrize(
    ("size", "initial_window", "accepted"),
    [
        pytest.param(10, None, [True] * 5, id="all-sent-at-once"),
        # 40,000 bytes: three DATA frames each (the peer's largest frame is 16,384 bytes).
        pytest.param(
            40_000, None, [True, False, False, False, False], id="split-into-frames-until-the-window"
        ),
        # A 100-byte window takes two 47-byte messages; the third waits for the window in the handler.
        pytest.param(40, 100, [True, True, False, False, False], id="refused-past-the-window"),
    ],
)
async def test_messages_arrive_whole_and_in_order_within_the_window(
    size: int, initial_window: int | None, accepted: list[bool]
) -> None:
    """Five messages sent directly as far as the window allows, the rest and a last one through the handler: the
    client reads all six, in order, then status OK (h2 on the client checks every frame and window)."""
    direct = Direct(size=size)
    with trio.fail_after(30):
        async with (
            serving(direct) as address,
            RawH2Client.connect(address, initial_window=initial_window) as client,
        ):
            stream_id = await client.open("Send")
            await client.send(stream_id, wrappers_pb2.UInt32Value(value=5), end_stream=True)
            messages, status = await _receive_all(client, stream_id)
    assert messages == [bytes([index]) * size for index in range(6)]
    assert (direct.accepted, status) == (accepted, "0")


def test_there_is_no_current_stream_outside_a_handler() -> None:
    """Only a handler's task knows its stream."""
    assert current_server_stream() is None


@pytest.fixture
def through_the_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every batch goes to the send thread, even one connection's few bytes (written on the trio thread else)."""
    monkeypatch.setattr(compat, "_INLINE_LIMIT", 0)


class HeldSend:
    """Send: with the send thread held, one message sent with `send_nowait` (its bytes then wait in the thread:
    use `through_the_thread`), then `value` more yielded by the handler (with `wait`, once the first is in flight;
    without, in the same scheduler tick: one batch takes them all); `in_flight` tells when the first is in flight."""

    def __init__(self, *, wait: bool = True) -> None:
        self.wait = wait
        self.release = threading.Event()
        self.in_flight = trio.Event()
        self.outlet: compat._Outlet | None = None

    def service(self) -> purerpc.Service:
        return send_service(self._send)

    async def _send(self, request: wrappers_pb2.UInt32Value) -> AsyncIterator[EncodedMessage]:
        stream = current_server_stream()
        assert stream is not None
        compat._send_thread().call(self.release.wait)  # the thread writes nothing until released
        assert StreamSender(stream).send_nowait([_message(0, size=10)])
        outlet = getattr(stream._socket, compat._OUTLET_ATTRIBUTE)
        while self.wait and not outlet.in_flight:  # handed to the thread at the end of the scheduler tick
            await trio.lowlevel.checkpoint()
        self.outlet = outlet
        self.in_flight.set()
        for index in range(1, request.value + 1):
            yield EncodedMessage(_message(index, size=10))


@pytest.mark.usefixtures("through_the_thread")
@pytest.mark.parametrize("wait", [True, False], ids=["after-the-batch", "in-the-same-batch"])
async def test_what_the_handler_yields_while_the_send_thread_holds_earlier_bytes_goes_after_them(
    wait: bool,
) -> None:
    """Bytes for the send thread, then three messages yielded (purerpc's writer path) and the trailers, while the
    thread holds the first batch or before it was handed over: the writer task waits for the thread, and the
    client reads all four in order, then status OK."""
    held = HeldSend(wait=wait)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            address = await nursery.start(
                functools.partial(
                    serve_grpc, [held.service()], listen=ListenAddress.tcp(host="127.0.0.1", port=0)
                )
            )
            async with RawH2Client.connect(address) as client:
                stream_id = await client.open("Send")
                await client.send(stream_id, wrappers_pb2.UInt32Value(value=3), end_stream=True)
                await held.in_flight.wait()
                await trio.testing.wait_all_tasks_blocked()
                held.release.set()
                messages, status = await _receive_all(client, stream_id)
            nursery.cancel_scope.cancel()
    assert (messages, status) == ([bytes([index]) * 10 for index in range(4)], "0")


@pytest.mark.usefixtures("through_the_thread")
async def test_a_connection_closed_while_the_send_thread_holds_its_bytes_closes_after_writing_them() -> None:
    """The server shuts down while the send thread holds bytes of a connection: the connection's socket stays
    open (its descriptor cannot be reused by another connection) until the thread wrote them; the client reads
    them whole, then the connection ends."""
    held = HeldSend()
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            server = trio.CancelScope()

            async def run_server(*, task_status: trio.TaskStatus[ListenAddress]) -> None:
                with server:
                    await serve_grpc(
                        [held.service()],
                        listen=ListenAddress.tcp(host="127.0.0.1", port=0),
                        task_status=task_status,
                    )

            address = await nursery.start(run_server)
            async with RawH2Client.connect(address) as client:
                stream_id = await client.open("Send")
                await client.send(stream_id, wrappers_pb2.UInt32Value(value=0), end_stream=True)
                await held.in_flight.wait()
                server.cancel()
                await trio.testing.wait_all_tasks_blocked()  # every server task ended or waits for the thread
                assert held.outlet is not None
                assert held.outlet.closed  # its writer task ended: no send starts
                assert held.outlet.socket.fileno() != -1  # but the socket is open
                held.release.set()
                event = await client.wait_for(
                    lambda event: isinstance(event, h2.events.DataReceived) and event.stream_id == stream_id
                )
                received = event.data + await client.wait_closed()
    assert received.startswith(struct.pack(">?I", False, 12) + _message(0, size=10))
    assert held.outlet.socket.fileno() == -1


async def test_bytes_the_socket_does_not_take_are_given_back_and_sent_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """6 MB sent directly in one scheduler tick to a client that reads nothing for a while: the send thread's
    one non-blocking send writes what the socket takes, gives the rest back to the writer task (which waits for
    the socket), and the client then reads every message whole and in order, then status OK."""
    shortfalls: list[int] = []
    returned = trio.Event()
    upstream_sent = compat._sent

    def counting_sent(batch: compat._Batch, sent: list[int]) -> None:
        shortfalls.extend(len(data) - count for (_, data), count in zip(batch, sent, strict=True))
        returned.set()
        upstream_sent(batch, sent)

    monkeypatch.setattr(compat, "_sent", counting_sent)
    size, count = 100_000, 60
    direct = Direct(size=size)
    with trio.fail_after(60):
        async with (
            serving(direct) as address,
            RawH2Client.connect(address, initial_window=2**31 - 1) as client,
        ):
            client._connection.increment_flow_control_window(2**31 - 1 - 65_535)
            stream_id = await client.open("Send")
            await client.send(stream_id, wrappers_pb2.UInt32Value(value=count), end_stream=True)
            await returned.wait()  # the batch came back from the thread (the client has read nothing)
            messages, status = await _receive_all(client, stream_id)
    assert max(shortfalls) > 0  # the socket did not take the whole batch
    assert direct.accepted == [True] * count
    assert messages == [bytes([index % 256]) * size for index in range(count + 1)]
    assert status == "0"


class Batches:
    """Send: `value` messages of `size` bytes with `send_nowait` on each of `streams` open streams at once (one
    scheduler tick), once all `streams` have asked; then one yielded. `sent` is set once they are handed over."""

    def __init__(self, *, streams: int, size: int) -> None:
        self.size = size
        self.sent = trio.Event()
        self._senders: list[StreamSender] = []
        self._count = streams
        self._asked = trio.Event()

    def service(self) -> purerpc.Service:
        return send_service(self._send)

    async def _send(self, request: wrappers_pb2.UInt32Value) -> AsyncIterator[EncodedMessage]:
        stream = current_server_stream()
        assert stream is not None
        self._senders.append(StreamSender(stream))
        if len(self._senders) == self._count:
            for sender in self._senders:  # no checkpoint between them: one tick, one batch
                for index in range(request.value):
                    assert sender.send_nowait([_message(index, size=self.size)])
            self.sent.set()
            self._asked.set()
        await self._asked.wait()
        yield EncodedMessage(_message(request.value, size=self.size))


@contextlib.contextmanager
def _send_thread_held() -> Iterator[threading.Event]:
    """Hold the send thread (it writes nothing) until the event yielded is set, or the block ends."""
    release = threading.Event()
    compat._send_thread().call(release.wait)
    try:
        yield release
    finally:
        release.set()  # else the server's connections, closing, would wait for the thread for ever


@pytest.mark.parametrize(
    ("streams", "size", "inline"),
    [
        pytest.param(1, 10, True, id="one-connection-few-bytes-on-the-trio-thread"),
        pytest.param(3, 10, True, id="three-connections-few-bytes-each-on-the-trio-thread"),
        # Two messages of 65 bytes each (with the gRPC prefix and the frame header): over the limit set below.
        pytest.param(1, 60, False, id="one-connection-over-the-inline-limit-through-the-thread"),
        pytest.param(3, 60, False, id="three-connections-over-the-inline-limit-through-the-thread"),
    ],
)
async def test_a_connection_few_bytes_are_written_on_the_trio_thread_and_more_go_through_the_send_thread(
    streams: int, size: int, inline: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the send thread held, messages sent directly on `streams` connections in one tick: a connection's few
    bytes are written at once, however many connections the batch has (each client reads its messages, then
    status OK, while the thread is still held); a connection's bytes over `_INLINE_LIMIT` wait in the thread until
    it is released (each connection's bytes are in flight), then every client reads its messages in order."""
    monkeypatch.setattr(compat, "_INLINE_LIMIT", 100)
    batches = Batches(streams=streams, size=size)
    with trio.fail_after(30):
        async with serving_service(batches.service()) as address, contextlib.AsyncExitStack() as stack:
            release = stack.enter_context(_send_thread_held())
            clients = [await stack.enter_async_context(RawH2Client.connect(address)) for _ in range(streams)]
            stream_ids = []
            for client in clients:
                stream_ids.append(await client.open("Send"))
                await client.send(stream_ids[-1], wrappers_pb2.UInt32Value(value=2), end_stream=True)
            await batches.sent.wait()
            await trio.testing.wait_all_tasks_blocked()
            outlets = [getattr(sender._socket, compat._OUTLET_ATTRIBUTE) for sender in batches._senders]
            assert [outlet.in_flight for outlet in outlets] == [not inline] * streams
            if not inline:
                release.set()
            received = [
                await _receive_all(client, stream_id)
                for client, stream_id in zip(clients, stream_ids, strict=True)
            ]
    expected = [bytes([index]) * size for index in range(3)]
    assert received == [(expected, "0")] * streams
