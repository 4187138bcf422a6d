"""The memory backend: the registry kept only in memory, for tests (lost on restart).

It can also play a store that changes underneath the registrar (`push`), is read-only (`writable=False`),
or goes away and comes back (`set_available`), so the server's handling of each is testable without a network.
"""

from __future__ import annotations

import math

import trio

from aether.registrar.backends.base import BackendFeed, StoreAvailability
from aether.registrar.errors import StoreUnavailableError
from aether.registrar.snapshot import Change, Mutation, RegistrySnapshot, empty_snapshot

__all__ = ["MemoryBackend"]

LOCATION = "memory"


class MemoryBackend:
    """Holds the last snapshot it was given, and every mutation applied, in memory.

    Args:
        snapshot: What `load` returns first (an empty registry at version 0 by default).
        writable: False plays a read-only store: the registrar refuses writes and never calls `apply`.
    """

    def __init__(self, *, snapshot: RegistrySnapshot | None = None, writable: bool = True) -> None:
        self.snapshot = empty_snapshot() if snapshot is None else snapshot
        """The registry as last stored."""
        self.applied: list[Mutation] = []
        """Every mutation stored, in order."""
        self._writable = writable
        self._available = True
        self._reason = ""
        # Unbounded: `push` is called from tests that must not block on the registrar's owner task.
        self._feed_send, self._feed_receive = trio.open_memory_channel[BackendFeed](math.inf)

    @property
    def description(self) -> str:
        """`memory` (nothing else identifies it)."""
        return LOCATION

    @property
    def writable(self) -> bool:
        """Whether the registrar may write (the `writable` argument)."""
        return self._writable

    async def load(self) -> RegistrySnapshot:
        """Return the registry as last stored."""
        await trio.lowlevel.checkpoint()
        return self.snapshot

    async def apply(
        self, mutation: Mutation, *, snapshot: RegistrySnapshot, changes: tuple[Change, ...]
    ) -> None:
        """Remember `mutation` and the registry after it.

        Raises:
            StoreUnavailableError: `set_available(False)` was called (and not undone); nothing is stored.
        """
        del changes
        await trio.lowlevel.checkpoint()
        if not self._available:
            raise StoreUnavailableError(LOCATION, reason=self._reason)
        self.snapshot = snapshot
        self.applied.append(mutation)

    def push(self, item: BackendFeed) -> None:
        """Report a change (or an availability change) as if another writer had made it to the store."""
        self._feed_send.send_nowait(item)

    def set_available(self, *, available: bool, reason: str = "") -> None:
        """Make the store (un)reachable: `apply` fails while unavailable, and the registrar is told."""
        self._available = available
        self._reason = reason
        self.push(StoreAvailability(available=available, reason=reason))

    async def serve_updates(
        self,
        updates: trio.abc.SendChannel[BackendFeed],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Forward what `push` and `set_available` report, in order, until cancelled."""
        task_status.started()
        async for item in self._feed_receive:
            await updates.send(item)
