"""The admin endpoint serves JSON documents on a Unix socket (mode 0660) and `aether status` renders them."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
import trio
import trio.testing

from aether.core.snapshot import SHORT_NAMES, TYPE_ORDER
from aether.plane.admin import REQUEST_TIMEOUT, serve_admin
from aether.plane.admin_client import NACKED, STATUS_COLUMNS, fetch_admin, render_status
from aether.xds.protocol import TypeStatus

DOCUMENT = {
    "streams": [
        {
            "streamId": 1,
            "nodeId": "node-a",
            "mode": "delta",
            "types": [
                {"type": "CDS", "status": "SYNCED", "ackedVersion": "v1", "sentVersion": "v1", "error": ""},
                {
                    "type": "LDS",
                    "status": "NACKED",
                    "ackedVersion": "v1",
                    "sentVersion": "v2",
                    "error": "bad port",
                },
            ],
        }
    ]
}


async def test_the_admin_socket_serves_documents_and_refuses_unknown_paths(tmp_path: Path) -> None:
    """GET /status returns the document; an unknown path is a 404 naming the known ones; the socket is 0660."""
    path = tmp_path / "run" / "admin.sock"
    async with trio.open_nursery() as nursery:
        await nursery.start(
            lambda task_status: serve_admin(
                path=path, documents={"/status": lambda: DOCUMENT}, task_status=task_status
            )
        )
        assert stat.S_IMODE(path.stat().st_mode) == 0o660
        assert await trio.to_thread.run_sync(fetch_admin, path, "/status") == DOCUMENT
        with pytest.raises(ValueError, match=r"^admin '/nope' answered b'HTTP/1.1 404 Not Found'"):
            await trio.to_thread.run_sync(fetch_admin, path, "/nope")
        nursery.cancel_scope.cancel()
    assert not path.exists()


def test_status_renders_one_row_per_stream_and_the_nack_errors() -> None:
    """Columns per type in ADS order; a type the stream never asked for shows '-'; NACK errors follow."""
    assert render_status(DOCUMENT) == [
        "NODE    STREAM  MODE   CDS     EDS  LDS     RDS  SDS",
        "node-a  1       DELTA  SYNCED  -    NACKED  -    -",
        "node-a stream 1 LDS NACKED: bad port",
    ]


def test_the_clients_columns_and_nack_status_are_the_servers() -> None:
    """The light client spells the type columns and NACKED itself; they are the snapshot's and the server's."""
    assert (
        tuple(SHORT_NAMES[type_url] for type_url in TYPE_ORDER),
        TypeStatus.NACKED.value,
    ) == (STATUS_COLUMNS, NACKED)


async def _exchange(path: Path, *chunks: bytes) -> bytes:
    """Send `chunks` one by one on a fresh connection to the admin socket; return all it answers until it closes."""
    stream = await trio.open_unix_socket(str(path))
    async with stream:
        for chunk in chunks:
            await stream.send_all(chunk)
            await trio.testing.wait_all_tasks_blocked()
        answer = b""
        while data := await stream.receive_some(65536):
            answer += data
    return answer


@pytest.mark.parametrize(
    ("chunks", "status_line", "error"),
    [
        pytest.param(
            (b"GET /sta", b"tus HTTP/1.1\r\nHost: x\r\n", b"\r\n"),
            b"HTTP/1.1 200 OK",
            None,
            id="a-request-in-pieces-is-answered",
        ),
        pytest.param(
            (b"POST /status HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",),
            b"HTTP/1.1 404 Not Found",
            "not found: '/status'; try one of ['/status']",
            id="a-method-other-than-get-is-not-found",
        ),
        pytest.param(
            (b"this is not http\r\n\r\n",),
            b"HTTP/1.1 400 Bad Request",
            "bad request: illegal request line: bytearray(b'this is not http')",
            id="bytes-that-are-no-request-are-a-bad-request",
        ),
        pytest.param(
            (b"GET /status HTTP/1.1\r\nHost: x\r\nX-Junk: " + b"j" * 9000,),
            b"HTTP/1.1 431 Request Header Fields Too Large",
            "bad request: Receive buffer too long",
            id="a-head-over-the-limit-is-refused",
        ),
    ],
)
async def test_the_admin_socket_parses_requests_with_h11(
    tmp_path: Path, chunks: tuple[bytes, ...], status_line: bytes, error: str | None
) -> None:
    """Requests are parsed by h11: pieces are joined, and bad ones get their 4xx with a JSON error naming why."""
    path = tmp_path / "admin.sock"
    async with trio.open_nursery() as nursery:
        await nursery.start(
            lambda task_status: serve_admin(
                path=path, documents={"/status": lambda: DOCUMENT}, task_status=task_status
            )
        )
        answer = await _exchange(path, *chunks)
        nursery.cancel_scope.cancel()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0] == status_line
    assert json.loads(body) == (DOCUMENT if error is None else {"error": error})


async def test_a_client_that_sends_nothing_gets_a_timeout(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    """A stuck client holds its task for `REQUEST_TIMEOUT` seconds only, and is told 408; one that leaves, nothing."""
    del autojump_clock
    path = tmp_path / "admin.sock"
    async with trio.open_nursery() as nursery:
        await nursery.start(
            lambda task_status: serve_admin(
                path=path, documents={"/status": lambda: DOCUMENT}, task_status=task_status
            )
        )
        silent = await trio.open_unix_socket(str(path))
        async with silent:
            answer = b""
            while data := await silent.receive_some(65536):
                answer += data
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.split(b"\r\n")[0] == b"HTTP/1.1 408 Request Timeout"
        assert json.loads(body) == {"error": f"no request within {REQUEST_TIMEOUT} s"}
        leaving = await trio.open_unix_socket(str(path))
        await leaving.send_eof()
        assert await leaving.receive_some(65536) == b""
        await leaving.aclose()
        nursery.cancel_scope.cancel()
