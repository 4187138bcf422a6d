"""The registrar: the mesh's endpoint registry, its versioned snapshot and history, and the WatchEndpoints stream."""

from __future__ import annotations

from aether.registrar.authorization import agent_spiffe_id
from aether.registrar.backends import (
    CHECKPOINT_EVERY,
    Backend,
    BackendFeed,
    EmbeddedBackend,
    StoreAvailability,
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
    RegistrarClient,
    RegistrarClientStatistics,
    WatchScope,
    serve_registrar_client,
)
from aether.registrar.errors import (
    InvalidRequestError,
    PermissionRefusedError,
    RegistrarError,
    StoreError,
    StoreUnavailableError,
)
from aether.registrar.gc_pacing import serve_gc_pacing
from aether.registrar.server import SERVICE_NAME, WRITE_WAIT, Registrar, RegistrarStatistics, serve_registrar
from aether.registrar.snapshot import (
    ALL_SERVICES,
    HISTORY_LIMIT,
    Change,
    ChangeKind,
    EndpointRegistered,
    EndpointsReplaced,
    EndpointsUnregistered,
    EndpointsUpdated,
    Mutation,
    RegistrySnapshot,
    ServiceFilter,
    StoreUpdate,
    apply,
    apply_update,
    empty_snapshot,
    resync,
    snapshot_of,
    visible,
)
from aether.registrar.watch_machine import SyncKind, WatchMachine, WatchOutput, WatchPhase, WatchProtocolError

__all__ = [
    "ALL_SERVICES",
    "CHECKPOINT_EVERY",
    "DEFAULT_WATCHER_BUFFER",
    "HISTORY_LIMIT",
    "SERVICE_NAME",
    "WRITE_WAIT",
    "Backend",
    "BackendFeed",
    "Broadcaster",
    "BroadcasterStatistics",
    "Change",
    "ChangeKind",
    "EmbeddedBackend",
    "EndpointRegistered",
    "EndpointsReplaced",
    "EndpointsUnregistered",
    "EndpointsUpdated",
    "InvalidRequestError",
    "Mutation",
    "PermissionRefusedError",
    "Registrar",
    "RegistrarClient",
    "RegistrarClientStatistics",
    "RegistrarError",
    "RegistrarStatistics",
    "RegistrySnapshot",
    "ServiceFilter",
    "StoreAvailability",
    "StoreError",
    "StoreUnavailableError",
    "StoreUpdate",
    "SyncKind",
    "WatchMachine",
    "WatchOutput",
    "WatchPhase",
    "WatchProtocolError",
    "WatchScope",
    "Watcher",
    "WatcherEnd",
    "agent_spiffe_id",
    "apply",
    "apply_update",
    "empty_snapshot",
    "open_embedded_backend",
    "resync",
    "serve_gc_pacing",
    "serve_registrar",
    "serve_registrar_client",
    "snapshot_of",
    "visible",
]
