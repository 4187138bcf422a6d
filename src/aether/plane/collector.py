"""The process's policy for Python's cyclic garbage collector around folds and projections.

What a fold or a projection builds is small immutable objects that never form cycles (the state, the Gateway API
model of every route, its translations, the snapshot); reference counting frees them all. CPython's cyclic
collector still walks them: each young collection walks what was allocated since the last, and each full
collection, run every time the long-lived population grew by a quarter, walks every tracked object. A projection
from scratch at 10,000 HTTPRoutes keeps ~500,000 tracked objects, and the collector's passes over them (each full
collection a little larger than the last) cost as much as the projection's own work while they can free nothing.

So:
- `collector_paused` pauses the collector for a block (a log replay: the state it folds is all kept);
- `collector_deferred` pauses it for a projection and then freezes what survived (`gc.freeze`: out of every later
  collection, so the next ones walk only what was allocated since). Cyclic garbage frozen meanwhile (a cycle that
  was young garbage at the freeze, or a frozen object that became part of garbage later) is not lost: it counts in
  the frozen population, and once that population grew by `FULL_COLLECTION_GROWTH` since the last full collection
  (CPython's own rule for full collections, applied to what is frozen), everything is unfrozen, collected once and
  frozen again. Frozen garbage is so bounded by a quarter of what was alive after the last full collection
  (plus `FULL_COLLECTION_MINIMUM`). The frozen population is estimated without walking it (what each freeze
  added), and counted only when the estimate calls for a collection.

Process-wide, like the collector: every caller that drives a projection (the plane's publisher for the agent and
the edge, the controller's status reconcile) uses the same `collector_deferred`.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["FULL_COLLECTION_GROWTH", "FULL_COLLECTION_MINIMUM", "collector_deferred", "collector_paused"]

FULL_COLLECTION_GROWTH = 1.25
"""The frozen population, against what it was after the last full collection, that runs the next one."""
FULL_COLLECTION_MINIMUM = 10_000
"""Frozen objects that never run a full collection on their own (a small process collects as CPython would)."""


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for the block.

    Folding allocates millions of small immutable objects that never form cycles; the collector's passes over them
    cost about 40% of a replay's time and can free nothing. Reference counting still frees everything.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class _Frozen:
    """The frozen population: as counted after the last full collection this policy ran, and as estimated since."""

    after_full = 0
    estimate = 0
    """`after_full` plus what each freeze since added (the young generation's count; deaths are not subtracted, so
    this over-estimates, and the population is counted, O(n), only when the estimate calls for a collection)."""


def _older_generations() -> int:
    """The tracked objects in the older generations (not frozen): survivors of the young collections run between
    projections."""
    return len(gc.get_objects(generation=1)) + len(gc.get_objects(generation=2))


@contextlib.contextmanager
def collector_deferred() -> Iterator[None]:
    """Pause the collector for the block (a projection), then freeze what is alive, and run one full collection
    when the frozen population grew by `FULL_COLLECTION_GROWTH` (see the module docstring)."""
    with collector_paused():
        try:
            yield
        finally:
            added = gc.get_count()[0] + _older_generations()
            gc.freeze()
            _Frozen.estimate += added
            threshold = _Frozen.after_full * FULL_COLLECTION_GROWTH + FULL_COLLECTION_MINIMUM
            if _Frozen.estimate > threshold:
                _Frozen.estimate = gc.get_freeze_count()
                if _Frozen.estimate > threshold:
                    gc.unfreeze()
                    gc.collect()
                    gc.freeze()
                    _Frozen.after_full = _Frozen.estimate = gc.get_freeze_count()
