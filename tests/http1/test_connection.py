"""`aether.http1`: h11 framing on trio streams, both sides, and the one-shot `http_request`."""

from __future__ import annotations

import functools

import pytest
import trio
import trio.testing

from aether.http1 import HttpConnection, HttpProtocolError, HttpRequest, HttpResponse, http_get, http_request


async def _answer_with(raw: bytes) -> HttpResponse:
    """Send a GET over an in-memory pair and read `raw` as the server's answer (the server then closes)."""
    client_stream, server_stream = trio.testing.memory_stream_pair()
    client = HttpConnection(client_stream, client=True, peer="server")
    await client.send_request("GET", "/", headers={"host": "x"})
    await server_stream.send_all(raw)
    await server_stream.aclose()
    return await client.receive_response()


async def test_a_chunked_body_is_joined_and_its_trailers_skipped() -> None:
    """Chunked bodies (Envoy's admin API uses them) are joined, and trailers are skipped."""
    response = await _answer_with(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nwiki\r\n5;x=y\r\npedia\r\n0\r\nt: 1\r\n\r\n"
    )

    assert response == HttpResponse(status=200, headers={"transfer-encoding": "chunked"}, body=b"wikipedia")


async def test_a_body_without_length_runs_to_the_close_and_repeated_headers_are_joined() -> None:
    """An HTTP/1.0-style body ends when the peer closes; repeated header values are joined with `, `."""
    response = await _answer_with(b"HTTP/1.1 200 OK\r\nA: 1\r\na: 2\r\n\r\nto the end")

    assert response == HttpResponse(status=200, headers={"a": "1, 2"}, body=b"to the end")


async def test_a_malformed_or_cut_response_is_a_protocol_error() -> None:
    """A garbled status line and a body cut short raise `HttpProtocolError`, a `ValueError` naming the peer."""
    with pytest.raises(HttpProtocolError, match=r"^http from server: .*status line"):
        await _answer_with(b"HTCPCP/1.0 418\r\n\r\n")
    with pytest.raises(
        ValueError, match=r"^http from server: peer closed connection without sending complete"
    ):
        await _answer_with(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nab")
    with pytest.raises(
        HttpProtocolError,
        match=r"^http from server: can.t handle event type ConnectionClosed when role=SERVER",
    ):
        await _answer_with(b"")


async def test_a_server_reads_keep_alive_requests_then_sees_the_close() -> None:
    """Two pipelined requests are read one after the other; a clean close after them reads as None."""
    client_stream, server_stream = trio.testing.memory_stream_pair()
    await client_stream.send_all(
        b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\nhiGET /b HTTP/1.0\r\n\r\n"
    )
    await client_stream.send_eof()
    server = HttpConnection(server_stream, client=False, peer="client")

    first = await server.receive_request()
    await server.send_response(204, headers={})
    assert server.next_cycle()
    second = await server.receive_request()
    await server.send_response(200, headers={}, body=b"ok")

    assert first == HttpRequest(
        method="POST",
        target="/a",
        headers={"host": "x", "content-length": "2"},
        body=b"hi",
        http_version="1.1",
    )
    assert second == HttpRequest(method="GET", target="/b", headers={}, body=b"", http_version="1.0")
    assert not server.next_cycle()  # an HTTP/1.0 client: the connection closes after its answer
    answers = await client_stream.receive_some()
    assert answers.startswith(b"HTTP/1.1 204 No Content\r\n")


async def test_a_head_over_the_limit_is_refused_with_the_status_hint_431() -> None:
    """A server reading a head longer than `max_head_size` raises with the hint 431."""
    client_stream, server_stream = trio.testing.memory_stream_pair()
    await client_stream.send_all(b"GET / HTTP/1.1\r\nx: " + b"y" * 200)
    server = HttpConnection(server_stream, client=False, peer="client", max_head_size=100)

    with pytest.raises(HttpProtocolError) as caught:
        await server.receive_request()

    assert caught.value.status_hint == 431


async def test_http_request_sends_a_body_and_http_get_reads_the_answer() -> None:
    """`http_request` sends the method, body and headers on a fresh connection; `http_get` is its GET."""
    seen: list[HttpRequest] = []

    async def serve(stream: trio.SocketStream) -> None:
        async with stream:
            connection = HttpConnection(stream, client=False, peer="client")
            request = await connection.receive_request()
            assert request is not None
            seen.append(request)
            await connection.send_response(201, headers={"x-seen": request.method}, body=request.body)

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(functools.partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        posted = await http_request("127.0.0.1", port, "POST", "/p", headers={"Host": "svc"}, body=b"data")
        got = await http_get("127.0.0.1", port, "/g?q=1")
        nursery.cancel_scope.cancel()

    assert (posted.status, posted.headers["x-seen"], posted.body) == (201, "POST", b"data")
    assert (got.status, got.headers["x-seen"], got.body) == (201, "GET", b"")
    assert [(request.method, request.target, request.headers["host"]) for request in seen] == [
        ("POST", "/p", "svc"),
        ("GET", "/g?q=1", f"127.0.0.1:{port}"),
    ]
