"""The xDS adapter: the ADS server (SotW and Delta stream machines, and the server that pumps them), its snapshot
cache, and the per-stream status documents."""

from __future__ import annotations

from aether.xds.cache import SnapshotCache, SnapshotCacheStatistics
from aether.xds.encoding import EncodedResources, EncodedResponse
from aether.xds.errors import XdsError
from aether.xds.protocol import ProtocolError, StreamMachine, StreamOutput, TypeStatus, TypeStatusRow
from aether.xds.server import StreamStatus, XdsServer, XdsServerStatistics

__all__ = [
    "EncodedResources",
    "EncodedResponse",
    "ProtocolError",
    "SnapshotCache",
    "SnapshotCacheStatistics",
    "StreamMachine",
    "StreamOutput",
    "StreamStatus",
    "TypeStatus",
    "TypeStatusRow",
    "XdsError",
    "XdsServer",
    "XdsServerStatistics",
]
