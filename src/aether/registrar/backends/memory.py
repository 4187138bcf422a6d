"""The memory backend: the registry kept only in memory, for tests and `aether demo` (lost on restart)."""

from __future__ import annotations

import trio

from aether.registrar.snapshot import Change, Mutation, RegistrySnapshot, empty_snapshot

__all__ = ["MemoryBackend"]


class MemoryBackend:
    """Holds the last snapshot it was given, and every mutation applied, in memory.

    Args:
        snapshot: What `load` returns first (an empty registry at version 0 by default).
    """

    def __init__(self, *, snapshot: RegistrySnapshot | None = None) -> None:
        self.snapshot = empty_snapshot() if snapshot is None else snapshot
        """The registry as last stored."""
        self.applied: list[Mutation] = []
        """Every mutation stored, in order."""

    async def load(self) -> RegistrySnapshot:
        """Return the registry as last stored."""
        await trio.lowlevel.checkpoint()
        return self.snapshot

    async def apply(
        self, mutation: Mutation, *, snapshot: RegistrySnapshot, changes: tuple[Change, ...]
    ) -> None:
        """Remember `mutation` and the registry after it."""
        del changes
        await trio.lowlevel.checkpoint()
        self.snapshot = snapshot
        self.applied.append(mutation)
