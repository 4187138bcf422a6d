"""A tiny HTTP/1.1 backend that answers 200 and names itself: the demo's pods run it, and tests route to it."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import attrs
import h11
import trio

from aether.core.project.names import LOOPBACK
from aether.http1 import HttpConnection, HttpProtocolError

__all__ = [
    "UPSTREAM_NAME_HEADER",
    "HttpUpstream",
    "HttpUpstreamStatistics",
    "open_http_upstream",
    "serve_http_upstream",
]

UPSTREAM_NAME_HEADER = "x-upstream-name"
"""The response header that carries the upstream's name."""


@attrs.frozen(kw_only=True)
class HttpUpstreamStatistics:
    """What an `HttpUpstream` has served so far."""

    requests: int
    """Requests answered."""
    connections: int
    """Connections accepted; Envoy reuses upstream connections, so this is usually smaller."""
    paths: tuple[str, ...]
    """The request targets, in the order they were answered."""


class HttpUpstream:
    """A running upstream; `serve_http_upstream` hands it to the parent once it listens."""

    def __init__(self, *, name: str, host: str, port: int, body: bytes) -> None:
        self.name = name
        """The name the upstream answers with."""
        self.host = host
        """The address it listens on."""
        self.port = port
        """The port it listens on."""
        self.body = body
        """The body of every response."""
        self._cancel_scope = trio.CancelScope()
        self._requests = 0
        self._connections = 0
        self._paths: list[str] = []

    @property
    def address(self) -> tuple[str, int]:
        """`(host, port)`, ready for `make_load_assignment`."""
        return self.host, self.port

    def statistics(self) -> HttpUpstreamStatistics:
        """Return the requests and connections served so far."""
        return HttpUpstreamStatistics(
            requests=self._requests, connections=self._connections, paths=tuple(self._paths)
        )

    def stop(self) -> None:
        """Stop listening and drop every open connection; `serve_http_upstream` then returns."""
        self._cancel_scope.cancel()

    async def _handle(self, stream: trio.SocketStream) -> None:
        try:
            await self._serve_connection(stream)
        except trio.BrokenResourceError:
            # The client went away mid-exchange: a normal end for a backend.
            return

    async def _serve_connection(self, stream: trio.SocketStream) -> None:
        # Invariant: trio runs these handlers on one thread, and the counters change only between checkpoints.
        self._connections += 1
        async with stream:
            connection = HttpConnection(stream, client=False, peer="client")
            try:
                while await self._answer_one(connection):
                    pass
            except HttpProtocolError as exc:
                await connection.send_response(
                    exc.status_hint, headers=[("connection", "close")], body=f"{exc}\n".encode()
                )

    async def _answer_one(self, connection: HttpConnection) -> bool:
        """Answer one request; return whether the connection stays open for another."""
        request = await connection.receive_request()
        if request is None:
            return False
        self._requests += 1
        self._paths.append(request.target)
        # h11 knows when the client asked to close (`connection: close`, or HTTP/1.0) and must close then.
        keep_alive = connection.machine.their_state is not h11.MUST_CLOSE
        headers = [
            ("content-type", "text/plain"),
            (UPSTREAM_NAME_HEADER, self.name),
            ("connection", "keep-alive" if keep_alive else "close"),
        ]
        await connection.send_response(200, headers=headers, body=self.body)
        return connection.next_cycle()


async def serve_http_upstream(
    *,
    name: str = "upstream",
    host: str = LOOPBACK,
    port: int = 0,
    body: bytes | None = None,
    listeners: Sequence[trio.SocketListener] | None = None,
    task_status: trio.TaskStatus[HttpUpstream] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve HTTP/1.1 until cancelled or stopped, answering every request with 200 and `body`.

    Args:
        name: The upstream's name, sent in the `x-upstream-name` header and the default body.
        host: The address to listen on.
        port: The port to listen on; 0 picks a free one.
        body: The response body; `hello from <name>` by default.
        listeners: Listening sockets made elsewhere (such as inside another network namespace); when given,
            `host` and `port` only name them.
        task_status: Receives the `HttpUpstream` once it listens.
    """
    if listeners is None:
        listeners = await trio.open_tcp_listeners(port, host=host)
    bound_port: int = listeners[0].socket.getsockname()[1]
    upstream = HttpUpstream(
        name=name, host=host, port=bound_port, body=f"hello from {name}".encode() if body is None else body
    )
    with upstream._cancel_scope:
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, upstream._handle, listeners)
            task_status.started(upstream)


@asynccontextmanager
async def open_http_upstream(
    *,
    name: str = "upstream",
    host: str = LOOPBACK,
    port: int = 0,
    body: bytes | None = None,
) -> AsyncIterator[HttpUpstream]:
    """Run `serve_http_upstream` for the duration of the block.

    Args:
        name: The upstream's name, sent in the `x-upstream-name` header and the default body.
        host: The address to listen on.
        port: The port to listen on; 0 picks a free one.
        body: The response body; `hello from <name>` by default.

    Yields:
        The listening upstream; `stop()` it to make it vanish before the block ends.
    """
    async with trio.open_nursery() as nursery:
        upstream: HttpUpstream = await nursery.start(
            functools.partial(serve_http_upstream, name=name, host=host, port=port, body=body)
        )
        try:
            yield upstream
        finally:
            upstream.stop()
