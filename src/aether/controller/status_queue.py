"""Which objects a reconcile diffs against their computed status: those observed changed since the last reconcile,
and those whose computed status the view changed (`GatewayProjector.status_changes`); every object after a
takeover or a resync. So a route edit costs the diff of that route (and of what its edit changed), not of every
object of ours.
"""

from __future__ import annotations

from collections.abc import Mapping

import immutables

from aether.core.gateway import ObjectStatus

__all__ = ["StatusQueue"]


class StatusQueue:
    """The keys (`<kind>/<namespace>/<name>`) whose status the next reconcile diffs."""

    def __init__(self) -> None:
        self._observed: set[str] = set()
        self._everything = True
        self._last: Mapping[str, ObjectStatus] = immutables.Map()

    def observed(self, key: str) -> None:
        """Object `key` was listed, changed or deleted (or its write failed: diff it again next time)."""
        self._observed.add(key)

    def everything(self) -> None:
        """Diff every object next time (a new leader, a resync)."""
        self._everything = True

    def take(self, status: Mapping[str, ObjectStatus], changes: frozenset[str] | None) -> set[str] | None:
        """Return the keys to diff now (None: every object) given the view's `status` and the keys whose status it
        changed (None: unknown, found by comparing with the last view's by identity); then start anew."""
        if self._everything:
            wanted = None
        else:
            if changes is None:
                last = self._last
                changes = frozenset(
                    key for key in set(status).union(last) if status.get(key) is not last.get(key)
                )
            wanted = self._observed | changes
        self._observed = set()
        self._everything = False
        self._last = status
        return wanted
