"""Registry backends: the `Backend` interface, and the embedded (local directory) store."""

from __future__ import annotations

from aether.registrar.backends.base import Backend, BackendFeed, StoreAvailability
from aether.registrar.backends.embedded import CHECKPOINT_EVERY, EmbeddedBackend, open_embedded_backend

__all__ = [
    "CHECKPOINT_EVERY",
    "Backend",
    "BackendFeed",
    "EmbeddedBackend",
    "StoreAvailability",
    "open_embedded_backend",
]
