"""The xDS adapter: the ADS server, the gRPC listener it runs on, and the purerpc compatibility layer."""

from __future__ import annotations

from aether.xds.cache import SnapshotCache, SnapshotCacheStatistics
from aether.xds.compat import PURERPC_VERSION, apply_purerpc_fixes
from aether.xds.errors import (
    InvalidListenAddressError,
    InvalidServeOptionError,
    ListenError,
    MessageTooLargeError,
    PeerGoneError,
    PurerpcVersionError,
    XdsError,
)
from aether.xds.listen import (
    DEFAULT_MAX_MESSAGE_LENGTH,
    DEFAULT_XDS_SOCKET,
    MAX_MESSAGE_LENGTH_LIMIT,
    UNIX_SOCKET_MODE,
    ListenAddress,
    serve_grpc,
)
from aether.xds.protocol import ProtocolError, StreamOutput, TypeStatus, TypeStatusRow
from aether.xds.server import StreamStatus, XdsServer, XdsServerStatistics

__all__ = [
    "DEFAULT_MAX_MESSAGE_LENGTH",
    "DEFAULT_XDS_SOCKET",
    "MAX_MESSAGE_LENGTH_LIMIT",
    "PURERPC_VERSION",
    "UNIX_SOCKET_MODE",
    "InvalidListenAddressError",
    "InvalidServeOptionError",
    "ListenAddress",
    "ListenError",
    "MessageTooLargeError",
    "PeerGoneError",
    "ProtocolError",
    "PurerpcVersionError",
    "SnapshotCache",
    "SnapshotCacheStatistics",
    "StreamOutput",
    "StreamStatus",
    "TypeStatus",
    "TypeStatusRow",
    "XdsError",
    "XdsServer",
    "XdsServerStatistics",
    "apply_purerpc_fixes",
    "serve_grpc",
]
