"""A minimal HTTP/1.1 client on trio sockets: requests through Envoy's listeners, and Envoy's admin API."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import trio

__all__ = ["HttpReader", "HttpResponse", "http_get"]

_RECEIVE_SIZE = 65536
# One read per typical admin response; config dumps take a few.

_MAX_HEAD_SIZE = 65536
# A status line plus headers from Envoy or a test client is far smaller; more means a broken peer.

_STATUS_WITHOUT_BODY = frozenset({204, 304})


class HttpResponse(NamedTuple):
    """An HTTP response as `http_get` read it; unpacks as `status, headers, body`."""

    status: int
    """The status code."""
    headers: Mapping[str, str]
    """Header names in lower case; repeated headers are joined with `, `."""
    body: bytes
    """The body, with any chunked encoding removed."""


async def http_get(
    host: str,
    port: int,
    path: str,
    *,
    headers: Mapping[str, str] | None = None,
    # One request is the call site here: the deadline covers connect, send and read together (STYLE C5).
    timeout: float = 5.0,  # noqa: ASYNC109
) -> HttpResponse:
    """Send one `GET` over HTTP/1.1 on a fresh connection, such as through an Envoy listener.

    Args:
        host: The address to connect to.
        port: The port to connect to.
        path: The path and query.
        headers: Extra request headers; `Host` defaults to `host:port`.
        timeout: Seconds for the whole exchange.

    Returns:
        The response.

    Raises:
        OSError: If the connection is refused or breaks.
        ValueError: If the response is not well-formed HTTP/1.1.
        trio.TooSlowError: If the exchange takes longer than `timeout`.
    """
    with trio.fail_after(timeout):
        return await _get(host, port, path, headers=headers or {})


class HttpReader:
    """Reads HTTP/1.1 message heads and bodies from a byte stream (shared with `aether.demo.upstream`)."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self._stream = stream
        self._buffer = bytearray()

    async def read_head(self) -> tuple[str, dict[str, str]] | None:
        """Read a start line and headers.

        Returns:
            The start line and the headers (lower-case names, repeats joined with `, `), or None if the
            stream ended cleanly before the message began.

        Raises:
            ValueError: If the head is malformed, too large, or cut off.
        """
        start = 0
        while (index := self._buffer.find(b"\r\n\r\n", start)) < 0:
            if len(self._buffer) > _MAX_HEAD_SIZE:
                raise ValueError(f"http head: must be under {_MAX_HEAD_SIZE} bytes (got {len(self._buffer)})")
            start = max(0, len(self._buffer) - 3)
            if not await self._fill():
                if self._buffer:
                    raise ValueError(f"http head: stream ended mid-head (got {bytes(self._buffer[:200])!r})")
                return None
        lines = self._buffer[:index].decode("latin-1").split("\r\n")
        del self._buffer[: index + 4]
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon or not name or name != name.strip():
                raise ValueError(f"http head: header must be 'name: value' (got {line!r})")
            key = name.lower()
            headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
        return lines[0], headers

    async def read_body(self, headers: Mapping[str, str], *, delimited_by_close: bool) -> bytes:
        """Read the body that `headers` announce.

        Args:
            headers: The message's headers, as `read_head` returned them.
            delimited_by_close: True for a response without a length (the body runs to the end of the stream);
                False for a request, whose body is then empty.

        Raises:
            ValueError: If the length is malformed or the stream ends early.
        """
        if "chunked" in headers.get("transfer-encoding", "").lower():
            return await self._read_chunked()
        if "content-length" in headers:
            text = headers["content-length"]
            if not text.isascii() or not text.isdigit():
                raise ValueError(f"http body: content-length must be a decimal number (got {text!r})")
            return await self._read_exactly(int(text))
        if delimited_by_close:
            while await self._fill():
                pass
            return self._take(len(self._buffer))
        return b""

    async def _read_chunked(self) -> bytes:
        body = bytearray()
        while True:
            size_line = await self._read_line()
            size_text = size_line.split(";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise ValueError(f"http body: chunk size must be hexadecimal (got {size_line!r})") from None
            if size == 0:
                # Trailers, if any, end with an empty line.
                while await self._read_line():
                    pass
                return bytes(body)
            body += await self._read_exactly(size)
            if await self._read_line():
                raise ValueError("http body: a chunk must end with CRLF")

    async def _read_line(self) -> str:
        while (index := self._buffer.find(b"\r\n")) < 0:
            await self._fill_or_fail()
        line = self._take(index + 2)
        return line[:-2].decode("latin-1")

    async def _read_exactly(self, size: int) -> bytes:
        while len(self._buffer) < size:
            await self._fill_or_fail()
        return self._take(size)

    def _take(self, size: int) -> bytes:
        taken = bytes(self._buffer[:size])
        del self._buffer[:size]
        return taken

    async def _fill_or_fail(self) -> None:
        if not await self._fill():
            raise ValueError(f"http body: stream ended mid-body (after {len(self._buffer)} buffered bytes)")

    async def _fill(self) -> bool:
        chunk = await self._stream.receive_some(_RECEIVE_SIZE)
        self._buffer += chunk
        return bool(chunk)


async def _get(host: str, port: int, path: str, *, headers: Mapping[str, str]) -> HttpResponse:
    request_headers = {"host": f"{host}:{port}", "connection": "close", "user-agent": "aether-testing"}
    request_headers.update((name.lower(), value) for name, value in headers.items())
    head = f"GET {path} HTTP/1.1\r\n" + "".join(
        f"{name}: {value}\r\n" for name, value in request_headers.items()
    )
    stream = await trio.open_tcp_stream(host, port)
    async with stream:
        await stream.send_all(head.encode("latin-1") + b"\r\n")
        reader = HttpReader(stream)
        message = await reader.read_head()
        if message is None:
            raise ValueError(f"http response from {host}:{port}: connection closed before a status line")
        status_line, response_headers = message
        version, _, rest = status_line.partition(" ")
        code = rest[:3]
        if not version.startswith("HTTP/1.") or not code.isascii() or not code.isdigit():
            raise ValueError(f"http response from {host}:{port}: malformed status line (got {status_line!r})")
        status = int(code)
        body = (
            b""
            if status in _STATUS_WITHOUT_BODY or status < 200
            else await reader.read_body(response_headers, delimited_by_close=True)
        )
    return HttpResponse(status=status, headers=response_headers, body=body)
