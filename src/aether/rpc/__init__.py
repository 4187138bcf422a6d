"""gRPC plumbing every role shares: listen addresses and `serve_grpc`, the client dialer and unary calls, mutual TLS
with SVIDs, the purerpc compatibility layer, and jittered backoff."""

from __future__ import annotations

from aether.rpc.backoff import DEFAULT_BACKOFF, Backoff
from aether.rpc.calls import (
    CONNECT_TIMEOUT,
    CONNECTION_ERRORS,
    KEEPALIVE_IDLE,
    KEEPALIVE_INTERVAL,
    KEEPALIVE_PROBES,
    open_grpc_socket,
    unary_call,
)
from aether.rpc.compat import PURERPC_VERSION, apply_purerpc_fixes
from aether.rpc.direct import EncodedMessage, StreamSender, current_server_stream
from aether.rpc.errors import (
    InvalidListenAddressError,
    InvalidServeOptionError,
    ListenError,
    MessageTooLargeError,
    PeerGoneError,
    PurerpcVersionError,
    RpcError,
)
from aether.rpc.listen import (
    DEFAULT_MAX_MESSAGE_LENGTH,
    MAX_MESSAGE_LENGTH_LIMIT,
    UNIX_SOCKET_MODE,
    ListenAddress,
    current_peer_certificate,
    serve_grpc,
    serve_unix_streams,
)
from aether.rpc.tls import client_tls_context, server_tls_context

__all__ = [
    "CONNECTION_ERRORS",
    "CONNECT_TIMEOUT",
    "DEFAULT_BACKOFF",
    "DEFAULT_MAX_MESSAGE_LENGTH",
    "KEEPALIVE_IDLE",
    "KEEPALIVE_INTERVAL",
    "KEEPALIVE_PROBES",
    "MAX_MESSAGE_LENGTH_LIMIT",
    "PURERPC_VERSION",
    "UNIX_SOCKET_MODE",
    "Backoff",
    "EncodedMessage",
    "InvalidListenAddressError",
    "InvalidServeOptionError",
    "ListenAddress",
    "ListenError",
    "MessageTooLargeError",
    "PeerGoneError",
    "PurerpcVersionError",
    "RpcError",
    "StreamSender",
    "apply_purerpc_fixes",
    "client_tls_context",
    "current_peer_certificate",
    "current_server_stream",
    "open_grpc_socket",
    "serve_grpc",
    "serve_unix_streams",
    "server_tls_context",
    "unary_call",
]
