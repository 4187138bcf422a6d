"""The h2c test backend (`aether.testing.h2c_upstream`) as an HTTP/2 client sees it, on loopback."""

from __future__ import annotations

import h2.config
import h2.connection
import h2.events
import trio

from aether.testing.h2c_upstream import open_h2c_upstream

HOST = "127.0.0.1"


def _request(client: h2.connection.H2Connection, stream_id: int) -> None:
    headers = [(":method", "GET"), (":path", "/"), (":scheme", "http"), (":authority", "web.example")]
    client.send_headers(stream_id, headers, end_stream=True)


async def _answer_of(stream: trio.SocketStream, client: h2.connection.H2Connection, stream_id: int) -> str:
    """Read until stream `stream_id`'s response headers arrive; return their `:status`."""
    with trio.fail_after(10):
        while True:
            data = await stream.receive_some(65536)
            assert data, "the backend closed the connection"
            events = client.receive_data(data)
            await stream.send_all(client.data_to_send())
            for event in events:
                if isinstance(event, h2.events.ResponseReceived) and event.stream_id == stream_id:
                    status: str = dict(event.headers)[":status"]
                    return status


async def test_a_late_answer_to_a_stream_the_client_reset_is_dropped_and_the_connection_serves_on() -> None:
    """A request reset by the client, then a newer one: h2 forgets the reset stream, so the late answer's stream id
    counts as too low (`StreamIDTooLowError`). The answer is dropped; the connection serves the next request."""
    async with open_h2c_upstream(name="alpha", host=HOST) as upstream:
        # Stream 1 answers late, stream 3 at once, stream 5 after stream 1's answer was attempted.
        upstream.answer_delays = [0.2, 0.0, 0.5]
        client = h2.connection.H2Connection(
            config=h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        )
        client.initiate_connection()
        async with await trio.open_tcp_stream(HOST, upstream.port) as stream:
            _request(client, 1)
            client.reset_stream(1)
            _request(client, 3)
            await stream.send_all(client.data_to_send())
            assert await _answer_of(stream, client, 3) == "200"
            _request(client, 5)
            await stream.send_all(client.data_to_send())
            assert await _answer_of(stream, client, 5) == "200"
        assert len(upstream.requests) == 3
