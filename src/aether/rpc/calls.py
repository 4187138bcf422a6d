"""The client side of gRPC over purerpc: dialing a target (TCP or Unix socket, optionally TLS) and unary calls.

purerpc's own client speaks only plain TCP, so every client of ours (the agent's registrar watch and registrations,
the CNI plugin's call to the agent) dials with `open_grpc_socket` and runs purerpc's protocol on the stream.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
from collections.abc import AsyncIterator
from typing import Any, TypeVar

import anyio
import anyio.abc
import anyio.streams.tls
import h2.exceptions
import trio
from google.protobuf.message import Message
from purerpc.grpc_proto import GRPCProtoSocket
from purerpc.grpclib.config import GRPCConfiguration
from purerpc.grpclib.exceptions import GRPCError
from purerpc.wrappers import extract_message_from_singleton_stream

from aether.rpc.compat import apply_purerpc_fixes
from aether.rpc.listen import DEFAULT_MAX_MESSAGE_LENGTH, ListenAddress

__all__ = [
    "CONNECTION_ERRORS",
    "CONNECT_TIMEOUT",
    "KEEPALIVE_IDLE",
    "KEEPALIVE_INTERVAL",
    "KEEPALIVE_PROBES",
    "open_grpc_socket",
    "unary_call",
]

ResponseT = TypeVar("ResponseT", bound=Message)

CONNECT_TIMEOUT = 5.0
"""Seconds to establish a connection: loopback or in-cluster takes milliseconds, and a blackholed address must
not hold a client for the kernel's two-minute SYN timeout."""

CONNECTION_ERRORS: tuple[type[Exception], ...] = (
    OSError,  # connect refused, reset, unreachable; TimeoutError from `open_grpc_socket`
    GRPCError,  # any non-OK status (purerpc.RpcFailedError), protocol errors, PeerGoneError
    anyio.BrokenResourceError,
    anyio.EndOfStream,
    anyio.ClosedResourceError,
    h2.exceptions.ProtocolError,
)
"""What a call or stream over a broken connection raises: the caller backs off and dials again."""

KEEPALIVE_IDLE = 10
"""Seconds a TCP connection may be idle before the kernel probes it."""
KEEPALIVE_INTERVAL = 5
"""Seconds between probes; after `KEEPALIVE_PROBES` unanswered ones the connection fails and the client redials."""
KEEPALIVE_PROBES = 3
# So a peer whose host vanished (a crash, a partition) is noticed within about 25 s of silence, instead of the
# kernel's two hours; a peer process that dies is noticed at once anyway (its kernel resets the stream).
# Not an HTTP/2 PING: purerpc drops PING acknowledgements (`GRPCConnection._ping_acknowledged`), so a hung but
# connected peer process is not detected this way.


def _keep_alive(sock: socket.socket) -> None:
    """Turn on TCP keepalive probes (and a matching bound on unacknowledged sends)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, KEEPALIVE_IDLE)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, KEEPALIVE_INTERVAL)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, KEEPALIVE_PROBES)
    timeout_ms = (KEEPALIVE_IDLE + KEEPALIVE_INTERVAL * KEEPALIVE_PROBES) * 1000
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, timeout_ms)


@contextlib.asynccontextmanager
async def open_grpc_socket(
    target: ListenAddress, *, tls: ssl.SSLContext | None = None
) -> AsyncIterator[GRPCProtoSocket]:
    """Dial `target` (TCP or Unix socket), with TLS when given `tls`, and run a client-side purerpc connection on it.

    Raises:
        TimeoutError: No connection within `CONNECT_TIMEOUT`.
        OSError: The connection was refused or failed.
    """
    apply_purerpc_fixes()
    connection: anyio.abc.ByteStream
    try:
        with trio.fail_after(CONNECT_TIMEOUT):
            if target.path is not None:
                connection = await anyio.connect_unix(target.path)
            else:
                assert target.host is not None
                assert target.port is not None
                connection = await anyio.connect_tcp(target.host or "127.0.0.1", target.port)
            if tls is not None:
                connection = await anyio.streams.tls.TLSStream.wrap(
                    connection, server_side=False, ssl_context=tls, standard_compatible=False
                )
    except trio.TooSlowError:
        raise TimeoutError(f"{target}: not connected within {CONNECT_TIMEOUT} s") from None
    config = GRPCConfiguration(client_side=True, max_message_length=DEFAULT_MAX_MESSAGE_LENGTH)
    # purerpc never closes the socket it is given: close it here.
    async with connection, GRPCProtoSocket(config, connection) as grpc_socket:
        if target.path is None:
            # After purerpc's socket wrapper, which sets its own keepalive (5 min idle) on every TCP socket.
            _keep_alive(connection.extra(anyio.abc.SocketAttribute.raw_socket))
        yield grpc_socket


async def unary_call(
    grpc_socket: GRPCProtoSocket,
    *,
    service: str,
    method: str,
    request: Message,
    response_type: type[ResponseT],
    scheme: str = "http",
    authority: str = "localhost",
    metadata: tuple[tuple[str, str], ...] = (),
) -> ResponseT:
    """Call `service`/`method` with `request` (and custom `metadata`) on `grpc_socket`; return its one response.

    Raises:
        GRPCError: The call ended with a status other than OK (purerpc's error for that status).
    """
    stream: Any = await grpc_socket.start_request(
        scheme, service, method, request.DESCRIPTOR.full_name, authority, custom_metadata=metadata
    )
    stream.expect_message_type(response_type)
    await stream.send_message(request)
    await stream.close()
    response = await extract_message_from_singleton_stream(stream)
    assert isinstance(response, response_type), f"{service}/{method} answered {type(response).__name__}"
    return response
