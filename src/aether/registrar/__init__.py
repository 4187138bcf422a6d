"""The registrar: the mesh's endpoint registry, its versioned snapshot and history, and the WatchEndpoints stream."""

from __future__ import annotations

from aether.registrar.backends import (
    CHECKPOINT_EVERY,
    Backend,
    EmbeddedBackend,
    MemoryBackend,
    open_embedded_backend,
)
from aether.registrar.broadcaster import (
    DEFAULT_WATCHER_BUFFER,
    Broadcaster,
    BroadcasterStatistics,
    Watcher,
    WatcherEnd,
)
from aether.registrar.client import (
    DEFAULT_BACKOFF,
    Backoff,
    RegistrarClient,
    RegistrarClientStatistics,
    WatchProtocolError,
    serve_registrar_client,
)
from aether.registrar.errors import InvalidRequestError, RegistrarError, StoreError
from aether.registrar.server import SERVICE_NAME, Registrar, RegistrarStatistics, serve_registrar
from aether.registrar.snapshot import (
    ALL_SERVICES,
    HISTORY_LIMIT,
    Change,
    ChangeKind,
    EndpointRegistered,
    EndpointsUnregistered,
    Mutation,
    RegistrySnapshot,
    ServiceFilter,
    apply,
    empty_snapshot,
    resync,
    snapshot_of,
    visible,
)

__all__ = [
    "ALL_SERVICES",
    "CHECKPOINT_EVERY",
    "DEFAULT_BACKOFF",
    "DEFAULT_WATCHER_BUFFER",
    "HISTORY_LIMIT",
    "SERVICE_NAME",
    "Backend",
    "Backoff",
    "Broadcaster",
    "BroadcasterStatistics",
    "Change",
    "ChangeKind",
    "EmbeddedBackend",
    "EndpointRegistered",
    "EndpointsUnregistered",
    "InvalidRequestError",
    "MemoryBackend",
    "Mutation",
    "Registrar",
    "RegistrarClient",
    "RegistrarClientStatistics",
    "RegistrarError",
    "RegistrarStatistics",
    "RegistrySnapshot",
    "ServiceFilter",
    "StoreError",
    "WatchProtocolError",
    "Watcher",
    "WatcherEnd",
    "apply",
    "empty_snapshot",
    "open_embedded_backend",
    "resync",
    "serve_registrar",
    "serve_registrar_client",
    "snapshot_of",
    "visible",
]
