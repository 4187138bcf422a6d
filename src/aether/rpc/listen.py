"""Where the gRPC server listens (`ListenAddress`), and `serve_grpc`, which serves purerpc services there.

A Unix socket (`ListenAddress.unix`) or TCP; TCP binds the one host it is given:
all interfaces only when asked for explicitly.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import functools
import ipaddress
import logging
import os
import socket
import ssl
import stat
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.streams.tls
import attrs
import purerpc
import purerpc.server
import trio
from purerpc.grpc_socket import GRPCStream
from purerpc.grpclib.config import GRPCConfiguration

from aether.rpc.compat import apply_purerpc_fixes
from aether.rpc.direct import CURRENT_STREAM
from aether.rpc.errors import InvalidListenAddressError, InvalidServeOptionError, ListenError

__all__ = [
    "DEFAULT_MAX_MESSAGE_LENGTH",
    "MAX_MESSAGE_LENGTH_LIMIT",
    "UNIX_SOCKET_MODE",
    "ListenAddress",
    "current_peer_certificate",
    "serve_grpc",
    "serve_unix_streams",
]

LOG = logging.getLogger("aether.rpc")

DEFAULT_MAX_MESSAGE_LENGTH = 32 * 2**20
"""The largest gRPC message received or sent (32 MiB), as purerpc's own default.

A CDS response for 10,000 clusters is about 1 MiB, so this leaves a wide margin; Envoy accepts larger ones.
"""

MAX_MESSAGE_LENGTH_LIMIT = 2**30 - 1
"""The largest `max_message_length` accepted.

purerpc advertises twice the limit as each stream's initial HTTP/2 window, and HTTP/2 caps windows at 2**31 - 1.
"""

UNIX_SOCKET_MODE = 0o660
"""Mode of the Unix socket: only its owner (the agent's user) and its group may connect."""

_MAX_UNIX_PATH_BYTES = 107
"""Linux's `sun_path` holds 108 bytes, the terminating NUL included."""

_ACCEPT_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
"""accept() errors that mean "out of resources for now": wait and retry, as `trio.serve_listeners` does."""

_ACCEPT_RETRY_SECONDS = 0.1
"""Pause after an accept() capacity error: long enough for a connection to close, short enough to go unnoticed."""

_TLS_HANDSHAKE_TIMEOUT = 10.0
"""Seconds a TLS client gets to finish its handshake: milliseconds normally; a stalled one must not hold a task."""

_PEER_CERTIFICATE: contextvars.ContextVar[bytes | None] = contextvars.ContextVar(
    "aether_peer_certificate", default=None
)


def current_peer_certificate() -> bytes | None:
    """Return the verified client certificate (DER) of the TLS connection whose request is being handled.

    None outside `serve_grpc(tls=...)` connections: plain TCP, Unix sockets, or a client that sent none.
    Set per connection before purerpc runs its handlers, so every handler task of the connection sees it.
    """
    return _PEER_CERTIFICATE.get()


_FORMS = "'unix:/absolute/path', 'ipv4:port', '[ipv6]:port' or ':port' (all interfaces)"


@attrs.frozen(kw_only=True)
class ListenAddress:
    """A Unix socket path, or a TCP host and port.

    Build one with `unix`, `tcp` or `parse`; `str()` gives the text `parse` reads back.
    """

    path: Path | None = None
    """The Unix socket's absolute path; None for TCP."""
    host: str | None = None
    """TCP: an IP address, or "" for all interfaces; None for a Unix socket."""
    port: int | None = None
    """TCP: 0..65535, where 0 asks for any free port; None for a Unix socket."""

    def __attrs_post_init__(self) -> None:
        reason = _violation(self.path, self.host, self.port)
        if reason is not None:
            raise InvalidListenAddressError(_format(self.path, self.host, self.port), reason=reason)

    @classmethod
    def unix(cls, path: Path) -> ListenAddress:
        """Return the address of the Unix socket at `path` (absolute, at most 107 bytes).

        Raises:
            InvalidListenAddressError: `path` is relative or too long.
        """
        return cls(path=path)

    @classmethod
    def tcp(cls, *, host: str, port: int) -> ListenAddress:
        """Return a TCP address: `host` is an IP address, or "" for all interfaces; `port` is 0..65535.

        Raises:
            InvalidListenAddressError: `host` is no IP address, or `port` is out of range.
        """
        return cls(host=host, port=port)

    @classmethod
    def parse(cls, text: str) -> ListenAddress:
        """Parse ``unix:/absolute/path``, ``ipv4:port``, ``[ipv6]:port`` or ``:port``.

        ``:port`` listens on all interfaces, as do ``0.0.0.0:port`` (IPv4) and ``[::]:port`` (IPv6);
        nothing else does. Host names are refused: a name can stand for several addresses, or change.

        Raises:
            InvalidListenAddressError: `text` is none of these forms; the message says which rule it breaks.
        """
        path: Path | None = None
        host: str | None = None
        port: int | None = None
        if text.startswith("unix:"):
            raw_path = text.removeprefix("unix:")
            if not raw_path:
                raise InvalidListenAddressError(text, reason="the unix socket path is empty")
            path = Path(raw_path)
        else:
            host, port = _parse_host_port(text)
        reason = _violation(path, host, port)
        if reason is not None:
            raise InvalidListenAddressError(text, reason=reason)
        return cls(path=path, host=host, port=port)

    def __str__(self) -> str:
        return _format(self.path, self.host, self.port)


def _parse_host_port(text: str) -> tuple[str, int]:
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket or not rest.startswith(":"):
            raise InvalidListenAddressError(text, reason=f"expected {_FORMS}")
        port_text = rest[1:]
        if ":" not in host:
            raise InvalidListenAddressError(
                text, reason=f"brackets are for ipv6 addresses only (got {host!r})"
            )
    else:
        host, colon, port_text = text.rpartition(":")
        if not colon:
            raise InvalidListenAddressError(text, reason=f"expected {_FORMS}")
        if ":" in host:
            if _is_ip_address(host):
                raise InvalidListenAddressError(
                    text, reason=f"an ipv6 address must be in brackets, as in '[::1]:18000' (got {host!r})"
                )
            raise InvalidListenAddressError(text, reason=f"expected {_FORMS}")
    if not (port_text.isascii() and port_text.isdigit()):
        raise InvalidListenAddressError(text, reason=f"port must be a decimal number (got {port_text!r})")
    return host, int(port_text)


def _violation(path: Path | None, host: str | None, port: int | None) -> str | None:
    """Return the rule the fields break, or None when they make an address."""
    if path is not None and host is None and port is None:
        if not path.is_absolute():
            return f"the unix socket path must be absolute (got {str(path)!r})"
        if "\0" in str(path):
            return "the unix socket path must not contain NUL"
        length = len(os.fsencode(path))
        if length > _MAX_UNIX_PATH_BYTES:
            return f"the unix socket path must be at most {_MAX_UNIX_PATH_BYTES} bytes (got {length!r})"
        return None
    if path is None and host is not None and port is not None:
        if host and not _is_ip_address(host):
            return f"host must be an ip address, or empty for all interfaces (got {host!r})"
        if not 0 <= port <= 65535:
            return f"port must be 0..65535 (got {port!r})"
        return None
    return "give either a unix socket path, or a host and a port"


def _is_ip_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _format(path: Path | None, host: str | None, port: int | None) -> str:
    if path is not None and host is None and port is None:
        return f"unix:{path}"
    if path is None and host is not None and port is not None:
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return f"path={path!r}, host={host!r}, port={port!r}"


async def serve_grpc(
    services: Sequence[purerpc.Service],
    *,
    listen: ListenAddress,
    max_message_length: int = DEFAULT_MAX_MESSAGE_LENGTH,
    tls: ssl.SSLContext | None = None,
    task_status: trio.TaskStatus[ListenAddress] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve `services` over gRPC (HTTP/2, without TLS unless `tls` is given) on `listen` until cancelled.

    Applies `aether.rpc.compat.apply_purerpc_fixes` first. Uses purerpc's `ConnectionHandler` but not its
    `Server.serve_async`, which binds all interfaces with SO_REUSEPORT (so a second server on the same port
    starts without error) and knows no Unix sockets.

    Args:
        services: The services to serve, each under its own name.
        listen: Where to listen. A Unix socket's parent directories are created; a stale socket file there
            (nobody listening) is replaced; the socket gets mode `UNIX_SOCKET_MODE`.
        max_message_length: The largest message received or sent, in bytes (1..`MAX_MESSAGE_LENGTH_LIMIT`).
            A larger one fails its stream with RESOURCE_EXHAUSTED (see `aether.rpc.errors.MessageTooLargeError`).
        tls: Serve TLS with this server context (it should offer ALPN "h2"); the verified client certificate
            of each connection is `current_peer_certificate()` inside its handlers. A failed handshake closes
            that connection only.
        task_status: Receives the address once it listens: `listen` itself, or for TCP port 0 the port chosen.

    Raises:
        InvalidServeOptionError: `max_message_length` is out of range, or two services have the same name.
        ListenError: Another server listens on the Unix socket, the path is not a socket, or binding failed.
        PurerpcVersionError: purerpc is not the version the fixes are for.

    Resource handling:
        The listening sockets close on return. A Unix socket file this call created is removed then,
        unless something else has replaced it meanwhile.

    Error handling:
        A failing connection is logged by purerpc (logger ``purerpc``) and closed; the others go on.
        accept() running out of file descriptors or memory is logged and retried after a pause.
    """
    handler = _connection_handler(services, max_message_length=max_message_length)
    if tls is not None:
        handler = functools.partial(_handle_tls, handler, tls)
    if listen.path is not None:
        await _serve_unix(handler, listen=listen, path=listen.path, task_status=task_status)
    else:
        await _serve_tcp(handler, listen=listen, task_status=task_status)


def _connection_handler(services: Sequence[purerpc.Service], *, max_message_length: int) -> Any:
    if not 1 <= max_message_length <= MAX_MESSAGE_LENGTH_LIMIT:
        raise InvalidServeOptionError(
            "max_message_length", rule=f"must be 1..{MAX_MESSAGE_LENGTH_LIMIT}", value=max_message_length
        )
    by_name: dict[str, purerpc.Service] = {}
    for service in services:
        if service.name in by_name:
            raise InvalidServeOptionError("services", rule="service names must be unique", value=service.name)
        by_name[service.name] = service
    apply_purerpc_fixes()
    handler = _ConnectionHandler(by_name, purerpc.Server(port=0))
    handler.config = GRPCConfiguration(client_side=False, max_message_length=max_message_length)
    return handler


class _ConnectionHandler(purerpc.server.ConnectionHandler):  # type: ignore[misc]  # purerpc is untyped
    """purerpc's, but each stream's handler task knows its stream (`aether.rpc.direct.current_server_stream`)."""

    async def request_received(self, stream: GRPCStream) -> None:
        CURRENT_STREAM.set(stream)  # this task is the stream's own: the value lives as long as the stream
        await super().request_received(stream)


async def _serve_tcp(
    handler: Any, *, listen: ListenAddress, task_status: trio.TaskStatus[ListenAddress]
) -> None:
    assert listen.host is not None
    assert listen.port is not None
    async with _listen_errors(listen):
        # local_host=None is anyio's "all interfaces, IPv4 and IPv6": only for an explicitly empty host.
        listener = await anyio.create_tcp_listener(local_host=listen.host or None, local_port=listen.port)
    async with listener:
        port: int = listener.extra(anyio.abc.SocketAttribute.local_port)
        sockets = [one for one in listener.listeners if isinstance(one, anyio.abc.SocketListener)]
        assert len(sockets) == len(listener.listeners), "anyio's TCP listeners are socket listeners"
        task_status.started(attrs.evolve(listen, port=port))
        await _serve_listeners(handler, sockets)


async def serve_unix_streams(
    handler: Callable[[anyio.abc.SocketStream], Awaitable[None]],
    *,
    path: Path,
    task_status: trio.TaskStatus[ListenAddress] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve each connection to the Unix socket `path` with `handler`, each in its own task, until cancelled.

    The socket is made as `serve_grpc` makes its own: mode `UNIX_SOCKET_MODE`, its directory created, a stale
    socket file replaced, one in use refused (`ListenError`), and the file removed on exit. The stream is closed
    after `handler` returns; a handler's exception ends the server (handle what a peer can cause).
    """
    listen = ListenAddress.unix(path)
    await _serve_unix(handler, listen=listen, path=path, task_status=task_status)


async def _serve_unix(
    handler: Any, *, listen: ListenAddress, path: Path, task_status: trio.TaskStatus[ListenAddress]
) -> None:
    async with _listen_errors(listen):
        await trio.to_thread.run_sync(_prepare_unix_path, path, str(listen))
        listener = await anyio.create_unix_listener(path, mode=UNIX_SOCKET_MODE)
    async with listener:
        # Synchronous on purpose, here and in `finally` (which runs when cancelled): quick syscalls, and no
        # checkpoint between creating the socket file and the `try` that removes it.
        created = os.lstat(path)
        try:
            task_status.started(listen)
            await _serve_listeners(handler, [listener])
        finally:
            with contextlib.suppress(FileNotFoundError):
                now = os.lstat(path)
                if (now.st_dev, now.st_ino) == (created.st_dev, created.st_ino):
                    os.unlink(path)


def _prepare_unix_path(path: Path, address: str) -> None:
    """Create the socket's directory; refuse a path in use or not a socket; remove a stale socket file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise ListenError(address, reason="the path exists and is not a socket")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.setblocking(False)
        result = probe.connect_ex(os.fspath(path))
    if result in (0, errno.EAGAIN):  # EAGAIN: someone listens, with a full backlog
        raise ListenError(address, reason="another server is listening on this socket")
    if result == errno.ECONNREFUSED:  # nobody listens: left over from a process that died
        path.unlink(missing_ok=True)
    elif result != errno.ENOENT:
        raise ListenError(address, reason=f"cannot tell whether the socket is in use: {os.strerror(result)}")


@contextlib.asynccontextmanager
async def _listen_errors(listen: ListenAddress) -> AsyncIterator[None]:
    """Translate the OSError of setting up a listener into `ListenError` (chained)."""
    try:
        yield
    except ListenError:
        raise
    except OSError as exc:
        raise ListenError(str(listen), reason=exc.strerror or str(exc)) from exc


async def _serve_listeners(handler: Any, listeners: Sequence[anyio.abc.SocketListener]) -> None:
    async with trio.open_nursery() as handler_nursery:
        for listener in listeners:
            handler_nursery.start_soon(_accept_forever, listener, handler, handler_nursery)


async def _handle_connection(handler: Any, stream: anyio.abc.SocketStream) -> None:
    # purerpc never closes the connection's socket (it waits for the garbage collector): close it here.
    async with stream:
        await handler(stream)


async def _handle_tls(handler: Any, context: ssl.SSLContext, stream: anyio.abc.ByteStream) -> None:
    """Finish the TLS handshake, remember the client's certificate for the handlers, then serve gRPC on it."""
    try:
        with trio.fail_after(_TLS_HANDSHAKE_TIMEOUT):
            wrapped = await anyio.streams.tls.TLSStream.wrap(
                stream, server_side=True, ssl_context=context, standard_compatible=False
            )
    except (OSError, ssl.SSLError, anyio.BrokenResourceError, anyio.EndOfStream, trio.TooSlowError) as exc:
        LOG.info("TLS handshake failed: %r", exc)
        return
    ssl_object = wrapped.extra(anyio.streams.tls.TLSAttribute.ssl_object)
    _PEER_CERTIFICATE.set(ssl_object.getpeercert(binary_form=True))
    # The TLS layer closes the socket stream under it (closed again by `_handle_connection`: a no-op).
    async with wrapped:
        await handler(wrapped)


async def _accept_forever(
    listener: anyio.abc.SocketListener, handler: Any, handler_nursery: trio.Nursery
) -> None:
    while True:
        try:
            stream = await listener.accept()
        except OSError as exc:
            if exc.errno not in _ACCEPT_CAPACITY_ERRNOS:
                raise
            LOG.error("accept failed on %r (%s); retrying in %s s", listener, exc, _ACCEPT_RETRY_SECONDS)
            await trio.sleep(_ACCEPT_RETRY_SECONDS)
            continue
        handler_nursery.start_soon(_handle_connection, handler, stream)
