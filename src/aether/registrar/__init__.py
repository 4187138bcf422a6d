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
    "DEFAULT_WATCHER_BUFFER",
    "HISTORY_LIMIT",
    "SERVICE_NAME",
    "Backend",
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
    "RegistrarError",
    "RegistrarStatistics",
    "RegistrySnapshot",
    "ServiceFilter",
    "StoreError",
    "Watcher",
    "WatcherEnd",
    "apply",
    "empty_snapshot",
    "open_embedded_backend",
    "resync",
    "serve_registrar",
    "snapshot_of",
    "visible",
]
