"""Registry backends: the `Backend` interface, the embedded (local directory) store, and the memory one."""

from __future__ import annotations

from aether.registrar.backends.base import Backend, BackendFeed, StoreAvailability
from aether.registrar.backends.embedded import CHECKPOINT_EVERY, EmbeddedBackend, open_embedded_backend
from aether.registrar.backends.memory import MemoryBackend

__all__ = [
    "CHECKPOINT_EVERY",
    "Backend",
    "BackendFeed",
    "EmbeddedBackend",
    "MemoryBackend",
    "StoreAvailability",
    "open_embedded_backend",
]
