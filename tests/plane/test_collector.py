"""The collector policy: paused for a projection, survivors frozen after it, frozen cycles reclaimed by a full
collection once the frozen population grew by a quarter."""

from __future__ import annotations

import gc
import weakref

from aether.plane import collector
from aether.plane.collector import collector_deferred, collector_paused


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_the_collector_is_paused_for_the_block_and_resumes_after() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with collector_deferred():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_paused_collector_stays_paused_after_a_nested_block() -> None:
    gc.disable()
    try:
        with collector_deferred():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
        gc.unfreeze()


def test_survivors_are_frozen_and_frozen_cycles_are_reclaimed_once_the_population_grew_by_a_quarter() -> None:
    try:
        with collector_deferred():
            pass
        base = collector._Frozen.after_full
        assert gc.get_freeze_count() > 0
        with collector_deferred():
            cycle = _Cycle()
        alive = weakref.ref(cycle)
        del cycle
        gc.collect()
        assert alive() is not None, "frozen: a collection leaves it alone"
        threshold = base * collector.FULL_COLLECTION_GROWTH + collector.FULL_COLLECTION_MINIMUM
        grown = int(threshold) - gc.get_freeze_count() + 1_000
        with collector_deferred():
            kept = [[] for _ in range(grown)]  # a projection's long-lived objects
        assert alive() is None, "the full collection after the population grew reclaims it"
        assert collector._Frozen.after_full >= len(kept), "counted after the collection"
        del kept
    finally:
        gc.unfreeze()
