"""Time-driven re-checks of SVIDs: the core has no clock, so a source that keeps time re-sends an SVID when one of
its moments passes (`not_before`: it becomes valid; `not_after`: it expires), and the reducer judges it again.

Without this an SVID that expires while its source sends nothing would stay served: nothing would tell the log.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable

import trio

__all__ = ["Rechecks"]


class Rechecks:
    """Moments (ns since the epoch) to re-check SVIDs at, by SPIFFE ID; `serve` calls back when one passes."""

    def __init__(self, *, clock: Callable[[], int] = time.time_ns) -> None:
        self._clock = clock
        self._moments: dict[str, tuple[int, ...]] = {}
        self._changed = trio.Event()

    def set(self, spiffe_id: str, moments: tuple[int, ...]) -> None:
        """Re-check `spiffe_id` at each of `moments` still ahead (replaces the ones set before; 0s are skipped)."""
        now = self._clock()
        ahead = tuple(sorted(moment for moment in moments if moment > now))
        if ahead:
            self._moments[spiffe_id] = ahead
        else:
            self._moments.pop(spiffe_id, None)
        self._changed.set()

    def forget(self, spiffe_id: str) -> None:
        """Re-check `spiffe_id` no more."""
        self._moments.pop(spiffe_id, None)
        self._changed.set()

    @property
    def pending(self) -> dict[str, tuple[int, ...]]:
        """The moments ahead, by SPIFFE ID (a copy)."""
        return dict(self._moments)

    async def serve(self, recheck: Callable[[str, int], Awaitable[None]]) -> None:
        """Until cancelled: when a moment passes, await `recheck(spiffe_id, now)` (once per moment passed)."""
        while True:
            self._changed = trio.Event()
            now = self._clock()
            due = sorted(spiffe_id for spiffe_id, moments in self._moments.items() if moments[0] <= now)
            for spiffe_id in due:
                remaining = tuple(moment for moment in self._moments[spiffe_id] if moment > now)
                if remaining:
                    self._moments[spiffe_id] = remaining
                else:
                    del self._moments[spiffe_id]
                await recheck(spiffe_id, now)
            if due:
                continue
            nearest = min((moments[0] for moments in self._moments.values()), default=None)
            wait = math.inf if nearest is None else (nearest - now) / 1e9
            with trio.move_on_after(wait):
                await self._changed.wait()
