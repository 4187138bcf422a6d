"""The snapshot cache: the latest snapshot of each node, and a way to wait for a newer one.

The latest snapshot wins: a stream that falls behind gets the newest snapshot, never a backlog, so a slow Envoy
never stalls whoever publishes.
"""

from __future__ import annotations

import attrs

from aether.core.snapshot import Snapshot
from aether.sync import LatestValue


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
        self._snapshots: dict[str, LatestValue[Snapshot | None]] = {}
        """Each node's latest snapshot; a node some stream waits on before its first snapshot holds None."""
        self._published = 0

    def set_snapshot(self, snapshot: Snapshot) -> None:
        """Publish `snapshot` for its node: every stream of that node wakes and sends what changed."""
        self._cell(snapshot.node_id).set(snapshot)
        self._published += 1

    def get(self, node_id: str) -> Snapshot | None:
        """Return the node's current snapshot, or None."""
        cell = self._snapshots.get(node_id)
        return None if cell is None else cell.value

    async def wait_newer(self, node_id: str, *, seen: Snapshot | None) -> Snapshot:
        """Return the node's current snapshot as soon as it is not `seen` (at once if it already differs)."""
        current = await self._cell(node_id).wait_value(
            lambda current: current is not None and current is not seen
        )
        assert current is not None
        return current

    def statistics(self) -> SnapshotCacheStatistics:
        """Return what the cache holds."""
        return SnapshotCacheStatistics(
            nodes=sum(1 for cell in self._snapshots.values() if cell.value is not None),
            waiting_nodes=sum(1 for cell in self._snapshots.values() if cell.statistics().tasks_waiting),
            published=self._published,
        )

    def _cell(self, node_id: str) -> LatestValue[Snapshot | None]:
        cell = self._snapshots.get(node_id)
        if cell is None:
            cell = self._snapshots[node_id] = LatestValue(None)
        return cell
