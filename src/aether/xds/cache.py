"""The snapshot cache: the latest snapshot of each node, and a way to wait for a newer one.

The latest snapshot wins: a stream that falls behind gets the newest snapshot, never a backlog, so a slow Envoy
never stalls whoever publishes.
"""

from __future__ import annotations

import attrs
import trio

from aether.core.snapshot import Snapshot


@attrs.frozen(kw_only=True)
class SnapshotCacheStatistics:
    """What the cache holds."""

    nodes: int
    """Nodes with a snapshot."""
    waiting_nodes: int
    """Nodes some stream is waiting on."""
    published: int
    """Snapshots published since the cache was made."""


class SnapshotCache:
    """Latest snapshot per node id. Owned by one task that publishes; read by every stream of that node."""

    def __init__(self) -> None:
        self._snapshots: dict[str, Snapshot] = {}
        self._changed: dict[str, trio.Event] = {}
        self._published = 0

    def set_snapshot(self, snapshot: Snapshot) -> None:
        """Publish `snapshot` for its node: every stream of that node wakes and sends what changed."""
        self._snapshots[snapshot.node_id] = snapshot
        self._published += 1
        event = self._changed.pop(snapshot.node_id, None)
        if event is not None:
            event.set()

    def get(self, node_id: str) -> Snapshot | None:
        """Return the node's current snapshot, or None."""
        return self._snapshots.get(node_id)

    async def wait_newer(self, node_id: str, *, seen: Snapshot | None) -> Snapshot:
        """Return the node's current snapshot as soon as it is not `seen` (at once if it already differs)."""
        while True:
            current = self._snapshots.get(node_id)
            if current is not None and current is not seen:
                return current
            event = self._changed.setdefault(node_id, trio.Event())
            await event.wait()

    def statistics(self) -> SnapshotCacheStatistics:
        """Return what the cache holds."""
        return SnapshotCacheStatistics(
            nodes=len(self._snapshots), waiting_nodes=len(self._changed), published=self._published
        )
