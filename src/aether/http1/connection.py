"""`HttpConnection`: one HTTP/1.1 connection on a trio stream, client or server side, as h11 frames it; `http_request`.

h11 is sans-IO (as h2, and as our xDS stream machines): it turns bytes into events and events into bytes, and keeps
the rules of framing (lengths, chunks, keep-alive, `HTTP/1.0` peers, bodies that run to the close) in one tested
place. This module only moves the bytes, so every HTTP/1 client and server here reads and writes through it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from http import HTTPStatus
from typing import Any, NamedTuple

import attrs
import h11
import trio

__all__ = [
    "HttpConnection",
    "HttpProtocolError",
    "HttpRequest",
    "HttpResponse",
    "http_get",
    "http_request",
]

RECEIVE_SIZE = 65536
"""Bytes asked of the stream per read: one read per typical admin response; config dumps take a few."""

MAX_HEAD_SIZE = 65536
"""A request or status line plus headers from Envoy or a client of ours is far smaller; more means a broken peer
(h11 then raises, with the status hint 431)."""

Headers = Sequence[tuple[str, str]] | Mapping[str, str]
"""Headers to send: pairs in order, or a mapping."""


@attrs.frozen(kw_only=True)
class HttpProtocolError(ValueError):
    """The peer's bytes are not HTTP/1.1 (or it closed mid-message); a `ValueError`, as any malformed input."""

    peer: str
    """Who sent them (`127.0.0.1:8080`, or `client` for a server's peer)."""
    problem: str
    """What was wrong, in h11's words."""
    status_hint: int = 400
    """The status a server answers with (431 for a head over `MAX_HEAD_SIZE`)."""

    def __str__(self) -> str:
        return f"http from {self.peer}: {self.problem}"


@attrs.frozen(kw_only=True)
class HttpRequest:
    """A request as `HttpConnection.receive_request` read it."""

    method: str
    """`GET`, `POST`, ..."""
    target: str
    """The path and query (or an absolute URI, for a proxy)."""
    headers: Mapping[str, str]
    """Header names in lower case; repeated headers are joined with `, `."""
    body: bytes
    """The body, with any chunked encoding removed."""
    http_version: str
    """`1.1` or `1.0`."""


class HttpResponse(NamedTuple):
    """A response as `HttpConnection.receive_response` read it; unpacks as `status, headers, body`."""

    status: int
    """The status code."""
    headers: Mapping[str, str]
    """Header names in lower case; repeated headers are joined with `, `."""
    body: bytes
    """The body, with any chunked encoding removed."""


class HttpConnection:
    """One HTTP/1.1 connection on `stream`: send and receive whole messages (or h11 events, to stream a body).

    After a full exchange, `next_cycle()` says whether the connection may carry another (keep-alive) and readies it.

    Error handling:
        The peer's protocol errors become `HttpProtocolError` (a `ValueError`); a stream that breaks raises what
        the stream raises (`trio.BrokenResourceError`, `OSError`).
    """

    def __init__(
        self, stream: trio.abc.Stream, *, client: bool, peer: str, max_head_size: int = MAX_HEAD_SIZE
    ) -> None:
        self.stream = stream
        """The byte stream underneath."""
        self.peer = peer
        """The peer's name in error messages."""
        self._h11 = h11.Connection(
            h11.CLIENT if client else h11.SERVER, max_incomplete_event_size=max_head_size
        )

    @property
    def machine(self) -> h11.Connection:
        """The h11 state machine (for its states, such as `their_state is h11.MUST_CLOSE`)."""
        return self._h11

    async def next_event(self) -> Any:
        """Return h11's next event, reading from the stream as it needs (never `h11.NEED_DATA`).

        Raises:
            HttpProtocolError: The peer broke the protocol.
        """
        while True:
            with self._peer_errors():
                event = self._h11.next_event()
            if event is not h11.NEED_DATA:
                return event
            self._h11.receive_data(bytes(await self.stream.receive_some(RECEIVE_SIZE)))

    async def send(
        self, *events: h11.Request | h11.Response | h11.InformationalResponse | h11.Data | h11.EndOfMessage
    ) -> None:
        """Send `events` in one write."""
        data = b"".join(self._h11.send(event) or b"" for event in events)
        await self.stream.send_all(data)

    async def send_request(self, method: str, target: str, *, headers: Headers, body: bytes = b"") -> None:
        """Send a whole request; a body gets a `Content-Length` (unless `headers` frame it)."""
        pairs = _pairs(headers)
        if body and not any(name.lower() in ("content-length", "transfer-encoding") for name, _ in pairs):
            pairs.append(("content-length", str(len(body))))
        await self.send(
            h11.Request(method=method, target=target, headers=pairs), *_body(body), h11.EndOfMessage()
        )

    async def send_response(self, status: int, *, headers: Headers, body: bytes = b"") -> None:
        """Send a whole response with `Content-Length` set (unless `headers` frame it), and the status's phrase."""
        try:
            reason = HTTPStatus(status).phrase.encode()
        except ValueError:
            reason = b""  # a code the standard library does not name
        pairs = _pairs(headers)
        if not any(name.lower() in ("content-length", "transfer-encoding") for name, _ in pairs):
            pairs.append(("content-length", str(len(body))))
        await self.send(
            h11.Response(status_code=status, headers=pairs, reason=reason), *_body(body), h11.EndOfMessage()
        )

    async def receive_request(self) -> HttpRequest | None:
        """Read a whole request; None if the peer closed (or stopped) before it began one.

        Raises:
            HttpProtocolError: The request is malformed, its head too large, or it was cut off.
        """
        head = await self.next_event()
        if isinstance(head, h11.ConnectionClosed) or head is h11.PAUSED:
            return None
        assert isinstance(head, h11.Request), f"an h11 server before a request got {head!r}; this is a bug"
        return HttpRequest(
            method=head.method.decode("ascii"),
            target=head.target.decode("ascii", "replace"),
            headers=_headers(head.headers),
            body=await self._receive_body(),
            http_version=head.http_version.decode("ascii"),
        )

    async def receive_response_head(self) -> h11.Response:
        """Read a response head, skipping `1xx` ones.

        Raises:
            HttpProtocolError: The head is malformed, or the peer closed before one.
        """
        while True:
            event = await self.next_event()
            if isinstance(event, h11.Response):
                return event
            if not isinstance(event, h11.InformationalResponse):
                raise HttpProtocolError(
                    peer=self.peer,
                    problem=f"connection closed before a status line (got {type(event).__name__})",
                )

    async def receive_response(self) -> HttpResponse:
        """Read a whole response (head and body).

        Raises:
            HttpProtocolError: The response is malformed or cut off.
        """
        head = await self.receive_response_head()
        return HttpResponse(
            status=head.status_code, headers=_headers(head.headers), body=await self._receive_body()
        )

    def next_cycle(self) -> bool:
        """After a full exchange: ready the connection for another and return True, or False when it must close."""
        if self._h11.our_state is h11.DONE and self._h11.their_state is h11.DONE:
            self._h11.start_next_cycle()
            return True
        return False

    async def _receive_body(self) -> bytes:
        body = bytearray()
        while isinstance(event := await self.next_event(), h11.Data):
            body += event.data
        assert isinstance(event, h11.EndOfMessage), f"h11 ended a body with {event!r}; this is a bug"
        return bytes(body)

    @contextlib.contextmanager
    def _peer_errors(self) -> Iterator[None]:
        try:
            yield
        except h11.RemoteProtocolError as exc:
            raise HttpProtocolError(
                peer=self.peer, problem=str(exc), status_hint=exc.error_status_hint
            ) from exc


async def http_request(
    host: str,
    port: int,
    method: str,
    target: str,
    *,
    headers: Mapping[str, str] | None = None,
    body: bytes = b"",
    # One request is the call site here: the deadline covers connect, send and read together (STYLE C5).
    timeout: float = 5.0,  # noqa: ASYNC109
) -> HttpResponse:
    """Send one request over HTTP/1.1 on a fresh connection (closed after it), such as through an Envoy listener.

    Args:
        host: The address to connect to.
        port: The port to connect to.
        method: The method (`GET`, `POST`, ...).
        target: The path and query.
        headers: Extra request headers; `Host` defaults to `host:port`.
        body: The request body, sent with a `Content-Length` (also 0 for an empty body but `GET`'s).
        timeout: Seconds for the whole exchange.

    Returns:
        The response.

    Raises:
        OSError: If the connection is refused or breaks.
        HttpProtocolError: If the response is not well-formed HTTP/1.1 (a `ValueError`).
        trio.TooSlowError: If the exchange takes longer than `timeout`.
    """
    request_headers = {"host": f"{host}:{port}", "connection": "close", "user-agent": "aether"}
    if method != "GET":
        request_headers["content-length"] = str(len(body))
    request_headers.update((name.lower(), value) for name, value in (headers or {}).items())
    with trio.fail_after(timeout):
        stream = await trio.open_tcp_stream(host, port)
        async with stream:
            connection = HttpConnection(stream, client=True, peer=f"{host}:{port}")
            await connection.send_request(method, target, headers=request_headers, body=body)
            return await connection.receive_response()


async def http_get(
    host: str,
    port: int,
    path: str,
    *,
    headers: Mapping[str, str] | None = None,
    timeout: float = 5.0,  # noqa: ASYNC109 (as http_request's)
) -> HttpResponse:
    """`http_request(host, port, "GET", path, ...)`: one `GET` on a fresh connection."""
    return await http_request(host, port, "GET", path, headers=headers, timeout=timeout)


def _pairs(headers: Headers) -> list[tuple[str, str]]:
    return list(headers.items()) if isinstance(headers, Mapping) else list(headers)


def _body(body: bytes) -> tuple[h11.Data, ...]:
    return (h11.Data(data=body),) if body else ()


def _headers(pairs: Sequence[tuple[bytes, bytes]]) -> dict[str, str]:
    """Lower-case names (h11 gives them so), values decoded as Latin-1, repeats joined with `, ` (RFC 9110 5.3)."""
    headers: dict[str, str] = {}
    for name, value in pairs:
        key, text = name.decode("latin-1"), value.decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return headers
