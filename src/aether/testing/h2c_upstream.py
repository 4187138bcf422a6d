"""An HTTP/2 cleartext (h2c, prior knowledge) test backend: what a mesh cluster dials with identity none.

It answers every request 200 with its own name, and echoes what it received (method, path, authority) in response
headers, so a routing test reads where a request landed and how it was rewritten from the response alone. It also
records every request, so a test can see traffic no client waited for (mirrors).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import attrs
import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import trio

__all__ = [
    "ECHO_AUTHORITY_HEADER",
    "ECHO_METHOD_HEADER",
    "ECHO_PATH_HEADER",
    "H2cRequest",
    "H2cUpstream",
    "open_h2c_upstream",
    "serve_h2c_upstream",
]

ECHO_METHOD_HEADER = "x-echo-method"
ECHO_PATH_HEADER = "x-echo-path"
ECHO_AUTHORITY_HEADER = "x-echo-authority"
UPSTREAM_NAME_HEADER = "x-upstream-name"
_RECEIVE_SIZE = 65536


@attrs.frozen(kw_only=True)
class H2cRequest:
    """One request an `H2cUpstream` received."""

    method: str
    path: str
    authority: str
    headers: Mapping[str, str]
    """Every header but the pseudo-headers, names in lower case."""


class H2cUpstream:
    """A running h2c backend; `serve_h2c_upstream` hands it to the parent once it listens."""

    def __init__(self, *, name: str, host: str, port: int, delay: float) -> None:
        self.name = name
        self.host = host
        self.port = port
        self.delay = delay
        """Seconds every answer waits (a slow backend, for timeout tests)."""
        self.answer_delays: list[float] = []
        """Seconds each of the next answers waits instead of `delay`, in order (a backend slow only at first)."""
        self.resets = 0
        """How many of the next requests are answered by resetting their stream (INTERNAL_ERROR) once received:
        the request reached the backend and got no answer."""
        self.requests: list[H2cRequest] = []
        """Every request received, in order (appended before the answer is sent)."""
        self._cancel_scope = trio.CancelScope()

    def stop(self) -> None:
        """Stop listening and drop every connection."""
        self._cancel_scope.cancel()

    async def _handle(self, stream: trio.SocketStream) -> None:
        connection = h2.connection.H2Connection(
            config=h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        )
        connection.initiate_connection()
        # Invariant: the h2 state machine is shared by the answering tasks of one connection; the lock keeps
        # each change plus its send atomic.
        lock = trio.Lock()
        async with stream, trio.open_nursery() as answers:
            try:
                await stream.send_all(connection.data_to_send())
                pending: dict[int, H2cRequest] = {}
                while data := await stream.receive_some(_RECEIVE_SIZE):
                    async with lock:
                        events = connection.receive_data(data)
                        await stream.send_all(connection.data_to_send())
                    for event in events:
                        if isinstance(event, h2.events.RequestReceived):
                            pending[event.stream_id] = _request(event.headers)
                        elif isinstance(event, h2.events.DataReceived):
                            async with lock:
                                connection.acknowledge_received_data(
                                    event.flow_controlled_length, event.stream_id
                                )
                                await stream.send_all(connection.data_to_send())
                        elif isinstance(event, h2.events.StreamEnded) and event.stream_id in pending:
                            request = pending.pop(event.stream_id)
                            self.requests.append(request)
                            if self.resets:
                                self.resets -= 1
                                async with lock:
                                    connection.reset_stream(
                                        event.stream_id, error_code=h2.errors.ErrorCodes.INTERNAL_ERROR
                                    )
                                    await stream.send_all(connection.data_to_send())
                                continue
                            delay = self.answer_delays.pop(0) if self.answer_delays else self.delay
                            answers.start_soon(
                                self._answer, connection, lock, stream, event.stream_id, request, delay
                            )
            except (trio.BrokenResourceError, h2.exceptions.ProtocolError):
                pass  # the peer went away or spoke something else: a normal end for a test backend
            answers.cancel_scope.cancel()

    async def _answer(
        self,
        connection: h2.connection.H2Connection,
        lock: trio.Lock,
        stream: trio.SocketStream,
        stream_id: int,
        request: H2cRequest,
        delay: float,
    ) -> None:
        await trio.sleep(delay)
        body = f"{self.name}\n".encode()
        headers = [
            (":status", "200"),
            ("content-type", "text/plain"),
            ("content-length", str(len(body))),
            (UPSTREAM_NAME_HEADER, self.name),
            (ECHO_METHOD_HEADER, request.method),
            (ECHO_PATH_HEADER, request.path),
            (ECHO_AUTHORITY_HEADER, request.authority),
        ]
        async with lock:
            try:
                connection.send_headers(stream_id, headers)
                connection.send_data(stream_id, body, end_stream=True)
                await stream.send_all(connection.data_to_send())
            except (
                trio.BrokenResourceError,
                trio.ClosedResourceError,
                h2.exceptions.StreamClosedError,
                h2.exceptions.StreamIDTooLowError,
            ):
                # The request was reset (a timeout), or the connection went away. A stream the client reset
                # long enough ago is forgotten by h2, which then takes its id for a new stream opened too late
                # (StreamIDTooLowError), not for a closed one: either way, nobody waits for this answer.
                return


def _request(headers: list[tuple[str, str]]) -> H2cRequest:
    pseudo = {name: value for name, value in headers if name.startswith(":")}
    return H2cRequest(
        method=pseudo.get(":method", ""),
        path=pseudo.get(":path", ""),
        authority=pseudo.get(":authority", ""),
        headers={name: value for name, value in headers if not name.startswith(":")},
    )


async def serve_h2c_upstream(
    *,
    name: str,
    host: str,
    port: int = 0,
    delay: float = 0.0,
    task_status: trio.TaskStatus[H2cUpstream] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve h2c on `host:port` until cancelled or stopped, answering every request 200 with `name`."""
    listeners = await trio.open_tcp_listeners(port, host=host)
    bound: int = listeners[0].socket.getsockname()[1]
    upstream = H2cUpstream(name=name, host=host, port=bound, delay=delay)
    with upstream._cancel_scope:
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, upstream._handle, listeners)
            task_status.started(upstream)


@asynccontextmanager
async def open_h2c_upstream(
    *, name: str, host: str, port: int = 0, delay: float = 0.0
) -> AsyncIterator[H2cUpstream]:
    """Run an h2c upstream for the duration of the block (see `serve_h2c_upstream`)."""
    async with trio.open_nursery() as nursery:
        upstream: H2cUpstream = await nursery.start(
            functools.partial(serve_h2c_upstream, name=name, host=host, port=port, delay=delay)
        )
        try:
            yield upstream
        finally:
            upstream.stop()
